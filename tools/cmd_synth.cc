// `kiln synth --preset NAME --dtype T -o OUT.gguf [--seed S] [--layers N] [--dense] [-t N] [--force]`:
// writes a GGUF (Llama family or mixture of experts) with seeded random weights at the real shapes of a public model, plus a minimal
// SentencePiece tokenizer, so that speed can be measured at real sizes without downloading weights.
// The file is streamed: the header (metadata + tensor infos) is written first, with every tensor
// offset computed from the sizes alone, then each tensor is generated and quantized in chunks of
// rows by the thread pool and appended; memory stays O(chunk) whatever the model size (an 8B model
// in q4_0 is ~4.5 GB on disk, never in RAM). The file is written as OUT.part and renamed at the end.
// Refuses (before writing anything) a file larger than the free disk space, or larger than physical
// memory unless --force, since such a model could not be run here anyway.
// GGUF layout: ggml docs/gguf.md; the metadata part is produced by formats::GgufWriter (so it is
// byte-identical to what kiln writes elsewhere) and only the tensor count field is patched.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/thread_pool.h"
#include "formats/ggml_type.h"
#include "formats/gguf_writer.h"
#include "synth_presets.h"

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSynthUsage =
    "usage: kiln synth --preset NAME --dtype T -o OUT.gguf [--seed S] [--layers N] [--dense] [-t N] [--force]\n"
    "       kiln synth --list\n"
    "\n"
    "Writes a GGUF with seeded random weights at the shapes of a real model (for benchmarks).\n"
    "\n"
    "  --preset NAME    model shapes (--list shows them)\n"
    "  --dtype T        weight matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, mxfp4 (norms and biases "
    "stay f32)\n"
    "  -o, --output F   the GGUF file to write\n"
    "  --seed S         RNG seed (default 0); same seed, same file\n"
    "  --layers N       override the layer count (small test files)\n"
    "  --dense          a mixture-of-experts preset as a dense model with the same active parameters: one\n"
    "                   MLP as wide as the experts a token uses (experts per token x expert width), for\n"
    "                   comparing an MoE model with its dense equivalent\n"
    "  -t, --threads N  threads generating weights (default: logical CPUs)\n"
    "  --force          allow a file larger than physical memory\n";

constexpr uint64_t kAlign = 32;               // GGUF default alignment (general.alignment unset)
constexpr uint64_t kChunkElements = 1 << 22;  // rows generated per write: ~4M weights

uint64_t align_up(uint64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

std::optional<uint64_t> parse_u64(const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19) return std::nullopt;
    return std::stoull(s);
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
    b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 4);
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
    b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 8);
}

// Metadata (via GgufWriter) + tensor infos + padding up to the data section.
core::Result<std::vector<uint8_t>> build_header(const loader::ModelConfig& c, const std::vector<SynthTensor>& plan,
                                                core::DType dtype, const std::string& preset, uint64_t seed) {
    formats::GgufWriter w;
    for (auto& [k, v] : loader::config_to_gguf_metadata(c)) w.set(k, v);
    w.set("general.name", formats::gguf_string(c.name));
    w.set("general.description", formats::gguf_string("kiln synth: random weights at the shapes of " + preset +
                                                      ", seed " + std::to_string(seed) + "; not a trained model"));
    for (auto& [k, v] : synth_tokenizer(c.vocab_size)) w.set(k, std::move(v));
    w.set("kiln.synth.preset", formats::gguf_string(preset));
    w.set("kiln.synth.seed", formats::gguf_u64(seed));
    w.set("kiln.synth.dtype", formats::gguf_string(std::string(core::dtype_name(dtype))));
    KILN_RETURN_IF_ERROR(w.validate());
    std::vector<uint8_t> h = w.to_bytes();  // no tensors: header + metadata only
    const uint64_t n = plan.size();
    std::memcpy(h.data() + 8, &n, 8);  // "GGUF", u32 version, u64 tensor count, u64 kv count
    uint64_t offset = 0;
    for (const SynthTensor& t : plan) {
        put_u64(h, t.name.size());
        h.insert(h.end(), t.name.begin(), t.name.end());
        put_u32(h, uint32_t(t.shape.size()));
        for (size_t d = t.shape.size(); d-- > 0;) put_u64(h, t.shape[d]);  // innermost first
        put_u32(h, *formats::ggml_from_dtype(t.dtype));
        put_u64(h, offset);
        offset += align_up(t.num_bytes());
    }
    h.resize(align_up(h.size()), 0);
    return h;
}

core::Status check_space(const std::string& out, uint64_t file_bytes, bool force) {
    std::error_code ec;
    fs::path dir = fs::absolute(fs::path(out), ec).parent_path();
    fs::space_info si = fs::space(dir, ec);
    if (ec)
        return core::error(core::StatusCode::kIo)
               << out << ": cannot check free space in " << dir.string() << ": " << ec.message();
    const double gb = 1e9;
    if (file_bytes > si.available)
        return core::error(core::StatusCode::kInvalidArgument)
               << out << ": the file would take " << double(file_bytes) / gb << " GB but only "
               << double(si.available) / gb << " GB are free in " << dir.string()
               << " (pick a smaller preset, a quantized --dtype or fewer --layers)";
    const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
    if (!force && file_bytes > ram)
        return core::error(core::StatusCode::kInvalidArgument)
               << out << ": the file would take " << double(file_bytes) / gb << " GB, more than this machine's "
               << double(ram) / gb << " GB of memory, so it could not be run here (use a quantized --dtype, "
               << "fewer --layers, or --force)";
    return core::Status::ok();
}

core::Status write_synth(const std::string& out, const std::vector<uint8_t>& header,
                         const std::vector<SynthTensor>& plan, uint64_t seed, core::ThreadPool& pool,
                         uint64_t file_bytes) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(out.c_str(), "wb"), &std::fclose);
    if (!f) return core::error(core::StatusCode::kIo) << out << ": cannot create: " << std::strerror(errno);
    auto write = [&](const void* p, size_t n) -> core::Status {
        if (n && std::fwrite(p, 1, n, f.get()) != n)
            return core::error(core::StatusCode::kIo) << out << ": write failed: " << std::strerror(errno);
        return core::Status::ok();
    };
    KILN_RETURN_IF_ERROR(write(header.data(), header.size()));
    const bool show = file_bytes > (uint64_t(256) << 20);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    uint64_t done = header.size();
    std::vector<uint8_t> buf;
    const int nt = pool.num_threads();
    std::vector<std::vector<float>> scratch(static_cast<size_t>(nt));
    static const uint8_t kZeros[kAlign] = {};
    for (size_t ti = 0; ti < plan.size(); ++ti) {
        const SynthTensor& t = plan[ti];
        const uint64_t rows = t.rows(), row_bytes = t.row_bytes();
        const uint64_t chunk_rows = std::max<uint64_t>(1, kChunkElements / t.cols());
        for (auto& s : scratch) s.resize(t.cols());
        for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
            const uint64_t r1 = std::min(rows, r0 + chunk_rows);
            buf.resize((r1 - r0) * row_bytes);
            // Chunk c of the split always covers the same rows; a worker's scratch is picked by chunk.
            pool.parallel_for(nt, [&](int64_t b, int64_t e) {
                for (int64_t c = b; c < e; ++c) {
                    const uint64_t lo = r0 + (r1 - r0) * uint64_t(c) / uint64_t(nt);
                    const uint64_t hi = r0 + (r1 - r0) * uint64_t(c + 1) / uint64_t(nt);
                    synth_rows(t, seed, ti, lo, hi, buf.data() + (lo - r0) * row_bytes, scratch[size_t(c)].data());
                }
            });
            KILN_RETURN_IF_ERROR(write(buf.data(), buf.size()));
            done += buf.size();
            const auto now = std::chrono::steady_clock::now();
            if (show && std::chrono::duration<double>(now - last).count() > 1.0) {
                last = now;
                const double s = std::chrono::duration<double>(now - t0).count();
                std::fprintf(stderr, "\rkiln synth: %5.1f%%  %.2f / %.2f GB  %.0f MB/s  (%s)    ",
                             100.0 * double(done) / double(file_bytes), double(done) / 1e9, double(file_bytes) / 1e9,
                             double(done) / 1e6 / s, t.name.c_str());
            }
        }
        const uint64_t pad = align_up(t.num_bytes()) - t.num_bytes();
        KILN_RETURN_IF_ERROR(write(kZeros, size_t(pad)));
        done += pad;
    }
    if (show) std::fputc('\n', stderr);
    if (std::fclose(f.release()) != 0)
        return core::error(core::StatusCode::kIo) << out << ": close failed: " << std::strerror(errno);
    if (done != file_bytes)
        return core::error(core::StatusCode::kInternal)
               << out << ": wrote " << done << " bytes, planned " << file_bytes;
    return core::Status::ok();
}

void list_presets() {
    std::printf("%-16s %-10s %8s %7s %6s %7s %6s %6s  %s\n", "preset", "arch", "vocab", "hidden", "ffn", "layers",
                "heads", "kv", "shapes of");
    for (const SynthPreset& p : synth_presets())
        std::printf("%-16s %-10s %8lld %7lld %6lld %7lld %6lld %6lld  %s\n", p.name, p.arch, (long long)p.vocab_size,
                    (long long)p.hidden_size, (long long)p.intermediate_size, (long long)p.num_layers,
                    (long long)p.num_heads, (long long)p.num_kv_heads, p.about);
}

}  // namespace

int cmd_synth(int argc, char** argv) {
    Args args({"--help", "-h", "--list", "--force", "--dense"},
              {"--preset", "--dtype", "-o", "--output", "--seed", "--layers", "-t", "--threads"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln synth: %s\n%s", args.error().c_str(), kSynthUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kSynthUsage, stdout);
        return 0;
    }
    if (args.has("--list")) {
        list_presets();
        return 0;
    }
    auto preset_name = args.get("--preset");
    auto dtype_name = args.get("--dtype");
    auto out = args.get("--output") ? args.get("--output") : args.get("-o");
    if (!preset_name || !dtype_name || !out || !args.positional().empty()) {
        std::fprintf(stderr, "kiln synth: --preset, --dtype and -o are required\n%s", kSynthUsage);
        return 2;
    }
    const SynthPreset* preset = find_synth_preset(*preset_name);
    if (!preset) {
        std::fprintf(stderr, "kiln synth: unknown preset '%s' (known: %s)\n", preset_name->c_str(),
                     synth_preset_names().c_str());
        return 2;
    }
    std::optional<core::DType> dtype = core::dtype_from_name(*dtype_name);
    if (!dtype || !synth_dtype_supported(*dtype)) {
        std::fprintf(stderr,
                     "kiln synth: unsupported --dtype '%s' (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, "
                     "q6_k, mxfp4)\n",
                     dtype_name->c_str());
        return 2;
    }
    uint64_t seed = 0;
    if (auto s = args.get("--seed")) {
        auto v = parse_u64(*s);
        if (!v) {
            std::fprintf(stderr, "kiln synth: --seed needs a non-negative integer, got '%s'\n", s->c_str());
            return 2;
        }
        seed = *v;
    }
    int64_t layers = 0;
    if (auto s = args.get("--layers")) {
        auto v = parse_u64(*s);
        if (!v || *v < 1 || *v > 1024) {
            std::fprintf(stderr, "kiln synth: --layers needs an integer in [1, 1024], got '%s'\n", s->c_str());
            return 2;
        }
        layers = int64_t(*v);
    }
    int threads = core::ThreadPool::default_num_threads();
    if (auto s = args.get("--threads") ? args.get("--threads") : args.get("-t")) {
        auto v = parse_u64(*s);
        if (!v || *v < 1 || *v > 1024) {
            std::fprintf(stderr, "kiln synth: --threads needs an integer in [1, 1024], got '%s'\n", s->c_str());
            return 2;
        }
        threads = int(*v);
    }
    if (args.has("--dense") && preset->num_experts == 0) {
        std::fprintf(stderr, "kiln synth: --dense needs a mixture-of-experts preset; %s is dense already\n", preset->name);
        return 2;
    }
    const loader::ModelConfig config = synth_config(*preset, layers, args.has("--dense"));
    if (core::Status st = config.validate(); !st.is_ok()) {
        std::fprintf(stderr, "kiln synth: %s\n", st.to_string().c_str());
        return 1;
    }
    const std::vector<SynthTensor> plan = synth_tensor_plan(config, *dtype);
    for (const SynthTensor& t : plan) {
        if (t.row_bytes() == 0) {  // e.g. q4_k / q5_k (256-element blocks) on a model 288 wide
            std::fprintf(stderr, "kiln synth: --dtype %s needs every matrix row to be whole blocks; %s has %llu columns\n",
                         dtype_name->c_str(), t.name.c_str(), static_cast<unsigned long long>(t.cols()));
            return 2;
        }
    }
    auto header = build_header(config, plan, *dtype, preset->name, seed);
    if (!header) {
        std::fprintf(stderr, "kiln synth: %s\n", header.status().to_string().c_str());
        return 1;
    }
    uint64_t file_bytes = header->size(), params = 0;
    for (const SynthTensor& t : plan) {
        file_bytes += align_up(t.num_bytes());
        params += t.rows() * t.cols();
    }
    if (core::Status st = check_space(*out, file_bytes, args.has("--force")); !st.is_ok()) {
        std::fprintf(stderr, "kiln synth: %s\n", st.to_string().c_str());
        return 1;
    }
    const std::string part = *out + ".part";
    core::ThreadPool pool(threads);
    const auto t0 = std::chrono::steady_clock::now();
    core::Status st = write_synth(part, *header, plan, seed, pool, file_bytes);
    std::error_code ec;
    if (st.is_ok()) {
        fs::rename(part, *out, ec);
        if (ec) st = core::error(core::StatusCode::kIo) << *out << ": cannot rename " << part << ": " << ec.message();
    }
    if (!st.is_ok()) {
        fs::remove(part, ec);
        std::fprintf(stderr, "kiln synth: %s\n", st.to_string().c_str());
        return 1;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "kiln synth: wrote %s: %s, %lld layers, %.1fM params, %s weights, %.1f MB in %.1f s\n",
                 out->c_str(), preset->name, (long long)config.num_layers, double(params) / 1e6,
                 std::string(core::dtype_name(*dtype)).c_str(), double(file_bytes) / 1e6, s);
    return 0;
}

}  // namespace kiln::tools

// `kiln numerics MODEL --format F [--calib FILE] [--calib-tokens N] [--json] [-t N]`: a thin main
// over quant_tools/quant_numerics.h. Prints, per projection weight, the error `kiln quantize --format F`
// would add (SQNR, relative and max error of the weight as kiln runs it) and, with calibration
// text, the relative error of that projection's output on sampled real inputs; then a summary.
// Nothing is written to disk.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint_tokenizer.h"
#include "loader/convert.h"
#include "quant_tools/quant_numerics.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

using nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: kiln numerics MODEL --format F [--zero-point] [--calib FILE] [--calib-tokens N]\n"
    "                     [--tokenizer FILE] [--json] [-t N] [--quiet]\n"
    "\n"
    "Measures what `kiln quantize --format F` would do to MODEL's q/k/v/o and gate/up/down projections,\n"
    "without writing anything: each weight goes through the same write and load path (so the weight\n"
    "measured is the one kiln runs, fp16-rounded block scales included) and is compared with MODEL's\n"
    "weights as f32 (for a quantized GGUF, its dequantized weights). Per tensor:\n"
    "  SQNR dB      10 log10(sum W^2 / sum (W - W')^2)\n"
    "  rel err      ||W - W'|| / ||W|| (Frobenius)\n"
    "  max err      max |W - W'|\n"
    "  out rel err  ||X W^T - X W'^T|| / ||X W^T|| over sampled inputs X of that projection (with --calib;\n"
    "               up to 512 token rows per layer input, taken evenly over the calibration text)\n"
    "Activations are not quantized here (int8 also quantizes them at run time).\n"
    "\n"
    "  --format F        int8, w4-g32, w4-g64, w4-g128 (w4-gN-zp = with zero points), fp8, fp8-block,\n"
    "                    mxfp8, mxfp4, nvfp4 (the formats of kiln quantize)\n"
    "  --zero-point      INT4 with zero points (asymmetric)\n"
    "  --calib FILE      calibration text: adds the output error column (at least 64 tokens)\n"
    "  --calib-tokens N  calibration tokens read from FILE (default 4096)\n"
    "  --tokenizer FILE  tokenizer for --calib (default: the model's own, or tok512.bin / tokenizer.bin\n"
    "                    beside a llama2.c model)\n"
    "  --json            print one JSON object {format, model, calib_tokens, tensors: [...], summary: {...}}\n"
    "                    (infinite or undefined figures are null)\n"
    "  -t, --threads N   worker threads (default: the physical cores)\n"
    "  --quiet           no progress on stderr\n"
    "\n"
    "exit status: 0 ok, 1 the model or a file cannot be read or measured, 2 bad arguments\n";

std::optional<int64_t> parse_positive(const std::string& s) {
    try {
        size_t used = 0;
        const long long n = std::stoll(s, &used);
        if (used != s.size() || n < 1) return std::nullopt;
        return int64_t(n);
    } catch (...) {
        return std::nullopt;
    }
}

ordered_json number(double v) {
    return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr);
}

ordered_json to_json(const quant_tools::NumericsReport& r, const std::string& path, int64_t calib_tokens) {
    ordered_json j;
    j["format"] = r.scheme.name();
    j["model"] = path;
    j["calib_tokens"] = calib_tokens;
    j["tensors"] = ordered_json::array();
    for (const quant_tools::TensorNumerics& t : r.tensors)
        j["tensors"].push_back({{"name", t.name},
                                {"rows", t.rows},
                                {"cols", t.cols},
                                {"sqnr_db", number(t.sqnr_db)},
                                {"rel_error", number(t.rel_error)},
                                {"max_abs_error", number(t.max_abs_error)},
                                {"output_rel_error", number(t.output_rel_error)}});
    const quant_tools::NumericsSummary& s = r.summary;
    j["summary"] = {{"num_tensors", s.num_tensors},
                    {"num_params", s.num_params},
                    {"mean_sqnr_db", number(s.mean_sqnr_db)},
                    {"total_sqnr_db", number(s.total_sqnr_db)},
                    {"worst_sqnr_db", number(s.worst_sqnr_db)},
                    {"worst_tensor", s.worst_tensor},
                    {"mean_output_rel_error", number(s.mean_output_rel_error)},
                    {"worst_output_rel_error", number(s.worst_output_rel_error)},
                    {"worst_output_tensor",
                     s.worst_output_tensor.empty() ? ordered_json(nullptr) : ordered_json(s.worst_output_tensor)}};
    return j;
}

void print_table(const quant_tools::NumericsReport& r) {
    std::printf("%-28s %-11s %8s %9s %9s %11s\n", "tensor", "shape", "SQNR dB", "rel err", "max err", "out rel err");
    for (const quant_tools::TensorNumerics& t : r.tensors) {
        const std::string shape = std::to_string(t.rows) + "x" + std::to_string(t.cols);
        char out[32] = "-";
        if (!std::isnan(t.output_rel_error)) std::snprintf(out, sizeof out, "%.3e", t.output_rel_error);
        std::printf("%-28s %-11s %8.2f %9.3e %9.3e %11s\n", t.name.c_str(), shape.c_str(), t.sqnr_db, t.rel_error,
                    t.max_abs_error, out);
    }
    const quant_tools::NumericsSummary& s = r.summary;
    std::printf(
        "summary: %s, %lld tensors, %lld params: mean SQNR %.2f dB (parameter-weighted), all weights %.2f dB, "
        "worst %.2f dB (%s)",
        r.scheme.name().c_str(), (long long)s.num_tensors, (long long)s.num_params, s.mean_sqnr_db, s.total_sqnr_db,
        s.worst_sqnr_db, s.worst_tensor.c_str());
    if (!std::isnan(s.mean_output_rel_error))
        std::printf("; output rel err mean %.3e, worst %.3e (%s)", s.mean_output_rel_error, s.worst_output_rel_error,
                    s.worst_output_tensor.c_str());
    std::printf("\n");
}

// The scheme named by --format (and --zero-point); prints the reason and returns nullopt when bad.
std::optional<loader::QuantScheme> scheme_from_args(const Args& args) {
    std::string format = *args.get("--format");
    bool zp = args.has("--zero-point");
    if (format.starts_with("w4-") && format.ends_with("-zp")) {
        format.resize(format.size() - 3);
        zp = true;
    }
    auto scheme = loader::parse_quant_scheme(format);
    if (!scheme.is_ok()) {
        std::fprintf(stderr, "kiln numerics: --format: %s\n", scheme.status().message().c_str());
        return std::nullopt;
    }
    if (zp && scheme->format != loader::QuantFormat::kPackedInt) {
        std::fprintf(stderr, "kiln numerics: --zero-point applies to the INT4 formats (w4-gN) only\n");
        return std::nullopt;
    }
    scheme->zero_point = zp;
    return *scheme;
}

}  // namespace

int cmd_numerics(int argc, char** argv) {
    Args args({"--help", "-h", "--quiet", "--zero-point", "--json"},
              {"--format", "--calib", "--calib-tokens", "--tokenizer", "-t", "--threads"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln numerics: %s\n%s", args.error().c_str(), kUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (args.positional().size() != 1 || !args.get("--format")) {
        std::fprintf(stderr, "kiln numerics: %s\n%s",
                     args.positional().size() != 1 ? "expected one MODEL" : "--format F is required", kUsage);
        return 2;
    }
    const std::optional<loader::QuantScheme> scheme = scheme_from_args(args);
    if (!scheme) return 2;
    int64_t max_tokens = 4096;
    if (auto v = args.get("--calib-tokens")) {
        auto n = parse_positive(*v);
        if (!n) {
            std::fprintf(stderr, "kiln numerics: --calib-tokens needs a positive integer, got '%s'\n", v->c_str());
            return 2;
        }
        if (!args.get("--calib")) {
            std::fprintf(stderr, "kiln numerics: --calib-tokens needs --calib FILE\n");
            return 2;
        }
        max_tokens = *n;
    }
    std::optional<int> threads;
    if (auto v = args.get("-t") ? args.get("-t") : args.get("--threads")) {
        threads = parse_threads(*v);
        if (!threads) {
            std::fprintf(stderr, "kiln numerics: -t needs a positive integer, got '%s'\n", v->c_str());
            return 2;
        }
    }
    const bool quiet = args.has("--quiet");
    auto fail = [](const core::Status& st) {
        std::fprintf(stderr, "kiln numerics: %s\n", st.message().c_str());
        return 1;
    };

    const auto t0 = std::chrono::steady_clock::now();
    const std::string& path = args.positional()[0];
    auto ck = loader::load_checkpoint(path);
    if (!ck.is_ok()) return fail(ck.status());
    auto f32 = loader::to_f32_checkpoint(*ck);
    if (!f32.is_ok()) return fail(f32.status());
    core::ThreadPool pool(threads.value_or(core::ThreadPool::default_num_threads()));

    std::vector<quant_tools::LayerActivations> acts;
    int64_t calib_tokens = 0;
    if (auto calib = args.get("--calib")) {
        auto tok = loader::find_tokenizer(*ck, args.get("--tokenizer").value_or(""));
        if (!tok.is_ok()) return fail(tok.status());
        std::ifstream f(*calib, std::ios::binary);
        if (!f) {
            std::fprintf(stderr, "kiln numerics: cannot read --calib %s\n", calib->c_str());
            return 1;
        }
        std::stringstream ss;
        ss << f.rdbuf();
        std::vector<int32_t> ids = (*tok)->encode(ss.str());
        if (int64_t(ids.size()) > max_tokens) ids.resize(size_t(max_tokens));
        if (ids.size() < 64) {
            std::fprintf(stderr, "kiln numerics: --calib %s has only %zu tokens (64 at least)\n", calib->c_str(),
                         ids.size());
            return 1;
        }
        calib_tokens = int64_t(ids.size());
        auto progress = [&](int64_t done, int64_t total) {
            if (quiet || total <= 0) return;
            std::fprintf(stderr, "\rcalibrate %lld/%lld tokens", (long long)done, (long long)total);
            if (done == total) std::fputc('\n', stderr);
            std::fflush(stderr);
        };
        auto a = quant_tools::collect_activations(*f32, ids, &pool, quant_tools::CalibrationOptions{}, progress);
        if (!a.is_ok()) return fail(a.status());
        acts = std::move(*a);
    }
    auto report = quant_tools::measure_quant_numerics(*f32, *scheme, args.get("--calib") ? &acts : nullptr, &pool);
    if (!report.is_ok()) return fail(report.status());
    if (args.has("--json"))
        std::printf("%s\n", to_json(*report, path, calib_tokens).dump(2).c_str());
    else
        print_table(*report);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!quiet) {
        const std::string calib_note =
            calib_tokens ? ", " + std::to_string(calib_tokens) + " calibration tokens" : std::string();
        std::fprintf(stderr, "kiln numerics: %s: %lld projections measured (%s%s) in %.1f s\n", path.c_str(),
                     (long long)report->summary.num_tensors, scheme->name().c_str(), calib_note.c_str(), secs);
    }
    return 0;
}

}  // namespace kiln::tools

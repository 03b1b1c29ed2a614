// `kiln inspect PATH [--json] [--isa L]`: what a model file holds. Loads it as a Checkpoint (any
// format) and prints the architecture, hyper-parameters, tokenizer, every tensor, the parameter count,
// and how the weight matrices would run (ops::plan_linear at the best ISA or --isa: kernel level,
// activation format, repacked at load or not).
// A GGUF file that kiln cannot run (unknown architecture, vocab-only) is still listed, raw.
// GGUF strings are not validated as UTF-8, so every JSON dump replaces invalid sequences (U+FFFD)
// instead of throwing.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "args.h"
#include "commands.h"
#include "core/bytes.h"
#include "formats/gguf.h"
#include "kernels/cpu/matmul.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "ops/linear.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tools {
namespace {

using nlohmann::ordered_json;

const char* kInspectHelp =
    "usage: kiln inspect PATH [--json] [--isa L]\n"
    "  PATH     a GGUF file, a safetensors file or Hugging Face model folder, or a llama2.c .bin\n"
    "  --json   print one JSON object instead of text\n"
    "  --isa L  show the kernels of level L (avx2, avx-vnni, avx512, avx512-vnni, amx, ref; default: the best this\n"
    "           CPU runs) for the weight matrices\n";

// dump() that never throws on the invalid UTF-8 a GGUF string may hold.
std::string safe_dump(const ordered_json& j, int indent = -1) {
    return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

std::string human_bytes(uint64_t n) {
    char buf[32];
    if (n >= (1ull << 30))
        std::snprintf(buf, sizeof buf, "%.2f GiB", double(n) / double(1ull << 30));
    else if (n >= (1ull << 20))
        std::snprintf(buf, sizeof buf, "%.2f MiB", double(n) / double(1ull << 20));
    else
        std::snprintf(buf, sizeof buf, "%.2f KiB", double(n) / 1024.0);
    return buf;
}

std::string human_count(uint64_t n) {
    char buf[32];
    if (n >= 1000000000ull)
        std::snprintf(buf, sizeof buf, "%.2fB", double(n) / 1e9);
    else if (n >= 1000000ull)
        std::snprintf(buf, sizeof buf, "%.2fM", double(n) / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.1fK", double(n) / 1e3);
    return buf;
}

ordered_json config_json(const loader::ModelConfig& c) {
    ordered_json j;
    j["architecture"] = c.arch;
    if (!c.name.empty()) j["name"] = c.name;
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_layers"] = c.num_layers;
    j["num_heads"] = c.num_heads;
    j["num_kv_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["max_seq_len"] = c.max_seq_len;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (!c.rope_scaling.type.empty()) {
        j["rope_scaling"] = {{"type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor}};
    }
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["attention_bias"] = c.attention_bias;
    j["qk_norm"] = c.qk_norm;
    if (c.sliding_window) j["sliding_window"] = c.sliding_window;
    if (c.sliding_window && c.max_window_layers) j["max_window_layers"] = c.max_window_layers;
    if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
    if (!c.eos_token_ids.empty()) j["eos_token_ids"] = c.eos_token_ids;
    return j;
}

// The tokenizer the checkpoint carries: GGUF metadata, or tokenizer.json beside an HF checkpoint.
ordered_json tokenizer_json(const loader::Checkpoint& ck) {
    auto tok = loader::load_tokenizer(ck);
    if (!tok && tok.status().code() == core::StatusCode::kNotFound)
        return ordered_json{{"kind", "none"}, {"note", "no tokenizer in this file"}};
    if (!tok) return ordered_json{{"kind", "error"}, {"error", tok.status().to_string()}};
    const tokenizer::Tokenizer& t = **tok;
    return ordered_json{{"kind", t.kind()},     {"pre", t.pre()},       {"vocab_size", t.vocab_size()},
                        {"bos_id", t.bos_id()}, {"eos_id", t.eos_id()}, {"chat_template", !t.chat_template().empty()}};
}

ordered_json checkpoint_json(const loader::Checkpoint& ck) {
    ordered_json j;
    j["path"] = ck.path;
    j["format"] = ck.format;
    j["config"] = config_json(ck.config);
    if (!ck.gguf_metadata.empty()) {
        ordered_json meta;
        for (const auto& [k, v] : ck.gguf_metadata) meta[k] = v.to_string();
        j["metadata"] = meta;
    }
    j["tokenizer"] = tokenizer_json(ck);
    uint64_t bytes = 0;
    std::map<std::string, uint64_t> by_type;
    ordered_json tensors = ordered_json::array();
    for (const loader::TensorRef& t : ck.tensors) {
        // I8 weights (compressed-tensors INT8): the int8 rows plus one f32 scale per row
        const uint64_t n = t.num_bytes + (t.row_scale && !t.shape.empty() ? 4 * t.shape[0] : 0);
        tensors.push_back({{"name", t.name},
                           {"type", std::string(core::dtype_name(t.dtype))},
                           {"shape", t.shape},
                           {"bytes", n}});
        bytes += n;
        by_type[std::string(core::dtype_name(t.dtype))] += 1;
    }
    j["num_params"] = ck.num_params();
    j["num_bytes"] = bytes;
    j["tensor_types"] = by_type;
    j["tensors"] = tensors;
    return j;
}

// How the layers' weight matrices (and the output matrix) would run at `isa`, one entry per dtype:
// what ops::make_linear picks, without repacking anything.
ordered_json kernels_json(const loader::Checkpoint& ck, kernels::cpu::Isa isa) {
    struct Entry {
        uint64_t matrices = 0, bytes = 0, packed_bytes = 0;
        std::string runs_as;
    };
    std::map<std::string, Entry> by_type;
    const bool has_output = ck.find("output.weight") != nullptr;
    ops::LinearOptions lo;
    lo.isa = isa;
    for (const loader::TensorRef& t : ck.tensors) {
        const bool matrix = t.shape.size() == 2 && (t.name.rfind("blk.", 0) == 0 || t.name == "output.weight" ||
                                                    (!has_output && t.name == "token_embd.weight"));
        if (!matrix || !core::dtype_bytes(t.dtype, t.shape[1])) continue;
        const kernels::ref::WeightView w = loader::weight_view_of(t);
        Entry& e = by_type[std::string(core::dtype_name(t.dtype))];
        e.matrices += 1;
        e.bytes += t.num_bytes;
        auto plan = ops::plan_linear(w, lo);
        std::string what;
        if (!plan) {
            what = "not runnable: " + plan.status().message();
        } else if (!plan->kernel) {
            what = "f32 reference path (rows dequantized)";
        } else {
            what = std::string(kernels::cpu::isa_name(plan->isa)) + ", " + ops::act_format_name(plan->kernel->act) +
                   " activations" +
                   (plan->packed_kernel ? std::string(", repacked at load (") + plan->packed_kernel->layout + ")" : "");
            e.packed_bytes += plan->packed_bytes;
        }
        if (e.runs_as.empty()) {
            e.runs_as = what;
        } else if (e.runs_as.find(what) == std::string::npos) {
            e.runs_as += "; some: " + what;  // e.g. rows too short for the activation blocks
        }
    }
    ordered_json j;
    j["isa"] = kernels::cpu::isa_name(isa);
    ordered_json types = ordered_json::object();
    for (const auto& [name, e] : by_type) {
        types[name] = {{"matrices", e.matrices},
                       {"bytes", e.bytes},
                       {"runs_as", e.runs_as},
                       {"packed_bytes", e.packed_bytes}};
    }
    j["matrices"] = types;
    return j;
}

// Raw listing of a GGUF file kiln cannot load as a model.
ordered_json raw_gguf_json(const formats::GgufFile& g, const core::Status& why) {
    ordered_json j;
    j["path"] = g.path();
    j["format"] = "gguf";
    j["version"] = g.version();
    j["not_loadable"] = why.to_string();
    ordered_json meta;
    for (const std::string& k : g.keys()) meta[k] = g.find(k)->to_string();
    j["metadata"] = meta;
    auto tok = tokenizer::Tokenizer::from_gguf(g);
    j["tokenizer"] =
        tok ? ordered_json{{"kind", (*tok)->kind()}, {"pre", (*tok)->pre()}, {"vocab_size", (*tok)->vocab_size()}}
            : ordered_json{{"kind", "error"}, {"error", tok.status().to_string()}};
    ordered_json tensors = ordered_json::array();
    uint64_t params = 0, bytes = 0;
    for (const formats::GgufTensorInfo& t : g.tensors()) {
        tensors.push_back({{"name", t.name},
                           {"type", std::string(core::dtype_name(t.dtype))},
                           {"shape", t.shape},
                           {"bytes", t.num_bytes}});
        params += t.num_elements();
        bytes += t.num_bytes;
    }
    j["num_params"] = params;
    j["num_bytes"] = bytes;
    j["tensors"] = tensors;
    return j;
}

void print_text(const ordered_json& j) {
    std::ostringstream o;
    o << "file:        " << j["path"].get<std::string>() << " (" << j["format"].get<std::string>() << ")\n";
    if (j.contains("not_loadable"))
        o << "note:        not a model kiln can run: " << j["not_loadable"].get<std::string>() << "\n";
    if (j.contains("config")) {
        o << "config:\n";
        for (auto& [k, v] : j["config"].items()) o << "  " << k << ": " << safe_dump(v) << "\n";
    }
    if (j.contains("metadata")) {
        o << "metadata:\n";
        for (auto& [k, v] : j["metadata"].items()) o << "  " << k << ": " << v.get<std::string>() << "\n";
    }
    o << "tokenizer:\n";
    for (auto& [k, v] : j["tokenizer"].items()) o << "  " << k << ": " << safe_dump(v) << "\n";
    o << "tensors:     " << j["tensors"].size() << "\n";
    for (const auto& t : j["tensors"]) {
        char line[512];
        std::snprintf(line, sizeof line, "  %-36s %-6s %-20s %12llu\n", t["name"].get<std::string>().c_str(),
                      t["type"].get<std::string>().c_str(),
                      core::shape_string(t["shape"].get<std::vector<uint64_t>>()).c_str(),
                      (unsigned long long)t["bytes"].get<uint64_t>());
        o << line;
    }
    uint64_t params = j["num_params"], bytes = j["num_bytes"];
    o << "parameters:  " << params << " (" << human_count(params) << ")\n";
    o << "size:        " << bytes << " bytes (" << human_bytes(bytes) << ")\n";
    if (j.contains("kernels")) {
        o << "kernels (" << j["kernels"]["isa"].get<std::string>() << "):\n";
        for (auto& [type, e] : j["kernels"]["matrices"].items()) {
            o << "  " << type << ": " << e["matrices"].get<uint64_t>() << " matrices, "
              << e["runs_as"].get<std::string>();
            const uint64_t packed = e["packed_bytes"].get<uint64_t>();
            if (packed) o << " (" << human_bytes(packed) << " repacked)";
            o << "\n";
        }
    }
    std::cout << o.str();
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
    Args args({"--json", "--help", "-h"}, {"--isa"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln inspect: %s\n%s", args.error().c_str(), kInspectHelp);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kInspectHelp, stdout);
        return 0;
    }
    if (args.positional().size() != 1) {
        std::fputs(kInspectHelp, stderr);
        return 2;
    }
    const std::string& path = args.positional()[0];
    kernels::cpu::Isa isa = kernels::cpu::best_isa();
    if (auto name = args.get("--isa")) {
        auto parsed = kernels::cpu::parse_isa(*name);
        if (!parsed) {
            std::fprintf(stderr, "kiln inspect: unknown --isa '%s' (avx2, avx-vnni, avx512, avx512-vnni, amx, ref)\n", name->c_str());
            return 2;
        }
        if (!kernels::cpu::isa_supported(*parsed)) {
            std::fprintf(stderr, "kiln inspect: this CPU does not support %s\n", kernels::cpu::isa_name(*parsed));
            return 2;
        }
        isa = *parsed;
    }
    ordered_json j;
    auto ck = loader::load_checkpoint(path);
    if (ck) {
        j = checkpoint_json(*ck);
        j["kernels"] = kernels_json(*ck, isa);
    } else {
        auto gguf = formats::GgufFile::open(path);
        if (!gguf) {
            std::fprintf(stderr, "kiln inspect: %s\n", ck.status().to_string().c_str());
            return 1;
        }
        j = raw_gguf_json(*gguf, ck.status());
    }
    if (args.has("--json"))
        std::cout << safe_dump(j, 2) << "\n";
    else
        print_text(j);
    return 0;
}

}  // namespace kiln::tools

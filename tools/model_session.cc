// Model + tokenizer + thread pool setup for the commands that run a model (see model_session.h).
#include "model_session.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kernels/ref/kv_quant.h"
#include "loader/checkpoint_tokenizer.h"

namespace kiln::tools {

namespace fs = std::filesystem;


std::string default_model_path() {
    if (const char* m = std::getenv("KILN_MODEL"); m && *m) return m;
    fs::path cache;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
        cache = x;
    } else if (const char* h = std::getenv("HOME"); h && *h) {
        cache = fs::path(h) / ".cache";
    } else {
        cache = ".cache";
    }
    return (cache / "kiln" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

core::Result<std::string> resolve_model_path(const std::optional<std::string>& model_arg) {
    if (model_arg) return *model_arg;
    std::string path = default_model_path();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        return core::error(core::StatusCode::kNotFound)
               << "no -m MODEL given and the default model " << path
               << " is missing (scripts/setup installs it; KILN_MODEL overrides the path)";
    }
    return path;
}

std::optional<int> parse_threads(const std::string& s) {
    try {
        size_t used = 0;
        int n = std::stoi(s, &used);
        if (used != s.size() || n < 1 || n > 1024) return std::nullopt;
        return n;
    } catch (...) {
        return std::nullopt;
    }
}

const std::set<std::string> kSessionFlags = {"--f32-activations"};
const std::set<std::string> kSessionOptions = {"-m",    "--model", "--tokenizer", "-t",
                                               "--threads", "--isa",  "--kv-cache-dtype"};
const char* const kSessionHelp =
    "\nmodel and kernels:\n"
    "  -m, --model MODEL      GGUF file, safetensors file or HF folder, or llama2.c .bin\n"
    "                         (default: $KILN_MODEL, else SmolLM2-135M-Instruct Q4_1 from scripts/setup)\n"
    "  --tokenizer FILE       tokenizer to use instead of the checkpoint's\n"
    "  -t, --threads N        worker threads (default: the physical cores this process may use)\n"
    "  --isa ISA              matmul kernels: ref, avx2, avx-vnni, avx512, avx512-vnni, amx (default: the best\n"
    "                         this CPU runs)\n"
    "  --f32-activations      multiply quantized weights by f32 activations (slow reference path) instead\n"
    "                         of activations rounded to 8-bit blocks\n"
    "  --kv-cache-dtype T     K/V cache rows: f32, f16 (half the memory; rounded to half), int8 or fp8\n"
    "                         (E4M3; one-byte codes with an f32 scale per token and KV head: ~1/4 of f32;\n"
    "                         docs/quantization.md). Default f32 on the CPU, f16 for the engine on a GPU\n";

bool parse_session_options(const Args& args, const char* cmd, SessionOptions& out) {
    out.model = args.get_either("--model", "-m");
    out.tokenizer = args.get("--tokenizer").value_or("");
    if (auto t = args.get_either("--threads", "-t")) {
        out.threads = parse_threads(*t);
        if (!out.threads) {
            std::fprintf(stderr, "kiln %s: --threads needs an integer in [1, 1024], got '%s'\n", cmd, t->c_str());
            return false;
        }
    }
    if (auto i = args.get("--isa")) {
        auto isa = kernels::cpu::parse_isa(*i);
        if (!isa) {
            std::fprintf(stderr, "kiln %s: --isa must be ref, avx2, avx-vnni, avx512 or avx512-vnni, got '%s'\n", cmd, i->c_str());
            return false;
        }
        if (!kernels::cpu::isa_supported(*isa)) {
            std::fprintf(stderr, "kiln %s: this CPU cannot run --isa %s\n", cmd, i->c_str());
            return false;
        }
        out.linear.isa = *isa;
    }
    out.linear.f32_activations = args.has("--f32-activations");
    if (auto v = args.get("--kv-cache-dtype")) {
        out.kv_dtype = kernels::ref::parse_kv_dtype(*v);
        if (!out.kv_dtype) {
            std::fprintf(stderr, "kiln %s: --kv-cache-dtype must be %s, got '%s'\n", cmd, kernels::ref::kKvDtypeNames,
                         v->c_str());
            return false;
        }
    }
    return true;
}

core::Result<std::unique_ptr<ModelSession>> open_model_session(const SessionOptions& o) {
    auto s = std::make_unique<ModelSession>();
    KILN_ASSIGN_OR_RETURN(std::string path, resolve_model_path(o.model));
    KILN_ASSIGN_OR_RETURN(s->checkpoint, loader::load_checkpoint(path));
    KILN_ASSIGN_OR_RETURN(s->tokenizer, loader::find_tokenizer(s->checkpoint, o.tokenizer));
    s->pool = std::make_unique<core::ThreadPool>(o.threads.value_or(core::ThreadPool::default_num_threads()));
    KILN_ASSIGN_OR_RETURN(s->model, model::create_model(s->checkpoint, s->pool.get(), o.linear,
                                                        model::WeightMemory::kFileMapping));
    return s;
}

// open_model_session's rank 0 under mpirun: the whole checkpoint's tokenizer, the rank's slice, the model.
static core::Status open_rank_model(ModelSession& s, const SessionOptions& o);

core::Result<std::unique_ptr<ModelSession>> open_model_session(const SessionOptions& o, const EngineOptions& parallel) {
    if (parallel.tensor_parallel == 1 && parallel.pipeline_parallel == 1 && parallel.expert_parallel == 1)
        return open_model_session(o);
    auto s = std::make_unique<ModelSession>();
    KILN_ASSIGN_OR_RETURN(s->par, api::open_parallel(parallel));
    if (core::Status st = open_rank_model(*s, o); !st.is_ok()) {
        // The other ranks wait for this one's pool: end the job.
        std::fprintf(stderr, "kiln: rank 0 of %d: %s; ending the job\n", s->par.world->size(), st.to_string().c_str());
        s->par.world->abort(1);
        return st;
    }
    return s;
}

static core::Status open_rank_model(ModelSession& s_, const SessionOptions& o) {
    ModelSession* s = &s_;
    KILN_ASSIGN_OR_RETURN(std::string path, resolve_model_path(o.model));
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint whole, loader::load_checkpoint(path));
    KILN_ASSIGN_OR_RETURN(s->tokenizer, loader::find_tokenizer(whole, o.tokenizer));
    KILN_ASSIGN_OR_RETURN(s->checkpoint, api::rank_checkpoint(whole, s->par));
    s->pool = std::make_unique<core::ThreadPool>(o.threads.value_or(core::ThreadPool::default_num_threads()));
    KILN_ASSIGN_OR_RETURN(s->model, model::create_model(s->checkpoint, s->pool.get(), o.linear,
                                                        model::WeightMemory::kFileMapping));
    api::attach(*s->model, s->par);
    return core::Status::ok();
}

core::Result<std::unique_ptr<ModelSession>> open_model_session(const std::optional<std::string>& model_path,
                                                               const std::string& tokenizer_path,
                                                               std::optional<int> threads) {
    SessionOptions o;
    o.model = model_path;
    o.tokenizer = tokenizer_path;
    o.threads = threads;
    return open_model_session(o);
}

}  // namespace kiln::tools

// Shared setup of the commands that run a model (logits, generate): load the checkpoint, find its
// tokenizer (--tokenizer, the checkpoint's own, or tok512.bin / tokenizer.bin beside a llama2.c
// .bin), build a thread pool of -t threads and the CpuModel.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "api/parallel.h"
#include "args.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "ops/linear.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tools {

struct ModelSession {
    api::ParallelGroups par;  // under mpirun (open_model_session with parallel options): rank 0's groups
    loader::Checkpoint checkpoint;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::unique_ptr<core::ThreadPool> pool;
    std::unique_ptr<model::CpuModel> model;
};

// What the model commands share: which model, tokenizer, threads and kernels.
struct SessionOptions {
    std::optional<std::string> model;  // nullopt = the default model
    std::string tokenizer;             // "" = the checkpoint's own (or one found beside it)
    std::optional<int> threads;        // nullopt = physical cores
    ops::LinearOptions linear;         // --isa, --f32-activations
    // --kv-cache-dtype; nullopt = the command's default (f32 on the CPU, f16 for the engine on a GPU)
    std::optional<kernels::KvDtype> kv_dtype;
};
// Option names for Args: flags (no value) and options (with a value) parse_session_options reads.
extern const std::set<std::string> kSessionFlags, kSessionOptions;
// The --help lines of those options.
extern const char* const kSessionHelp;
// Reads -m/--model, --tokenizer, -t/--threads, --isa, --f32-activations, --kv-cache-dtype; false after printing
// "kiln CMD: <what is wrong>" on a bad value.
bool parse_session_options(const Args& args, const char* cmd, SessionOptions& out);
core::Result<std::unique_ptr<ModelSession>> open_model_session(const SessionOptions& options);
// Rank 0 of `mpirun -np N kiln CMD ... --tp T --pp P`: its share of the model, attached to the
// groups (parallel: the options the other ranks run Engine::run_worker with); one process when every
// size is 1. The model's passes must go through engine::SequenceRunner then.
core::Result<std::unique_ptr<ModelSession>> open_model_session(const SessionOptions& options,
                                                               const EngineOptions& parallel);

// model_path: nullopt = the default model (resolve_model_path). threads: nullopt =
// core::ThreadPool::default_num_threads(). tokenizer_path: "" = find one.
core::Result<std::unique_ptr<ModelSession>> open_model_session(const std::optional<std::string>& model_path,
                                                               const std::string& tokenizer_path,
                                                               std::optional<int> threads);

// The model used when -m is omitted: $KILN_MODEL when set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup links it there).
std::string default_model_path();
// `model_arg`, or the default model when it is absent; kNotFound naming the path and the fix when
// the default is missing.
core::Result<std::string> resolve_model_path(const std::optional<std::string>& model_arg);

// Parses a positive thread count; nullopt on a bad value.
std::optional<int> parse_threads(const std::string& s);

}  // namespace kiln::tools

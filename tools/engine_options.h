// The serving-engine options every command that runs kiln::Engine shares (generate, bench offline,
// later serve): the session options of model_session.h (-m, --tokenizer, -t, --isa,
// --f32-activations) plus the KV cache and batching knobs.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "args.h"
#include "kiln/engine.h"
#include "model_session.h"

namespace kiln::tools {

// Option names for Args: flags (no value) and options (with a value), the session ones included.
// Functions, not globals: they build on model_session.cc's sets, and globals of two files have no
// defined initialization order.
std::set<std::string> engine_flags();
std::set<std::string> engine_options();
extern const char* const kEngineHelp;  // --help lines of the options below (session ones included)

// Fills `out` (model path resolved, the default model when -m is absent); false after printing
// "kiln CMD: <what is wrong>".
bool parse_engine_options(const Args& args, const char* cmd, EngineOptions& out);

// The parallelism options (--tp, --pp, --pp-batches, --ep, --collective-timeout; part of
// engine_options()) into out; false after printing what is wrong.
std::set<std::string> parallel_options();
extern const char* const kParallelHelp;  // their --help lines (part of kEngineHelp)
bool parse_parallel_options(const Args& args, const char* cmd, EngineOptions& out);
// Commands that run the model outside the engine under mpirun (kiln perplexity, kiln logits): the
// EngineOptions the other ranks run with (Engine::run_worker): the session's model, tokenizer,
// threads and kernels, and the parallelism options (the model path is resolved only when some size
// is above 1: one process reports a missing model when it opens it).
bool parallel_session_options(const Args& args, const char* cmd, const SessionOptions& session, EngineOptions& out);

// Tensor parallelism: on ranks other than 0 of `mpirun -np N kiln CMD ... --tp N`, runs
// Engine::run_worker and returns the exit code; -1 on rank 0 and without --tp (the command goes on).
int run_if_worker(const EngineOptions& options, const char* cmd);

// "speculative: D draft tokens, A accepted (R%), T tokens per verifying step" from the engine's counters.
std::string spec_summary(const EngineStats& s);

// EngineOptions::on_load_progress of the commands: "uploading weights: NN% of G GiB" on stderr.
void print_upload_progress(uint64_t done, uint64_t total);

}  // namespace kiln::tools

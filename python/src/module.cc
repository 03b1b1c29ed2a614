// kiln._kiln: the compiled half of the kiln Python package (nanobind). It binds the public C++ API
// (include/kiln/engine.h) and the HTTP server (src/server) nearly one to one; the vLLM-shaped API
// (LLM, SamplingParams, RequestOutput, AsyncEngine, serve) is plain Python in python/kiln on top.
// GIL: every call that can wait (loading, waiting for outputs, tokenizing, serving, closing) releases
// it, so Python threads and the engine's own threads run at once; engine callbacks never touch Python
// (see outbox.h). Errors: a kiln::Status becomes a Python exception carrying its message
// (kInvalidArgument -> ValueError, kNotFound -> FileNotFoundError, kOutOfMemory -> MemoryError,
// kUnsupported -> NotImplementedError, others -> kiln.EngineError, a RuntimeError); nothing aborts.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <sys/prctl.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/engine.h"
#include "outbox.h"
#include "server/http_server.h"

namespace nb = nanobind;

namespace kiln::python {
namespace {

struct StatusError : std::runtime_error {
    Status::Code code;
    StatusError(const Status& st) : std::runtime_error(st.message), code(st.code) {}
};

void check(const Status& st) {
    if (!st.ok()) throw StatusError(st);
}

PyObject* g_engine_error = nullptr;  // kiln.EngineError

void translate_status(const std::exception_ptr& p, void*) {
    try {
        std::rethrow_exception(p);
    } catch (const StatusError& e) {
        PyObject* type = g_engine_error;
        switch (e.code) {
            case Status::Code::kInvalidArgument:
                type = PyExc_ValueError;
                break;
            case Status::Code::kNotFound:
                type = PyExc_FileNotFoundError;
                break;
            case Status::Code::kOutOfMemory:
                type = PyExc_MemoryError;
                break;
            case Status::Code::kUnsupported:
                type = PyExc_NotImplementedError;
                break;
            default:
                break;
        }
        PyErr_SetString(type, e.what());
    }
}

// One loaded model: a kiln::Engine and the channels its outputs go to.
class PyEngine {
public:
    explicit PyEngine(const EngineOptions& options) : outbox_(std::make_shared<Outbox>()) {
        Status st;
        std::unique_ptr<Engine> e = Engine::create(options, &st);
        if (!e) throw StatusError(st);
        engine_ = std::move(e);
    }

    // The engine, shared for the length of one call: close() from another thread drops only its own
    // reference, so the engine is destroyed after the last call in flight returns.
    std::shared_ptr<Engine> engine() {
        std::lock_guard<std::mutex> lock(mu_);
        if (!engine_) throw StatusError({Status::Code::kUnavailable, "the engine is closed"});
        return engine_;
    }

    // A server's hold on the engine (close() is refused while one is attached).
    std::shared_ptr<Engine> attach_server() {
        std::lock_guard<std::mutex> lock(mu_);
        if (!engine_) throw StatusError({Status::Code::kUnavailable, "the engine is closed"});
        ++servers_;
        return engine_;
    }
    void detach_server() {
        std::lock_guard<std::mutex> lock(mu_);
        --servers_;
    }

    uint64_t open_channel() { return outbox_->open_channel(); }
    void close_channel(uint64_t ch) { outbox_->close_channel(ch); }

    // Queues requests (prompt ids, sampling) whose outputs go to channel `ch`, all in one step of the
    // engine's loop; returns their engine request ids.
    std::vector<uint64_t> submit(uint64_t ch, const std::vector<std::pair<std::vector<int32_t>, SamplingParams>>& batch,
                                 bool speculate) {
        std::vector<Request> reqs(batch.size());
        std::shared_ptr<Outbox> box = outbox_;
        for (size_t i = 0; i < batch.size(); ++i) {
            // (an empty id list would make the engine encode the empty prompt text instead)
            if (batch[i].first.empty()) throw StatusError({Status::Code::kInvalidArgument, "the prompt has no tokens"});
            reqs[i].prompt_ids = batch[i].first;
            reqs[i].sampling = batch[i].second;
            reqs[i].speculate = speculate;
            reqs[i].on_output = [box, ch](const RequestOutput& o) { box->push(ch, o); };
        }
        std::vector<uint64_t> ids;
        check(engine()->add_requests(std::move(reqs), &ids));
        return ids;
    }

    std::vector<RequestOutput> take(uint64_t ch, double timeout_s, bool finished_only) {
        return outbox_->take(ch, timeout_s, finished_only);
    }

    // The reference of bench/python_overhead.py: the same requests queued and awaited from C++ alone
    // (no channel, no Python per token); returns (seconds from queueing to the last output, tokens).
    std::pair<double, int64_t> bench_native(const std::vector<std::pair<std::vector<int32_t>, SamplingParams>>& batch) {
        std::mutex mu;
        std::condition_variable cv;
        size_t remaining = batch.size();
        int64_t tokens = 0;
        std::vector<Request> reqs(batch.size());
        for (size_t i = 0; i < batch.size(); ++i) {
            reqs[i].prompt_ids = batch[i].first;
            reqs[i].sampling = batch[i].second;
            reqs[i].on_output = [&](const RequestOutput& o) {
                std::lock_guard<std::mutex> lock(mu);
                tokens += int64_t(o.token_ids.size());
                if (o.finished && --remaining == 0) cv.notify_all();
            };
        }
        const auto t0 = std::chrono::steady_clock::now();
        check(engine()->add_requests(std::move(reqs), nullptr));
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return remaining == 0; });
        return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), tokens};
    }

    void abort(uint64_t id) {
        std::shared_ptr<Engine> e;
        {
            std::lock_guard<std::mutex> lock(mu_);
            e = engine_;
        }
        if (e) e->abort(id);
    }

    std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>>& messages,
                                    bool add_generation_prompt, const std::string& chat_template) {
        std::vector<ChatMessage> msgs;
        for (const auto& [role, content] : messages) msgs.push_back({role, content});
        std::string text;
        check(engine()->apply_chat_template(msgs, add_generation_prompt, chat_template, &text));
        return text;
    }

    // Messages, tools and template variables as JSON text (Engine::apply_chat_template(ChatTemplateArgs)).
    std::string apply_chat_template_json(const std::string& messages_json, const std::string& tools_json,
                                         const std::string& kwargs_json, bool add_generation_prompt,
                                         const std::string& chat_template) {
        std::string text;
        ChatTemplateArgs args{messages_json, tools_json, kwargs_json, add_generation_prompt, chat_template};
        check(engine()->apply_chat_template(args, &text));
        return text;
    }

    void close() {
        std::shared_ptr<Engine> e;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (servers_ > 0)
                throw StatusError(
                    {Status::Code::kUnavailable, "a kiln server still serves this engine: stop it first"});
            e = std::move(engine_);
        }
        // Destroyed here, or by the last call still using it: aborts what still runs (their callbacks
        // finish their channels) and joins the step loop.
        e.reset();
    }

private:
    std::shared_ptr<Outbox> outbox_;  // shared with the callbacks: outlives the engine
    std::mutex mu_;                   // guards engine_ and servers_
    std::shared_ptr<Engine> engine_;
    int servers_ = 0;
};

// The OpenAI-compatible server of `kiln serve` over a PyEngine, listening on its own thread.
class PyServer {
public:
    PyServer(PyEngine& engine, const server::ServerOptions& options) : engine_(engine), http_(options) {
        std::string err;
        if (!http_.bind(&err)) throw StatusError({Status::Code::kIo, err});
        held_ = engine.attach_server();
        http_.set_engine(*held_);
        thread_ = std::thread([this] {
            http_.serve();  // returns when stopped (or when the listener failed: running() turns false)
            done_ = true;
        });
    }
    ~PyServer() { stop(); }

    int port() const { return http_.port(); }
    bool running() const { return !done_; }

    // Waits up to timeout_s for the server to stop; true when it has.
    bool wait(double timeout_s) {
        auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (!done_ && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return done_;
    }

    void stop() {
        if (stopped_.exchange(true)) return;
        http_.stop();
        if (thread_.joinable()) thread_.join();
        engine_.detach_server();
    }

private:
    PyEngine& engine_;              // kept alive by the Python object (keep_alive)
    std::shared_ptr<Engine> held_;  // the engine the HTTP server answers with
    server::HttpServer http_;
    std::thread thread_;
    std::atomic<bool> done_{false}, stopped_{false};
};

const char* kFinishNames[] = {nullptr, "stop", "length", "abort", "error"};

}  // namespace
}  // namespace kiln::python

NB_MODULE(_kiln, m) {
    using namespace kiln;
    using namespace kiln::python;
    using release = nb::call_guard<nb::gil_scoped_release>;
    m.doc() = "kiln's compiled core (use the kiln package, not this module).";

    g_engine_error = PyErr_NewExceptionWithDoc(
        "kiln.EngineError", "An error the kiln engine reported (its message says which).", PyExc_RuntimeError, nullptr);
    m.attr("EngineError") = nb::handle(g_engine_error);
    nb::register_exception_translator(translate_status);

    nb::class_<SamplingParams>(m, "NativeSamplingParams")
        .def(nb::init<>())
        .def(nb::init<const SamplingParams&>())
        .def_rw("temperature", &SamplingParams::temperature)
        .def_rw("top_k", &SamplingParams::top_k)
        .def_rw("top_p", &SamplingParams::top_p)
        .def_rw("min_p", &SamplingParams::min_p)
        .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
        .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
        .def_rw("presence_penalty", &SamplingParams::presence_penalty)
        .def_rw("logit_bias", &SamplingParams::logit_bias)
        .def_rw("seed", &SamplingParams::seed)
        .def_rw("has_seed", &SamplingParams::has_seed)
        .def_rw("max_tokens", &SamplingParams::max_tokens)
        .def_rw("stop", &SamplingParams::stop)
        .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
        .def_rw("ignore_eos", &SamplingParams::ignore_eos)
        .def_rw("skip_special_tokens", &SamplingParams::skip_special_tokens)
        .def_rw("logprobs", &SamplingParams::logprobs)
        .def_prop_rw(
            "structured_kind", [](const SamplingParams& p) { return p.structured.kind; },
            [](SamplingParams& p, std::string v) { p.structured.kind = std::move(v); })
        .def_prop_rw(
            "structured_value", [](const SamplingParams& p) { return p.structured.value; },
            [](SamplingParams& p, std::string v) { p.structured.value = std::move(v); })
        .def_prop_rw(
            "structured_choices", [](const SamplingParams& p) { return p.structured.choices; },
            [](SamplingParams& p, std::vector<std::string> v) { p.structured.choices = std::move(v); })
        .def(
            "validate", [](const SamplingParams& p) { check(validate_sampling_params(p)); },
            "Raises ValueError naming the first field out of range.");

    nb::class_<EngineOptions>(m, "EngineOptions")
        .def(nb::init<>())
        .def_rw("model", &EngineOptions::model)
        .def_rw("tokenizer", &EngineOptions::tokenizer)
        .def_rw("threads", &EngineOptions::threads)
        .def_rw("isa", &EngineOptions::isa)
        .def_rw("f32_activations", &EngineOptions::f32_activations)
        .def_rw("mmap_weights", &EngineOptions::mmap_weights)
        .def_rw("kv_cache_bytes", &EngineOptions::kv_cache_bytes)
        .def_rw("block_size", &EngineOptions::block_size)
        .def_rw("kv_cache_dtype", &EngineOptions::kv_cache_dtype)
        .def_rw("kv_prefault", &EngineOptions::kv_prefault)
        .def_rw("max_batch_tokens", &EngineOptions::max_batch_tokens)
        .def_rw("max_seqs", &EngineOptions::max_seqs)
        .def_rw("prefix_cache", &EngineOptions::prefix_cache)
        .def_rw("max_model_len", &EngineOptions::max_model_len)
        .def_rw("speculative", &EngineOptions::speculative)
        .def_rw("draft_model", &EngineOptions::draft_model)
        .def_rw("num_draft", &EngineOptions::num_draft)
        .def_rw("spec_ngram_min", &EngineOptions::spec_ngram_min)
        .def_rw("spec_ngram_max", &EngineOptions::spec_ngram_max)
        .def_rw("spec_max_batch", &EngineOptions::spec_max_batch)
        .def_rw("device", &EngineOptions::device)
        .def_rw("gpu_memory_utilization", &EngineOptions::gpu_memory_utilization)
        .def_rw("tensor_parallel", &EngineOptions::tensor_parallel)
        .def_rw("pipeline_parallel", &EngineOptions::pipeline_parallel)
        .def_rw("pipeline_batches", &EngineOptions::pipeline_batches)
        .def_rw("expert_parallel", &EngineOptions::expert_parallel)
        .def_rw("collective_timeout", &EngineOptions::collective_timeout);

    // Parallel ranks under mpirun (docs/parallel.md): rank 0 runs the Engine, the others run_worker.
    m.def("parallel_rank", &Engine::parallel_rank, nb::arg("options"),
          "This process's rank in `mpirun -np N python ...` with parallel options; 0 otherwise.");
    m.def(
        "run_worker",
        [](const EngineOptions& options) {
            // mpirun's SIGINT / SIGTERM go to every rank; rank 0 drains and then stops the others, so a
            // worker outlives the signal, and dies with mpirun should it go first.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            const Status st = Engine::run_worker(options);
            if (!st.ok()) throw StatusError(st);
        },
        release(), nb::arg("options"), "Follows rank 0's steps until its engine goes away (ranks 1..).");

    nb::class_<TokenLogprobs>(m, "TokenLogprobs")
        .def_ro("token_id", &TokenLogprobs::token_id)
        .def_ro("logprob", &TokenLogprobs::logprob)
        .def_ro("top", &TokenLogprobs::top);

    nb::class_<RequestOutput>(m, "Output", "One update of one engine request (new tokens since the last).")
        .def_ro("request_id", &RequestOutput::request_id)
        .def_ro("token_ids", &RequestOutput::token_ids)
        .def_prop_ro("text", [](const RequestOutput& o) { return nb::bytes(o.text.data(), o.text.size()); })
        .def_ro("finished", &RequestOutput::finished)
        .def_prop_ro("finish_reason",
                     [](const RequestOutput& o) -> nb::object {
                         const char* name = kFinishNames[int(o.finish_reason)];
                         if (!name) return nb::none();
                         return nb::str(name);
                     })
        .def_ro("error", &RequestOutput::error)
        .def_ro("prompt_tokens", &RequestOutput::prompt_tokens)
        .def_ro("completion_tokens", &RequestOutput::completion_tokens)
        .def_ro("cached_tokens", &RequestOutput::cached_tokens)
        .def_ro("ttft_seconds", &RequestOutput::ttft_seconds)
        .def_ro("logprobs", &RequestOutput::logprobs);

    nb::class_<ModelInfo>(m, "ModelInfo")
        .def_ro("name", &ModelInfo::name)
        .def_ro("arch", &ModelInfo::arch)
        .def_ro("path", &ModelInfo::path)
        .def_ro("vocab_size", &ModelInfo::vocab_size)
        .def_ro("max_model_len", &ModelInfo::max_model_len)
        .def_ro("num_layers", &ModelInfo::num_layers)
        .def_ro("bos_id", &ModelInfo::bos_id)
        .def_ro("eos_id", &ModelInfo::eos_id)
        .def_ro("chat_template", &ModelInfo::chat_template)
        .def_ro("threads", &ModelInfo::threads)
        .def_ro("isa", &ModelInfo::isa)
        .def_ro("device", &ModelInfo::device);

    nb::class_<EngineStats>(m, "EngineStats")
        .def_ro("num_running", &EngineStats::num_running)
        .def_ro("num_waiting", &EngineStats::num_waiting)
        .def_ro("kv_blocks_in_use", &EngineStats::kv_blocks_in_use)
        .def_ro("kv_blocks_total", &EngineStats::kv_blocks_total)
        .def_ro("prefix_query_tokens", &EngineStats::prefix_query_tokens)
        .def_ro("prefix_hit_tokens", &EngineStats::prefix_hit_tokens)
        .def_ro("prompt_tokens_total", &EngineStats::prompt_tokens_total)
        .def_ro("generated_tokens_total", &EngineStats::generated_tokens_total)
        .def_ro("num_preemptions", &EngineStats::num_preemptions)
        .def_ro("num_steps", &EngineStats::num_steps)
        .def_ro("forward_seconds", &EngineStats::forward_seconds)
        .def_ro("sample_seconds", &EngineStats::sample_seconds)
        .def_ro("grammar_seconds", &EngineStats::grammar_seconds)
        .def_ro("spec_draft_tokens", &EngineStats::spec_draft_tokens)
        .def_ro("spec_accepted_tokens", &EngineStats::spec_accepted_tokens);

    nb::class_<PyEngine>(m, "Engine", "A loaded model serving requests (kiln::Engine).")
        .def(nb::init<const EngineOptions&>(), release(), "Loads the model and starts the step loop.")
        .def("open_channel", &PyEngine::open_channel)
        .def("close_channel", &PyEngine::close_channel, release())
        .def("submit", &PyEngine::submit, release(), nb::arg("channel"), nb::arg("requests"),
             nb::arg("speculate") = true,
             "Queues [(prompt ids, NativeSamplingParams), ...] in one engine step; returns their ids.")
        .def("take", &PyEngine::take, release(), nb::arg("channel"), nb::arg("timeout"),
             nb::arg("finished_only") = false,
             "The outputs queued on a channel (one per request, merged), waiting up to timeout seconds\n"
             "for the first (finished_only: for a request's last).")
        .def("abort", &PyEngine::abort, release())
        .def("bench_native", &PyEngine::bench_native, release(), nb::arg("requests"),
             "Benchmark reference: runs the requests from C++ alone; (seconds, tokens).")
        .def(
            "stats", [](PyEngine& e) { return e.engine()->stats(); }, release())
        .def_prop_ro("model_info", [](PyEngine& e) { return e.engine()->model_info(); })
        .def(
            "tokenize",
            [](PyEngine& e, const std::string& text, bool add_special, bool parse_special) {
                std::shared_ptr<Engine> eng = e.engine();
                nb::gil_scoped_release unlock;
                return eng->tokenize(text, add_special, parse_special);
            },
            nb::arg("text"), nb::arg("add_special") = true, nb::arg("parse_special") = true)
        .def(
            "detokenize",
            [](PyEngine& e, const std::vector<int32_t>& ids, bool skip_special) {
                std::string s = e.engine()->detokenize(ids, skip_special);
                return nb::bytes(s.data(), s.size());
            },
            nb::arg("ids"), nb::arg("skip_special") = false)
        .def(
            "token_bytes",
            [](PyEngine& e, int32_t id) {
                std::string s = e.engine()->token_bytes(id);
                return nb::bytes(s.data(), s.size());
            },
            nb::arg("id"))
        .def("apply_chat_template", &PyEngine::apply_chat_template, nb::arg("messages"),
             nb::arg("add_generation_prompt"), nb::arg("chat_template") = "")
        .def("apply_chat_template_json", &PyEngine::apply_chat_template_json, nb::arg("messages_json"),
             nb::arg("tools_json"), nb::arg("kwargs_json"), nb::arg("add_generation_prompt"),
             nb::arg("chat_template") = "")
        .def("close", &PyEngine::close, release(), "Aborts what still runs and frees the model.");

    nb::class_<server::ServerOptions>(m, "ServerOptions")
        .def(nb::init<>())
        .def_rw("host", &server::ServerOptions::host)
        .def_rw("port", &server::ServerOptions::port)
        .def_rw("api_key", &server::ServerOptions::api_key)
        .def_rw("max_queue", &server::ServerOptions::max_queue)
        .def_rw("max_seqs", &server::ServerOptions::max_seqs)
        .def_rw("served_model_name", &server::ServerOptions::served_model_name)
        .def_rw("chat_template", &server::ServerOptions::chat_template)
        .def_rw("log_json", &server::ServerOptions::log_json);

    nb::class_<PyServer>(m, "Server", "kiln serve's HTTP server over an Engine, on its own thread.")
        .def(nb::init<PyEngine&, const server::ServerOptions&>(), nb::keep_alive<1, 2>(), release())
        .def_prop_ro("port", &PyServer::port)
        .def_prop_ro("running", &PyServer::running)
        .def("wait", &PyServer::wait, release(), nb::arg("timeout"))
        .def("stop", &PyServer::stop, release());
}

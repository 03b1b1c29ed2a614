// kiln::Engine (include/kiln/engine.h) over engine::EngineCore: loading, the step-loop thread, and
// the conversions between the public plain structs and the internal ones.
// Threading: one mutex guards the core; the loop thread holds it for one step at a time and sleeps
// on a condition variable while there is no work. add_request / abort take the same mutex, so they
// wait at most one step (the loop steps aside between steps while a caller waits). Callbacks run inside a step (on the
// loop thread) and must not call back into the Engine.
#include "kiln/engine.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "api/parallel.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "grammar/compiler.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/kv_quant.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "model/cpu_model.h"
#ifdef KILN_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#endif
#include "ops/linear.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

Status to_public(const core::Status& s) {
    if (s.is_ok()) return {};
    return {Status::Code(int(s.code())), s.to_string()};
}

sampling::SamplingParams to_internal(const SamplingParams& p) {
    sampling::SamplingParams q;
    q.temperature = p.temperature;
    q.top_k = p.top_k;
    q.top_p = p.top_p;
    q.min_p = p.min_p;
    q.repetition_penalty = p.repetition_penalty;
    q.frequency_penalty = p.frequency_penalty;
    q.presence_penalty = p.presence_penalty;
    q.logit_bias = p.logit_bias;
    q.seed = p.seed;
    q.has_seed = p.has_seed;
    q.max_tokens = p.max_tokens;
    q.stop_strings = p.stop;
    q.stop_ids = p.stop_token_ids;
    q.ignore_eos = p.ignore_eos;
    q.logprobs = p.logprobs;
    return q;
}

}  // namespace

namespace {

// The structured-output part of the checks: a known kind (the spec itself is checked when compiled).
core::Status validate_structured(const StructuredOutput& s) {
    grammar::StructuredSpec::Kind kind;
    if (!grammar::parse_kind(s.kind, kind))
        return core::error(core::StatusCode::kInvalidArgument)
               << "structured output kind must be json_schema, json_object, regex, choice or grammar, got '" << s.kind << "'";
    return core::Status::ok();
}

}  // namespace

Status validate_sampling_params(const SamplingParams& params) {
    const core::Status st = to_internal(params).validate(INT32_MAX);
    return to_public(st.is_ok() ? validate_structured(params.structured) : st);
}

const char* finish_reason_name(FinishReason r) {
    return engine::finish_reason_name(engine::FinishReason(int(r)));
}

namespace {

// "cpu" -> -1; "cuda" -> 0; "cuda:N" -> N.
core::Result<int> parse_device(const std::string& d) {
    if (d.empty() || d == "cpu") return -1;
    if (d == "cuda") return 0;
    if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 8 &&
        d.find_first_not_of("0123456789", 5) == std::string::npos)
        return std::stoi(d.substr(5));
    return core::error(core::StatusCode::kInvalidArgument) << "device must be cpu, cuda or cuda:N, got '" << d << "'";
}

}  // namespace

struct Engine::Impl {
    api::ParallelGroups par;  // tensor / pipeline parallelism: rank 0's groups (outlive the model)
    loader::Checkpoint checkpoint;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::unique_ptr<core::ThreadPool> pool;
    std::unique_ptr<model::CpuModel> model;
    // Speculative decoding's draft model (--draft-model, or the target's first layers) and its checkpoint.
    loader::Checkpoint draft_checkpoint;
    std::unique_ptr<model::CpuModel> draft;
#ifdef KILN_HAVE_CUDA
    std::unique_ptr<model::CudaModel> gpu_model;
#endif
    std::unique_ptr<engine::EngineCore> core;
    ModelInfo info;
    // Structured output: grammars compiled against this tokenizer's vocabulary (made on first use).
    std::once_flag grammars_once;
    std::unique_ptr<grammar::GrammarCompiler> grammars;
    grammar::GrammarCompiler& grammar_compiler() {
        std::call_once(grammars_once, [this] {
            grammars = std::make_unique<grammar::GrammarCompiler>(
                grammar::token_table(*tokenizer, int32_t(info.vocab_size)));
        });
        return *grammars;
    }

    mutable std::mutex mu;
    std::condition_variable cv;
    // Callers waiting for mu: the loop steps aside between steps while any wait, so add_request /
    // abort / stats wait at most one step (std::mutex alone would let the loop re-take it at once).
    mutable std::atomic<int> waiters{0};
    std::unique_lock<std::mutex> lock_for_caller() const {
        waiters.fetch_add(1);
        std::unique_lock<std::mutex> lock(mu);
        waiters.fetch_sub(1);
        return lock;
    }
    bool stopping = false;
    uint64_t next_id = 1;
    std::unordered_map<uint64_t, Clock::time_point> added;  // arrival times, for TTFT
    std::thread loop;

    void run() {
        std::unique_lock<std::mutex> lock(mu);
        while (!stopping) {
            if (!core->has_work()) {
                cv.wait(lock, [&] { return stopping || core->has_work(); });
                continue;
            }
            // A step that finds nothing to run while requests exist cannot happen (the scheduler
            // always makes progress); should it, back off instead of spinning under the lock.
            if (!core->step()) cv.wait_for(lock, std::chrono::milliseconds(1));
            if (waiters.load() > 0) {  // let the callers in, then go on
                lock.unlock();
                while (waiters.load() > 0) std::this_thread::yield();
                lock.lock();
            }
        }
    }
};

namespace {

// EngineOptions::speculative: -1 for "" and "ngram" (no draft model), 0 for "draft" (the
// --draft-model checkpoint), N for "layers:N" (the target's first N layers).
core::Result<int64_t> parse_speculative(const EngineOptions& o) {
    auto bad = [] { return core::error(core::StatusCode::kInvalidArgument); };
    const std::string& s = o.speculative;
    if (!o.draft_model.empty() && s != "draft") return bad() << "a draft model needs speculative method draft";
    if (s.empty() || s == "ngram") return int64_t(-1);
    if (s == "draft") {
        if (o.draft_model.empty()) return bad() << "speculative method draft needs a draft model (--draft-model)";
        return int64_t(0);
    }
    if (s.rfind("layers:", 0) == 0 && s.size() > 7 && s.size() <= 12 &&
        s.find_first_not_of("0123456789", 7) == std::string::npos && std::stoll(s.substr(7)) > 0)
        return int64_t(std::stoll(s.substr(7)));
    return bad() << "speculative method must be ngram, draft or layers:N, got '" << s << "'";
}

}  // namespace

// The draft model of EngineOptions::speculative "draft" (its own checkpoint and tokenizer, which must
// be the target's) or "layers:N" (impl.draft_checkpoint, cut already).
static core::Status load_draft(Engine::Impl& impl, const EngineOptions& o, const ops::LinearOptions& lo,
                               int64_t layers) {
    if (layers == 0) {
        KILN_ASSIGN_OR_RETURN(impl.draft_checkpoint, loader::load_checkpoint(o.draft_model));
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                              loader::find_tokenizer(impl.draft_checkpoint, ""));
        const tokenizer::Tokenizer& want = *impl.tokenizer;
        if (tok->vocab_size() != want.vocab_size())
            return core::error(core::StatusCode::kInvalidArgument)
                   << "draft model " << o.draft_model << " has " << tok->vocab_size() << " tokens, the model "
                   << want.vocab_size() << ": speculation needs the same tokenizer";
        for (int32_t id = 0; id < want.vocab_size(); ++id)
            if (tok->token_text(id) != want.token_text(id))
                return core::error(core::StatusCode::kInvalidArgument)
                       << "draft model " << o.draft_model << ": token " << id << " is '" << tok->token_text(id)
                       << "', the model's '" << want.token_text(id) << "': speculation needs the same tokenizer";
        KILN_ASSIGN_OR_RETURN(impl.draft, model::create_model(impl.draft_checkpoint, impl.pool.get(), lo,
                                                              o.mmap_weights ? model::WeightMemory::kFileMapping
                                                                             : model::WeightMemory::kAnonymous));
    } else {
        KILN_ASSIGN_OR_RETURN(impl.draft, model::CpuModel::create(impl.draft_checkpoint, impl.pool.get(), lo));
    }
    return core::Status::ok();
}

std::unique_ptr<Engine> Engine::create(const EngineOptions& o, Status* status) {
    return create_with(o, status, nullptr);
}

std::unique_ptr<Engine> Engine::create_replica(const Engine& first, const EngineOptions& o, Status* status) {
    if (!first.impl_->model) {
        if (status) *status = {Status::Code::kUnsupported, "replicas share a CPU model; this engine runs on a GPU"};
        return nullptr;
    }
    return create_with(o, status, first.impl_.get());
}

std::unique_ptr<Engine> Engine::create_with(const EngineOptions& o, Status* status, const Impl* first) {
    std::unique_ptr<Impl> impl = std::make_unique<Impl>();
    auto fail = [&](const core::Status& s) -> std::unique_ptr<Engine> {
        if (impl->par.world && impl->par.world->size() > 1) {  // the other ranks wait for this one: end the job
            std::fprintf(stderr, "kiln: rank 0 of %d: %s; ending the job\n", impl->par.world->size(),
                         s.to_string().c_str());
            impl->par.world->abort(1);
        }
        if (status) *status = to_public(s);
        return nullptr;
    };
    auto lo_or = api::linear_options(o);
    if (!lo_or) return fail(lo_or.status());
    const ops::LinearOptions lo = *lo_or;
    if (o.threads < 0 || o.threads > 1024)
        return fail(core::error(core::StatusCode::kInvalidArgument)
                    << "threads must be in [1, 1024], got " << o.threads);
    if (first && (o.tensor_parallel > 1 || o.pipeline_parallel > 1 || o.expert_parallel > 1 || o.device != "cpu"))
        return fail(core::error(core::StatusCode::kUnsupported)
                    << "replicas run on the CPU in one process, without parallel ranks");
    auto par = api::open_parallel(o);
    if (!par) return fail(par.status());
    impl->par = std::move(*par);
    if (impl->par.rank() != 0)
        return fail(core::error(core::StatusCode::kInvalidArgument)
                    << "parallel rank " << impl->par.rank() << " runs Engine::run_worker, not create");
    // A replica's checkpoint: the first engine's, whose tensors the shared model was made from (the
    // bytes of repacked matrices released: a self-speculation draft reads the file again below).
    auto ck = first ? core::Result<loader::Checkpoint>(first->checkpoint) : loader::load_checkpoint(o.model);
    if (!ck) return fail(ck.status());
    impl->checkpoint = std::move(*ck);
    auto tok = loader::find_tokenizer(impl->checkpoint, o.tokenizer);
    if (!tok) return fail(tok.status());
    impl->tokenizer = std::move(*tok);
    const int threads = o.threads > 0 ? o.threads : core::ThreadPool::default_num_threads();
    auto device = parse_device(o.device);
    if (!device) return fail(device.status());
    const auto kv_dtype = o.kv_cache_dtype.empty()
                              ? std::optional(*device >= 0 ? kernels::KvDtype::kF16 : kernels::KvDtype::kF32)
                              : kernels::ref::parse_kv_dtype(o.kv_cache_dtype);
    if (!kv_dtype)
        return fail(core::error(core::StatusCode::kInvalidArgument)
                    << "KV cache dtype must be " << kernels::ref::kKvDtypeNames << ", got '" << o.kv_cache_dtype
                    << "'");
    engine::EngineConfig ec;
    ec.kv_cache_bytes = o.kv_cache_bytes;
    ec.kv_default_share = o.kv_default_share;
    ec.block_size = o.block_size;
    ec.kv_dtype = *kv_dtype;
    ec.max_batch_tokens = o.max_batch_tokens;
    ec.max_seqs = o.max_seqs;
    ec.prefix_cache = o.prefix_cache;
    ec.kv_prefault = o.kv_prefault;
    ec.max_model_len = o.max_model_len;
    ec.pipeline_lanes = o.pipeline_batches;
    auto spec = parse_speculative(o);
    if (!spec) return fail(spec.status());
    if (*spec >= 0 && *device >= 0)
        return fail(core::error(core::StatusCode::kUnsupported)
                    << "draft-model and self-speculation run on the CPU only for now; on a GPU use --spec ngram");
    if (!o.speculative.empty()) {
        ec.spec.method = *spec >= 0 ? engine::SpecConfig::Method::kDraftModel : engine::SpecConfig::Method::kNgram;
        ec.spec.num_draft = o.num_draft;
        ec.spec.ngram_min = o.spec_ngram_min;
        ec.spec.ngram_max = o.spec_ngram_max;
        ec.spec.max_batch = o.spec_max_batch >= 0 ? o.spec_max_batch : engine::kDefaultSpecMaxBatch;
    }
    const loader::ModelConfig* config = nullptr;
    std::string device_text = "cpu";
    core::Result<std::unique_ptr<engine::EngineCore>> ecore = core::error(core::StatusCode::kInternal);
    if (*spec > 0) {  // self-speculation: the first layers over the same tensors, taken before the
                      // target's load moves or releases any of them
        if (first) {
            auto again = loader::load_checkpoint(o.model);
            if (!again) return fail(again.status());
            impl->draft_checkpoint = std::move(*again);
        } else {
            impl->draft_checkpoint = impl->checkpoint;
        }
        if (core::Status s = loader::keep_first_layers(impl->draft_checkpoint, *spec); !s.is_ok())
            return fail(core::error(s.code()) << "speculative " << o.speculative << ": " << s.message());
    }
    if (*device < 0) {
        if (impl->par.world) {  // this rank's layers and share of the heads (the tokenizer was found above)
            auto sliced = api::rank_checkpoint(impl->checkpoint, impl->par);
            if (!sliced) return fail(sliced.status());
            impl->checkpoint = std::move(*sliced);
        }
        impl->pool = std::make_unique<core::ThreadPool>(threads);
        if (first) {
            impl->model = first->model->replica(impl->pool.get());
        } else {
            auto m = model::create_model(impl->checkpoint, impl->pool.get(), lo,
                                         o.mmap_weights ? model::WeightMemory::kFileMapping
                                                        : model::WeightMemory::kAnonymous);
            if (!m) return fail(m.status());
            impl->model = std::move(*m);
        }
        api::attach(*impl->model, impl->par);
        config = &impl->model->config();
        if (*spec >= 0) {
            if (core::Status s = load_draft(*impl, o, lo, *spec); !s.is_ok()) return fail(s);
            ec.spec.draft_model = impl->draft.get();
        }
        ecore = engine::EngineCore::create(impl->model.get(), impl->tokenizer.get(), ec);
    } else {
#ifdef KILN_HAVE_CUDA
        if (o.kv_cache_bytes > 0)
            return fail(core::error(core::StatusCode::kInvalidArgument)
                        << "on a GPU the KV cache takes what --gpu-memory-utilization leaves: no KV budget in bytes");
        model::CudaModelOptions co;
        co.device = *device;
        co.gpu_memory_utilization = o.gpu_memory_utilization;
        co.max_batch_tokens = o.max_batch_tokens;
        co.max_seqs = o.max_seqs;
        // One sampled row per sequence and step, and one per draft token with speculation.
        co.max_logits =
            int64_t(o.max_seqs) * (1 + (ec.spec.method == engine::SpecConfig::Method::kNone ? 0 : o.num_draft));
        co.max_seq_len = o.max_model_len;
        co.block_size = o.block_size;
        co.kv_dtype = ec.kv_dtype;
        co.progress = o.on_load_progress;
        auto m = model::CudaModel::create(impl->checkpoint, co);
        if (!m) return fail(m.status());
        impl->gpu_model = std::move(*m);
        model::CudaModel* g = impl->gpu_model.get();
        config = &g->config();
        device_text = g->describe();
        engine::PagedModel pm;
        pm.config = config;
        pm.num_kv_blocks = g->options().num_kv_blocks;
        pm.block_size = int32_t(g->options().block_size);
        pm.forward = [g](std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                         std::vector<float>& logits) { return g->forward_batch(tokens, seqs, logits); };
        pm.forward_greedy = [g](std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                                std::vector<int32_t>& ids) { return g->forward_batch_greedy(tokens, seqs, ids); };
        pm.forward_sample = [g](std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                                std::span<const kernels::ref::SampleRow> rows,
                                std::span<const kernels::ref::LogitAdjustment> adjust, std::vector<int32_t>& ids) {
            return g->forward_batch_sample(tokens, seqs, rows, adjust, ids);
        };
        ecore = engine::EngineCore::create(std::move(pm), impl->tokenizer.get(), ec);
#else
        return fail(core::error(core::StatusCode::kUnsupported)
                    << "this kiln was built without the CUDA backend: build it with the cuda-release preset "
                       "(-DKILN_CUDA=ON) to run on "
                    << o.device);
#endif
    }
    if (!ecore) return fail(ecore.status());
    impl->core = std::move(*ecore);
    const loader::ModelConfig& c = *config;
    ModelInfo& info = impl->info;
    info.name = c.name;
    info.arch = c.arch;
    info.path = o.model;
    info.vocab_size = c.vocab_size;
    info.max_model_len = impl->core->max_model_len();
    info.num_layers = c.num_layers;
    info.hidden_size = c.hidden_size;
    info.num_experts = c.num_experts;
    info.bos_id = impl->tokenizer->bos_id();
    info.eos_id = impl->tokenizer->eos_id();
    info.chat_template = impl->tokenizer->chat_template();
    info.threads = threads;
    info.isa = kernels::cpu::isa_name(lo.isa);
    info.device = device_text;
    Impl* raw = impl.get();
    impl->loop = std::thread([raw] { raw->run(); });
    if (status) *status = {};
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int Engine::parallel_rank(const EngineOptions& options) {
    return (options.tensor_parallel > 1 || options.pipeline_parallel > 1 || options.expert_parallel > 1) &&
                   dist::launched_by_mpirun()
               ? dist::mpirun_rank()
               : 0;
}

Status Engine::run_worker(const EngineOptions& options) { return to_public(api::run_worker(options)); }

Engine::~Engine() {
    {
        auto lock = impl_->lock_for_caller();
        impl_->stopping = true;
    }
    impl_->cv.notify_all();
    impl_->loop.join();
    // Whatever is left ends with kAbort (its callback still runs, as promised).
    std::vector<uint64_t> left;
    for (const auto& [id, t] : impl_->added) left.push_back(id);
    for (uint64_t id : left) impl_->core->abort(int64_t(id));
}

namespace {

// Tokenizes the prompt and compiles the structured-output grammar (on the caller's thread, so a
// new schema never stalls the step loop).
core::Result<engine::Request> to_engine_request(Engine::Impl& impl, Request& r) {
    engine::Request req;
    req.prompt = r.prompt_ids.empty() ? impl.tokenizer->encode(r.prompt) : std::move(r.prompt_ids);
    req.params = to_internal(r.sampling);
    req.return_logits = r.return_logits;
    req.speculate = r.speculate;
    req.skip_special = r.sampling.skip_special_tokens;
    const StructuredOutput& so = r.sampling.structured;
    KILN_RETURN_IF_ERROR(validate_structured(so));
    if (!so.kind.empty()) {
        grammar::StructuredSpec spec;
        grammar::parse_kind(so.kind, spec.kind);
        spec.value = so.value;
        spec.choices = so.choices;
        KILN_ASSIGN_OR_RETURN(req.grammar, impl.grammar_compiler().compile(spec));
    }
    return req;
}

// With impl->mu held: queues one request (converted by to_engine_request) under a new id.
Status add_locked(Engine::Impl* impl, engine::Request req, OutputCallback cb, uint64_t* id) {
    const uint64_t rid = impl->next_id++;
    const Clock::time_point t0 = Clock::now();
    req.on_output = [impl, cb = std::move(cb), rid, t0](const engine::StepOutput& s) {
        RequestOutput out;
        out.request_id = rid;
        out.token_ids = s.token_ids;
        out.text = s.text;
        out.finished = s.finished;
        out.finish_reason = FinishReason(int(s.finish_reason));
        out.error = s.error;
        out.prompt_tokens = s.prompt_tokens;
        out.completion_tokens = s.completion_tokens;
        out.cached_tokens = s.cached_tokens;
        out.ttft_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        out.logits = s.logits;
        out.logprobs.reserve(s.logprobs.size());
        for (const sampling::TokenLogprobs& lp : s.logprobs) out.logprobs.push_back({lp.token, lp.logprob, lp.top});
        if (s.finished) impl->added.erase(rid);
        if (cb) cb(out);
    };
    impl->added.emplace(rid, t0);
    core::Status st = impl->core->add(int64_t(rid), std::move(req));
    if (!st.is_ok()) {
        impl->added.erase(rid);
        return to_public(st);
    }
    if (id) *id = rid;
    return {};
}

}  // namespace

Status Engine::add_request(Request r, uint64_t* id) {
    core::Result<engine::Request> req = to_engine_request(*impl_, r);
    if (!req.is_ok()) return to_public(req.status());
    auto lock = impl_->lock_for_caller();
    Status st = add_locked(impl_.get(), std::move(*req), std::move(r.on_output), id);
    if (st.ok()) impl_->cv.notify_all();
    return st;
}

Status Engine::add_requests(std::vector<Request> requests, std::vector<uint64_t>* ids) {
    std::vector<engine::Request> reqs;
    reqs.reserve(requests.size());
    for (Request& r : requests) {
        core::Result<engine::Request> req = to_engine_request(*impl_, r);
        if (!req.is_ok()) return to_public(req.status());
        reqs.push_back(std::move(*req));
    }
    std::vector<uint64_t> added;
    auto lock = impl_->lock_for_caller();
    for (size_t i = 0; i < reqs.size(); ++i) {
        uint64_t rid = 0;
        Status st = add_locked(impl_.get(), std::move(reqs[i]), std::move(requests[i].on_output), &rid);
        if (!st.ok()) {
            for (uint64_t a : added) impl_->core->abort(int64_t(a));
            return st;
        }
        added.push_back(rid);
    }
    impl_->cv.notify_all();
    if (ids) *ids = std::move(added);
    return {};
}

void Engine::abort(uint64_t id) {
    auto lock = impl_->lock_for_caller();
    impl_->core->abort(int64_t(id));
}

EngineStats Engine::stats() const {
    auto lock = impl_->lock_for_caller();
    const engine::EngineStats s = impl_->core->stats();
    EngineStats o;
    o.num_running = s.num_running;
    o.num_waiting = s.num_waiting;
    o.kv_blocks_in_use = s.kv_blocks_in_use;
    o.kv_blocks_total = s.kv_blocks_total;
    o.peak_kv_blocks_in_use = s.peak_kv_blocks_in_use;
    o.block_size = impl_->core->config().block_size;
    o.prefix_query_tokens = s.prefix_query_tokens;
    o.prefix_hit_tokens = s.prefix_hit_tokens;
    o.prompt_tokens_total = s.prompt_tokens_total;
    o.generated_tokens_total = s.generated_tokens_total;
    o.num_preemptions = s.num_preemptions;
    o.num_steps = s.num_steps;
    o.schedule_seconds = s.schedule_seconds;
    o.forward_seconds = s.forward_seconds;
    o.sample_seconds = s.sample_seconds;
    o.grammar_seconds = s.grammar_seconds;
    o.spec_draft_tokens = s.spec_draft_tokens;
    o.spec_accepted_tokens = s.spec_accepted_tokens;
    o.spec_verify_steps = s.spec_verify_steps;
    if (impl_->par.world) {
        const dist::CommStats c = impl_->par.stats();
        o.tensor_parallel = impl_->par.tp;
        o.pipeline_parallel = impl_->par.pp;
        o.collective_calls = c.calls;
        o.collective_bytes = c.bytes;
        o.collective_seconds = c.seconds;
    }
    return o;
}

const ModelInfo& Engine::model_info() const {
    return impl_->info;
}

std::vector<int32_t> Engine::tokenize(const std::string& text, bool add_special, bool parse_special) const {
    return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids, bool skip_special) const {
    return impl_->tokenizer->decode(ids, skip_special);
}

std::string Engine::token_bytes(int32_t id) const {
    return impl_->tokenizer->piece(id, /*skip_special=*/false, /*first=*/false);
}

Status Engine::apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                   const std::string& chat_template, std::string* text) const {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    return apply_chat_template(ChatTemplateArgs{msgs.dump(), "", "", add_generation_prompt, chat_template}, text);
}

Status Engine::apply_chat_template(const ChatTemplateArgs& args, std::string* text) const {
    using ojson = nlohmann::ordered_json;
    const tokenizer::Tokenizer& tok = *impl_->tokenizer;
    const std::string& tmpl = args.chat_template.empty() ? tok.chat_template() : args.chat_template;
    if (tmpl.empty())
        return {Status::Code::kNotFound, "the model has no chat template; pass one (--chat-template FILE)"};
    tokenizer::ChatTemplateInput in;
    auto parse = [](const std::string& text, const char* what, ojson* out) -> Status {
        if (text.empty()) return {};
        *out = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
        if (out->is_discarded()) return {Status::Code::kInvalidArgument, std::string(what) + " is not valid JSON"};
        return {};
    };
    if (Status st = parse(args.messages_json, "messages", &in.messages); !st.ok()) return st;
    if (!in.messages.is_array()) return {Status::Code::kInvalidArgument, "messages must be a JSON array"};
    if (Status st = parse(args.tools_json, "tools", &in.tools); !st.ok()) return st;
    if (!in.tools.is_null() && !in.tools.is_array()) return {Status::Code::kInvalidArgument, "tools must be a JSON array"};
    ojson kwargs;
    if (Status st = parse(args.kwargs_json, "chat template kwargs", &kwargs); !st.ok()) return st;
    if (!kwargs.is_null() && !kwargs.is_object())
        return {Status::Code::kInvalidArgument, "chat template kwargs must be a JSON object"};
    // Tool-call arguments arrive as JSON text (OpenAI); templates expect the object (vLLM and HF pass it so).
    for (auto& m : in.messages) {
        if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        for (auto& call : m["tool_calls"]) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
            auto& fn = call["function"];
            if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
            ojson parsed = ojson::parse(fn["arguments"].get<std::string>(), nullptr, false);
            if (!parsed.is_discarded() && parsed.is_object()) fn["arguments"] = std::move(parsed);
        }
    }
    if (kwargs.is_object())
        for (const auto& [k, v] : kwargs.items()) in.extra.emplace_back(k, tokenizer::json_to_value(v));
    in.add_generation_prompt = args.add_generation_prompt;
    in.bos_token = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    in.eos_token = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    auto r = tokenizer::render_chat_template(tmpl, in);
    if (!r) return to_public(r.status());
    if (text) *text = std::move(*r);
    return {};
}

ToolCallParse parse_tool_calls(const std::string& format, const std::string& text, const std::string& tools_json,
                               bool final) {
    auto f = tokenizer::tool_format_from_name(format);
    nlohmann::ordered_json tools;
    if (!tools_json.empty()) {
        tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
        if (tools.is_discarded()) tools = nullptr;
    }
    tokenizer::ToolParse p = tokenizer::parse_tool_calls(f.value_or(tokenizer::ToolFormat::kNone), text, tools, final);
    ToolCallParse out{std::move(p.content), std::move(p.reasoning), {}};
    for (auto& c : p.calls) out.calls.push_back({std::move(c.name), std::move(c.arguments)});
    return out;
}

std::string detect_tool_call_format(const std::string& chat_template) {
    return tokenizer::tool_format_name(tokenizer::detect_tool_format(chat_template));
}

bool is_tool_call_format(const std::string& name) { return tokenizer::tool_format_from_name(name).has_value(); }

}  // namespace kiln

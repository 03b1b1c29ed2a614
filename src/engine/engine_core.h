// EngineCore: the serving engine's step loop, single-threaded and deterministic (kiln::Engine in
// include/kiln/engine.h runs it on its own thread). One step = schedule (sched::Scheduler:
// continuous batching, chunked prefill, prefix cache, preemption) -> one forward_batch of the model
// (CpuModel over a host pool, or a PagedModel such as the GPU model) over the paged KV cache -> sample every sequence
// that reached its last token -> detokenize, check stops -> report to each request's callback; finished and aborted
// requests free their blocks at once. With speculative decoding on (EngineConfig::spec), a decoding sequence
// first gets a draft (n-gram lookup in its own tokens); the step runs the draft after its last token, and the
// rows are verified in order with Sampler::verify (exact in distribution; greedy: token for token the same),
// so one step may emit several tokens; the scheduler drops the rejected drafts' KV. Invariants: a request's tokens and text depend only on its prompt and params
// (batch invariance of forward_batch; one Sampler per request, called once per generated token); every callback of a
// request runs on the thread calling step() / abort(), the last one with finished = true, exactly once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/draft_model.h"
#include "engine/parallel.h"
#include "grammar/matcher.h"
#include "kv/kv_storage.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "sampling/stop_checker.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kiln::engine {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort", "error"

struct StepOutput {
    int64_t request_id = 0;
    std::vector<int32_t> token_ids;  // new tokens since the last output (a stop token is not included)
    std::string text;                // new text, safe to show (never part of a stop string)
    bool finished = false;
    FinishReason finish_reason = FinishReason::kNone;
    std::string error;  // with kError
    int64_t prompt_tokens = 0, completion_tokens = 0;
    int64_t cached_tokens = 0;                      // prompt tokens served by the prefix cache (first admission)
    std::vector<std::vector<float>> logits;         // with Request::return_logits: the raw logits of each new token
    std::vector<sampling::TokenLogprobs> logprobs;  // with params.logprobs >= 0: one per entry of token_ids
};
using OutputFn = std::function<void(const StepOutput&)>;

struct Request {
    std::vector<int32_t> prompt;  // token ids, non-empty
    sampling::SamplingParams params;
    OutputFn on_output;
    bool return_logits = false;  // tests: the row each new token was sampled from, before sampling
    bool speculate = true;       // with EngineConfig::spec on: false opts this request out
    bool skip_special = false;   // control tokens left out of the text (ids unchanged)
    // Structured output: every token is drawn from those that keep the text a prefix of the
    // grammar's language (EOS only once the text is whole); the request ends with kStop when the
    // grammar can go no further. Its rows are sampled on the host.
    std::shared_ptr<grammar::CompiledGrammar> grammar;
};

// Speculative decoding (docs/speculative.md).
// SpecConfig::max_batch of kiln::Engine when not given: measured on a 2-core VM (docs/speculative.md).
inline constexpr int32_t kDefaultSpecMaxBatch = 8;
struct SpecConfig {
    // kNgram: prompt lookup (engine/ngram_proposer.h). kDraftModel: `draft_model` drafts greedily
    // (engine/draft_model.h): a smaller model with the same vocabulary, or the target's first layers.
    enum class Method { kNone, kNgram, kDraftModel };
    Method method = Method::kNone;
    model::CpuModel* draft_model = nullptr;  // kDraftModel; must outlive the engine
    int32_t num_draft = 5;                // most tokens proposed per sequence and step
    int32_t ngram_min = 2, ngram_max = 4;  // n-gram lengths looked up, longest first
    // Speculate only in steps where at most this many sequences decode (0: always): on a big batch
    // a decode step is no longer bound by reading the weights, and rejected drafts cost compute.
    int32_t max_batch = 0;
    // Tests only: replaces Sampler::verify (the distribution test shows a wrong rule fails it).
    std::function<sampling::Sampler::Verdict(sampling::Sampler&, std::span<float> logits,
                                             std::span<const int32_t> history, int32_t draft)>
        verify_for_tests;
};

struct EngineConfig {
    int64_t num_kv_blocks = 0;   // 0: from kv_cache_bytes
    int64_t kv_cache_bytes = 0;  // 0: a default (see default_kv_cache_bytes)
    double kv_default_share = 1;  // the default's share of memory (data-parallel replicas split it)
    int32_t block_size = 16;
    // K/V row format (kernels/kernel_params.h): f32, f16 (half the memory), int8 / fp8 (codes with a
    // scale per token and KV head: about a quarter).
    kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
    int64_t max_batch_tokens = 512;
    int32_t max_seqs = 64;
    bool prefix_cache = true;
    // Commit the whole K/V pool at creation (KvStorage::prefault) instead of page by page on first use:
    // a slower start, no first-touch page faults inside steps.
    bool kv_prefault = false;
    int64_t max_model_len = 0;  // 0: the model's context length
    SpecConfig spec;
    // Batches in flight over pipeline stages (PagedModel::lanes): 0 for one per stage, 1 for one
    // batch at a time (each step waits for the last stage).
    int32_t pipeline_lanes = 0;
};

struct EngineStats {
    int64_t num_running = 0, num_waiting = 0;
    int32_t kv_blocks_in_use = 0, kv_blocks_total = 0, peak_kv_blocks_in_use = 0;
    int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
    int64_t prompt_tokens_total = 0, generated_tokens_total = 0;
    int64_t num_preemptions = 0, num_steps = 0;
    double schedule_seconds = 0, forward_seconds = 0, sample_seconds = 0;  // summed over steps
    double grammar_seconds = 0;  // structured output: token masks and matcher steps (part of sample_seconds)
    // Speculative decoding: draft tokens run and verified, drafts accepted, and sequence-steps that
    // verified a draft (each emits its accepted drafts plus one token).
    int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_verify_steps = 0;
};

// The default KV budget: `share` of a quarter of MemAvailable (or 1 GiB when unknown), at most what
// max_seqs sequences of max_model_len tokens need.
int64_t default_kv_cache_bytes(int64_t bytes_per_token, int64_t max_seqs, int64_t max_model_len, double share = 1);

// A model that keeps its own paged KV pool (model::CudaModel on a GPU): the engine hands out
// block ids in [0, num_kv_blocks) of that pool and calls `forward` once per step
// (CpuModel::forward_batch's contract, K/V inside the model).
struct PagedModel {
    const loader::ModelConfig* config = nullptr;
    int64_t num_kv_blocks = 0;
    int32_t block_size = 0;
    std::function<core::Status(std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                               std::vector<float>& logits)>
        forward;
    // Optional: the same step returning only the argmax of each logits row (sampling::
    // argmax_lowest_id's rule), used when every sequence sampled in the step decodes greedily with
    // no bias, penalties, logprobs or raw logits asked for (a GPU then copies back ids, not rows).
    std::function<core::Status(std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                               std::vector<int32_t>& ids)>
        forward_greedy;
    // Optional: the same step with every sampled row sampled on the model's side (a GPU's
    // kernels/cuda/sample_rows) from the rows Sampler::plan_row builds, one per sampled sequence in
    // order; used when no sequence sampled in the step asks for logprobs or raw logits.
    std::function<core::Status(std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                               std::span<const kernels::SampleRow> rows,
                               std::span<const kernels::LogitAdjustment> adjust, std::vector<int32_t>& ids)>
        forward_sample;
    // Optional: the pass in two halves, so that up to `lanes` batches are in flight (a pipeline whose
    // last stage is another rank: rank 0 runs its stage on one batch while the later stages run
    // another, vLLM's virtual engines). start(lane, ...) returns once this rank's part of the pass is
    // done, finish(lane) once the logits are in `logits`; passes finish in the order they started.
    // With them the engine keeps one scheduler per lane over its share of the KV blocks.
    int32_t lanes = 1;
    std::function<core::Status(int32_t lane, std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                               std::vector<float>& logits)>
        start;
    std::function<core::Status(int32_t lane)> finish;
};

class EngineCore {
public:
    // The model, tokenizer and pool must outlive the core. kInvalidArgument for a bad config. The
    // K/V pool (host memory) is sized from config (num_kv_blocks, kv_cache_bytes) and owned by the core.
    static core::Result<std::unique_ptr<EngineCore>> create(model::CpuModel* model,
                                                            const tokenizer::Tokenizer* tokenizer,
                                                            const EngineConfig& config);
    // Over a model with its own pool: config's num_kv_blocks, kv_cache_bytes, kv_dtype and block_size
    // are the model's (block_size overridden by model.block_size).
    static core::Result<std::unique_ptr<EngineCore>> create(PagedModel model, const tokenizer::Tokenizer* tokenizer,
                                                            const EngineConfig& config);
    // Queues a request under `id` (unique, caller-chosen). kInvalidArgument (nothing queued, no
    // callback) for a duplicate id, an empty prompt, bad params, or a prompt + max_tokens beyond
    // the context or the KV pool.
    core::Status add(int64_t id, Request request);
    // Ends a request now: its callback gets finished with kAbort; its blocks are freed. Unknown: no-op.
    void abort(int64_t id);
    // Runs one step; false when there was nothing to do. With pipeline lanes a step finishes the
    // next lane's batch in flight (its outputs reported) and starts that lane's next batch.
    bool step();
    bool has_work() const;
    EngineStats stats() const;
    const EngineConfig& config() const { return config_; }
    int64_t max_model_len() const { return config_.max_model_len; }

private:
    struct Live {
        Request request;
        std::unique_ptr<sampling::Sampler> sampler;
        std::unique_ptr<sampling::StopChecker> stop;
        std::unique_ptr<tokenizer::StreamDecoder> decoder;
        std::unique_ptr<grammar::Matcher> matcher;  // with Request::grammar
        bool grammar_stuck = false;  // no token can continue the grammar (a vocabulary without the bytes it needs)
        int64_t generated = 0;
        int64_t cached_tokens = 0;
        bool cached_reported = false;
        std::vector<int32_t> draft;  // proposed for the step in progress
        // kDraftModel, sampled requests: the draft model's sampler (the request's parameters, its own
        // seed) and the distribution each draft was drawn from (q for Sampler::verify).
        std::unique_ptr<sampling::Sampler> draft_sampler;
        std::vector<std::vector<sampling::TokenProb>> draft_probs;
        int32_t spec_k = 0;          // draft length for the next step, adapted to what was accepted
        // A draft model's drafts cost passes: after a step that accepted none, the sequence drafts
        // nothing for spec_backoff steps (doubling, up to 32, reset by an acceptance).
        int32_t spec_backoff = 0, spec_pause = 0;
        int32_t lane = 0;  // the lane whose scheduler holds it
    };
    // A scheduler over its share of the KV blocks ([first_block, first_block + its blocks)) and the
    // batch it has in flight (one lane unless PagedModel::lanes > 1).
    struct Lane {
        std::unique_ptr<sched::Scheduler> scheduler;
        int32_t first_block = 0;
        sched::ScheduledBatch batch;
        bool in_flight = false;
        bool ids_back = false;  // the pass returns ids (sampled_), not logits rows
        int64_t num_rows = 0;   // logits rows (or ids) the pass returns
        std::vector<int32_t> tokens;
        std::vector<model::BatchSeq> seqs;
        std::vector<float> logits;
        std::vector<int32_t> sampled;  // ids from the model (ids_back): one per logits row
    };
    // A sampled sequence's new tokens in a step: new_tokens_[first, first + count).
    struct Emitted {
        size_t first = 0, count = 0;
    };
    EngineCore() = default;
public:
    ~EngineCore();
    EngineCore(const EngineCore&) = delete;
    EngineCore& operator=(const EngineCore&) = delete;

private:
    // Schedules the lane's next batch and starts its pass (runs it, with one lane); false when the
    // lane had nothing to run.
    bool start_step(Lane& lane);
    // Waits for the lane's pass (with lanes), samples, reports.
    void finish_step(Lane& lane);
    sched::Scheduler& scheduler_of(int64_t id) { return *lanes_[size_t(requests_.at(id).lane)].scheduler; }
    void propose_drafts(Lane& lane);
    // kDraftModel: the draft model fills the drafts of the scheduled decodes; an entry it could not
    // fill (its pool short) runs fewer drafts.
    core::Status draft_scheduled(sched::ScheduledBatch& batch);
    // Verifies the drafts and samples every sampled sequence of the step (rows from logits_, or ids
    // from sampled_ when ids_back); fills new_tokens_ / emitted_ and the raw rows and logprobs asked for.
    void sample_step(Lane& lane,
                     std::vector<std::pair<size_t, std::vector<float>>>& raw,
                     std::vector<std::pair<size_t, sampling::TokenLogprobs>>& lps);
    // Structured output: the row's grammar mask into mask_ (EOS and stop tokens only once the text is whole); with
    // `write`, -inf into the logits outside it too.
    void apply_grammar(Live& live, std::span<float> logits, bool write);
    void finish(int64_t id, Live& live, FinishReason reason, StepOutput& out);
    void release(int64_t id);  // out of the scheduler (its blocks freed) and the draft model
    void fail_batch(const sched::ScheduledBatch& batch, const core::Status& st);

    PagedModel model_;
    const tokenizer::Tokenizer* tokenizer_ = nullptr;
    EngineConfig config_;
    std::unique_ptr<kv::KvStorage> storage_;  // the CPU model's pool (model_.forward points into it)
    std::shared_ptr<StepSender> sender_;       // rank 0 of parallel ranks: the plans; told to stop with the engine
    std::vector<Lane> lanes_;
    size_t next_lane_ = 0;  // with lanes: the one the next step finishes and starts
    std::unique_ptr<DraftModel> draft_;  // SpecConfig::kDraftModel
    std::map<int64_t, Live> requests_;
    std::vector<int32_t> eos_ids_;
    // Step buffers, reused.
    std::vector<int32_t> new_tokens_;  // the step's new tokens, sequence after sequence (emitted_)
    std::vector<int32_t> new_counts_;  // emitted_[i].count, for Scheduler::complete
    std::vector<Emitted> emitted_;     // one per sampled sequence, in batch order
    std::vector<int32_t> history_;     // a sequence's tokens plus its accepted drafts, while verifying
    std::vector<kernels::SampleRow> sample_rows_;  // forward_sample's rows and entries
    std::vector<kernels::LogitAdjustment> sample_adjust_;
    std::vector<float> row_copy_;  // a logits row kept raw for logprobs (the sampler scribbles on its input)
    std::vector<uint64_t> mask_;   // a grammar's token mask
    EngineStats stats_;
};

}  // namespace kiln::engine

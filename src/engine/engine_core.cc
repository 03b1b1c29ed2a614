// EngineCore (see engine_core.h).
#include "engine/engine_core.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/check.h"
#include "engine/ngram_proposer.h"
#include "engine/parallel.h"

namespace kiln::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t mem_available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb * 1024;
    return 0;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kAbort:
            return "abort";
        case FinishReason::kError:
            return "error";
    }
    return "";
}

int64_t default_kv_cache_bytes(int64_t bytes_per_token, int64_t max_seqs, int64_t max_model_len, double share) {
    const int64_t avail = mem_available_bytes();
    int64_t budget = int64_t(double(avail > 0 ? avail / 4 : (int64_t(1) << 30)) * std::clamp(share, 1e-6, 1.0));
    const int64_t need = bytes_per_token * max_seqs * max_model_len;
    if (need > 0) budget = std::min(budget, need);
    return budget;
}

// The options every model shares, resolved against the model's config (max_model_len).
static core::Status check_config(const loader::ModelConfig& mc, EngineConfig& c) {
    auto bad = [] { return core::error(core::StatusCode::kInvalidArgument); };
    if (c.block_size <= 0 || c.block_size > 4096)
        return bad() << "--block-size must be in [1, 4096], got " << c.block_size;
    if (c.max_batch_tokens <= 0) return bad() << "--max-batch-tokens must be positive, got " << c.max_batch_tokens;
    if (c.max_seqs <= 0) return bad() << "--max-seqs must be positive, got " << c.max_seqs;
    if (c.max_model_len < 0 || c.kv_cache_bytes < 0 || c.num_kv_blocks < 0)
        return bad() << "negative context length or KV budget";
    const SpecConfig& sp = c.spec;
    if (sp.method != SpecConfig::Method::kNone) {
        if (sp.num_draft < 1 || sp.num_draft > 64)
            return bad() << "--num-draft must be in [1, 64], got " << sp.num_draft;
        if (sp.ngram_min < 1 || sp.ngram_max < sp.ngram_min || sp.ngram_max > 64)
            return bad() << "n-gram lengths must satisfy 1 <= min <= max <= 64, got " << sp.ngram_min << ".."
                         << sp.ngram_max;
        if (sp.max_batch < 0) return bad() << "--spec-max-batch must be >= 0, got " << sp.max_batch;
        if (sp.method == SpecConfig::Method::kDraftModel) {
            if (!sp.draft_model) return bad() << "draft-model speculation needs a draft model";
            if (sp.draft_model->config().vocab_size != mc.vocab_size)
                return bad() << "the draft model's vocabulary has " << sp.draft_model->config().vocab_size
                             << " tokens, the model's " << mc.vocab_size << ": they must share a tokenizer";
        }
    }
    if (c.max_model_len == 0) c.max_model_len = mc.max_seq_len > 0 ? mc.max_seq_len : 2048;
    if (mc.max_seq_len > 0 && c.max_model_len > mc.max_seq_len)
        return bad() << "--max-model-len " << c.max_model_len << " exceeds the model's context of " << mc.max_seq_len;
    return core::Status::ok();
}

EngineCore::~EngineCore() {
    // Passes still in flight end first (the other ranks run them): their results are dropped.
    for (size_t i = 0; i < lanes_.size(); ++i)
        if (lanes_[i].in_flight && model_.finish) {
            if (core::Status st = model_.finish(int32_t(i)); !st.is_ok())
                std::fprintf(stderr, "kiln: a batch in flight at shutdown: %s\n", st.to_string().c_str());
        }
    if (sender_) {  // the followers' loop ends with the engine
        if (core::Status st = sender_->send_stop(); !st.is_ok())
            std::fprintf(stderr, "kiln: stopping the parallel ranks: %s\n", st.to_string().c_str());
    }
}

core::Result<std::unique_ptr<EngineCore>> EngineCore::create(model::CpuModel* model,
                                                             const tokenizer::Tokenizer* tokenizer,
                                                             const EngineConfig& config) {
    KILN_CHECK(model && tokenizer) << "EngineCore needs a model and a tokenizer";
    const loader::ModelConfig& mc = model->config();
    EngineConfig c = config;
    KILN_RETURN_IF_ERROR(check_config(mc, c));
    // A pipeline stage's pool holds its layers; rank 0's stage and KV-head share are the largest, so
    // the same blocks fit every rank's budget.
    const int64_t block_bytes = kv_pool_block_bytes(mc, c.block_size, c.kv_dtype);
    if (c.num_kv_blocks == 0) {
        if (c.kv_cache_bytes == 0)
            c.kv_cache_bytes =
                default_kv_cache_bytes(block_bytes / c.block_size, c.max_seqs, c.max_model_len, c.kv_default_share);
        c.num_kv_blocks = c.kv_cache_bytes / block_bytes;
        if (c.num_kv_blocks < 1)
            return core::error(core::StatusCode::kInvalidArgument)
                   << "a KV budget of " << c.kv_cache_bytes << " bytes holds no block of " << block_bytes << " bytes";
    }
    if (c.num_kv_blocks > INT32_MAX / c.block_size)
        return core::error(core::StatusCode::kInvalidArgument) << "too many KV blocks: " << c.num_kv_blocks;
    dist::Communicator* tp = model->step_group();  // the ranks that run every pass (tensor / pipeline parallel)
    if (tp && tp->size() > 1) {  // rank 0 of the group: the followers allocate the same blocks
        if (tp->rank() != 0)
            return core::error(core::StatusCode::kInvalidArgument)
                   << "parallel rank " << tp->rank() << " runs run_follower, not an engine";
    } else {
        tp = nullptr;
    }
    KILN_ASSIGN_OR_RETURN(KvPool kv, make_kv_pool(mc, c.num_kv_blocks, c.block_size, c.kv_dtype));
    std::unique_ptr<kv::KvStorage> storage = std::move(kv.storage);
    if (c.kv_prefault) storage->prefault(model->pool());
    std::shared_ptr<model::KvLayers> layers = kv.layers;
    PagedModel pm;
    pm.config = &mc;
    pm.num_kv_blocks = c.num_kv_blocks;
    pm.block_size = c.block_size;
    // Before each pass: the plan to the other ranks, the blocks it writes to huge pages.
    std::shared_ptr<StepSender> sender = tp ? std::make_shared<StepSender>(*tp) : nullptr;
    auto prepare = [layers, sender, st = storage.get()](std::span<const int32_t> tokens,
                                                        std::span<const model::BatchSeq> seqs) {
        if (sender) KILN_RETURN_IF_ERROR(sender->send_step(tokens, seqs));
        // The blocks this step writes (a block it only reads was written, so handed over, before): their
        // memory to huge pages, in the background.
        int32_t end = 0;
        const int64_t bs = layers->block_size;
        for (const model::BatchSeq& s : seqs)
            for (int64_t i = s.start / bs; i < (s.start + s.num_tokens + bs - 1) / bs; ++i)
                end = std::max(end, s.block_table[size_t(i)] + 1);
        st->collapse_blocks(end);
        return core::Status::ok();
    };
    pm.forward = [model, layers, prepare](std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                                          std::vector<float>& logits) {
        KILN_RETURN_IF_ERROR(prepare(tokens, seqs));
        return model->forward_batch(tokens, seqs, *layers, logits);
    };
    // Pipeline stages after rank 0's: one batch in flight per stage (or as configured), so that rank 0
    // starts the next batch while the later stages run this one.
    dist::Communicator* world = model->pipeline();
    const int stages = world ? world->size() / (model->tensor_parallel() ? model->tensor_parallel()->size() : 1) : 1;
    if (c.pipeline_lanes < 0) return core::error(core::StatusCode::kInvalidArgument) << "--pp-batches must be >= 0";
    const int32_t lanes = c.pipeline_lanes > 0 ? c.pipeline_lanes : stages;
    if (stages > 1 && lanes > 1) {
        if (c.num_kv_blocks < lanes)
            return core::error(core::StatusCode::kInvalidArgument)
                   << "a KV pool of " << c.num_kv_blocks << " blocks cannot be split over " << lanes << " pipeline lanes";
        // Each lane's receive of its logits, posted by start and waited for by finish.
        auto inflight = std::make_shared<std::vector<std::unique_ptr<dist::Pending>>>(size_t(lanes));
        pm.lanes = lanes;
        pm.start = [model, layers, prepare, inflight](int32_t lane, std::span<const int32_t> tokens,
                                                      std::span<const model::BatchSeq> seqs,
                                                      std::vector<float>& logits) {
            KILN_RETURN_IF_ERROR(prepare(tokens, seqs));
            auto& slot = (*inflight)[size_t(lane)];
            KILN_CHECK(!slot) << "pipeline lane " << lane << " started twice";
            KILN_ASSIGN_OR_RETURN(slot, model->start_batch(tokens, seqs, *layers, logits));
            return core::Status::ok();
        };
        pm.finish = [inflight](int32_t lane) {
            std::unique_ptr<dist::Pending> recv = std::move((*inflight)[size_t(lane)]);
            return recv ? recv->wait() : core::Status::ok();
        };
    }
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> e, create(std::move(pm), tokenizer, c));
    e->storage_ = std::move(storage);
    if (sender) {  // last, once nothing here can fail: the followers allocate the same blocks and start
        KILN_RETURN_IF_ERROR(sender->send_pool({c.num_kv_blocks, c.block_size, int64_t(c.kv_dtype)}));
        e->sender_ = sender;
    }
    return e;
}

core::Result<std::unique_ptr<EngineCore>> EngineCore::create(PagedModel model, const tokenizer::Tokenizer* tokenizer,
                                                             const EngineConfig& config) {
    KILN_CHECK(model.config && model.forward && tokenizer) << "EngineCore needs a model and a tokenizer";
    const loader::ModelConfig& mc = *model.config;
    EngineConfig c = config;
    c.num_kv_blocks = model.num_kv_blocks;  // the model's pool
    c.block_size = model.block_size;
    KILN_RETURN_IF_ERROR(check_config(mc, c));
    if (c.num_kv_blocks < 1 || c.num_kv_blocks > INT32_MAX / c.block_size)
        return core::error(core::StatusCode::kInvalidArgument) << "KV pool of " << c.num_kv_blocks << " blocks";
    const int32_t lanes = model.start && model.finish ? std::max(1, model.lanes) : 1;
    if (lanes > 1 && c.num_kv_blocks < lanes)
        return core::error(core::StatusCode::kInvalidArgument)
               << "a KV pool of " << c.num_kv_blocks << " blocks cannot be split over " << lanes << " lanes";
    std::unique_ptr<EngineCore> e(new EngineCore());
    e->model_ = std::move(model);
    e->tokenizer_ = tokenizer;
    // The lanes split the blocks and the sequences per step (each lane's batch is one pass).
    for (int32_t l = 0; l < lanes; ++l) {
        sched::SchedulerConfig sc;
        const int64_t first = c.num_kv_blocks * l / lanes;
        sc.num_blocks = int32_t(c.num_kv_blocks * (l + 1) / lanes - first);
        sc.block_size = c.block_size;
        sc.max_batch_tokens = c.max_batch_tokens;
        sc.max_seqs = std::max<int32_t>(1, (c.max_seqs + lanes - 1) / lanes);
        sc.prefix_cache = c.prefix_cache;
        Lane& lane = e->lanes_.emplace_back();
        lane.scheduler = std::make_unique<sched::Scheduler>(sc);
        lane.first_block = int32_t(first);
    }
    if (tokenizer->eos_id() >= 0) e->eos_ids_.push_back(tokenizer->eos_id());
    for (int64_t id : mc.eos_token_ids)
        if (id >= 0 && std::find(e->eos_ids_.begin(), e->eos_ids_.end(), int32_t(id)) == e->eos_ids_.end())
            e->eos_ids_.push_back(int32_t(id));
    e->stats_.kv_blocks_total = int32_t(c.num_kv_blocks);
    if (c.spec.method == SpecConfig::Method::kDraftModel) {
        KILN_ASSIGN_OR_RETURN(e->draft_, DraftModel::create(c.spec.draft_model, c.num_kv_blocks, c.block_size));
    }
    e->config_ = c;
    return e;
}

core::Status EngineCore::add(int64_t id, Request request) {
    const int64_t vocab = model_.config->vocab_size;
    if (requests_.count(id))
        return core::error(core::StatusCode::kInvalidArgument) << "request id " << id << " is in use";
    if (request.prompt.empty()) return core::error(core::StatusCode::kInvalidArgument) << "the prompt has no tokens";
    for (int32_t t : request.prompt)
        if (t < 0 || t >= vocab)
            return core::error(core::StatusCode::kInvalidArgument)
                   << "prompt token id " << t << " outside the vocabulary [0, " << vocab << ")";
    const int64_t len = int64_t(request.prompt.size());
    if (len >= config_.max_model_len)
        return core::error(core::StatusCode::kInvalidArgument)
               << "the prompt has " << len << " tokens; the context holds " << config_.max_model_len
               << " (prompt + output)";
    if (request.params.max_tokens < 0) return core::error(core::StatusCode::kInvalidArgument) << "max_tokens < 0";
    if (len + request.params.max_tokens > config_.max_model_len)
        return core::error(core::StatusCode::kInvalidArgument)
               << "prompt (" << len << " tokens) + max_tokens (" << request.params.max_tokens
               << ") exceeds the context of " << config_.max_model_len;
    KILN_ASSIGN_OR_RETURN(sampling::Sampler sampler,
                          sampling::Sampler::create(request.params, int32_t(vocab), int32_t(len)));
    if (request.grammar && request.grammar->vocab().vocab_size() != int32_t(vocab))
        return core::error(core::StatusCode::kInvalidArgument)
               << "the grammar was compiled for a vocabulary of " << request.grammar->vocab().vocab_size()
               << " tokens; the model has " << vocab;
    // A new request joins the lane holding the fewest.
    int32_t lane = 0;
    int64_t fewest = INT64_MAX;
    for (size_t l = 0; l < lanes_.size(); ++l) {
        const sched::SchedulerStats st = lanes_[l].scheduler->stats();
        if (st.num_running + st.num_waiting < fewest) {
            fewest = st.num_running + st.num_waiting;
            lane = int32_t(l);
        }
    }
    sched::Scheduler& scheduler = *lanes_[size_t(lane)].scheduler;
    KILN_RETURN_IF_ERROR(scheduler.add(id, request.prompt, len + request.params.max_tokens));
    Live live;
    live.lane = lane;
    live.sampler = std::make_unique<sampling::Sampler>(std::move(sampler));
    live.stop = std::make_unique<sampling::StopChecker>(request.params, eos_ids_);
    live.decoder = std::make_unique<tokenizer::StreamDecoder>(*tokenizer_, request.skip_special);
    if (request.grammar) live.matcher = std::make_unique<grammar::Matcher>(request.grammar);
    live.request = std::move(request);
    live.spec_k = config_.spec.num_draft;
    if (config_.spec.method == SpecConfig::Method::kDraftModel && !live.sampler->is_greedy()) {
        sampling::SamplingParams dp = live.request.params;
        dp.seed ^= 0x9e3779b97f4a7c15ull;  // a stream of its own, as reproducible as the request's
        live.draft_sampler = std::make_unique<sampling::Sampler>(dp, int32_t(vocab), int32_t(len));
    }
    stats_.prompt_tokens_total += len;
    if (live.request.params.max_tokens == 0) {  // nothing to generate: finished at once
        scheduler.remove(id);
        StepOutput out;
        out.request_id = id;
        out.prompt_tokens = len;
        finish(id, live, FinishReason::kLength, out);
        return core::Status::ok();
    }
    requests_.emplace(id, std::move(live));
    return core::Status::ok();
}

void EngineCore::apply_grammar(Live& live, std::span<float> logits, bool write) {
    live.matcher->fill_mask(mask_);
    // EOS (unless ignore_eos) and the request's stop tokens end the text: allowed once it is whole,
    // never before (even when a tokenizer does not mark them as control tokens).
    const bool end_ok = live.matcher->can_end();
    auto set = [&](int32_t id, bool on) {
        if (id < 0 || size_t(id) >= logits.size()) return;
        const uint64_t bit = uint64_t(1) << (id & 63);
        mask_[size_t(id) >> 6] = on ? mask_[size_t(id) >> 6] | bit : mask_[size_t(id) >> 6] & ~bit;
    };
    for (int32_t id : eos_ids_) set(id, end_ok && !live.request.params.ignore_eos);
    for (int32_t id : live.request.params.stop_ids) set(id, end_ok);
    bool any = false;
    for (uint64_t m : mask_) any = any || m != 0;
    live.grammar_stuck = !any;
    if (write) sampling::mask_logits(logits, mask_);
}

void EngineCore::finish(int64_t id, Live& live, FinishReason reason, StepOutput& out) {
    if (!live.stop->stopped()) {
        out.text += live.stop->append(live.decoder->flush()).text;
        if (!live.stop->stopped()) out.text += live.stop->finish();
    }
    out.finished = true;
    out.finish_reason = reason;
    out.completion_tokens = live.generated;
    out.cached_tokens = live.cached_tokens;
    if (live.request.on_output) live.request.on_output(out);
    (void)id;
}

void EngineCore::release(int64_t id) {
    scheduler_of(id).remove(id);
    if (draft_) draft_->forget(id);
}

void EngineCore::abort(int64_t id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    if (Lane& lane = lanes_[size_t(it->second.lane)]; lane.in_flight) {
        // Its lane's pass ends first (the request may finish in it): blocks are never freed under a
        // pass in flight.
        finish_step(lane);
        it = requests_.find(id);
        if (it == requests_.end()) return;
    }
    release(id);
    StepOutput out;
    out.request_id = id;
    out.prompt_tokens = int64_t(it->second.request.prompt.size());
    Live live = std::move(it->second);
    requests_.erase(it);
    finish(id, live, FinishReason::kAbort, out);
}

void EngineCore::fail_batch(const sched::ScheduledBatch& batch, const core::Status& st) {
    for (const sched::ScheduledSeq& s : batch.seqs) {
        auto it = requests_.find(s.id);
        if (it == requests_.end()) continue;
        release(s.id);
        StepOutput out;
        out.request_id = s.id;
        out.error = st.to_string();
        Live live = std::move(it->second);
        requests_.erase(it);
        finish(s.id, live, FinishReason::kError, out);
    }
}

void EngineCore::propose_drafts(Lane& lane) {
    const SpecConfig& sc = config_.spec;
    if (sc.method == SpecConfig::Method::kNone) return;
    sched::Scheduler& sched = *lane.scheduler;
    const int32_t me = int32_t(&lane - lanes_.data());
    int64_t decoding = 0;
    for (const auto& [id, live] : requests_) decoding += live.lane == me && sched.is_decoding(id) ? 1 : 0;
    if (sc.max_batch > 0 && decoding > sc.max_batch) return;
    for (auto& [id, live] : requests_) {
        if (live.lane != me) continue;
        live.draft.clear();
        live.draft_probs.clear();
        if (!live.request.speculate || !sched.is_decoding(id)) continue;
        if (live.spec_pause > 0) {
            --live.spec_pause;
            continue;
        }
        // Tokens left after the one this step samples anyway.
        const int64_t left = live.request.params.max_tokens - live.generated - 1;
        const int64_t k = std::min<int64_t>(live.spec_k, left);
        if (k <= 0) continue;
        if (sc.method == SpecConfig::Method::kDraftModel) {  // drafted once scheduled (draft_scheduled)
            sched.set_draft(id, k);
            continue;
        }
        live.draft = propose_ngram(sched.tokens(id), k, sc.ngram_min, sc.ngram_max);
        sched.set_draft(id, int64_t(live.draft.size()));
    }
}

core::Status EngineCore::draft_scheduled(sched::ScheduledBatch& batch) {
    for (sched::SeqId id : batch.preempted) draft_->forget(id);  // recomputed from scratch later
    std::vector<DraftModel::Job> jobs;
    for (const sched::ScheduledSeq& s : batch.seqs)
        if (s.num_draft > 0) {
            Live& live = requests_.at(s.id);
            jobs.push_back({s.id, scheduler_of(s.id).tokens(s.id), s.num_draft, &live.draft, live.draft_sampler.get(),
                            &live.draft_probs});
        }
    if (jobs.empty()) return core::Status::ok();
    KILN_RETURN_IF_ERROR(draft_->propose(jobs));
    for (sched::ScheduledSeq& s : batch.seqs) {
        if (s.num_draft == 0) continue;
        const int64_t got = int64_t(requests_.at(s.id).draft.size());
        if (got >= s.num_draft) continue;
        // Fewer drafts than scheduled: the step runs fewer tokens (its blocks still cover them).
        batch.num_tokens -= s.num_draft - got;
        s.num_tokens -= s.num_draft - got;
        s.num_draft = got;
    }
    return core::Status::ok();
}

void EngineCore::sample_step(Lane& lane, std::vector<std::pair<size_t, std::vector<float>>>& raw,
                             std::vector<std::pair<size_t, sampling::TokenLogprobs>>& lps) {
    const size_t V = size_t(model_.config->vocab_size);
    const sched::ScheduledBatch& batch = lane.batch;
    const bool ids_back = lane.ids_back;
    std::vector<float>& logits_ = lane.logits;
    const std::vector<int32_t>& sampled_ = lane.sampled;
    new_tokens_.clear();
    new_counts_.clear();
    emitted_.clear();
    // The distribution draft i was drawn from (empty: a point mass, as n-gram and greedy drafts are).
    auto q_of = [](const Live& live, size_t i) {
        return i < live.draft_probs.size() ? std::span<const sampling::TokenProb>(live.draft_probs[i])
                                           : std::span<const sampling::TokenProb>();
    };
    size_t row = 0;  // logits row (or id from the model) of the step
    for (const sched::ScheduledSeq& s : batch.seqs) {
        if (!s.sample) continue;
        Live& live = requests_.at(s.id);
        const size_t nd = size_t(s.num_draft), first = new_tokens_.size();
        const std::vector<int32_t>& tokens = lane.scheduler->tokens(s.id);
        if (nd > 0) history_.assign(tokens.begin(), tokens.end());
        const std::vector<int32_t>& hist = nd > 0 ? history_ : tokens;
        const int32_t num_top = live.request.params.logprobs;
        // Row i of the sequence predicts the token after draft i - 1: drafts are checked in order and
        // the first rejected one is replaced by the verdict's token; after the last accepted draft
        // (or none) the next row is sampled as usual.
        for (size_t i = 0; i <= nd; ++i, ++row) {
            std::span<float> logits(ids_back ? nullptr : logits_.data() + row * V, ids_back ? 0 : V);
            if (live.request.return_logits && !ids_back)
                raw.emplace_back(new_tokens_.size(), std::vector<float>(logits.begin(), logits.end()));
            if (num_top >= 0 && !ids_back) row_copy_.assign(logits.begin(), logits.end());
            if (live.matcher) {
                const auto tg = Clock::now();
                // A row the sampler draws from takes the mask as it is; a draft's row is verified
                // against logits with -inf written outside it.
                apply_grammar(live, logits, /*write=*/i < nd);
                stats_.grammar_seconds += seconds_since(tg);
            }
            int32_t tok = 0;
            bool accepted = false;
            if (i < nd) {
                const int32_t d = live.draft[i];
                if (ids_back) {
                    tok = sampled_[row];
                    accepted = tok == d;
                } else {
                    const sampling::Sampler::Verdict v =
                        config_.spec.verify_for_tests ? config_.spec.verify_for_tests(*live.sampler, logits, hist, d)
                                                      : live.sampler->verify(logits, hist, d, q_of(live, i));
                    tok = v.token;
                    accepted = v.accepted;
                }
            } else {
                tok = ids_back ? sampled_[row]
                               : live.sampler->sample(logits, hist,
                                                      live.matcher ? std::span<const uint64_t>(mask_) : std::span<const uint64_t>());
            }
            new_tokens_.push_back(tok);
            if (num_top >= 0 && !ids_back)
                lps.emplace_back(new_tokens_.size() - 1, sampling::token_logprobs(row_copy_, tok, num_top));
            // The grammar follows every token but the ones that end the request; once it can go no
            // further, so does the sequence (the output loop finishes it).
            // A token the matcher refuses (a mask and a walk that disagree: a bug) ends the request with
            // an error, as a grammar with no way on does.
            if (live.matcher && !live.grammar_stuck && !live.stop->is_stop_token(tok)) {
                const auto tg = Clock::now();
                live.grammar_stuck = !live.matcher->accept_token(tok);
                stats_.grammar_seconds += seconds_since(tg);
            }
            const bool grammar_done =
                live.matcher && (live.grammar_stuck || live.stop->is_stop_token(tok) || live.matcher->must_end());
            if (i == nd || !accepted || grammar_done) {
                row += nd - i;  // the rows of the drafts after a rejected one are not looked at
                break;
            }
            history_.push_back(tok);
        }
        ++row;
        const size_t count = new_tokens_.size() - first;
        emitted_.push_back({first, count});
        new_counts_.push_back(int32_t(count));
        if (draft_ && nd > 0) draft_->verified(s.id, int64_t(count - 1));
        if (nd > 0) {  // adapt the draft length: longer after a full acceptance, shorter after a miss
            stats_.spec_draft_tokens += int64_t(nd);
            stats_.spec_accepted_tokens += int64_t(count - 1);
            ++stats_.spec_verify_steps;
            live.spec_k = count - 1 == nd ? std::min(config_.spec.num_draft, live.spec_k + 2)
                                          : std::max(std::min(2, config_.spec.num_draft), live.spec_k - 1);
            if (draft_) {
                live.spec_backoff = count == 1 ? std::min(32, std::max(1, 2 * live.spec_backoff)) : 0;
                live.spec_pause = live.spec_backoff;
            }
        }
    }
}

bool EngineCore::has_work() const {
    if (!requests_.empty()) return true;
    for (const Lane& lane : lanes_)
        if (lane.in_flight) return true;
    return false;
}

bool EngineCore::step() {
    if (!model_.start) {  // one lane, each pass run whole
        if (!start_step(lanes_[0])) return false;
        finish_step(lanes_[0]);
        return true;
    }
    // The next lane that has a batch in flight or one to start: its batch finishes (so its sequences'
    // next tokens are known) and its next one starts, while the other lanes' passes go on.
    for (size_t tries = 0; tries < lanes_.size(); ++tries) {
        Lane& lane = lanes_[next_lane_];
        next_lane_ = (next_lane_ + 1) % lanes_.size();
        bool did = false;
        if (lane.in_flight) {
            finish_step(lane);
            did = true;
        }
        if (start_step(lane)) did = true;
        if (did) return true;
    }
    return false;
}

bool EngineCore::start_step(Lane& lane) {
    const auto t0 = Clock::now();
    propose_drafts(lane);
    lane.batch = lane.scheduler->schedule();
    sched::ScheduledBatch& batch = lane.batch;
    if (batch.seqs.empty()) return false;
    if (draft_) {
        const auto td = Clock::now();
        const core::Status drafted = draft_scheduled(batch);
        stats_.forward_seconds += seconds_since(td);  // model work, counted with the step's forward
        if (!drafted.is_ok()) {
            fail_batch(batch, drafted);
            return true;
        }
    }
    std::vector<int32_t>& tokens_ = lane.tokens;
    std::vector<model::BatchSeq>& seqs_ = lane.seqs;
    tokens_.clear();
    seqs_.clear();
    bool any_draft = false;
    int64_t num_rows = 0;  // logits rows the step returns: 1 + num_draft per sampled sequence
    for (sched::ScheduledSeq& s : batch.seqs) {
        const std::vector<int32_t>& all = lane.scheduler->tokens(s.id);
        const int64_t real = s.num_tokens - s.num_draft;
        tokens_.insert(tokens_.end(), all.begin() + s.start, all.begin() + s.start + real);
        if (s.num_draft > 0) {
            const std::vector<int32_t>& d = requests_.at(s.id).draft;
            KILN_CHECK(int64_t(d.size()) >= s.num_draft) << "scheduled more drafts than proposed";
            tokens_.insert(tokens_.end(), d.begin(), d.begin() + s.num_draft);
            any_draft = true;
        }
        for (int32_t& b : s.block_table) b += lane.first_block;  // the lane's blocks in the whole pool
        const int64_t rows = s.sample ? 1 + s.num_draft : 0;
        seqs_.push_back({s.start, s.num_tokens, s.block_table, rows});
        num_rows += rows;
    }
    const auto t1 = Clock::now();
    stats_.schedule_seconds += std::chrono::duration<double>(t1 - t0).count();
    // Where the sampled rows are decided: plain greedy rows need only their argmax (the model's
    // greedy step, when it has one); rows that need no logprobs or raw logits can be sampled by the
    // model (forward_sample, not with drafts to verify); otherwise the logits come back and the
    // host samples. A pass in two halves (lanes) always brings the logits.
    const bool whole = !model_.start;
    bool plain_greedy = whole && bool(model_.forward_greedy);
    bool device_sample = whole && bool(model_.forward_sample) && !any_draft;
    for (const sched::ScheduledSeq& s : batch.seqs) {
        if (!s.sample) continue;
        const Live& live = requests_.at(s.id);
        const sampling::SamplingParams& p = live.request.params;
        // Rows the host must see: logprobs, raw logits, or a grammar's mask to apply before sampling.
        const bool wants_logits = p.logprobs >= 0 || live.request.return_logits || live.matcher;
        plain_greedy = plain_greedy && !wants_logits && live.sampler->is_greedy() && p.logit_bias.empty() &&
                       p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
        device_sample = device_sample && !wants_logits;
    }
    device_sample = device_sample && !plain_greedy;
    if (device_sample) {
        sample_rows_.clear();
        sample_adjust_.clear();
        for (const sched::ScheduledSeq& s : batch.seqs) {
            if (!s.sample) continue;
            sample_rows_.emplace_back();
            requests_.at(s.id).sampler->plan_row(lane.scheduler->tokens(s.id), sample_rows_.back(), sample_adjust_);
        }
    }
    lane.ids_back = plain_greedy || device_sample;
    lane.num_rows = num_rows;
    const int32_t lane_id = int32_t(&lane - lanes_.data());
    const core::Status forwarded =
        !whole         ? model_.start(lane_id, tokens_, seqs_, lane.logits)
        : plain_greedy ? model_.forward_greedy(tokens_, seqs_, lane.sampled)
        : device_sample ? model_.forward_sample(tokens_, seqs_, sample_rows_, sample_adjust_, lane.sampled)
                        : model_.forward(tokens_, seqs_, lane.logits);
    stats_.forward_seconds += seconds_since(t1);
    if (!forwarded.is_ok()) {
        fail_batch(batch, forwarded);
        return true;
    }
    lane.in_flight = true;
    return true;
}

void EngineCore::finish_step(Lane& lane) {
    KILN_CHECK(lane.in_flight) << "finish_step without a batch in flight";
    lane.in_flight = false;
    const sched::ScheduledBatch& batch = lane.batch;
    const auto t1 = Clock::now();
    if (model_.finish) {
        if (const core::Status st = model_.finish(int32_t(&lane - lanes_.data())); !st.is_ok()) {
            fail_batch(batch, st);
            return;
        }
    }
    // One id (or logits row) per row asked for, ids in the vocabulary: anything else is the model's
    // bug, reported as the batch's error rather than read out of bounds.
    const int64_t V = model_.config->vocab_size;
    const bool ids_back = lane.ids_back;
    const int64_t num_rows = lane.num_rows;
    const size_t got = ids_back ? lane.sampled.size() : lane.logits.size();
    bool sane = got == size_t(ids_back ? num_rows : num_rows * V);
    if (ids_back)
        for (int32_t id : lane.sampled) sane = sane && id >= 0 && id < V;
    if (!sane) {
        fail_batch(batch, core::error(core::StatusCode::kInternal)
                              << "the model returned " << got << " values (or an id outside the vocabulary) for "
                              << num_rows << " rows of logits");
        return;
    }
    const auto t2 = Clock::now();
    stats_.forward_seconds += std::chrono::duration<double>(t2 - t1).count();
    std::vector<std::pair<size_t, std::vector<float>>> raw;       // (index into new_tokens_, logits) when asked
    std::vector<std::pair<size_t, sampling::TokenLogprobs>> lps;  // (index into new_tokens_, logprobs) when asked
    sample_step(lane, raw, lps);
    lane.scheduler->complete(batch, new_tokens_, new_counts_);
    stats_.sample_seconds += seconds_since(t2);
    ++stats_.num_steps;

    size_t si = 0, ri = 0, li = 0;
    for (const sched::ScheduledSeq& s : batch.seqs) {
        Live& live = requests_.at(s.id);
        if (!live.cached_reported) live.cached_tokens = s.start;  // its first step starts after the cached prefix
        live.cached_reported = true;
        if (!s.sample) continue;
        const Emitted em = emitted_[si++];
        StepOutput out;
        out.request_id = s.id;
        out.prompt_tokens = int64_t(live.request.prompt.size());
        out.cached_tokens = live.cached_tokens;
        // Tokens in order until one finishes the request (the rest were never generated).
        const int64_t len_before = int64_t(lane.scheduler->tokens(s.id).size()) - int64_t(em.count);
        FinishReason reason = FinishReason::kNone;
        for (size_t j = 0; j < em.count && reason == FinishReason::kNone; ++j) {
            const size_t idx = em.first + j;
            const int32_t tok = new_tokens_[idx];
            if (ri < raw.size() && raw[ri].first == idx) out.logits.push_back(std::move(raw[ri++].second));
            const bool has_lp = li < lps.size() && lps[li].first == idx;
            const size_t lpi = has_lp ? li++ : 0;
            ++stats_.generated_tokens_total;
            if (live.grammar_stuck && j + 1 == em.count) {
                reason = FinishReason::kError;
                out.error = "structured output: no token can continue the grammar here";
                break;
            }
            if (live.stop->is_stop_token(tok)) {
                reason = FinishReason::kStop;
                break;
            }
            ++live.generated;
            out.token_ids.push_back(tok);
            if (has_lp) out.logprobs.push_back(std::move(lps[lpi].second));
            sampling::StopChecker::Output o = live.stop->append(live.decoder->push(tok));
            out.text += o.text;
            if (o.stopped || (live.matcher && live.matcher->must_end()))
                reason = FinishReason::kStop;
            else if (live.generated >= live.request.params.max_tokens)
                reason = FinishReason::kLength;
            else if (len_before + int64_t(j) + 1 >= config_.max_model_len)
                reason = FinishReason::kLength;
        }
        if (reason == FinishReason::kNone) {
            out.completion_tokens = live.generated;
            if (live.request.on_output) live.request.on_output(out);
            continue;
        }
        release(s.id);
        Live done = std::move(live);
        requests_.erase(s.id);
        finish(s.id, done, reason, out);
    }
}

EngineStats EngineCore::stats() const {
    EngineStats s = stats_;
    s.kv_blocks_total = 0;
    for (const Lane& lane : lanes_) {  // summed over the lanes (the peak: of each lane's, summed)
        const sched::SchedulerStats ss = lane.scheduler->stats();
        s.num_running += ss.num_running;
        s.num_waiting += ss.num_waiting;
        s.kv_blocks_in_use += ss.blocks_in_use;
        s.kv_blocks_total += ss.blocks_total;
        s.peak_kv_blocks_in_use += ss.peak_blocks_in_use;
        s.prefix_query_tokens += ss.prefix_query_tokens;
        s.prefix_hit_tokens += ss.prefix_hit_tokens;
        s.num_preemptions += ss.num_preemptions;
    }
    return s;
}

}  // namespace kiln::engine

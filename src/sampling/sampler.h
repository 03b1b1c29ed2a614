// Sampler: turns one row of f32 logits into a token id for one request, host-only.
// Pipeline, in this order (HF transformers logits processors / vLLM sampler semantics):
//   1. logit bias          (OpenAI logit_bias: added to the raw logit)
//   2. repetition penalty  (HF RepetitionPenaltyLogitsProcessor / CTRL: positive logits divided,
//                           negative multiplied, once per distinct token in prompt + generated)
//   3. frequency/presence  (OpenAI / vLLM: logit -= freq * count + presence * [count > 0], counting
//                           generated tokens only, i.e. ids[num_prompt_tokens:])
//   4. temperature         (below kGreedyTemperature: greedy argmax, lowest id on ties; no RNG draw)
//   5. top-k               (nth_element, ties broken by lower id; no full sort)
//   6. top-p               (smallest prefix of the descending distribution whose mass reaches p,
//                           always at least one token; grows a partial sort instead of sorting all)
//   7. min-p               (drop tokens with prob < min_p * max prob)
//   8. a draw from the sampler's own std::mt19937_64 (seeded: the same seed gives the same tokens on
//      any thread or platform, since mt19937_64 and our [0,1) conversion are fully specified;
//      unseeded: std::random_device).
// Invariants: params passed validate(vocab_size); logits.size() == vocab_size. NaN logits are treated
// as -inf. Token ids outside [0, vocab_size) in the history are ignored by the penalties. If every
// logit is -inf the lowest id is returned. The logits span is scratch: on return it holds the values
// after steps 1-4. Not thread-safe; one Sampler per request.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/softmax.h"
#include "kernels/ref/sample.h"
#include "sampling/sampling_params.h"

namespace kiln::sampling {

struct TokenProb {
    int32_t id;
    float prob;
};

class Sampler {
public:
    // Validates params; the usual way to build a Sampler from a user's request.
    static core::Result<Sampler> create(const SamplingParams& params, int32_t vocab_size, int32_t num_prompt_tokens);

    // Precondition (KILN_CHECK): params.validate(vocab_size) is ok and num_prompt_tokens >= 0.
    // num_prompt_tokens splits the history passed to sample(): the first num_prompt_tokens ids are the
    // prompt (repetition penalty only), the rest were generated (all penalties).
    Sampler(const SamplingParams& params, int32_t vocab_size, int32_t num_prompt_tokens);

    // Applies the pipeline to `logits` (modified in place) and draws a token.
    // prompt_and_generated_ids: the prompt followed by every token generated so far.
    // allowed (ceil(vocab / 64) words; empty: all): bit i = token i may be drawn, as if every other
    // logit were -inf (a grammar's mask): steps 4-8 then run over the allowed tokens alone (a plain
    // draw under a mask allowing an eighth of the vocabulary or more writes -inf over the others and
    // runs the unmasked softmax: `logits` is scratch either way).
    int32_t sample(std::span<float> logits, std::span<const int32_t> prompt_and_generated_ids,
                   std::span<const uint64_t> allowed = {});

    // Speculative decoding's acceptance rule (Leviathan et al. 2023, Chen et al. 2023) for one drafted
    // token: p is steps 1-7 of this row (the distribution sample() draws from), q the proposer's
    // distribution (`draft_probs`, sparse; empty = a point mass on `draft`, as n-gram lookup proposes).
    // Accepts `draft` with probability min(1, p(draft) / q(draft)); otherwise draws the token from
    // max(0, p - q) renormalized. Either way the token is distributed exactly as p. Greedy: accepts
    // when `draft` is the argmax (lowest id on ties), else returns the argmax; no RNG draw. Takes one
    // uniform draw to accept and one more to resample. `logits` is scratch, as in sample().
    struct Verdict {
        int32_t token = 0;
        bool accepted = false;
    };
    Verdict verify(std::span<float> logits, std::span<const int32_t> prompt_and_generated_ids, int32_t draft,
                   std::span<const TokenProb> draft_probs = {});

    // Step 8 alone: a draw from `dist` (candidates with probabilities summing to 1, as distribution()
    // returns them), one uniform from this sampler's generator.
    int32_t draw(std::span<const TokenProb> dist);

    // Steps 1-7 only: the final candidates with renormalized probabilities (greedy: one token, prob 1).
    // Order: descending prob (ties by id) when top-k or top-p ran, otherwise ascending id.
    // Consumes no randomness; for tests and logprobs.
    std::vector<TokenProb> distribution(std::span<float> logits, std::span<const int32_t> prompt_and_generated_ids);

    // For a device that samples (kernels/ref/sample.h, kernels/cuda/sample.h): this row's knobs in
    // `row`, its bias and penalty entries appended to `adjust` (ids ascending; row.adjust_begin /
    // adjust_count say where), and for a non-greedy row the draw u from this sampler's generator (one
    // per call, as sample() takes; sample() takes none for a row that is all -inf, this does).
    void plan_row(std::span<const int32_t> prompt_and_generated_ids, kernels::ref::SampleRow& row,
                  std::vector<kernels::ref::LogitAdjustment>& adjust);

    bool is_greedy() const { return params_.temperature < kGreedyTemperature; }
    const SamplingParams& params() const { return params_; }

private:
    void apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> ids);
    // Fills cands_ with steps 4-7 (over the `allowed` tokens alone when given). Returns false when greedy
    // (or everything is -inf): greedy_id_ holds the answer.
    bool build_candidates(std::span<float> logits, std::span<const uint64_t> allowed = {});
    // Steps 4 and 8 when no top-k, top-p or min-p cuts the distribution (the common case): the softmax
    // by the SIMD kernels, a draw found through block sums without building candidates.
    bool plain() const { return !is_greedy() && params_.top_k <= 0 && params_.top_p >= 1.0f && params_.min_p <= 0.0f; }
    int32_t sample_plain(std::span<float> logits);
    double uniform01();  // [0, 1) with 53 random bits

    SamplingParams params_;
    int32_t vocab_size_;
    int32_t num_prompt_tokens_;
    std::mt19937_64 rng_;
    int32_t greedy_id_ = 0;
    std::vector<TokenProb> cands_;  // scratch, reused across steps
    std::vector<int32_t> counts_;   // [vocab_size] zero between calls; penalties only
    std::vector<uint8_t> seen_;     // [vocab_size] zero between calls; repetition penalty only
    std::vector<float> q_dense_;    // [vocab_size] zero between calls; verify() with a draft distribution
    std::vector<float> probs_;      // sample_plain's scratch: exp(l - max), and its block sums
    std::vector<double> block_sums_;
    kernels::cpu::SoftmaxKernels softmax_ = kernels::cpu::best_softmax_kernels();
};

// Index of the largest logit, lowest id on ties, NaN never chosen (0 if all are NaN/-inf).
int32_t argmax_lowest_id(std::span<const float> logits);

// logits[i] = -inf for every i whose bit in `allowed` (ceil(logits.size() / 64) words) is clear: a
// grammar's mask written into a row.
void mask_logits(std::span<float> logits, std::span<const uint64_t> allowed);

}  // namespace kiln::sampling

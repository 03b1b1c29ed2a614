// Sampler implementation. See sampler.h for the pipeline and the reference behaviour of each step.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace kiln::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// A cumulative mass within this of top_p counts as reaching it, so a boundary that is exact in real
// arithmetic (e.g. 0.5 + 0.25 vs p = 0.75) is not lost to float rounding of the softmax.
constexpr double kTopPSlack = 1e-6;

// Descending prob, then ascending id: a strict weak order (no NaN reaches it), deterministic on ties.
bool higher(const TokenProb& a, const TokenProb& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.id < b.id;
}

}  // namespace

void mask_logits(std::span<float> logits, std::span<const uint64_t> allowed) {
    for (size_t w = 0; w < allowed.size(); ++w) {
        const uint64_t m = allowed[w];
        if (m == ~uint64_t(0)) continue;
        const size_t begin = std::min(logits.size(), w * 64), end = std::min(logits.size(), begin + 64);
        if (m == 0) {  // most words of a narrow mask: a plain fill the compiler vectorizes
            std::fill(logits.begin() + ptrdiff_t(begin), logits.begin() + ptrdiff_t(end), kNegInf);
            continue;
        }
        for (size_t i = begin; i < end; ++i)
            if (!((m >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
}

int32_t argmax_lowest_id(std::span<const float> logits) {
    int32_t best = 0;
    float best_val = kNegInf;
    bool found = false;
    for (size_t i = 0; i < logits.size(); ++i) {
        float v = logits[i];
        if (std::isnan(v)) continue;
        if (!found || v > best_val) {  // strict >: the first (lowest) id wins ties
            best = int32_t(i);
            best_val = v;
            found = true;
        }
    }
    return best;
}

core::Result<Sampler> Sampler::create(const SamplingParams& params, int32_t vocab_size, int32_t num_prompt_tokens) {
    KILN_RETURN_IF_ERROR(params.validate(vocab_size));
    if (num_prompt_tokens < 0) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "num_prompt_tokens must be >= 0, got " << num_prompt_tokens;
    }
    return Sampler(params, vocab_size, num_prompt_tokens);
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, int32_t num_prompt_tokens)
    : params_(params), vocab_size_(vocab_size), num_prompt_tokens_(num_prompt_tokens) {
    core::Status st = params.validate(vocab_size);
    KILN_CHECK(st.is_ok()) << "Sampler built from unvalidated params: " << st.message();
    KILN_CHECK(num_prompt_tokens >= 0) << num_prompt_tokens;
    if (params_.top_k < 0) params_.top_k = 0;
    if (params_.has_seed) {
        rng_.seed(params_.seed);
    } else {
        std::random_device rd;
        rng_.seed((uint64_t(rd()) << 32) ^ uint64_t(rd()));
    }
}

double Sampler::uniform01() {
    return double(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> ids) {
    for (const auto& [id, bias] : params_.logit_bias) logits[size_t(id)] += bias;

    auto in_range = [&](int32_t id) { return id >= 0 && id < vocab_size_; };
    const float rp = params_.repetition_penalty;
    if (rp != 1.0f) {
        if (seen_.empty()) seen_.assign(size_t(vocab_size_), 0);
        for (int32_t id : ids) {
            if (!in_range(id) || seen_[size_t(id)]) continue;
            seen_[size_t(id)] = 1;
            float& l = logits[size_t(id)];
            l = l > 0.0f ? l / rp : l * rp;
        }
        for (int32_t id : ids) {
            if (in_range(id)) seen_[size_t(id)] = 0;
        }
    }

    const float fp = params_.frequency_penalty, pp = params_.presence_penalty;
    if (fp != 0.0f || pp != 0.0f) {
        size_t start = std::min(ids.size(), size_t(num_prompt_tokens_));
        std::span<const int32_t> generated = ids.subspan(start);
        if (counts_.empty()) counts_.assign(size_t(vocab_size_), 0);
        for (int32_t id : generated) {
            if (in_range(id)) ++counts_[size_t(id)];
        }
        for (int32_t id : generated) {
            if (!in_range(id) || counts_[size_t(id)] == 0) continue;
            logits[size_t(id)] -= fp * float(counts_[size_t(id)]) + pp;
            counts_[size_t(id)] = 0;  // applied once per distinct token; also restores the all-zero state
        }
    }
}

bool Sampler::build_candidates(std::span<float> logits, std::span<const uint64_t> allowed) {
    // Candidates carry logits in .prob until the softmax below. Banned tokens (-inf: a bias, a
    // grammar's mask written into the logits) would get probability 0: they are left out, in id
    // order, so the softmax and the cuts run over the tokens a row allows (the same draws).
    if (!allowed.empty()) {  // only the allowed tokens, gathered in id order; the logits stay as they are
        const float inv_t = is_greedy() ? 1.0f : 1.0f / params_.temperature;
        cands_.clear();
        for (size_t w = 0; w < allowed.size(); ++w)
            for (uint64_t m = allowed[w]; m; m &= m - 1) {
                const int32_t id = int32_t(w * 64 + size_t(__builtin_ctzll(m)));
                if (id >= vocab_size_) break;
                const float l = logits[size_t(id)];
                if (!std::isnan(l) && l != kNegInf) cands_.push_back({id, l * inv_t});
            }
        if (cands_.empty() || is_greedy()) {  // the first largest (lowest id on ties); 0 as argmax_lowest_id
            greedy_id_ = 0;
            float best = kNegInf;
            for (const TokenProb& c : cands_)
                if (c.prob > best) best = c.prob, greedy_id_ = c.id;
            return false;
        }
    } else {
        if (is_greedy()) {
            greedy_id_ = argmax_lowest_id(logits);
            return false;
        }
        const float inv_t = 1.0f / params_.temperature;
        for (float& l : logits) l = std::isnan(l) ? kNegInf : l * inv_t;
        cands_.resize(size_t(vocab_size_));
        size_t n = 0;
        for (int32_t i = 0; i < vocab_size_; ++i) {
            const float l = logits[size_t(i)];
            cands_[n] = {i, l};
            n += l != kNegInf;
        }
        cands_.resize(n);
    }
    bool sorted = false;
    if (params_.top_k > 0 && size_t(params_.top_k) < cands_.size()) {
        auto kth = cands_.begin() + params_.top_k;
        std::nth_element(cands_.begin(), kth - 1, cands_.end(), higher);
        cands_.resize(size_t(params_.top_k));
        std::sort(cands_.begin(), cands_.end(), higher);  // only k elements
        sorted = true;
    }

    float max_logit = kNegInf;
    for (const TokenProb& c : cands_) max_logit = std::max(max_logit, c.prob);
    if (max_logit == kNegInf) {  // everything banned: fall back to the lowest id rather than NaN
        greedy_id_ = argmax_lowest_id(logits);
        return false;
    }
    double sum = 0.0;
    for (TokenProb& c : cands_) {
        c.prob = std::exp(c.prob - max_logit);
        sum += c.prob;
    }
    const float inv_sum = float(1.0 / sum);
    for (TokenProb& c : cands_) c.prob *= inv_sum;

    if (params_.top_p < 1.0f) {
        const double target = double(params_.top_p) - kTopPSlack;
        const size_t n = cands_.size();
        size_t k = sorted ? n : std::min<size_t>(n, 64);
        size_t keep = n;
        for (;;) {
            if (!sorted) std::partial_sort(cands_.begin(), cands_.begin() + k, cands_.end(), higher);
            double cum = 0.0;
            size_t i = 0;
            for (; i < k; ++i) {
                cum += cands_[i].prob;
                if (cum >= target) break;
            }
            if (i < k) {
                keep = i + 1;
                break;
            }
            if (k == n) break;
            k = std::min(n, k * 8);  // the mass is spread wider than guessed: sort a larger prefix
        }
        sorted = true;
        cands_.resize(keep);
    }

    if (params_.min_p > 0.0f) {
        float max_prob = 0.0f;
        for (const TokenProb& c : cands_) max_prob = std::max(max_prob, c.prob);
        const float threshold = params_.min_p * max_prob;
        std::erase_if(cands_, [&](const TokenProb& c) { return c.prob < threshold; });  // keeps the max
    }

    double kept = 0.0;
    for (const TokenProb& c : cands_) kept += c.prob;
    const float inv_kept = float(1.0 / kept);
    for (TokenProb& c : cands_) c.prob *= inv_kept;
    return true;
}

void Sampler::plan_row(std::span<const int32_t> ids, kernels::ref::SampleRow& row,
                       std::vector<kernels::ref::LogitAdjustment>& adjust) {
    row = kernels::ref::SampleRow{};
    row.temperature = params_.temperature;
    row.top_k = params_.top_k;
    row.top_p = params_.top_p;
    row.min_p = params_.min_p;
    row.repetition_penalty = params_.repetition_penalty;
    row.frequency_penalty = params_.frequency_penalty;
    row.presence_penalty = params_.presence_penalty;
    const size_t first = adjust.size();
    auto in_range = [&](int32_t id) { return id >= 0 && id < vocab_size_; };
    for (const auto& [id, bias] : params_.logit_bias) adjust.push_back({id, bias, 0, 0});
    const bool repetition = params_.repetition_penalty != 1.0f;
    if (repetition || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
        if (counts_.empty()) counts_.assign(size_t(vocab_size_), 0);
        if (seen_.empty()) seen_.assign(size_t(vocab_size_), 0);
        for (int32_t id : ids.subspan(std::min(ids.size(), size_t(num_prompt_tokens_))))
            if (in_range(id)) ++counts_[size_t(id)];
        for (int32_t id : ids) {  // one entry per distinct id, in first-seen order
            if (!in_range(id) || seen_[size_t(id)]) continue;
            seen_[size_t(id)] = 1;
            const int32_t generated = counts_[size_t(id)];
            if (repetition || generated > 0) adjust.push_back({id, 0.0f, repetition ? 1 : 0, generated});
        }
        for (int32_t id : ids) {  // back to all zero
            if (!in_range(id)) continue;
            seen_[size_t(id)] = 0;
            counts_[size_t(id)] = 0;
        }
    }
    // Entries of one id adjacent (biases first, in their order), as the kernel requires.
    std::stable_sort(
        adjust.begin() + std::ptrdiff_t(first), adjust.end(),
        [](const kernels::ref::LogitAdjustment& a, const kernels::ref::LogitAdjustment& b) { return a.id < b.id; });
    row.adjust_begin = int32_t(first);
    row.adjust_count = int32_t(adjust.size() - first);
    row.u = is_greedy() ? 0.0 : uniform01();
}

std::vector<TokenProb> Sampler::distribution(std::span<float> logits, std::span<const int32_t> ids) {
    KILN_CHECK(logits.size() == size_t(vocab_size_)) << logits.size() << " vs vocab " << vocab_size_;
    apply_bias_and_penalties(logits, ids);
    if (!build_candidates(logits)) return {{greedy_id_, 1.0f}};
    return cands_;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> ids, std::span<const uint64_t> allowed) {
    KILN_CHECK(logits.size() == size_t(vocab_size_)) << logits.size() << " vs vocab " << vocab_size_;
    KILN_CHECK(allowed.empty() || allowed.size() == size_t(vocab_size_ + 63) / 64) << allowed.size() << " mask words";
    apply_bias_and_penalties(logits, ids);
    if (plain()) {
        if (allowed.empty()) return sample_plain(logits);
        // A mask that allows many tokens (string contents): its banned ones' logits -inf, then the SIMD
        // softmax over the row, rather than gathering the allowed ones into candidates one by one (the
        // same distribution and id-order draw). Few allowed: the gather below is the cheaper.
        int64_t n_allowed = 0;
        for (uint64_t m : allowed) n_allowed += __builtin_popcountll(m);
        if (n_allowed * 8 >= int64_t(vocab_size_)) {
            mask_logits(logits, allowed);
            return sample_plain(logits);
        }
    }
    if (!build_candidates(logits, allowed)) return greedy_id_;
    return draw(cands_);
}

int32_t Sampler::sample_plain(std::span<float> logits) {
    const int64_t V = int64_t(logits.size());
    const float max_logit = softmax_.scale_max(logits.data(), 1.0f / params_.temperature, V);
    if (max_logit == kNegInf) return argmax_lowest_id(logits);  // everything banned: the lowest id
    const int64_t blocks = (V + kernels::cpu::kExpBlock - 1) / kernels::cpu::kExpBlock;
    probs_.resize(size_t(V));
    block_sums_.resize(size_t(blocks));
    softmax_.exp_shift(logits.data(), max_logit, probs_.data(), block_sums_.data(), V);
    double total = 0.0;
    for (double s : block_sums_) total += s;
    // The same draw as draw() over the normalized distribution in id order, without normalizing:
    // u scaled by the total; the block holding it found by its sums, then the token within it.
    const double u = uniform01() * total;
    double cum = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
        const double s = block_sums_[size_t(b)];
        if (u >= cum + s) {
            cum += s;
            continue;
        }
        const int64_t end = std::min(V, (b + 1) * kernels::cpu::kExpBlock);
        for (int64_t i = b * kernels::cpu::kExpBlock; i < end; ++i) {
            cum += double(probs_[size_t(i)]);
            if (u < cum) return int32_t(i);
        }  // (rounding left u past this block's entries: on to the next)
    }
    for (int64_t i = V; i-- > 0;)  // u beyond the rounded total: the last token with mass
        if (probs_[size_t(i)] > 0.0f) return int32_t(i);
    return argmax_lowest_id(logits);
}

int32_t Sampler::draw(std::span<const TokenProb> dist) {
    KILN_CHECK(!dist.empty()) << "a draw from an empty distribution";
    const double u = uniform01();  // dist is normalized: walk the CDF
    double cum = 0.0;
    for (const TokenProb& c : dist) {
        cum += c.prob;
        if (u < cum) return c.id;
    }
    for (auto it = dist.rbegin(); it != dist.rend(); ++it) {  // u beyond the rounded total mass
        if (it->prob > 0.0f) return it->id;
    }
    return dist.front().id;
}

Sampler::Verdict Sampler::verify(std::span<float> logits, std::span<const int32_t> ids, int32_t draft,
                                 std::span<const TokenProb> draft_probs) {
    KILN_CHECK(logits.size() == size_t(vocab_size_)) << logits.size() << " vs vocab " << vocab_size_;
    KILN_CHECK(draft >= 0 && draft < vocab_size_) << "draft token " << draft;
    apply_bias_and_penalties(logits, ids);
    if (!build_candidates(logits)) return {greedy_id_, greedy_id_ == draft};
    // q dense over the vocabulary (zero between calls); a point mass without the scratch.
    const bool point = draft_probs.empty();
    if (!point) {
        if (q_dense_.empty()) q_dense_.assign(size_t(vocab_size_), 0.0f);
        for (const TokenProb& t : draft_probs)
            if (t.id >= 0 && t.id < vocab_size_) q_dense_[size_t(t.id)] += t.prob;
    }
    auto q_of = [&](int32_t id) -> double { return point ? (id == draft ? 1.0 : 0.0) : double(q_dense_[size_t(id)]); };
    double p_draft = 0.0, total = 0.0, p_best = -1.0;
    int32_t best = draft;
    for (const TokenProb& c : cands_) {
        if (c.id == draft) p_draft = c.prob;
        total += std::max(0.0, double(c.prob) - q_of(c.id));  // the residual's mass
        if (c.prob > p_best) p_best = c.prob, best = c.id;
    }
    const double q_draft = q_of(draft);
    Verdict v;
    // Accept when u < p/q, written without the division (q = 0: the proposer could not have drafted it).
    if (q_draft > 0.0 && uniform01() * q_draft < p_draft) {
        v = {draft, true};
    } else if (!(total > 0.0)) {  // p <= q everywhere up to rounding: nothing left to resample from
        v = {p_draft > 0.0 ? draft : best, p_draft > 0.0};
    } else {  // a draw from max(0, p - q) / total
        const double u = uniform01() * total;
        double cum = 0.0;
        v = {best, false};
        for (const TokenProb& c : cands_) {
            const double r = std::max(0.0, double(c.prob) - q_of(c.id));
            if (r <= 0.0) continue;
            v.token = c.id;  // the last with mass, should u land beyond the rounded total
            cum += r;
            if (u < cum) break;
        }
    }
    if (!point)
        for (const TokenProb& t : draft_probs)
            if (t.id >= 0 && t.id < vocab_size_) q_dense_[size_t(t.id)] = 0.0f;
    return v;
}

}  // namespace kiln::sampling

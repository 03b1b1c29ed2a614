// Shared hyper-parameter checks (see hyper_params.h).
#include "formats/hyper_params.h"

#include <cmath>

namespace kiln::formats {
namespace {

using core::StatusCode;

constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxHidden = int64_t(1) << 18;
constexpr int64_t kMaxIntermediate = int64_t(1) << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxSeqLen = int64_t(1) << 30;
constexpr int64_t kMaxExperts = 4096;

enum Field {
    kVocab,
    kHidden,
    kIntermediate,
    kLayers,
    kHeads,
    kKvHeads,
    kHeadDim,
    kSeqLen,
    kEps,
    kTheta,
    kWindow,
    kWindowLayers,
    kBos,
    kEos,
    kExperts,
    kExpertsUsed,
    kExpertInter,
    kSharedInter,
    kNumFields
};

// clang-format off
constexpr const char* kHfNames[kNumFields] = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "sliding_window", "max_window_layers", "bos_token_id", "eos_token_id", "num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size"};
constexpr const char* kKilnNames[kNumFields] = {
    "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
    "max_seq_len", "rms_norm_eps", "rope_theta", "sliding_window", "max_window_layers", "bos_token_id",
    "eos_token_ids", "num_experts", "num_experts_used", "expert_intermediate_size", "shared_expert_intermediate_size"};
// clang-format on

bool positive(double v) {
    return v > 0 && std::isfinite(v);
}

// longrope: both factor lists hold head_dim / 2 positive numbers, a positive pretraining context.
core::Status check_longrope(const RopeScaling& rs, int64_t head_dim, const std::string& where) {
    for (const auto* list : {&rs.short_factor, &rs.long_factor}) {
        if (int64_t(list->size()) != head_dim / 2)
            return core::error(StatusCode::kCorrupt) << where << ": longrope " << (list == &rs.short_factor ? "short" : "long")
                                                     << "_factor has " << list->size() << " values, head_dim " << head_dim
                                                     << " needs " << head_dim / 2;
        for (double v : *list)
            if (!positive(v))
                return core::error(StatusCode::kCorrupt) << where << ": a longrope factor is " << v << " (must be > 0)";
    }
    if (rs.original_max_position_embeddings <= 0)
        return core::error(StatusCode::kCorrupt)
               << where << ": longrope needs original_max_position_embeddings > 0, got "
               << rs.original_max_position_embeddings;
    if (rs.attention_factor && !positive(*rs.attention_factor))
        return core::error(StatusCode::kCorrupt) << where << ": longrope attention_factor " << *rs.attention_factor
                                                 << " is not a positive number";
    return core::Status::ok();
}

core::Status check_rope_scaling(const RopeScaling& rs, int64_t head_dim, const std::string& where) {
    if (!positive(rs.factor))
        return core::error(StatusCode::kCorrupt)
               << where << ": rope_scaling factor " << rs.factor << " is not a positive number";
    if (rs.type == "longrope") return check_longrope(rs, head_dim, where);
    if (rs.type != "llama3") return core::Status::ok();
    if (rs.original_max_position_embeddings <= 0)
        return core::error(StatusCode::kCorrupt)
               << where << ": llama3 rope_scaling needs original_max_position_embeddings > 0, got "
               << rs.original_max_position_embeddings;
    if (!positive(rs.low_freq_factor) || !positive(rs.high_freq_factor) || rs.low_freq_factor == rs.high_freq_factor)
        return core::error(StatusCode::kCorrupt)
               << where << ": llama3 rope_scaling low_freq_factor " << rs.low_freq_factor << " and high_freq_factor "
               << rs.high_freq_factor << " must be positive and different";
    return core::Status::ok();
}

core::Status check_experts(const HyperParams& p, const char* const* n, const std::string& where) {
    if (p.num_experts == 0) {
        if (p.num_experts_used != 0 || p.shared_expert_intermediate_size != 0)
            return core::error(StatusCode::kCorrupt) << where << ": " << n[kExpertsUsed] << " " << p.num_experts_used
                                                     << " / " << n[kSharedInter] << " " << p.shared_expert_intermediate_size
                                                     << " given without experts";
        return core::Status::ok();
    }
    if (p.num_experts < 0 || p.num_experts > kMaxExperts)
        return core::error(StatusCode::kCorrupt)
               << where << ": " << n[kExperts] << " is " << p.num_experts << ", outside [0, " << kMaxExperts << "]";
    if (p.num_experts_used < 1 || p.num_experts_used > p.num_experts)
        return core::error(StatusCode::kCorrupt) << where << ": " << n[kExpertsUsed] << " is " << p.num_experts_used
                                                 << ", outside [1, " << n[kExperts] << " " << p.num_experts << "]";
    if (p.expert_intermediate_size <= 0 || p.expert_intermediate_size > kMaxIntermediate)
        return core::error(StatusCode::kCorrupt) << where << ": " << n[kExpertInter] << " is "
                                                 << p.expert_intermediate_size << ", outside [1, " << kMaxIntermediate << "]";
    if (p.shared_expert_intermediate_size < 0 || p.shared_expert_intermediate_size > kMaxIntermediate)
        return core::error(StatusCode::kCorrupt) << where << ": " << n[kSharedInter] << " is "
                                                 << p.shared_expert_intermediate_size << ", outside [0, "
                                                 << kMaxIntermediate << "]";
    return core::Status::ok();
}

}  // namespace

core::Status check_hyper_params(const HyperParams& p, FieldNames names, const std::string& where) {
    const char* const* n = names == FieldNames::kHf ? kHfNames : kKilnNames;
    const struct {
        Field field;
        int64_t value, max;
    } ranges[] = {{kVocab, p.vocab_size, kMaxVocab},
                  {kHidden, p.hidden_size, kMaxHidden},
                  {kIntermediate, p.intermediate_size, kMaxIntermediate},
                  {kLayers, p.num_layers, kMaxLayers},
                  {kHeads, p.num_heads, kMaxHeads},
                  {kKvHeads, p.num_kv_heads, kMaxHeads},
                  {kHeadDim, p.head_dim, kMaxHeadDim},
                  {kSeqLen, p.max_seq_len, kMaxSeqLen}};
    for (const auto& r : ranges)
        if (r.value <= 0 || r.value > r.max)
            return core::error(StatusCode::kCorrupt)
                   << where << ": " << n[r.field] << " is " << r.value << ", outside [1, " << r.max << "]";
    if (p.num_heads % p.num_kv_heads != 0)
        return core::error(StatusCode::kCorrupt) << where << ": " << n[kHeads] << " " << p.num_heads
                                                 << " is not a multiple of " << n[kKvHeads] << " " << p.num_kv_heads;
    if (p.head_dim % 2 != 0)
        return core::error(StatusCode::kCorrupt)
               << where << ": " << n[kHeadDim] << " " << p.head_dim << " is odd (RoPE rotates pairs)";
    if (!positive(p.rms_norm_eps))
        return core::error(StatusCode::kCorrupt)
               << where << ": " << n[kEps] << " " << p.rms_norm_eps << " is not positive";
    if (!positive(p.rope_theta))
        return core::error(StatusCode::kCorrupt)
               << where << ": " << n[kTheta] << " " << p.rope_theta << " is not positive";
    if (p.sliding_window < 0 || p.max_window_layers < 0)
        return core::error(StatusCode::kCorrupt) << where << ": " << n[kWindow] << " " << p.sliding_window << " / "
                                                 << n[kWindowLayers] << " " << p.max_window_layers << " is negative";
    KILN_RETURN_IF_ERROR(check_rope_scaling(p.rope_scaling, p.head_dim, where));
    auto check_id = [&](Field field, int64_t id) -> core::Status {
        if (id >= 0 && id < p.vocab_size) return core::Status::ok();
        return core::error(StatusCode::kCorrupt) << where << ": " << n[field] << " " << id << " is outside [0, "
                                                 << n[kVocab] << " " << p.vocab_size << ")";
    };
    if (p.bos_token_id) KILN_RETURN_IF_ERROR(check_id(kBos, *p.bos_token_id));
    for (int64_t id : p.eos_token_ids) KILN_RETURN_IF_ERROR(check_id(kEos, id));
    return check_experts(p, n, where);
}

}  // namespace kiln::formats

// Presets, tensor plan, seeded weights, quantizer and tokenizer of `kiln synth` (see synth_presets.h).
// Preset shapes are copied from each model's Hugging Face config.json (llama2.c's for the stories
// models); "tiny" is kiln's own, for tests.
#include "synth_presets.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/numeric.h"
#include "formats/architectures.h"
#include "quant/fp4_blocks.h"
#include "loader/weight_names.h"
#include "quant/mx.h"

namespace kiln::tools {
namespace {

// name, arch, vocab, hidden, ffn, layers, heads, kv heads, head_dim, context, eps, theta, tied, llama3 rope
const std::vector<SynthPreset> kPresets = {
    {"tiny", "llama", 512, 128, 352, 2, 4, 2, 32, 512, 1e-5, 10000, false, false, "kiln test model (0.5M params)"},
    {"tiny-k", "llama", 512, 256, 512, 2, 8, 4, 32, 512, 1e-5, 10000, false, false,
     "kiln test model, K-quant widths (1.4M params)"},
    {"tiny-moe", "mixtral", 512, 128, 352, 2, 4, 2, 32, 512, 1e-5, 10000, false, false,
     "kiln test model, mixture of experts: top-2 of 4 (0.5M params)", 4, 2, 128, true},
    {"stories15m", "llama", 32000, 288, 768, 6, 6, 6, 48, 256, 1e-5, 10000, true, false, "llama2.c stories15M"},
    {"stories110m", "llama", 32000, 768, 2048, 12, 12, 12, 64, 1024, 1e-5, 10000, true, false, "llama2.c stories110M"},
    {"smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 64, 8192, 1e-5, 100000, true, false,
     "HuggingFaceTB/SmolLM2-135M"},
    {"qwen2.5-0.5b", "qwen2", 151936, 896, 4864, 24, 14, 2, 64, 32768, 1e-6, 1000000, true, false,
     "Qwen/Qwen2.5-0.5B (q/k/v biases)"},
    {"tinyllama-1.1b", "llama", 32000, 2048, 5632, 22, 32, 4, 64, 2048, 1e-5, 10000, false, false,
     "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"},
    {"llama-3.2-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 64, 131072, 1e-5, 500000, true, true,
     "meta-llama/Llama-3.2-1B"},
    {"llama-2-7b", "llama", 32000, 4096, 11008, 32, 32, 32, 128, 4096, 1e-5, 10000, false, false,
     "meta-llama/Llama-2-7b-hf"},
    {"llama-3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 8192, 1e-5, 500000, false, false,
     "meta-llama/Meta-Llama-3-8B"},
    // Mixtures of experts (use --layers: the whole models are 47B and 30B parameters).
    {"mixtral-8x7b", "mixtral", 32000, 4096, 14336, 32, 32, 8, 128, 32768, 1e-5, 1000000, false, false,
     "mistralai/Mixtral-8x7B-v0.1 (top-2 of 8 experts)", 8, 2, 14336, true},
    {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 6144, 48, 32, 4, 128, 40960, 1e-6, 1000000, false, false,
     "Qwen/Qwen3-30B-A3B (top-8 of 128 experts, q/k norms)", 128, 8, 768, true},
    {"gpt-oss-20b", "gpt_oss", 201088, 2880, 2880, 24, 64, 8, 64, 131072, 1e-5, 150000, false, false,
     "openai/gpt-oss-20b (top-4 of 32 experts, sinks, YaRN, every other layer sliding)", 32, 4, 2880, true},
};

// SplitMix64 (Steele et al. 2014): a counter-based stream, one per (seed, tensor, row).
struct SplitMix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

// Irwin-Hall with four 16-bit uniforms: mean 0, variance 1, tails cut at ~3.5 sigma.
inline float approx_normal(uint64_t r) {
    const uint32_t sum =
        uint32_t(r & 0xffff) + uint32_t((r >> 16) & 0xffff) + uint32_t((r >> 32) & 0xffff) + uint32_t(r >> 48);
    return (float(sum) - 131070.0f) * (1.0f / 37837.23f);
}

constexpr int kQK = 32;

void quantize_q8_0(const float* x, int64_t n, uint8_t* dst) {
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 2 + kQK) {
        float amax = 0;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t dh = core::f32_to_fp16(d);
        std::memcpy(dst, &dh, 2);
        for (int j = 0; j < kQK; ++j) dst[2 + j] = uint8_t(int8_t(std::lround(x[j] * id)));
    }
}

// Q4_0: d = (the value of largest magnitude) / -8, q = clamp(x / d + 8.5) truncated, 0..15.
void quantize_q4_0(const float* x, int64_t n, uint8_t* dst) {
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 2 + kQK / 2) {
        float amax = 0, max = 0;
        for (int j = 0; j < kQK; ++j)
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t dh = core::f32_to_fp16(d);
        std::memcpy(dst, &dh, 2);
        for (int j = 0; j < kQK / 2; ++j) {
            const uint8_t q0 = uint8_t(std::min<int>(15, int8_t(x[j] * id + 8.5f)));
            const uint8_t q1 = uint8_t(std::min<int>(15, int8_t(x[j + kQK / 2] * id + 8.5f)));
            dst[2 + j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

// Q4_1: d = (max - min) / 15, m = min, q = (x - min) / d + 0.5 truncated, 0..15.
void quantize_q4_1(const float* x, int64_t n, uint8_t* dst) {
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 4 + kQK / 2) {
        float lo = FLT_MAX, hi = -FLT_MAX;
        for (int j = 0; j < kQK; ++j) {
            lo = std::min(lo, x[j]);
            hi = std::max(hi, x[j]);
        }
        const float d = (hi - lo) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t dh = core::f32_to_fp16(d), mh = core::f32_to_fp16(lo);
        std::memcpy(dst, &dh, 2);
        std::memcpy(dst + 2, &mh, 2);
        for (int j = 0; j < kQK / 2; ++j) {
            const uint8_t q0 = uint8_t(std::min<int>(15, int8_t((x[j] - lo) * id + 0.5f)));
            const uint8_t q1 = uint8_t(std::min<int>(15, int8_t((x[j + kQK / 2] - lo) * id + 0.5f)));
            dst[4 + j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

// Q4_K (256 elements: fp16 d, dmin, 12 bytes of 6-bit scales / mins, 128 bytes of nibbles;
// x = d sc_j q - dmin m_j per 32-element sub-block j), or Q5_K (kFiveBit: the same with 32 bytes of
// fifth bits qh before the nibbles, q = 0..31). A plain min/max fit, not ggml's iterative
// make_qkx2_quants search: sub-block step s_j = (max_j - min(min_j, 0)) / L (L = 15, or 31) and
// offset o_j = -min(min_j, 0); d = max s_j / 63, dmin = max o_j / 63; sc_j, m_j rounded to 6 bits;
// q = round((x + dmin m_j) / (d sc_j)) clamped to 0..L.
template <bool kFiveBit>
void quantize_k4(const float* x, int64_t n, uint8_t* dst) {
    constexpr int kQK_K = 256, kLevels = kFiveBit ? 31 : 15;
    constexpr int64_t kBytes = kFiveBit ? 176 : 144;
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, dst += kBytes) {
        float step[8], off[8], max_step = 0, max_off = 0;
        for (int j = 0; j < 8; ++j) {
            float lo = 0, hi = -FLT_MAX;
            for (int l = 0; l < 32; ++l) {
                lo = std::min(lo, x[32 * j + l]);
                hi = std::max(hi, x[32 * j + l]);
            }
            step[j] = (hi - lo) / float(kLevels);
            off[j] = -lo;
            max_step = std::max(max_step, step[j]);
            max_off = std::max(max_off, off[j]);
        }
        const float d = core::fp16_to_f32(core::f32_to_fp16(max_step / 63.0f));
        const float dmin = core::fp16_to_f32(core::f32_to_fp16(max_off / 63.0f));
        int sc[8], m[8];
        for (int j = 0; j < 8; ++j) {
            sc[j] = d > 0 ? std::min(63, int(std::lround(step[j] / d))) : 0;
            m[j] = dmin > 0 ? std::min(63, int(std::lround(off[j] / dmin))) : 0;
        }
        const uint16_t dh = core::f32_to_fp16(d), mh = core::f32_to_fp16(dmin);
        std::memcpy(dst, &dh, 2);
        std::memcpy(dst + 2, &mh, 2);
        uint8_t* q = dst + 4;  // the inverse of the 6-bit unpacking in kernels/ref/dequant.cc
        for (int j = 0; j < 4; ++j) {
            q[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
            q[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
            q[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
        }
        uint8_t* qh = dst + 16;  // Q5_K only: bit j of qh[l] = bit 4 of element l of sub-block j
        uint8_t* qs = dst + (kFiveBit ? 48 : 16);
        if (kFiveBit) std::memset(qh, 0, 32);
        for (int j = 0; j < 8; ++j) {
            const float scale = d * float(sc[j]), shift = dmin * float(m[j]);
            const float inv = scale > 0 ? 1.0f / scale : 0.0f;
            for (int l = 0; l < 32; ++l) {
                const int v = std::clamp(int(std::lround((x[32 * j + l] + shift) * inv)), 0, kLevels);
                uint8_t& byte = qs[32 * (j / 2) + l];
                byte = j % 2 ? uint8_t(byte | ((v & 15) << 4)) : uint8_t(v & 15);
                if (kFiveBit) qh[l] = uint8_t(qh[l] | ((v >> 4) << j));
            }
        }
    }
}

// Q6_K (kernels/ref/dequant.cc BlockQ6_K): per 256-element block, 16 sub-blocks of 16 with int8
// scales times an fp16 d; x = d * scales[j] * (q - 32), q 6 bits. Each sub-block's scale maps its
// largest |x| to 31 (scales rounded to the nearest multiple of d = max scale / 127), then q =
// round(x / (d * scales[j])) + 32 clamped to 0..63. Bits: element 32 s + l of a 128-element half
// (s = 0..3) has its low 4 bits in ql[l + 32 (s & 1)] (low nibble for s < 2) and its high 2 bits at
// bits 2s, 2s+1 of qh[l].
void quantize_q6_k(const float* x, int64_t n, uint8_t* dst) {
    constexpr int kQK_K = 256;
    constexpr int64_t kBytes = 210;
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, dst += kBytes) {
        float sub[16], max_sub = 0;
        for (int j = 0; j < 16; ++j) {
            float amax = 0;
            for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
            sub[j] = amax / 31.0f;
            max_sub = std::max(max_sub, sub[j]);
        }
        const uint16_t dh = core::f32_to_fp16(max_sub / 127.0f);
        const float d = core::fp16_to_f32(dh);
        uint8_t* ql = dst;
        uint8_t* qh = dst + 128;
        int8_t sc[16];
        for (int j = 0; j < 16; ++j) sc[j] = int8_t(d > 0 ? std::min(127, int(std::lround(sub[j] / d))) : 0);
        std::memset(dst, 0, 192);
        std::memcpy(dst + 192, sc, 16);
        std::memcpy(dst + 208, &dh, 2);
        for (int e = 0; e < kQK_K; ++e) {
            const float scale = d * float(sc[e / 16]);
            const int q = scale > 0 ? std::clamp(int(std::lround(x[e] / scale)) + 32, 0, 63) : 32;
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            ql[64 * h + l + 32 * (s & 1)] |= uint8_t((q & 15) << (s < 2 ? 0 : 4));
            qh[32 * h + l] |= uint8_t((q >> 4) << (2 * s));
        }
    }
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() {
    return kPresets;
}

const SynthPreset* find_synth_preset(const std::string& name) {
    for (const SynthPreset& p : kPresets)
        if (name == p.name) return &p;
    return nullptr;
}

std::string synth_preset_names() {
    std::string s;
    for (const SynthPreset& p : kPresets) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
}

loader::ModelConfig synth_config(const SynthPreset& p, int64_t num_layers, bool dense) {
    loader::ModelConfig c;
    c.arch = p.arch;
    c.name = std::string("synth-") + p.name + (dense ? "-dense" : "");
    c.vocab_size = p.vocab_size;
    c.hidden_size = p.hidden_size;
    c.intermediate_size = p.intermediate_size;
    c.num_layers = num_layers > 0 ? num_layers : p.num_layers;
    c.num_heads = p.num_heads;
    c.num_kv_heads = p.num_kv_heads;
    c.head_dim = p.head_dim;
    c.max_seq_len = p.max_seq_len;
    c.rms_norm_eps = p.rms_norm_eps;
    c.rope_theta = p.rope_theta;
    c.tie_word_embeddings = p.tie_word_embeddings;
    c.attention_bias = c.arch == "qwen2" || c.arch == "gpt_oss";
    c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3_moe";
    if (c.arch == "gpt_oss") {  // GptOssConfig's: sinks, window 128 on every other layer, YaRN 32 over 4096
        c.attn_sinks = true;
        c.sliding_window = 128;
        c.sliding_window_pattern = 2;
        c.rope_scaling.type = "yarn";
        c.rope_scaling.factor = 32.0;
        c.rope_scaling.original_max_position_embeddings = 4096;
        c.rope_scaling.truncate = false;
    }
    if (dense && p.num_experts > 0) {
        c.arch = c.arch == "qwen3_moe" ? "qwen3" : "llama";
        c.intermediate_size = p.num_experts_used * p.expert_ffn;
        c.attn_sinks = false;  // the dense twin of gpt-oss is a Llama shape: no sinks, biases or YaRN
        c.sliding_window = 0;
        c.sliding_window_pattern = 0;
        c.rope_scaling = {};
        c.attention_bias = false;
    } else {
        c.num_experts = p.num_experts;
        c.num_experts_used = p.num_experts_used;
        c.expert_intermediate_size = p.expert_ffn;
        c.norm_topk_prob = p.norm_topk;
        if (c.arch == "gpt_oss")
            c.moe_biases = true, c.swiglu_alpha = formats::kGptOssSwigluAlpha, c.swiglu_limit = formats::kGptOssSwigluLimit;
    }
    if (p.llama3_rope) {
        c.rope_scaling.type = "llama3";
        c.rope_scaling.factor = 32.0;
        c.rope_scaling.low_freq_factor = 1.0;
        c.rope_scaling.high_freq_factor = 4.0;
        c.rope_scaling.original_max_position_embeddings = 8192;
    }
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
}

bool synth_dtype_supported(core::DType t) {
    using core::DType;
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0 ||
           t == DType::kQ4_1 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K || t == DType::kMxfp4;
}

uint64_t SynthTensor::row_bytes() const {
    return core::dtype_bytes(dtype, cols()).value_or(0);
}

std::vector<SynthTensor> synth_tensor_plan(const loader::ModelConfig& c, core::DType w) {
    const uint64_t H = uint64_t(c.hidden_size), F = uint64_t(c.intermediate_size), V = uint64_t(c.vocab_size);
    const uint64_t Q = uint64_t(c.q_dim()), KV = uint64_t(c.kv_dim());
    const core::DType f32 = core::DType::kF32;
    std::vector<SynthTensor> plan;
    plan.push_back({"token_embd.weight", w, {V, H}, SynthKind::kMatrix});
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        plan.push_back({p + "attn_norm.weight", f32, {H}, SynthKind::kNorm});
        plan.push_back({p + "attn_q.weight", w, {Q, H}, SynthKind::kMatrix});
        plan.push_back({p + "attn_k.weight", w, {KV, H}, SynthKind::kMatrix});
        plan.push_back({p + "attn_v.weight", w, {KV, H}, SynthKind::kMatrix});
        if (c.attention_bias) {
            plan.push_back({p + "attn_q.bias", f32, {Q}, SynthKind::kBias});
            plan.push_back({p + "attn_k.bias", f32, {KV}, SynthKind::kBias});
            plan.push_back({p + "attn_v.bias", f32, {KV}, SynthKind::kBias});
        }
        if (c.qk_norm) {
            plan.push_back({p + "attn_q_norm.weight", f32, {uint64_t(c.head_dim)}, SynthKind::kNorm});
            plan.push_back({p + "attn_k_norm.weight", f32, {uint64_t(c.head_dim)}, SynthKind::kNorm});
        }
        plan.push_back({p + "attn_output.weight", w, {H, Q}, SynthKind::kMatrix});
        if (c.has_output_bias()) plan.push_back({p + "attn_output.bias", f32, {H}, SynthKind::kBias});
        if (c.attn_sinks) plan.push_back({p + "attn_sinks.weight", f32, {uint64_t(c.num_heads)}, SynthKind::kBias});
        plan.push_back({loader::canonical_to_gguf_name(p + "ffn_norm.weight", c), f32, {H}, SynthKind::kNorm});
        if (c.moe()) {
            const uint64_t E = uint64_t(c.num_experts), FE = uint64_t(c.expert_intermediate_size);
            plan.push_back({p + "ffn_gate_inp.weight", f32, {E, H}, SynthKind::kMatrix});
            plan.push_back({p + "ffn_gate_exps.weight", w, {E, FE, H}, SynthKind::kMatrix});
            plan.push_back({p + "ffn_up_exps.weight", w, {E, FE, H}, SynthKind::kMatrix});
            plan.push_back({p + "ffn_down_exps.weight", w, {E, H, FE}, SynthKind::kMatrix});
            if (c.moe_biases) {
                plan.push_back({p + "ffn_gate_inp.bias", f32, {E}, SynthKind::kBias});
                plan.push_back({p + "ffn_gate_exps.bias", f32, {E, FE}, SynthKind::kBias});
                plan.push_back({p + "ffn_up_exps.bias", f32, {E, FE}, SynthKind::kBias});
                plan.push_back({p + "ffn_down_exps.bias", f32, {E, H}, SynthKind::kBias});
            }
            continue;
        }
        plan.push_back({p + "ffn_gate.weight", w, {F, H}, SynthKind::kMatrix});
        plan.push_back({p + "ffn_up.weight", w, {F, H}, SynthKind::kMatrix});
        plan.push_back({p + "ffn_down.weight", w, {H, F}, SynthKind::kMatrix});
    }
    plan.push_back({"output_norm.weight", f32, {H}, SynthKind::kNorm});
    if (!c.tie_word_embeddings) plan.push_back({"output.weight", w, {V, H}, SynthKind::kMatrix});
    return plan;
}

void synth_rows(const SynthTensor& t, uint64_t seed, uint64_t tensor_idx, uint64_t row_begin, uint64_t row_end,
                uint8_t* dst, float* scratch) {
    const uint64_t cols = t.cols(), row_bytes = t.row_bytes();
    const float scale = 0.02f, offset = t.kind == SynthKind::kNorm ? 1.0f : 0.0f;
    for (uint64_t r = row_begin; r < row_end; ++r, dst += row_bytes) {
        SplitMix rng{seed * 0xD1B54A32D192ED03ull ^ (tensor_idx + 1) * 0x8CB92BA72F3D8DD7ull ^
                     r * 0x9E3779B97F4A7C15ull};
        rng.next();
        for (uint64_t j = 0; j < cols; ++j) scratch[j] = offset + scale * approx_normal(rng.next());
        quantize_row(t.dtype, scratch, int64_t(cols), dst);
    }
}

void quantize_row(core::DType type, const float* x, int64_t n, uint8_t* dst) {
    switch (type) {
        case core::DType::kF32:
            std::memcpy(dst, x, size_t(n) * 4);
            break;
        case core::DType::kF16:
            for (int64_t j = 0; j < n; ++j) {
                const uint16_t h = core::f32_to_fp16(x[j]);
                std::memcpy(dst + 2 * j, &h, 2);
            }
            break;
        case core::DType::kBF16:
            for (int64_t j = 0; j < n; ++j) {
                const uint16_t h = core::f32_to_bf16(x[j]);
                std::memcpy(dst + 2 * j, &h, 2);
            }
            break;
        case core::DType::kQ8_0:
            quantize_q8_0(x, n, dst);
            break;
        case core::DType::kQ4_0:
            quantize_q4_0(x, n, dst);
            break;
        case core::DType::kQ4_1:
            quantize_q4_1(x, n, dst);
            break;
        case core::DType::kQ4_K:
            quantize_k4<false>(x, n, dst);
            break;
        case core::DType::kQ5_K:
            quantize_k4<true>(x, n, dst);
            break;
        case core::DType::kQ6_K:
            quantize_q6_k(x, n, dst);
            break;
        case core::DType::kMxfp4: {  // OCP MX rounding (quant/mx.h), repacked into ggml blocks
            auto m = quant::quantize_mxfp4(std::span<const float>(x, size_t(n)), 1, n);
            auto b = m.is_ok() ? quant::to_mxfp4_blocks(*m) : core::Result<std::vector<uint8_t>>(m.status());
            KILN_CHECK(b.is_ok()) << "synth mxfp4: " << b.status().message();
            std::memcpy(dst, b->data(), b->size());
            break;
        }
        default:
            break;  // callers check synth_dtype_supported first
    }
}

loader::GgufMetadata synth_tokenizer(int64_t vocab_size) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};  // llama.cpp token types: unknown, control
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        tokens.push_back(name);
        types.push_back(6);  // byte
    }
    const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
    if (int64_t(tokens.size()) < vocab_size) {
        tokens.push_back(space);
        types.push_back(1);
    }
    // Lower-case words of length 1, 2, ...: "▁w" then "w" for each, shortest first.
    std::string word;
    for (size_t len = 1; int64_t(tokens.size()) < vocab_size; ++len) {
        word.assign(len, 'a');
        for (bool more = true; more && int64_t(tokens.size()) < vocab_size;) {
            tokens.push_back(space + word);
            types.push_back(1);
            if (int64_t(tokens.size()) < vocab_size) {
                tokens.push_back(word);
                types.push_back(1);
            }
            size_t i = len;  // next word in lexicographic order
            while (i > 0 && word[i - 1] == 'z') word[--i] = 'a';
            if (i == 0)
                more = false;
            else
                ++word[i - 1];
        }
    }
    tokens.resize(size_t(vocab_size));
    types.resize(size_t(vocab_size));
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t i = 259; i < scores.size(); ++i) scores[i] = -float(i - 259);
    using namespace formats;
    return loader::GgufMetadata{
        {"tokenizer.ggml.model", gguf_string("llama")},     {"tokenizer.ggml.tokens", gguf_string_array(tokens)},
        {"tokenizer.ggml.scores", gguf_f32_array(scores)},  {"tokenizer.ggml.token_type", gguf_i32_array(types)},
        {"tokenizer.ggml.bos_token_id", gguf_u32(1)},       {"tokenizer.ggml.eos_token_id", gguf_u32(2)},
        {"tokenizer.ggml.unknown_token_id", gguf_u32(0)},   {"tokenizer.ggml.add_bos_token", gguf_bool(true)},
        {"tokenizer.ggml.add_eos_token", gguf_bool(false)},
    };
}

}  // namespace kiln::tools

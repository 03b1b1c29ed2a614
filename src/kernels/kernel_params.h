// The neutral vocabulary of the kernels: the structs and function-pointer interfaces that the scalar
// reference (kernels/ref), the SIMD kernels (kernels/cpu) and their callers (ops) share, so that
// none of them depends on another's headers (scripts/lint_layers.py ranks kernels/ref below
// kernels/cpu and kernels/cuda; the oracle must not include what it checks), and the layers above
// (ops, model, engine) name kernels:: types, not one backend's. Includes no kernels. What they mean
// in detail: weights, RoPE, KV spans and attention shapes in kernels/ref/transformer.h (the oracle);
// sampling rows in kernels/ref/sample.h; the matmul contract (activation formats, arithmetic,
// packed layouts) in kernels/cpu/matmul.h, next to the kernel registry.
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace kiln::kernels {

// Activation block for the legacy 32-element weight formats. x[i] ~= d * q[i]; s = d * sum(q)
// (lets a weight format with a min, x = d_w * q_w + m_w, add m_w * s per block).
struct ActQ8 {
    float d;
    float s;
    int8_t q[32];
};
static_assert(sizeof(ActQ8) == 40);

// Activation block for the K-quants (256 elements). x[i] ~= d * q[i];
// bsums[j] = sum(q[16 j .. 16 j + 15]) (for the mins of Q2_K/Q4_K/Q5_K and the offsets of Q3_K
// (-4) and Q6_K (-32), applied in integers).
struct ActQ8K {
    float d;
    int16_t bsums[16];
    int8_t q[256];
};
static_assert(sizeof(ActQ8K) == 292);

// Header of a kI8Row activation row (per-token INT8): x[i] ~= d * q[i]; sum = sum(q) (kernels that
// feed vpdpbusd the weights + 128 subtract 128 * sum).
struct ActI8Row {
    float d;
    int32_t sum;
};
static_assert(sizeof(ActI8Row) == 8);
// q elements stored per kI8Row row: k rounded up to a multiple of 32.
inline constexpr int64_t i8_row_padded(int64_t k) {
    return (k + 31) / 32 * 32;
}
// The longest row the I8 kernels take: their int32 sums (with the +128 weight offset of vpdpbusd)
// stay exact up to k * 255 * 127 < 2^31. Longer rows take the f32 reference path (ops::make_linear).
inline constexpr int64_t kI8MaxK = 65536;

enum class ActFormat { kF32, kQ8, kQ8K, kBF16, kI8Row };
inline constexpr int kNumActFormats = 5;

struct MatmulKernel {
    ActFormat act;
    // Bytes of one activation row of k elements (k a multiple of the weight block size).
    size_t (*act_row_bytes)(int64_t k);
    // x [k] -> dst [act_row_bytes(k)]. dst needs no alignment.
    void (*quantize_row)(const float* x, void* dst, int64_t k);
    // y[t * ldy + r] = dot(weight row r, activation row t) for t in [0, n), r in [r0, r1).
    // w: the weight matrix, row r at w + r * w_row_bytes; act: n rows, row t at act + t * act_row_bytes.
    // Strides may exceed the dense row sizes (padding). k: elements per row (a multiple of the weight
    // block size). Pointers need no alignment. Only y[t * ldy + r] for r in [r0, r1) is written, so
    // threads given disjoint row ranges may share y.
    void (*gemm)(const void* w, size_t w_row_bytes, const void* act, size_t act_row_bytes, int64_t n, int64_t k,
                 float* y, int64_t ldy, int64_t r0, int64_t r1);
};

// Weights repacked at load for the legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; SIMD ISAs only):
// rows in groups of 8, and per group and 32-element block {fp16 d[8]; fp16 m[8] (Q4_1, Q5_1 only);
// the 8 rows' payloads (the ggml block without its fp16 fields: qs, or qh then qs)}; a group's blocks
// contiguous, groups in row order; the last group's missing rows repeat its last row. The same bytes
// as the ggml layout (8 blocks per group-block); what it saves is the 8 scalar inserts that gather
// the 8 rows' scales per block, and one stream per 8 rows instead of 8. Same arithmetic as
// MatmulKernel::gemm on the unpacked rows, so the results are bit-identical. At kAvx512Vnni, Q8_0,
// MXFP4 and NVFP4 use that level's own layout (groups of 16 rows, 4 elements of the 16 rows per
// 512-bit vpdpbusd, kernels/cpu/simd_vnni_kernels.h; r0 a multiple of 16) and Q4_0 and Q4_1 a 32-row
// one (rows i and i + 16 share each byte, kernels/cpu/simd_vnni_q4.h; r0 a multiple of 32), the same
// bytes padded to 16 or 32 rows and the same bit-identity; I8 rows are packed at
// kAvx512Vnni only (kernels/cpu/simd_i8_kernels.h: w + 128, 4 elements x 8 rows per vector; r0 a
// multiple of 8 as well); Q4_K, Q5_K and Q6_K in 16-row groups at kAvx512Vnni only
// (kernels/cpu/simd_vnni_kquant.h: within rounding of the row kernels, not their bits). F32, F16,
// E4M3_B32 and MXFP8 rows (and BF16 at kAvx512Vnni) are packed
// at the AVX-512 levels in 16-row k-major panels for an outer-product GEMM
// (kernels/cpu/simd_float_packed.h: r0 a multiple of 16; batch invariant, but another summation
// order than the row kernel, so not its bits). The amx level packs as avx512-vnni does and multiplies
// I8 and BF16 weights in AMX tiles (kernels/cpu/simd_amx_kernels.h: I8 with VnniI8's bits, BF16 batch
// invariant in another order). A packed buffer is only valid for the ISA whose kernel packed it.
struct PackedMatmulKernel {
    size_t (*packed_bytes)(int64_t rows, int64_t k);
    // w: rows x k in the ggml layout (row stride w_row_bytes) -> dst [packed_bytes(rows, k)].
    void (*pack)(const void* w, size_t w_row_bytes, int64_t rows, int64_t k, void* dst);
    // As MatmulKernel::gemm, over the packed matrix; r0 must be a multiple of 8 (16 for the
    // avx512-vnni 16-row groups and the float panels, 32 for its Q4_0 / Q4_1 groups; ops::linear
    // starts slices at multiples of 32).
    void (*gemm)(const void* packed, const void* act, size_t act_row_bytes, int64_t n, int64_t k, float* y,
                 int64_t ldy, int64_t r0, int64_t r1);
    const char* layout = "";  // the packed layout in a few words, for kiln inspect
};

// ---- weights, RoPE, attention (kernels/ref/transformer.h) ----

// A weight matrix W [rows, cols] stored row-major in any dtype dequantize_row supports; a row is
// row_bytes = dtype_bytes(dtype, cols) bytes. Rows are dequantized one at a time when used.
struct WeightView {
    const void* data = nullptr;
    core::DType dtype = core::DType::kF32;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;
    // I8 weights only (W8A8 per output channel): row r's values are int8 * row_scale[r]. Other
    // dtypes carry their scales in their blocks.
    const float* row_scale = nullptr;
};
// RoPE frequency setup as plain numbers (from ModelConfig's rope_theta / rope_scaling).
enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn };
struct RopeParams {
    double theta = 10000.0;
    RopeScalingKind scaling = RopeScalingKind::kNone;
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 0;
    // YaRN (transformers _compute_yarn_parameters): frequencies between the correction dimensions of
    // beta_fast and beta_slow rotations ramp from extrapolated (theta's) to interpolated (/ factor);
    // truncate rounds the range to whole dimensions. Its attention factor is applied to q elsewhere.
    double beta_fast = 32.0, beta_slow = 1.0;
    bool truncate = true;
    // Per-frequency divisors applied after the scaling above (llama.cpp's rope_freqs.weight); empty:
    // none. Host-side: rope_inv_freqs folds them into the inverse frequencies every kernel reads.
    std::vector<double> freq_factors;
};
// How a KV cache stores one row (one token's keys, or values, across the KV heads; kv_dim =
// num_kv_heads * head_dim):
//  - kF32: kv_dim floats;
//  - kF16: kv_dim IEEE halves (half the memory and traffic; rows computed in f32, rounded once);
//  - kI8, kFp8: kv_dim one-byte codes, then num_kv_heads f32 scales (kv_dim + 4 num_kv_heads bytes):
//    head h's element d = code[h head_dim + d] * scale[h], the code an int8 in [-127, 127] (kI8) or
//    an OCP E4M3 ("fn") value (kFp8). Each token's head gets its own scale, amax / 127 or amax / 448
//    (kernels/ref/kv_quant.h): a row's codes depend on that row only, so a batch never changes them.
enum class KvDtype : uint8_t { kF32, kF16, kI8, kFp8 };

// One sequence's cached keys and values for one layer, in rows of the KvDtype above.
//  - contiguous (block_table null): row j holds the token at position j;
//  - paged (block_table set; vLLM's PagedAttention layout): k and v point at a layer's block pool,
//    the token at position j sits in row kv_row(kv, j), slot j % block_size of physical block
//    block_table[j / block_size]. block_size > 0; block_table holds ceil(kv_len / block_size)
//    entries, each a block of the pool. Slots past kv_len in the last block are never read.
// Both layouts give bit-identical attention results for the same tokens: only addresses change.
// The kernels widen each row to f32 exactly (codes times scale, rounded once), so the result equals
// the f32 kernel on the dequantized cache.
struct KvSpan {
    // contiguous: [kv_len] rows; paged: [num_blocks, block_size] rows
    const void* k = nullptr;
    const void* v = nullptr;  // same layout as k
    int64_t kv_len = 0;       // tokens cached, the new ones included
    // Paged when non-null: [ceil(kv_len / block_size)] physical block of each logical block.
    const int32_t* block_table = nullptr;
    int64_t block_size = 0;  // tokens per block when paged
    KvDtype dtype = KvDtype::kF32;
};
// Row of key/value j in k/v.
inline int64_t kv_row(const KvSpan& kv, int64_t j) {
    return kv.block_table ? int64_t(kv.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size : j;
}
// Bytes of one row (see KvDtype).
inline int64_t kv_row_bytes(KvDtype t, int64_t num_kv_heads, int64_t head_dim) {
    const int64_t n = num_kv_heads * head_dim;
    return t == KvDtype::kF32 ? 4 * n : t == KvDtype::kF16 ? 2 * n : n + 4 * num_kv_heads;
}
struct AttentionShape {
    int64_t num_tokens = 0;  // new tokens, at positions kv_len - num_tokens .. kv_len - 1
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;  // num_heads is a multiple (GQA)
    int64_t head_dim = 0;
    int64_t window = 0;  // sliding window (token attends to pos - window < j <= pos); 0 = full
    // Gemma 2's logit soft-capping: each scaled score s becomes softcap * tanh(s / softcap) before the
    // softmax; 0 = none.
    float softcap = 0.0f;
};

// The soft-capped score (AttentionShape::softcap), the same expression in every kernel.
inline float softcap_score(float s, float cap) {
    return cap * std::tanh(s / cap);
}
// ---- sampling rows (kernels/ref/sample.h) ----

// One row's knobs, as validated sampling::SamplingParams carry them. Plain data, the same layout on
// host and device.
struct SampleRow {
    float temperature = 0.0f;  // below kSampleGreedyTemperature: the argmax (lowest id on ties), no draw
    int32_t top_k = 0;         // <= 0 or >= vocab: off
    float top_p = 1.0f;        // >= 1: off
    float min_p = 0.0f;        // <= 0: off
    float repetition_penalty = 1.0f;
    float frequency_penalty = 0.0f, presence_penalty = 0.0f;
    int32_t adjust_begin = 0, adjust_count = 0;  // this row's entries in the step's LogitAdjustment list
    double u = 0.0;                              // the draw, in [0, 1)
};

// The logit of `id` is changed by the entries naming it, adjacent in a row's list (ids in any
// order): every entry's bias is added in list order, then, once, the repetition penalty if an entry
// has in_history, then the frequency / presence penalty of the entries' summed `generated` count
// (the Sampler's order: bias, repetition, frequency / presence). Ids outside [0, vocab) are ignored.
struct LogitAdjustment {
    int32_t id = 0;
    float bias = 0.0f;       // OpenAI logit_bias
    int32_t in_history = 0;  // 1: the token is in prompt + generated (repetition penalty)
    int32_t generated = 0;   // its occurrences among the generated tokens (frequency, presence)
};

// The sampling contract's constants, shared by the host sampler (kernels/ref/sample.h) and the GPU's
// (kernels/cuda/sample.h): a temperature below kSampleGreedyTemperature is greedy; top-p's masses
// in fixed point (constexpr: the CUDA kernel calls them too), a probability truncated to a multiple
// of 2^-40, and the target (top_p - slack) * 2^40, at least 1 (one token).
inline constexpr float kSampleGreedyTemperature = 1e-5f;    // sampling::kGreedyTemperature
inline constexpr int64_t kExpBlock = 256;  // the CPU sampler's softmax block (kernels/cpu/softmax.h)
inline constexpr double kTopPSlack = 1e-6;                  // sampling::Sampler's
inline constexpr double kTopPFixedScale = 1099511627776.0;  // 2^40
constexpr uint64_t top_p_mass(float p) {
    return p > 0.0f ? uint64_t(double(p) * kTopPFixedScale) : 0;  // NaN: 0
}
constexpr uint64_t top_p_target(float top_p) {
    const double t = (double(top_p) - kTopPSlack) * kTopPFixedScale;
    return t < 1.0 ? 1 : uint64_t(t);
}

}  // namespace kiln::kernels

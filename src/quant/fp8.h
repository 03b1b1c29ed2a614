// FP8 E4M3 (OCP OFP8 "FN") weight/activation quantization with fp32 scales, scalar reference.
// Granularities (x is [rows, cols] row-major; for a Linear weight rows = output channels):
// - kPerTensor: one scale.                                      scales [1]
// - kPerChannel: one scale per row (per output channel).        scales [rows]
// - kBlock128: one scale per 128x128 tile (DeepSeek-V3 style).  scales [ceil(rows/128), ceil(cols/128)]
// Rule for each group G: scale = amax(G) / 448; q = e4m3(v / scale), round to nearest even,
// saturating (OFP8 saturation mode); dequantized = decode(q) * scale.
// Edge rules: a group whose amax / 448 is 0 (all zeros, or denormal-tiny) gets scale 1, so scales are
// never 0 and 1/scale is always finite. Edge tiles of kBlock128 cover only the real rows/columns
// (their amax ignores the missing part: padding with zeros, not stored). NaN/inf inputs are
// kInvalidArgument (a per-tensor scale cannot carry them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln::quant {

enum class Fp8Granularity { kPerTensor, kPerChannel, kBlock128 };

inline constexpr int64_t kFp8BlockSize = 128;

struct Fp8Matrix {
    Fp8Granularity granularity = Fp8Granularity::kPerTensor;
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<uint8_t> data;  // [rows, cols] E4M3 codes
    std::vector<float> scales;  // see the granularities above

    // Index into scales of the group holding element (r, c).
    int64_t scale_index(int64_t r, int64_t c) const;
};

core::Result<Fp8Matrix> quantize_fp8(std::span<const float> x, int64_t rows, int64_t cols, Fp8Granularity granularity);
std::vector<float> dequantize(const Fp8Matrix& m);

}  // namespace kiln::quant

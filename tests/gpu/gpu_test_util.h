// Helpers for the tests in tests/gpu: host vectors to and from DeviceBuffers (failures are test
// failures, reported where they happen) and random weights in any block type.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/numeric.h"
#include "kernels/cuda/device.h"

namespace kiln::kernels::cuda::test {

// n normal values (mean 0, sd `scale`), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
    auto b = DeviceBuffer::allocate(v.size() * sizeof(T));
    EXPECT_TRUE(b.is_ok()) << b.status().to_string();
    if (!b.is_ok()) return DeviceBuffer();
    EXPECT_TRUE(b->copy_from_host(v.data(), v.size() * sizeof(T)).is_ok());
    return std::move(*b);
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(b.copy_to_host(v.data(), n * sizeof(T)).is_ok());
    return v;
}

// n rows of k weights in `type`'s blocks: random quants, finite small fp16 scales (Q4_1's minimum
// negative, the K-quants' dmin positive).
inline std::vector<uint8_t> random_blocks(core::DType type, int64_t n, int64_t k, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t block_bytes = core::dtype_info(type).block_bytes;
    const int64_t block_elems = int64_t(core::dtype_info(type).block_size);
    std::vector<uint8_t> w(size_t(n * k / block_elems) * block_bytes);
    for (uint8_t& b : w) b = uint8_t(rng());
    for (size_t off = 0; off < w.size(); off += block_bytes) {  // finite, small fp16 scales
        const uint16_t d = core::f32_to_fp16(0.01f * (1.0f + std::fabs(dist(rng))));
        const uint16_t mn = core::f32_to_fp16(0.08f * std::fabs(dist(rng)));
        const uint16_t neg = core::f32_to_fp16(-0.08f * std::fabs(dist(rng)));
        if (type == core::DType::kMxfp4 || type == core::DType::kMxfp8) {  // E8M0 scale 2^-9 .. 2^-2
            w[off] = uint8_t(118 + rng() % 8);
        } else if (type == core::DType::kE4m3B32) {
            const float f = 0.002f * (1.0f + std::fabs(dist(rng)));
            std::memcpy(&w[off], &f, 4);
        } else if (type == core::DType::kNvfp4) {
            std::memcpy(&w[off], &d, 2);
        }
        if (type == core::DType::kE4m3B32 || type == core::DType::kMxfp8)  // no NaN codes
            for (size_t i = off + (type == core::DType::kMxfp8 ? 1 : 4); i < off + block_bytes; ++i)
                if ((w[i] & 0x7f) == 0x7f) w[i] = 0;
        if (type == core::DType::kMxfp4 || type == core::DType::kNvfp4 || type == core::DType::kE4m3B32 || type == core::DType::kMxfp8)
            continue;
        if (type == core::DType::kTq1_0 || type == core::DType::kTq2_0) {  // quants, then d
            std::memcpy(&w[off + (type == core::DType::kTq1_0 ? 52 : 64)], &d, 2);
            continue;
        }
        if (type == core::DType::kQ6_K || type == core::DType::kQ3_K) {  // quants and scales, then d
            std::memcpy(&w[off + (type == core::DType::kQ6_K ? 208 : 108)], &d, 2);
            continue;
        }
        if (type == core::DType::kQ2_K) {  // scales, qs, then d and dmin
            std::memcpy(&w[off + 80], &d, 2);
            std::memcpy(&w[off + 82], &mn, 2);
            continue;
        }
        std::memcpy(&w[off], &d, 2);
        if (type == core::DType::kQ4_1 || type == core::DType::kQ5_1) std::memcpy(&w[off + 2], &neg, 2);  // the minimum (added)
        if (type == core::DType::kQ4_K || type == core::DType::kQ5_K) std::memcpy(&w[off + 2], &mn, 2);   // dmin
    }
    return w;
}

}  // namespace kiln::kernels::cuda::test

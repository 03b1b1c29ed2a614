// Helpers for the tests in tests/gpu: host vectors to and from DeviceBuffers (failures are test
// failures, reported where they happen).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

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

}  // namespace kiln::kernels::cuda::test

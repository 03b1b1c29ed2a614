// The host side of the CUDA backend, on any machine: device discovery never fails (0 devices without
// a driver), errors become Status values with the call's name and CUDA's text, and without a device
// allocations and device queries say so instead of crashing. With a device: a buffer round trip.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"

namespace kiln::kernels::cuda {
namespace {

TEST(CudaDevice, ErrorsBecomeStatus) {
    EXPECT_TRUE(cuda_status(cudaSuccess, "x").is_ok());
    const core::Status oom = cuda_status(cudaErrorMemoryAllocation, "cudaMalloc(&p, 1 << 40)");
    EXPECT_EQ(oom.code(), core::StatusCode::kOutOfMemory);
    EXPECT_NE(oom.message().find("cudaMalloc(&p, 1 << 40)"), std::string::npos) << oom.message();
    EXPECT_NE(oom.message().find("cudaErrorMemoryAllocation"), std::string::npos) << oom.message();
    EXPECT_EQ(cuda_status(cudaErrorNoDevice, "x").code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(cuda_status(cudaErrorInsufficientDriver, "x").code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(cuda_status(cudaErrorIllegalAddress, "x").code(), core::StatusCode::kInternal);
}

TEST(CudaDevice, DiscoveryWithOrWithoutADevice) {
    const int n = device_count();
    ASSERT_GE(n, 0);
    auto missing = device_info(n);  // one past the last
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().code(), core::StatusCode::kUnsupported);
    if (n == 0) {
        auto b = DeviceBuffer::allocate(1024);
        ASSERT_FALSE(b.is_ok());
        EXPECT_EQ(b.status().code(), core::StatusCode::kUnsupported);
        GTEST_SKIP() << "no CUDA device: the device half of this test did not run";
    }
    auto d = device_info(0);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_FALSE(d->name.empty());
    EXPECT_GE(d->sm_major, 8) << "kiln's CUDA build targets sm_80 and sm_90a";
    EXPECT_GT(d->total_bytes, d->free_bytes / 2);
    EXPECT_GT(d->num_sms, 0);
    std::vector<float> host(1000), back(1000, -1.0f);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
    auto buf = DeviceBuffer::allocate(host.size() * 4);
    ASSERT_TRUE(buf.is_ok()) << buf.status().to_string();
    ASSERT_TRUE(buf->copy_from_host(host.data(), host.size() * 4).is_ok());
    ASSERT_TRUE(buf->copy_to_host(back.data(), back.size() * 4).is_ok());
    EXPECT_EQ(0, std::memcmp(host.data(), back.data(), host.size() * 4));
    EXPECT_EQ(buf->copy_to_host(back.data(), back.size() * 4 + 4).code(), core::StatusCode::kInvalidArgument);
    DeviceBuffer moved = std::move(*buf);
    EXPECT_EQ(buf->data(), nullptr);
    EXPECT_NE(moved.data(), nullptr);
    auto huge = DeviceBuffer::allocate(size_t(1) << 50);  // 1 PiB
    ASSERT_FALSE(huge.is_ok());
    EXPECT_EQ(huge.status().code(), core::StatusCode::kOutOfMemory);
}

}  // namespace
}  // namespace kiln::kernels::cuda

// The NCCL communicator (src/dist/cuda/nccl_communicator.h) on device buffers: one rank alone (the
// device check's single GPU), and, where the machine has two or more GPUs, a group of ranks as
// threads (bootstrapped through dist::make_thread_group), each collective against what every rank
// must get. Skipped without a device or without NCCL in the build.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/cuda/nccl_communicator.h"
#include "gpu_test_util.h"

namespace kiln {
namespace {

using kernels::cuda::DeviceBuffer;
using kernels::cuda::device_count;
using kernels::cuda::test::download;
using kernels::cuda::test::upload;

// Every collective of rank `rank` of `size`; failures are test failures.
void check_collectives(dist::Communicator& c) {
    const int n = c.size(), r = c.rank();
    // all-reduce: rank r contributes (r + 1) * (i + 1); the sum is (i + 1) n (n + 1) / 2
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((r + 1) * (int(i) + 1));
    DeviceBuffer d = upload(v);
    ASSERT_TRUE(c.all_reduce_sum(d.as<float>(), int64_t(v.size())).is_ok());
    const std::vector<float> sum = download<float>(d, v.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(sum[i], float((int(i) + 1) * n * (n + 1) / 2)) << i;
    // all-gather: rank r's 3 bytes {r, r, r}
    DeviceBuffer in = upload(std::vector<uint8_t>(3, uint8_t(r))), out = upload(std::vector<uint8_t>(size_t(3 * n), 255));
    ASSERT_TRUE(c.all_gather(in.data(), 3, out.data()).is_ok());
    const std::vector<uint8_t> all = download<uint8_t>(out, size_t(3 * n));
    for (int q = 0; q < n; ++q)
        for (int j = 0; j < 3; ++j) ASSERT_EQ(all[size_t(q * 3 + j)], q);
    // reduce-scatter: rank r's block b is b + r; rank r gets sum over ranks of (r + q) = n r + n (n - 1) / 2
    std::vector<float> blocks(size_t(2 * n));
    for (int b = 0; b < n; ++b) blocks[size_t(2 * b)] = blocks[size_t(2 * b + 1)] = float(b + r);
    DeviceBuffer bin = upload(blocks), bout = upload(std::vector<float>(2, -1.0f));
    ASSERT_TRUE(c.reduce_scatter_sum(bin.as<float>(), bout.as<float>(), 2).is_ok());
    const std::vector<float> mine = download<float>(bout, 2);
    EXPECT_EQ(mine[0], float(n * r + n * (n - 1) / 2));
    EXPECT_EQ(mine[1], mine[0]);
    // all-to-all: rank r's block to q holds 10 r + q; rank r gets 10 q + r from each q
    std::vector<int32_t> a2a(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) a2a[size_t(q)] = 10 * r + q;
    DeviceBuffer ain = upload(a2a), aout = upload(std::vector<int32_t>(size_t(n), -1));
    ASSERT_TRUE(c.all_to_all(ain.data(), 4, aout.data()).is_ok());
    const std::vector<int32_t> got = download<int32_t>(aout, size_t(n));
    for (int q = 0; q < n; ++q) EXPECT_EQ(got[size_t(q)], 10 * q + r) << "from rank " << q;
    // broadcast from the last rank
    DeviceBuffer b = upload(std::vector<int32_t>(4, r));
    ASSERT_TRUE(c.broadcast(b.data(), 16, n - 1).is_ok());
    for (int32_t x : download<int32_t>(b, 4)) EXPECT_EQ(x, n - 1);
    // point to point around the ring (n > 1): even ranks send first, odd ranks receive first
    if (n > 1) {
        DeviceBuffer s = upload(std::vector<int32_t>(2, r)), t = upload(std::vector<int32_t>(2, -1));
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        if (r % 2 == 0) {
            ASSERT_TRUE(c.send(s.data(), 8, next).is_ok());
            ASSERT_TRUE(c.recv(t.data(), 8, prev).is_ok());
        } else {
            ASSERT_TRUE(c.recv(t.data(), 8, prev).is_ok());
            ASSERT_TRUE(c.send(s.data(), 8, next).is_ok());
        }
        for (int32_t x : download<int32_t>(t, 2)) EXPECT_EQ(x, prev);
    }
    EXPECT_FALSE(c.send(d.data(), 4, r).is_ok());  // not to itself (NCCL's sends block)
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_GE(c.stats().calls, 6);
}

TEST(NcclCommunicator, OneRank) {
    if (!dist::nccl_available()) GTEST_SKIP() << "a build without NCCL";
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto single = dist::make_single_communicator();
    auto c = dist::make_nccl_communicator(*single, 0);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_STREQ((*c)->kind(), "nccl");
    EXPECT_EQ((*c)->size(), 1);
    check_collectives(**c);
}

TEST(NcclCommunicator, RanksAsThreadsOnTheirOwnGpus) {
    if (!dist::nccl_available()) GTEST_SKIP() << "a build without NCCL";
    const int n = device_count();
    if (n < 2) GTEST_SKIP() << n << " CUDA device(s): the group needs one per rank";
    auto boot = dist::make_thread_group(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            ASSERT_EQ(cudaSetDevice(r), cudaSuccess);  // this rank's buffers on its GPU
            boot[size_t(r)]->set_timeout_seconds(60);
            auto c = dist::make_nccl_communicator(*boot[size_t(r)], r);
            ASSERT_TRUE(c.is_ok()) << c.status().to_string();
            EXPECT_EQ((*c)->rank(), r);
            check_collectives(**c);
        });
    for (auto& t : threads) t.join();
}

TEST(NcclCommunicator, BadDeviceIsAnError) {
    if (!dist::nccl_available()) GTEST_SKIP() << "a build without NCCL";
    auto single = dist::make_single_communicator();
    auto c = dist::make_nccl_communicator(*single, 1000);
    EXPECT_FALSE(c.is_ok());
}

}  // namespace
}  // namespace kiln

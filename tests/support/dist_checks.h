// Checks of a dist::Communicator that every rank of a group runs at once (tests/unit/dist_test.cc
// on thread groups, tests/dist/mpi_collectives_test.cc on MPI ranks): each collective against what
// the contract in dist/communicator.h says every rank must get.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dist/communicator.h"

namespace kiln::testing {

// A value rank r contributes at index i, exactly representable so that sums are exact.
inline float dist_value(int r, int64_t i) { return float((r + 1) * 1000 + i % 997) * 0.25f; }

inline void check_collectives(dist::Communicator& c) {
    const int n = c.size(), me = c.rank();
    ASSERT_TRUE(dist::self_test(c).is_ok());
    // all_reduce_sum, small and large (past the small-message algorithms)
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(300000)}) {
        std::vector<float> x = std::vector<float>(size_t(count));
        for (int64_t i = 0; i < count; ++i) x[size_t(i)] = dist_value(me, i);
        ASSERT_TRUE(c.all_reduce_sum(x.data(), count).is_ok());
        int64_t wrong = 0;
        for (int64_t i = 0; i < count; ++i) {
            float want = 0;
            for (int r = 0; r < n; ++r) want += dist_value(r, i);
            wrong += x[size_t(i)] != want;
        }
        EXPECT_EQ(wrong, 0) << "all_reduce of " << count << " on rank " << me;
    }
    // all_gather: rank order
    std::vector<int64_t> mine = {me * 10, me * 10 + 1, me * 10 + 2};
    std::vector<int64_t> all = std::vector<int64_t>(size_t(3 * n), -1);
    ASSERT_TRUE(c.all_gather(mine.data(), 3 * sizeof(int64_t), all.data()).is_ok());
    for (int r = 0; r < n; ++r)
        for (int k = 0; k < 3; ++k) EXPECT_EQ(all[size_t(3 * r + k)], r * 10 + k);
    // reduce_scatter_sum: rank r gets block r summed
    const int64_t count = 5;
    std::vector<float> in = std::vector<float>(size_t(count * n)), out = std::vector<float>(size_t(count));
    for (int64_t i = 0; i < count * n; ++i) in[size_t(i)] = dist_value(me, i);
    ASSERT_TRUE(c.reduce_scatter_sum(in.data(), out.data(), count).is_ok());
    for (int64_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += dist_value(r, me * count + i);
        EXPECT_EQ(out[size_t(i)], want) << i;
    }
    // all_to_all: block r of rank me's output is rank r's block me
    std::vector<int32_t> send = std::vector<int32_t>(size_t(2 * n)), recv = std::vector<int32_t>(size_t(2 * n), -1);
    for (int r = 0; r < n; ++r) {
        send[size_t(2 * r)] = me * 100 + r;
        send[size_t(2 * r + 1)] = -(me * 100 + r);
    }
    ASSERT_TRUE(c.all_to_all(send.data(), 2 * sizeof(int32_t), recv.data()).is_ok());
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(recv[size_t(2 * r)], r * 100 + me);
        EXPECT_EQ(recv[size_t(2 * r + 1)], -(r * 100 + me));
    }
    // broadcast from every root
    for (int root = 0; root < n; ++root) {
        std::vector<uint8_t> b = std::vector<uint8_t>(100, uint8_t(me == root ? root + 1 : 0));
        ASSERT_TRUE(c.broadcast(b.data(), int64_t(b.size()), root).is_ok());
        for (uint8_t v : b) ASSERT_EQ(v, root + 1) << "broadcast from " << root << " on " << me;
    }
    // send / recv around a ring, in order
    if (n > 1) {
        const int next = (me + 1) % n, prev = (me + n - 1) % n;
        for (int k = 0; k < 3; ++k) {
            const int64_t v = me * 1000 + k;
            int64_t got = -1;
            if (me % 2 == 0) {
                ASSERT_TRUE(c.send(&v, sizeof(v), next).is_ok());
                ASSERT_TRUE(c.recv(&got, sizeof(got), prev).is_ok());
            } else {
                ASSERT_TRUE(c.recv(&got, sizeof(got), prev).is_ok());
                ASSERT_TRUE(c.send(&v, sizeof(v), next).is_ok());
            }
            EXPECT_EQ(got, prev * 1000 + k);
        }
    }
    // Posted receives: each rank posts two receives from its predecessor, then sends two messages to
    // its successor, big enough that MPI waits for the receiver, then waits for its receives. With
    // blocking receives after the sends this order would deadlock under MPI.
    if (n > 1) {
        const int next = (me + 1) % n, prev = (me + n - 1) % n;
        const int64_t count = 1 << 18;  // 1 MiB of int32
        std::vector<int32_t> out0 = std::vector<int32_t>(size_t(count)), out1 = out0;
        std::vector<int32_t> in0 = std::vector<int32_t>(size_t(count), -1), in1 = in0;
        for (int64_t i = 0; i < count; ++i) {
            out0[size_t(i)] = int32_t(me * 1000000 + i);
            out1[size_t(i)] = -int32_t(me * 1000000 + i);
        }
        auto p0 = c.start_recv(in0.data(), count * 4, prev);
        auto p1 = c.start_recv(in1.data(), count * 4, prev);
        ASSERT_TRUE(p0.is_ok() && p1.is_ok());
        ASSERT_TRUE(c.send(out0.data(), count * 4, next).is_ok());
        ASSERT_TRUE(c.send(out1.data(), count * 4, next).is_ok());
        ASSERT_TRUE((*p0)->wait().is_ok());
        ASSERT_TRUE((*p1)->wait().is_ok());
        for (int64_t i = 0; i < count; i += 4099) {
            ASSERT_EQ(in0[size_t(i)], int32_t(prev * 1000000 + i)) << "posted receive 0 on " << me;
            ASSERT_EQ(in1[size_t(i)], -int32_t(prev * 1000000 + i)) << "posted receive 1 on " << me;
        }
        // Posted sends: every rank sends first, then receives (blocking sends would deadlock here).
        std::fill(in0.begin(), in0.end(), -1);
        std::fill(in1.begin(), in1.end(), -1);
        auto s0 = c.start_send(out1.data(), count * 4, next);
        auto s1 = c.start_send(out0.data(), count * 4, next);
        ASSERT_TRUE(s0.is_ok() && s1.is_ok());
        ASSERT_TRUE(c.recv(in0.data(), count * 4, prev).is_ok());
        ASSERT_TRUE(c.recv(in1.data(), count * 4, prev).is_ok());
        ASSERT_TRUE((*s0)->wait().is_ok());
        ASSERT_TRUE((*s1)->wait().is_ok());
        for (int64_t i = 0; i < count; i += 4099) {
            ASSERT_EQ(in0[size_t(i)], -int32_t(prev * 1000000 + i)) << "posted send 0 on " << me;
            ASSERT_EQ(in1[size_t(i)], int32_t(prev * 1000000 + i)) << "posted send 1 on " << me;
        }
    }
    ASSERT_TRUE(c.barrier().is_ok());
}

}  // namespace kiln::testing

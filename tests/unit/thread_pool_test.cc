// ThreadPool: every index is visited exactly once, chunks are contiguous and deterministic, the pool
// survives many back-to-back jobs and jobs after idle gaps of every length, nested calls run inline,
// 1 thread means no workers, and parallel_tasks hands out single indices to whichever thread is free.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::core {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
    for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        for (int64_t n : {1, 2, 7, 127, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " n " << n;
        }
    }
}

TEST(ThreadPool, ChunksAreDeterministic) {
    ThreadPool pool(3);
    auto chunks = [&] {
        std::mutex mu;
        std::set<std::pair<int64_t, int64_t>> s;
        pool.parallel_for(100, [&](int64_t b, int64_t e) {
            std::lock_guard<std::mutex> l(mu);
            s.insert({b, e});
        });
        return s;
    };
    auto first = chunks();
    EXPECT_EQ(first.size(), 3u);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(chunks(), first);
}

TEST(ThreadPool, ManyJobsReuseTheSameThreads) {
    ThreadPool pool(3);
    std::mutex mu;
    std::set<std::thread::id> ids;
    for (int job = 0; job < 2000; ++job) {
        std::atomic<int64_t> sum{0};
        pool.parallel_for(64, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) sum += i;
            std::lock_guard<std::mutex> l(mu);
            ids.insert(std::this_thread::get_id());
        });
        ASSERT_EQ(sum.load(), 64 * 63 / 2);
    }
    EXPECT_LE(ids.size(), 3u);  // no thread is ever created per job
}

// A 3-chunk job whose chunks each wait (up to 30 s) until 3 threads are inside it at once: true when
// they all met, which only a pool whose workers really run chunks (the caller included) achieves.
bool three_threads_meet(ThreadPool& pool) {
    std::atomic<int> arrived{0};
    std::atomic<bool> timed_out{false};
    pool.parallel_for(3, [&](int64_t, int64_t) {
        arrived++;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (arrived.load() < 3) {
            if (std::chrono::steady_clock::now() > deadline) {
                timed_out = true;
                return;
            }
            std::this_thread::yield();
        }
    });
    return !timed_out.load() && arrived.load() == 3;
}

TEST(ThreadPool, ChunksRunConcurrently) {
    ThreadPool pool(3);
    EXPECT_TRUE(three_threads_meet(pool));
}

// Jobs after idle gaps that end in each of a worker's idle phases (pause spin, polling between yields
// for 4 ms, parked): every job still gets all 3 threads inside it at once.
TEST(ThreadPool, WorkersJoinAfterEveryKindOfIdleGap) {
    ThreadPool pool(3);
    for (int gap_us : {0, 20, 300, 2000, 6000, 30000, 0, 6000, 300}) {
        std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
        EXPECT_TRUE(three_threads_meet(pool)) << "after " << gap_us << " us idle";
    }
}

// Back-to-back jobs of different sizes: a worker waking late for one job must never run a chunk of
// the next with the old job's bounds (this once deadlocked the stories260K golden test).
TEST(ThreadPool, AlternatingJobSizes) {
    for (int threads : {2, 3, 5}) {
        ThreadPool pool(threads);
        for (int job = 0; job < 20000; ++job) {
            const int64_t n = 1 + job % 4;
            std::atomic<int64_t> count{0};
            pool.parallel_for(n, [&](int64_t b, int64_t e) { count += e - b; });
            ASSERT_EQ(count.load(), n) << "job " << job;
        }
    }
}

TEST(ThreadPool, NestedCallsRunInline) {
    ThreadPool pool(2);
    std::atomic<int64_t> total{0};
    pool.parallel_for(4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    });
    EXPECT_EQ(total.load(), 40);
}

// parallel_tasks: one index per call, each exactly once; a thread held up in one task does not keep
// the others from the rest (the other threads run every remaining index meanwhile).
TEST(ThreadPool, TasksAreSingleIndicesClaimedByFreeThreads) {
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (int64_t n : {1, 2, 9, 100}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<int> bad{0};
            pool.parallel_tasks(n, [&](int64_t b, int64_t e) {
                if (threads > 1 && e != b + 1) bad++;
                for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            });
            EXPECT_EQ(bad.load(), 0) << "threads " << threads << " n " << n;
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " n " << n;
        }
    }
    ThreadPool pool(2);
    std::atomic<int> done_while_stuck{0};
    std::atomic<bool> stuck_done{false};
    pool.parallel_tasks(20, [&](int64_t b, int64_t) {
        if (b == 0) {  // wait (up to 30 s) until the other thread has run all 19 other tasks
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (done_while_stuck.load() < 19 && std::chrono::steady_clock::now() < deadline)
                std::this_thread::yield();
            stuck_done = true;
        } else if (!stuck_done.load()) {
            done_while_stuck++;
        }
    });
    EXPECT_EQ(done_while_stuck.load(), 19);
}

TEST(ThreadPool, MinChunkLimitsSplitting) {
    ThreadPool pool(4);
    std::atomic<int> calls{0};
    pool.parallel_for(
        10, [&](int64_t, int64_t) { calls++; }, 100);
    EXPECT_EQ(calls.load(), 1);
    EXPECT_GE(ThreadPool::default_num_threads(), 1);
}

}  // namespace
}  // namespace kiln::core

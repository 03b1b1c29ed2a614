// ThreadPool: a persistent pool of worker threads for data-parallel loops. Threads are created
// once, in the constructor; no op creates threads. Between jobs a worker spins for a short while
// (kSpinIterations pause instructions, ~50-100 us), then polls between sched_yield calls until 4 ms
// after its last job, and only then parks on a condition variable: the back-to-back small jobs of a
// decode step (a few per layer) start without a wake-up syscall, so does the next step after
// milliseconds of serial work (grammar masks, scheduling), an idle pool still sleeps, and a core
// another thread needs is given up. The caller spins while waiting for the workers to finish.
// parallel_for(n, fn) splits [0, n) into contiguous chunks whose boundaries depend only on n and
// num_threads() (never on timing), so the same call always computes the same chunks; the calling
// thread runs chunks too. A parallel_for issued from inside a worker (nested) runs serially on that
// thread; calls from several outside threads are serialized.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace kiln::core {

// A job body: fn(begin, end) over a range of indices (a non-owning reference, see function_ref.h).
using RangeFn = FunctionRef<void(int64_t, int64_t)>;

class ThreadPool {
public:
    // num_threads counts the calling thread: 1 means no workers (everything runs inline).
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return num_threads_; }

    // Calls fn(begin, end) over disjoint ranges covering [0, n); returns when all are done.
    // min_chunk: the smallest range worth handing to another thread.
    void parallel_for(int64_t n, RangeFn fn, int64_t min_chunk = 1);

    // As parallel_for, but every index is a chunk of its own, claimed in increasing order by whichever
    // thread is free next (fn(i, i + 1); fn(0, n) when it runs inline: one thread, or nested): for
    // several tasks per thread whose durations vary, so that no thread idles while another still has
    // tasks queued. Which thread runs an index depends on timing; the caller's results must not.
    void parallel_tasks(int64_t n, RangeFn fn);

    // The physical cores this process may run on (core::physical_core_count()): one compute thread per
    // core, since SMT siblings share the FMA units and the memory bandwidth the kernels saturate.
    static int default_num_threads();

private:
    void worker_loop();
    void run_chunks();
    void run_job(int64_t n, int64_t num_chunks, RangeFn fn);

    int num_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mu_;  // one parallel_for at a time
    // Job hand-off (a seqlock): generation_ is odd while the caller writes the job fields below and
    // even once they are ready. A worker announces itself in active_ and then re-checks the
    // generation before reading the fields; the caller waits for active_ == 0 after making the
    // generation odd, so no worker reads fields while they change.
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> active_{0};
    std::atomic<int64_t> next_chunk_{0};
    std::atomic<int64_t> chunks_done_{0};
    const RangeFn* fn_ = nullptr;
    int64_t n_ = 0, num_chunks_ = 0;
    // Parking after the spin: sleepers_ counts workers that may be waiting on wake_cv_.
    std::mutex mu_;
    std::condition_variable wake_cv_;
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace kiln::core

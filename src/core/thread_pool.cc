// ThreadPool implementation: a seqlock-style generation counter hands each job to the workers (see
// the member comments in thread_pool.h); chunks are claimed from an atomic counter and counted done
// atomically. Workers and the caller spin (pause) before sleeping, so small jobs cost no syscalls.
// An idle worker then polls between yields for a few milliseconds before it parks.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/cpu_info.h"

namespace kiln::core {
namespace {

thread_local bool t_in_pool_job = false;

// Pause iterations a worker spins after a job: ~25-40 ns each on current x86 cores.
constexpr int kSpinIterations = 2000;
// Then, until this long after its last job, it polls between sched_yield calls (the core goes to any
// other runnable thread) before it parks: the engine's serial work between two forward passes (a
// grammar's new token masks, for one) can take milliseconds, and waking a parked worker costs the next
// pass more than that wait (measured: docs/performance.md "Workers kept awake between steps").
constexpr std::chrono::microseconds kYieldWindow(4000);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
    workers_.reserve(size_t(num_threads_ - 1));
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
    }
    wake_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
}

int ThreadPool::default_num_threads() {
    return physical_core_count();
}

void ThreadPool::run_chunks() {
    const int64_t n = n_, num_chunks = num_chunks_;
    int64_t done = 0;
    for (;;) {
        int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
        if (c >= num_chunks) break;
        int64_t begin = n * c / num_chunks, end = n * (c + 1) / num_chunks;
        (*fn_)(begin, end);
        ++done;
    }
    if (done > 0) chunks_done_.fetch_add(done, std::memory_order_release);
}

void ThreadPool::worker_loop() {
    t_in_pool_job = true;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = generation_.load();
        auto idle = [&] { return (g == seen || (g & 1)) && !stop_.load(std::memory_order_relaxed); };
        for (int i = 0; i < kSpinIterations && idle(); ++i) {
            cpu_relax();
            g = generation_.load();
        }
        if (idle()) {
            const auto until = std::chrono::steady_clock::now() + kYieldWindow;
            while (idle() && std::chrono::steady_clock::now() < until) {
                std::this_thread::yield();
                for (int i = 0; i < 64 && idle(); ++i) {
                    cpu_relax();
                    g = generation_.load();
                }
            }
        }
        if (g == seen || (g & 1)) {
            std::unique_lock<std::mutex> lock(mu_);
            sleepers_.fetch_add(1);
            wake_cv_.wait(lock, [&] {
                const uint64_t now = generation_.load();
                return stop_.load() || (now != seen && !(now & 1));
            });
            sleepers_.fetch_sub(1);
            g = generation_.load();
        }
        if (stop_.load()) return;
        active_.fetch_add(1);
        if (generation_.load() == g) {  // the fields are job g's and stay so while active_ > 0
            run_chunks();
            seen = g;
        }
        active_.fetch_sub(1);
    }
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t min_chunk) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(1, min_chunk);
    run_job(n, std::min<int64_t>(num_threads_, (n + min_chunk - 1) / min_chunk), fn);
}

void ThreadPool::parallel_tasks(int64_t n, RangeFn fn) {
    if (n <= 0) return;
    run_job(n, num_threads_ > 1 ? n : 1, fn);
}

void ThreadPool::run_job(int64_t n, int64_t num_chunks, RangeFn fn) {
    if (num_chunks <= 1 || t_in_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> call_lock(call_mu_);
    const uint64_t g = generation_.load();
    generation_.store(g + 1);  // odd: fields changing; workers that arrive now back off
    while (active_.load() != 0) cpu_relax();
    fn_ = &fn;
    n_ = n;
    num_chunks_ = num_chunks;
    next_chunk_.store(0, std::memory_order_relaxed);
    chunks_done_.store(0, std::memory_order_relaxed);
    generation_.store(g + 2);  // even: job ready
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        wake_cv_.notify_all();
    }
    t_in_pool_job = true;
    run_chunks();
    t_in_pool_job = false;
    for (int i = 0; chunks_done_.load(std::memory_order_acquire) != num_chunks; ++i) {
        if (i < kSpinIterations * 8) {
            cpu_relax();
        } else {
            std::this_thread::yield();  // a worker was descheduled: give it the core
        }
    }
}

}  // namespace kiln::core

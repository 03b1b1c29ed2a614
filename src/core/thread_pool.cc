// ThreadPool implementation: one generation counter wakes the workers for each job; chunks are
// claimed from an atomic counter and completion is counted under the mutex. A new job is set up only
// when no worker is inside run_chunks (active_ == 0), so no worker ever mixes two jobs' fields.
#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"
#include "core/cpu_info.h"

namespace kiln::core {
namespace {
thread_local bool t_in_pool_job = false;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
    workers_.reserve(size_t(num_threads_ - 1));
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
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
    if (done > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        chunks_done_ += done;
        if (chunks_done_ == num_chunks) done_cv_.notify_all();
    }
}

void ThreadPool::worker_loop() {
    t_in_pool_job = true;
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            ++active_;  // the job's fields cannot change until active_ drops back to 0
        }
        run_chunks();
        std::lock_guard<std::mutex> lock(mu_);
        if (--active_ == 0) done_cv_.notify_all();
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(1, min_chunk);
    const int64_t num_chunks = std::min<int64_t>(num_threads_, (n + min_chunk - 1) / min_chunk);
    if (num_chunks <= 1 || t_in_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> call_lock(call_mu_);
    {
        // A worker that woke late for the previous job may still be looking at its fields.
        std::unique_lock<std::mutex> lock(mu_);
        done_cv_.wait(lock, [&] { return active_ == 0; });
        fn_ = &fn;
        n_ = n;
        num_chunks_ = num_chunks;
        next_chunk_.store(0, std::memory_order_relaxed);
        chunks_done_ = 0;
        ++generation_;
    }
    wake_cv_.notify_all();
    t_in_pool_job = true;
    run_chunks();
    t_in_pool_job = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
    fn_ = nullptr;
}

}  // namespace kiln::core

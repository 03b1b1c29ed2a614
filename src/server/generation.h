// One HTTP generation request as n engine requests (the OpenAI `n`), and the hand-off of their
// outputs from the engine's thread to the HTTP thread: the engine callbacks only push onto a queue
// under a mutex and notify a condition variable (they must never call back into the Engine, which
// holds its lock while it runs them); the HTTP thread waits on it.
// Lifetime: the queue is shared with the callbacks, so it outlives a Generation that is dropped
// early; dropping a Generation aborts its unfinished engine requests (their KV blocks are freed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/engine.h"

namespace kiln::server {

struct GenerationEvent {
    int index = 0;  // which of the n choices
    RequestOutput output;
};

class Generation {
public:
    // Queues n requests over `prompt_ids`; with a seed, choice i is seeded seed + i. On an error
    // nothing stays queued.
    // speculate: false runs them without speculative drafts (when the engine has them on).
    static Status start(Engine& engine, const std::vector<int32_t>& prompt_ids, const SamplingParams& sampling, int n,
                        bool speculate, std::unique_ptr<Generation>* out);
    ~Generation();
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;

    // The events queued so far, waiting up to `timeout` for the first one (empty on timeout).
    std::vector<GenerationEvent> wait(std::chrono::milliseconds timeout);
    // Every choice has delivered its finished event (through wait()).
    bool done() const { return num_finished_ == int(ids_.size()); }
    void abort();

private:
    struct Queue {
        std::mutex mu;
        std::condition_variable cv;
        std::deque<GenerationEvent> events;
    };
    Generation(Engine& engine, std::shared_ptr<Queue> q) : engine_(engine), queue_(std::move(q)) {}

    Engine& engine_;
    std::shared_ptr<Queue> queue_;
    std::vector<uint64_t> ids_;
    std::vector<bool> finished_;
    int num_finished_ = 0;
};

}  // namespace kiln::server

// The hand-off of engine outputs to Python threads. The engine calls each request's callback on its
// own thread while it holds its lock, so a callback only copies the output into its channel's queue
// and wakes that channel's waiter (no Python, no GIL, never back into the Engine). A channel is one
// consumer: a blocking LLM.generate call, a stream, or an AsyncEngine's dispatcher thread; each has
// its own condition variable, so 32 threads waiting on 32 channels are not woken by each other's
// tokens; a waiter that wants only finished requests (LLM.generate) is not woken per token at all.
// A closed channel drops what is queued and what still arrives (its requests were aborted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/engine.h"

namespace kiln::python {

class Outbox {
public:
    uint64_t open_channel() {
        std::lock_guard<std::mutex> lock(mu_);
        uint64_t ch = next_channel_++;
        channels_.emplace(ch, std::make_shared<Channel>());
        return ch;
    }

    void close_channel(uint64_t ch) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = channels_.find(ch);
        if (it == channels_.end()) return;
        it->second->closed = true;
        it->second->cv.notify_all();
        channels_.erase(it);
    }

    // Engine thread: enqueue, and wake the consumer only when what it waits for has come.
    void push(uint64_t ch, const RequestOutput& out) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = channels_.find(ch);
        if (it == channels_.end()) return;
        Channel& c = *it->second;
        c.outputs.push_back(out);
        if (out.finished) ++c.num_finished;
        if (!c.want_finished || out.finished) c.cv.notify_one();
    }

    // Everything queued on `ch`, one RequestOutput per request (consecutive updates of a request
    // merged: their tokens, text and logprobs concatenated, the first one's TTFT, the last one's
    // state), waiting up to `timeout_s` for the first output or, with `finished_only`, for a
    // request's last one (a blocking generate call needs no wake-up per token). Empty on timeout or
    // for a closed channel.
    std::vector<RequestOutput> take(uint64_t ch, double timeout_s, bool finished_only = false) {
        std::vector<RequestOutput> got;
        std::unique_lock<std::mutex> lock(mu_);
        auto it = channels_.find(ch);
        if (it == channels_.end()) return got;
        std::shared_ptr<Channel> c = it->second;  // alive while we wait, even if closed meanwhile
        auto ready = [&] { return c->closed || (finished_only ? c->num_finished > 0 : !c->outputs.empty()); };
        if (!ready() && timeout_s > 0) {
            c->want_finished = finished_only;
            c->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
            c->want_finished = false;
        }
        if (c->closed) return got;
        std::unordered_map<uint64_t, size_t> at;  // request id -> its entry in got
        for (RequestOutput& o : c->outputs) {
            auto [pos, fresh] = at.try_emplace(o.request_id, got.size());
            if (fresh) {
                got.push_back(std::move(o));
                continue;
            }
            RequestOutput& m = got[pos->second];
            m.token_ids.insert(m.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
            m.text += o.text;
            for (TokenLogprobs& lp : o.logprobs) m.logprobs.push_back(std::move(lp));
            for (std::vector<float>& row : o.logits) m.logits.push_back(std::move(row));
            if (m.token_ids.size() == o.token_ids.size()) m.ttft_seconds = o.ttft_seconds;  // m had none
            m.finished = o.finished;
            m.finish_reason = o.finish_reason;
            m.error = std::move(o.error);
            m.prompt_tokens = o.prompt_tokens;
            m.completion_tokens = o.completion_tokens;
            m.cached_tokens = o.cached_tokens;
        }
        c->outputs.clear();
        c->num_finished = 0;
        return got;
    }

private:
    struct Channel {
        std::condition_variable cv;
        std::deque<RequestOutput> outputs;
        size_t num_finished = 0;     // finished outputs among them
        bool want_finished = false;  // the waiter wants a finished output, not any
        bool closed = false;
    };
    std::mutex mu_;
    std::unordered_map<uint64_t, std::shared_ptr<Channel>> channels_;
    uint64_t next_channel_ = 1;
};

}  // namespace kiln::python

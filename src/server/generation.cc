// n engine requests of one HTTP request and their output queue (see generation.h).
#include "server/generation.h"

#include <algorithm>

namespace kiln::server {

Status Generation::start(Engine& engine, const std::vector<int32_t>& prompt_ids, const SamplingParams& sampling, int n,
                         bool speculate, std::unique_ptr<Generation>* out) {
    auto q = std::make_shared<Queue>();
    std::vector<Request> reqs(size_t(std::max(n, 0)));
    for (int i = 0; i < n; ++i) {
        Request& r = reqs[size_t(i)];
        r.prompt_ids = prompt_ids;
        r.sampling = sampling;
        r.speculate = speculate;
        if (sampling.has_seed) r.sampling.seed = sampling.seed + uint64_t(i);
        r.on_output = [q, i](const RequestOutput& o) {  // engine thread: enqueue only
            {
                std::lock_guard<std::mutex> lock(q->mu);
                q->events.push_back({i, o});
            }
            q->cv.notify_all();
        };
    }
    std::unique_ptr<Generation> g(new Generation(engine, q));
    // All n at once: they start in the same step (on an error none stays queued).
    Status st = engine.add_requests(std::move(reqs), &g->ids_);
    if (!st.ok()) {
        g->ids_.clear();
        return st;
    }
    g->finished_.assign(g->ids_.size(), false);
    *out = std::move(g);
    return {};
}

Generation::~Generation() {
    for (size_t i = 0; i < ids_.size(); ++i)
        if (!finished_[i]) engine_.abort(ids_[i]);
}

void Generation::abort() {
    for (size_t i = 0; i < ids_.size(); ++i)
        if (!finished_[i]) engine_.abort(ids_[i]);
}

std::vector<GenerationEvent> Generation::wait(std::chrono::milliseconds timeout) {
    std::vector<GenerationEvent> got;
    {
        std::unique_lock<std::mutex> lock(queue_->mu);
        queue_->cv.wait_for(lock, timeout, [&] { return !queue_->events.empty(); });
        while (!queue_->events.empty()) {
            got.push_back(std::move(queue_->events.front()));
            queue_->events.pop_front();
        }
    }
    for (const GenerationEvent& e : got)
        if (e.output.finished && e.index < int(finished_.size()) && !finished_[e.index]) {
            finished_[e.index] = true;
            ++num_finished_;
        }
    return got;
}

}  // namespace kiln::server

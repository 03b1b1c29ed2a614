// Data parallelism's router (`kiln serve --dp N`, docs/parallel.md): which of N engine replicas takes
// a request. A replica keeps the K/V of the prompts it ran in its prefix cache, so a prompt that
// shares a prefix with one sent before goes where that prefix went (its prefill is then mostly cache
// hits), unless that replica has more than `slack` sequences in flight beyond the least busy one;
// other prompts go to the least busy replica (ties in turn). Load is the router's own count of the
// sequences it sent to each replica and that have not been released yet (no engine is asked: that
// would wait for its step). The router remembers prefixes as chained hashes of whole blocks of
// block_size tokens (the prefix cache's granularity), at most `capacity` of them, the least recently
// used forgotten first: an estimate of what the replicas' caches hold (SGLang's cache-aware router
// works the same way).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::server {

class PrefixRouter {
public:
    PrefixRouter(int replicas, int block_size, int64_t slack = 4, size_t capacity = 1 << 20);

    // The replica for a request of `n` sequences over `prompt`; counts them as that replica's load
    // until release(replica, n), and remembers the prompt's blocks as that replica's. With `usable`
    // ([replicas]) only those marked true are candidates (a prefix's replica that is not is passed
    // over); -1 when none is. Thread-safe.
    int pick(std::span<const int32_t> prompt, int64_t n = 1, const std::vector<bool>* usable = nullptr);
    void release(int replica, int64_t n = 1);

    int replicas() const { return replicas_; }
    // What pick decided so far: requests sent after a prefix match, and in all.
    int64_t prefix_routed() const;
    int64_t routed() const;
    int64_t load(int replica) const;
    // The same in Prometheus text, with each replica's count: kiln_dp_requests_total{replica="r"},
    // kiln_dp_prefix_routed_total.
    std::string metrics() const;

private:
    struct Entry {
        int replica;
        std::list<uint64_t>::iterator at;  // in lru_
    };
    int replicas_, block_size_;
    int64_t slack_;
    size_t capacity_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, Entry> owner_;  // block chain hash -> replica
    std::list<uint64_t> lru_;                    // hashes, the most recently used last
    std::vector<int64_t> load_, per_replica_;
    int next_ = 0;  // the next replica among tied least busy ones
    int64_t prefix_routed_ = 0, routed_ = 0;
};

}  // namespace kiln::server

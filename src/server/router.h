// Data parallelism's router (`kiln serve --dp N`, docs/parallel.md): which of N engine replicas takes
// a request. A replica keeps the K/V of the prompts it ran in its prefix cache, so a prompt that
// shares a prefix with one sent before goes where that prefix went (its prefill is then mostly cache
// hits), unless that replica is busier than the least busy one by more than `slack` requests; other
// prompts go to the least busy replica (ties in turn). The router remembers prefixes as chained
// hashes of whole blocks of block_size tokens (the prefix cache's granularity), at most `capacity` of
// them (the oldest forgotten first), which is an approximation of what the replicas' caches hold
// (SGLang's cache-aware router works the same way).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::server {

class PrefixRouter {
public:
    PrefixRouter(int replicas, int block_size, int64_t slack = 4, size_t capacity = 1 << 20);

    // The replica for `prompt`, given each replica's load (requests running and waiting); remembers
    // the prompt's blocks as that replica's. Thread-safe.
    int pick(std::span<const int32_t> prompt, std::span<const int64_t> load);

    int replicas() const { return replicas_; }
    // What pick decided so far: requests sent after a prefix match, and in all.
    int64_t prefix_routed() const { return prefix_routed_; }
    int64_t routed() const { return routed_; }
    // The same in Prometheus text, with each replica's count: kiln_dp_requests_total{replica="r"},
    // kiln_dp_prefix_routed_total.
    std::string metrics();

private:
    int replicas_, block_size_;
    int64_t slack_;
    size_t capacity_;
    std::mutex mu_;
    std::unordered_map<uint64_t, int> owner_;  // block chain hash -> replica
    std::deque<uint64_t> order_;               // hashes in the order first remembered (forgetting)
    int next_ = 0;                             // the next replica among tied least busy ones
    int64_t prefix_routed_ = 0, routed_ = 0;
    std::vector<int64_t> per_replica_;
};

}  // namespace kiln::server

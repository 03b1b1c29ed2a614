// The data-parallel router (router.h).
#include "server/router.h"

#include <algorithm>

namespace kiln::server {

PrefixRouter::PrefixRouter(int replicas, int block_size, int64_t slack, size_t capacity)
    : replicas_(std::max(1, replicas)), block_size_(std::max(1, block_size)), slack_(slack),
      capacity_(std::max<size_t>(1, capacity)), load_(size_t(replicas_), 0), per_replica_(size_t(replicas_), 0) {}

int PrefixRouter::pick(std::span<const int32_t> prompt, int64_t n, const std::vector<bool>* usable) {
    auto ok = [usable](int r) { return !usable || (size_t(r) < usable->size() && (*usable)[size_t(r)]); };
    // The chain hash of each whole block: block i's hash covers tokens [0, (i + 1) * block_size).
    std::vector<uint64_t> chain;
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the token ids, carried from block to block
    for (size_t i = 0; i < prompt.size(); ++i) {
        for (int b = 0; b < 4; ++b) h = (h ^ ((uint32_t(prompt[i]) >> (8 * b)) & 0xff)) * 1099511628211ull;
        if ((i + 1) % size_t(block_size_) == 0) chain.push_back(h);
    }
    std::lock_guard<std::mutex> lock(mu_);
    int64_t least = -1;
    for (int r = 0; r < replicas_; ++r)
        if (ok(r) && (least < 0 || load_[size_t(r)] < least)) least = load_[size_t(r)];
    if (least < 0) return -1;  // no replica usable
    int chosen = -1;
    for (size_t i = chain.size(); i-- > 0;) {  // the longest prefix remembered
        auto it = owner_.find(chain[i]);
        if (it == owner_.end()) continue;
        if (ok(it->second.replica) && load_[size_t(it->second.replica)] <= least + slack_) {
            chosen = it->second.replica;
            ++prefix_routed_;
        }
        break;
    }
    if (chosen < 0) {  // the least busy, ties taken in turn
        for (int k = 0; k < replicas_ && chosen < 0; ++k) {
            const int r = (next_ + k) % replicas_;
            if (ok(r) && load_[size_t(r)] == least) chosen = r;
        }
        next_ = (chosen + 1) % replicas_;
    }
    ++routed_;
    ++per_replica_[size_t(chosen)];
    load_[size_t(chosen)] += std::max<int64_t>(1, n);
    for (uint64_t key : chain) {  // this prompt's blocks: now the chosen replica's, the most recent
        auto it = owner_.find(key);
        if (it != owner_.end()) {
            it->second.replica = chosen;
            lru_.splice(lru_.end(), lru_, it->second.at);
        } else {
            owner_.emplace(key, Entry{chosen, lru_.insert(lru_.end(), key)});
        }
    }
    while (owner_.size() > capacity_) {
        owner_.erase(lru_.front());
        lru_.pop_front();
    }
    return chosen;
}

void PrefixRouter::release(int replica, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (replica >= 0 && replica < replicas_)
        load_[size_t(replica)] = std::max<int64_t>(0, load_[size_t(replica)] - std::max<int64_t>(1, n));
}

int64_t PrefixRouter::prefix_routed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prefix_routed_;
}
int64_t PrefixRouter::routed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return routed_;
}
int64_t PrefixRouter::load(int replica) const {
    std::lock_guard<std::mutex> lock(mu_);
    return replica >= 0 && replica < replicas_ ? load_[size_t(replica)] : 0;
}

std::string PrefixRouter::metrics() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out =
        "# HELP kiln_dp_requests_total Generation requests each data-parallel replica was given.\n"
        "# TYPE kiln_dp_requests_total counter\n";
    for (int r = 0; r < replicas_; ++r)
        out += "kiln_dp_requests_total{replica=\"" + std::to_string(r) + "\"} " + std::to_string(per_replica_[size_t(r)]) +
               "\n";
    out += "# HELP kiln_dp_prefix_routed_total Requests sent to the replica that had their prompt's prefix.\n"
           "# TYPE kiln_dp_prefix_routed_total counter\n"
           "kiln_dp_prefix_routed_total " +
           std::to_string(prefix_routed_) + "\n";
    return out;
}

}  // namespace kiln::server

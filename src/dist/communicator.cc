// The single-rank and thread-group communicators, and the start-up self-test. The thread group
// runs every collective as: each rank posts its buffer's address, a barrier, each rank reads what it
// needs from the others' buffers (sums in rank order 0, 1, ..., so every rank gets the same bits),
// a barrier (no buffer is reused before everyone has read it).
#include "dist/communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace kiln::dist {
namespace {

using core::Status;
using core::StatusCode;

class SingleCommunicator final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const char* kind() const override { return "single"; }
    Status all_reduce_sum(float*, int64_t) override { return Status::ok(); }
    Status all_gather(const void* in, int64_t bytes, void* out) override { return copy(in, bytes, out); }
    Status reduce_scatter_sum(const float* in, float* out, int64_t count) override {
        return copy(in, count * int64_t(sizeof(float)), out);
    }
    Status all_to_all(const void* in, int64_t bytes, void* out) override { return copy(in, bytes, out); }
    Status broadcast(void*, int64_t, int root) override {
        if (root == 0) return Status::ok();
        return core::error(StatusCode::kInvalidArgument) << "single-rank communicator: broadcast from rank " << root;
    }
    Status send(const void*, int64_t, int dst) override { return no_peer("send to", dst); }
    Status recv(void*, int64_t, int src) override { return no_peer("recv from", src); }
    Status barrier() override { return Status::ok(); }

private:
    static Status copy(const void* in, int64_t bytes, void* out) {
        if (bytes > 0 && in != out) std::memmove(out, in, size_t(bytes));
        return Status::ok();
    }
    static Status no_peer(const char* what, int peer) {
        return core::error(StatusCode::kInvalidArgument) << "single-rank communicator: " << what << " rank " << peer;
    }
};

// What the ranks of a thread group share.
struct ThreadGroupState {
    explicit ThreadGroupState(int n) : size(n), posted(size_t(n), nullptr), mail(size_t(n) * size_t(n)) {}
    const int size;
    std::mutex mu;
    std::condition_variable cv;
    int arrived = 0;
    uint64_t generation = 0;
    std::vector<const void*> posted;  // [size]: each rank's buffer for the collective in progress
    // send/recv: mail[src * size + dst], a queue of messages
    std::vector<std::vector<std::vector<uint8_t>>> mail;
};

class ThreadCommunicator final : public Communicator {
public:
    ThreadCommunicator(std::shared_ptr<ThreadGroupState> s, int rank) : s_(std::move(s)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return s_->size; }
    const char* kind() const override { return "threads"; }

    Status all_reduce_sum(float* data, int64_t count) override {
        std::vector<float> sum = std::vector<float>(size_t(count), 0.0f);
        KILN_RETURN_IF_ERROR(exchange("all_reduce", data, count * 4, [&] {
            for (int r = 0; r < size(); ++r) {
                const float* x = static_cast<const float*>(s_->posted[size_t(r)]);
                for (int64_t i = 0; i < count; ++i) sum[size_t(i)] += x[i];
            }
        }));
        std::memcpy(data, sum.data(), size_t(count) * sizeof(float));
        return Status::ok();
    }
    Status all_gather(const void* in, int64_t bytes, void* out) override {
        return exchange("all_gather", in, bytes, [&] {
            for (int r = 0; r < size(); ++r)
                std::memcpy(static_cast<uint8_t*>(out) + r * bytes, s_->posted[size_t(r)], size_t(bytes));
        });
    }
    Status reduce_scatter_sum(const float* in, float* out, int64_t count) override {
        return exchange("reduce_scatter", in, count * 4 * size(), [&] {
            for (int64_t i = 0; i < count; ++i) out[i] = 0.0f;
            for (int r = 0; r < size(); ++r) {
                const float* x = static_cast<const float*>(s_->posted[size_t(r)]) + int64_t(rank_) * count;
                for (int64_t i = 0; i < count; ++i) out[i] += x[i];
            }
        });
    }
    Status all_to_all(const void* in, int64_t bytes, void* out) override {
        return exchange("all_to_all", in, bytes * size(), [&] {
            for (int r = 0; r < size(); ++r)
                std::memcpy(static_cast<uint8_t*>(out) + r * bytes,
                            static_cast<const uint8_t*>(s_->posted[size_t(r)]) + int64_t(rank_) * bytes, size_t(bytes));
        });
    }
    Status broadcast(void* data, int64_t bytes, int root) override {
        if (root < 0 || root >= size()) return core::error(StatusCode::kInvalidArgument) << "broadcast from rank " << root;
        return exchange("broadcast", data, bytes, [&] {
            if (rank_ != root) std::memcpy(data, s_->posted[size_t(root)], size_t(bytes));
        });
    }
    Status send(const void* data, int64_t bytes, int dst) override {
        if (dst < 0 || dst >= size() || dst == rank_)
            return core::error(StatusCode::kInvalidArgument) << "send to rank " << dst;
        std::lock_guard<std::mutex> lock(s_->mu);
        const uint8_t* p = static_cast<const uint8_t*>(data);
        s_->mail[size_t(rank_ * size() + dst)].emplace_back(p, p + bytes);
        s_->cv.notify_all();
        return Status::ok();
    }
    Status recv(void* data, int64_t bytes, int src) override {
        if (src < 0 || src >= size() || src == rank_)
            return core::error(StatusCode::kInvalidArgument) << "recv from rank " << src;
        std::unique_lock<std::mutex> lock(s_->mu);
        auto& box = s_->mail[size_t(src * size() + rank_)];
        if (!s_->cv.wait_for(lock, deadline(), [&] { return !box.empty(); }))
            return timed_out("recv");
        if (int64_t(box.front().size()) != bytes)
            return core::error(StatusCode::kInvalidArgument)
                   << "rank " << rank_ << ": recv of " << bytes << " bytes matched a send of " << box.front().size();
        std::memcpy(data, box.front().data(), size_t(bytes));
        box.erase(box.begin());
        return Status::ok();
    }
    Status barrier() override { return wait_all("barrier"); }

private:
    // The wait's bound; a day stands for "no bound" (timeout 0 or not finite).
    std::chrono::duration<double> deadline() const {
        const bool bounded = timeout_seconds_ > 0 && timeout_seconds_ < 1e9;
        return std::chrono::duration<double>(bounded ? timeout_seconds_ : 86400.0);
    }
    Status timed_out(const char* what) const {
        return core::error(StatusCode::kInternal) << what << " timed out after " << timeout_seconds_ << " s on rank "
                                                  << rank_ << " of " << size();
    }
    // Every rank arrives, then all go on (a generation counter makes it reusable).
    Status wait_all(const char* what) {
        std::unique_lock<std::mutex> lock(s_->mu);
        const uint64_t gen = s_->generation;
        if (++s_->arrived == s_->size) {
            s_->arrived = 0;
            ++s_->generation;
            s_->cv.notify_all();
            return Status::ok();
        }
        if (!s_->cv.wait_for(lock, deadline(), [&] { return s_->generation != gen; })) {
            --s_->arrived;  // this rank leaves the rendezvous it timed out of
            return timed_out(what);
        }
        return Status::ok();
    }
    template <typename Read>
    Status exchange(const char* what, const void* mine, int64_t bytes, Read read) {
        const auto start = std::chrono::steady_clock::now();
        ++stats_.calls;
        stats_.bytes += bytes;
        {
            std::lock_guard<std::mutex> lock(s_->mu);
            s_->posted[size_t(rank_)] = mine;
        }
        KILN_RETURN_IF_ERROR(wait_all(what));
        read();
        const Status done = wait_all(what);
        stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return done;
    }

    std::shared_ptr<ThreadGroupState> s_;
    int rank_;
};

// Communicator::start_recv's default: the receive runs in wait().
class DeferredRecv final : public Pending {
public:
    DeferredRecv(Communicator& comm, void* data, int64_t bytes, int src)
        : comm_(comm), data_(data), bytes_(bytes), src_(src) {}
    Status wait() override { return comm_.recv(data_, bytes_, src_); }

private:
    Communicator& comm_;
    void* data_;
    int64_t bytes_;
    int src_;
};

class Done final : public Pending {
public:
    Status wait() override { return Status::ok(); }
};

}  // namespace

core::Result<std::unique_ptr<Pending>> Communicator::start_send(const void* data, int64_t bytes, int dst) {
    KILN_RETURN_IF_ERROR(send(data, bytes, dst));
    return std::unique_ptr<Pending>(new Done());
}

core::Result<std::unique_ptr<Pending>> Communicator::start_recv(void* data, int64_t bytes, int src) {
    return std::unique_ptr<Pending>(new DeferredRecv(*this, data, bytes, src));
}

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

std::vector<std::unique_ptr<Communicator>> make_thread_group(int n) {
    auto state = std::make_shared<ThreadGroupState>(n);
    std::vector<std::unique_ptr<Communicator>> out;
    for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(state, r));
    return out;
}

Status self_test(Communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    int32_t token = me == 0 ? 0x6b696c6e : 0;  // "kiln"
    KILN_RETURN_IF_ERROR(comm.broadcast(&token, sizeof(token), 0));
    std::vector<int32_t> ranks = std::vector<int32_t>(size_t(n), -1);
    const int32_t mine = me;
    KILN_RETURN_IF_ERROR(comm.all_gather(&mine, sizeof(mine), ranks.data()));
    float sum[2] = {float(me + 1), 1.0f};
    KILN_RETURN_IF_ERROR(comm.all_reduce_sum(sum, 2));
    bool ranks_ok = true;
    for (int r = 0; r < n; ++r) ranks_ok = ranks_ok && ranks[size_t(r)] == r;
    if (token != 0x6b696c6e || !ranks_ok || sum[0] != float(n * (n + 1) / 2) || sum[1] != float(n))
        return core::error(StatusCode::kInternal)
               << "collective self-test failed on rank " << me << " of " << n << " (" << comm.kind()
               << "): broadcast " << (token == 0x6b696c6e ? "ok" : "wrong") << ", all_gather "
               << (ranks_ok ? "ok" : "wrong") << ", all_reduce " << sum[0] << " / " << sum[1];
    return comm.barrier();
}

}  // namespace kiln::dist

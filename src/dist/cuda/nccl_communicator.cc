// The NCCL communicator (nccl_communicator.h): NCCL's collectives on one stream, each waited for by
// polling the stream until it completes, NCCL reports an asynchronous error, or the deadline passes.
#include "dist/cuda/nccl_communicator.h"

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#ifdef KILN_HAVE_NCCL
#include <nccl.h>
#endif

namespace kiln::dist {

using core::Status;
using core::StatusCode;

#ifndef KILN_HAVE_NCCL

bool nccl_available() { return false; }

core::Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator&, int) {
    return core::error(StatusCode::kUnsupported) << "this kiln was built without NCCL";
}

#else

bool nccl_available() { return true; }

namespace {

Status cuda_error(cudaError_t e, const char* what) {
    return core::error(StatusCode::kInternal) << "CUDA " << what << ": " << cudaGetErrorString(e);
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream, float* scratch)
        : comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream), scratch_(scratch) {}
    ~NcclCommunicator() override {
        int before = 0;
        cudaGetDevice(&before);
        cudaSetDevice(device_);
        if (!aborted_) ncclCommDestroy(comm_);
        cudaFree(scratch_);
        cudaStreamDestroy(stream_);
        cudaSetDevice(before);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* kind() const override { return "nccl"; }

    Status all_reduce_sum(float* data, int64_t count) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(count));
        return wait(ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, stream_), "all_reduce",
                    count * 4);
    }
    Status all_gather(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(bytes));
        return wait(ncclAllGather(in, out, size_t(bytes), ncclUint8, comm_, stream_), "all_gather", bytes);
    }
    Status reduce_scatter_sum(const float* in, float* out, int64_t count) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(count));
        return wait(ncclReduceScatter(in, out, size_t(count), ncclFloat, ncclSum, comm_, stream_), "reduce_scatter",
                    count * 4 * size_);
    }
    Status all_to_all(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(bytes));
        ncclResult_t r = ncclGroupStart();
        auto fine = [](ncclResult_t x) { return x == ncclSuccess || x == ncclInProgress; };
        for (int peer = 0; peer < size_ && fine(r); ++peer) {
            r = ncclSend(static_cast<const uint8_t*>(in) + peer * bytes, size_t(bytes), ncclUint8, peer, comm_, stream_);
            if (fine(r))
                r = ncclRecv(static_cast<uint8_t*>(out) + peer * bytes, size_t(bytes), ncclUint8, peer, comm_, stream_);
        }
        const ncclResult_t end = ncclGroupEnd();
        return wait(fine(r) ? end : r, "all_to_all", bytes * size_);
    }
    Status broadcast(void* data, int64_t bytes, int root) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(bytes));
        if (root < 0 || root >= size_) return core::error(StatusCode::kInvalidArgument) << "broadcast from rank " << root;
        return wait(ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_), "broadcast", bytes);
    }
    Status send(const void* data, int64_t bytes, int dst) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(bytes));
        if (dst < 0 || dst >= size_ || dst == rank_)
            return core::error(StatusCode::kInvalidArgument) << "send to rank " << dst;
        return wait(ncclSend(data, size_t(bytes), ncclUint8, dst, comm_, stream_), "send", bytes);
    }
    Status recv(void* data, int64_t bytes, int src) override {
        KILN_RETURN_IF_ERROR(usable());
        KILN_RETURN_IF_ERROR(non_negative(bytes));
        if (src < 0 || src >= size_ || src == rank_)
            return core::error(StatusCode::kInvalidArgument) << "recv from rank " << src;
        return wait(ncclRecv(data, size_t(bytes), ncclUint8, src, comm_, stream_), "recv", bytes);
    }
    Status barrier() override {
        KILN_RETURN_IF_ERROR(usable());
        return wait(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_), "barrier", 0);
    }


private:
    // The NCCL communicator only (the job is the caller's to end, through the bootstrap).
    void comm_abort() {
        if (!aborted_.exchange(true)) ncclCommAbort(comm_);
    }
    static Status non_negative(int64_t n) {
        if (n >= 0) return Status::ok();
        return core::error(StatusCode::kInvalidArgument) << "NCCL: a negative size " << n;
    }
    Status usable() const {
        if (!aborted_) return Status::ok();
        return core::error(StatusCode::kInternal) << "NCCL rank " << rank_ << " of " << size_
                                                  << ": the communicator was aborted after an earlier failure";
    }
    // The collective just enqueued (r: what enqueuing it returned): done, failed, or timed out.
    Status wait(ncclResult_t r, const char* what, int64_t bytes) {
        const auto start = std::chrono::steady_clock::now();
        ++stats_.calls;
        stats_.bytes += bytes;
        auto fail = [&](const std::string& why) -> Status {
            comm_abort();
            return core::error(StatusCode::kInternal) << "NCCL rank " << rank_ << " of " << size_ << ": " << what << " "
                                                      << why;
        };
        // A non-blocking communicator may still be enqueuing (ncclInProgress) when the call returns.
        if (r != ncclSuccess && r != ncclInProgress) return fail(std::string("failed: ") + ncclGetErrorString(r));
        const bool bounded = timeout_seconds_ > 0 && timeout_seconds_ < 1e9;
        for (int64_t polls = 0;; ++polls) {
            ncclResult_t async = ncclSuccess;
            if (ncclResult_t g = ncclCommGetAsyncError(comm_, &async); g != ncclSuccess) async = g;
            if (async != ncclSuccess && async != ncclInProgress)
                return fail(std::string("failed: ") + ncclGetErrorString(async));
            if (async == ncclSuccess) {  // enqueued: wait for the stream
                const cudaError_t q = cudaStreamQuery(stream_);
                if (q == cudaSuccess) break;
                if (q != cudaErrorNotReady) return fail(std::string("failed on the device: ") + cudaGetErrorString(q));
            }
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (bounded && waited > timeout_seconds_)
                return fail("did not complete within " + std::to_string(int64_t(timeout_seconds_)) +
                            " s: another rank died or stopped answering");
            if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(waited > 1.0 ? 1000 : 50));
        }
        stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return Status::ok();
    }

    ncclComm_t comm_;
    int rank_, size_, device_;
    cudaStream_t stream_;  // every collective's
    float* scratch_;  // [1] on the device: the barrier's all-reduce
    std::atomic<bool> aborted_{false};
};

}  // namespace

// Makes the ranks' communicator on `device` (made current for the call only). Non-blocking NCCL
// init, polled under the bootstrap's deadline, so that a rank that never arrives is an error.
core::Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, int device) {
    int before = 0;
    cudaGetDevice(&before);
    struct Restore {
        int device;
        ~Restore() { cudaSetDevice(device); }
    } restore{before};
    // Rank 0's id, or its failure, reaches every rank (none is left waiting for a broadcast).
    struct {
        int32_t ok;
        ncclUniqueId id;
    } msg{};
    cudaError_t set = cudaSetDevice(device);
    if (bootstrap.rank() == 0) msg.ok = set == cudaSuccess && ncclGetUniqueId(&msg.id) == ncclSuccess;
    KILN_RETURN_IF_ERROR(bootstrap.broadcast(&msg, int64_t(sizeof(msg)), 0));
    if (set != cudaSuccess) return cuda_error(set, "cudaSetDevice");
    if (!msg.ok) return core::error(StatusCode::kInternal) << "NCCL: rank 0 could not make the communicator's id";
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRankConfig(&comm, bootstrap.size(), msg.id, bootstrap.rank(), &config);
    const double timeout = bootstrap.timeout_seconds();
    const auto start = std::chrono::steady_clock::now();
    while (r == ncclInProgress) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (ncclResult_t g = ncclCommGetAsyncError(comm, &r); g != ncclSuccess) r = g;
        if (r == ncclInProgress && timeout > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout) {
            ncclCommAbort(comm);
            return core::error(StatusCode::kInternal) << "ncclCommInitRank (rank " << bootstrap.rank() << " of "
                                                      << bootstrap.size() << "): the other ranks did not join within "
                                                      << timeout << " s";
        }
    }
    if (r != ncclSuccess)
        return core::error(StatusCode::kInternal) << "ncclCommInitRank (rank " << bootstrap.rank() << " of "
                                                  << bootstrap.size() << ", device " << device
                                                  << "): " << ncclGetErrorString(r);
    cudaStream_t stream;
    float* scratch = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float));
        if (e == cudaSuccess) e = cudaMemset(scratch, 0, sizeof(float));
        if (e != cudaSuccess) {
            cudaFree(scratch);
            cudaStreamDestroy(stream);
        }
    }
    if (e != cudaSuccess) {
        ncclCommDestroy(comm);
        return cuda_error(e, "stream / scratch for NCCL");
    }
    auto c = std::unique_ptr<Communicator>(new NcclCommunicator(comm, bootstrap.rank(), bootstrap.size(), device, stream,
                                                                scratch));
    c->set_timeout_seconds(timeout);
    return c;
}

#endif  // KILN_HAVE_NCCL

}  // namespace kiln::dist

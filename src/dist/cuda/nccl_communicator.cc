// The NCCL communicator (nccl_communicator.h): NCCL's collectives on one stream, each waited for by
// polling the stream until it completes, NCCL reports an asynchronous error, or the deadline passes.
#include "dist/cuda/nccl_communicator.h"

#include <cuda_runtime.h>

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
        cudaSetDevice(device_);
        if (!aborted_) ncclCommDestroy(comm_);
        cudaFree(scratch_);
        cudaStreamDestroy(stream_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* kind() const override { return "nccl"; }

    Status all_reduce_sum(float* data, int64_t count) override {
        KILN_RETURN_IF_ERROR(usable());
        return wait(ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, stream_), "all_reduce",
                    count * 4);
    }
    Status all_gather(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(usable());
        return wait(ncclAllGather(in, out, size_t(bytes), ncclUint8, comm_, stream_), "all_gather", bytes);
    }
    Status reduce_scatter_sum(const float* in, float* out, int64_t count) override {
        KILN_RETURN_IF_ERROR(usable());
        return wait(ncclReduceScatter(in, out, size_t(count), ncclFloat, ncclSum, comm_, stream_), "reduce_scatter",
                    count * 4 * size_);
    }
    Status all_to_all(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(usable());
        ncclResult_t r = ncclGroupStart();
        for (int peer = 0; peer < size_ && r == ncclSuccess; ++peer) {
            r = ncclSend(static_cast<const uint8_t*>(in) + peer * bytes, size_t(bytes), ncclUint8, peer, comm_, stream_);
            if (r == ncclSuccess)
                r = ncclRecv(static_cast<uint8_t*>(out) + peer * bytes, size_t(bytes), ncclUint8, peer, comm_, stream_);
        }
        const ncclResult_t end = ncclGroupEnd();
        return wait(r != ncclSuccess ? r : end, "all_to_all", bytes * size_);
    }
    Status broadcast(void* data, int64_t bytes, int root) override {
        KILN_RETURN_IF_ERROR(usable());
        if (root < 0 || root >= size_) return core::error(StatusCode::kInvalidArgument) << "broadcast from rank " << root;
        return wait(ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_), "broadcast", bytes);
    }
    Status send(const void* data, int64_t bytes, int dst) override {
        KILN_RETURN_IF_ERROR(usable());
        if (dst < 0 || dst >= size_ || dst == rank_)
            return core::error(StatusCode::kInvalidArgument) << "send to rank " << dst;
        return wait(ncclSend(data, size_t(bytes), ncclUint8, dst, comm_, stream_), "send", bytes);
    }
    Status recv(void* data, int64_t bytes, int src) override {
        KILN_RETURN_IF_ERROR(usable());
        if (src < 0 || src >= size_ || src == rank_)
            return core::error(StatusCode::kInvalidArgument) << "recv from rank " << src;
        return wait(ncclRecv(data, size_t(bytes), ncclUint8, src, comm_, stream_), "recv", bytes);
    }
    Status barrier() override {
        KILN_RETURN_IF_ERROR(usable());
        return wait(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_), "barrier", 0);
    }
    void abort(int) override {
        if (!aborted_) ncclCommAbort(comm_);
        aborted_ = true;
    }


private:
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
            abort(1);
            return core::error(StatusCode::kInternal) << "NCCL rank " << rank_ << " of " << size_ << ": " << what << " "
                                                      << why;
        };
        if (r != ncclSuccess) return fail(std::string("failed: ") + ncclGetErrorString(r));
        const bool bounded = timeout_seconds_ > 0 && timeout_seconds_ < 1e9;
        for (int64_t polls = 0;; ++polls) {
            const cudaError_t q = cudaStreamQuery(stream_);
            if (q == cudaSuccess) break;
            if (q != cudaErrorNotReady) return fail(std::string("failed on the device: ") + cudaGetErrorString(q));
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(comm_, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                return fail(std::string("failed: ") + ncclGetErrorString(async));
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
    bool aborted_ = false;
};

}  // namespace

core::Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, int device) {
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return cuda_error(e, "cudaSetDevice");
    ncclUniqueId id{};
    if (bootstrap.rank() == 0)
        if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
            return core::error(StatusCode::kInternal) << "ncclGetUniqueId: " << ncclGetErrorString(r);
    KILN_RETURN_IF_ERROR(bootstrap.broadcast(&id, int64_t(sizeof(id)), 0));
    ncclComm_t comm;
    if (ncclResult_t r = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()); r != ncclSuccess)
        return core::error(StatusCode::kInternal) << "ncclCommInitRank (rank " << bootstrap.rank() << " of "
                                                  << bootstrap.size() << ", device " << device
                                                  << "): " << ncclGetErrorString(r);
    cudaStream_t stream;
    float* scratch = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float));
        if (e != cudaSuccess) cudaStreamDestroy(stream);
    }
    if (e != cudaSuccess) {
        ncclCommDestroy(comm);
        return cuda_error(e, "stream / scratch for NCCL");
    }
    auto c = std::unique_ptr<Communicator>(new NcclCommunicator(comm, bootstrap.rank(), bootstrap.size(), device, stream,
                                                                scratch));
    c->set_timeout_seconds(bootstrap.timeout_seconds());
    return c;
}

#endif  // KILN_HAVE_NCCL

}  // namespace kiln::dist

// The MPI communicator (Open MPI, or any MPI-3 library): MPI_COMM_WORLD (or a subgroup) with the nonblocking
// collectives, each waited on with MPI_Test until it completes or its deadline passes (MPI has no
// timeouts of its own). A deadline that passes ends the job with MPI_Abort after saying which
// operation on which rank gave up: the usual cause is a rank that died or stopped answering, and
// mpirun names a rank that died. Built only where CMake found MPI (KILN_HAVE_MPI); elsewhere
// make_mpi_communicator says so.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/communicator.h"

#ifdef KILN_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace kiln::dist {

using core::Status;
using core::StatusCode;

namespace {
int env_int(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : 0;
}
}  // namespace

bool launched_by_mpirun() {
    return env_int("OMPI_COMM_WORLD_SIZE") > 1 || env_int("PMI_SIZE") > 1 || env_int("PMIX_SIZE") > 1;
}

int mpirun_rank() {
    if (std::getenv("OMPI_COMM_WORLD_RANK")) return env_int("OMPI_COMM_WORLD_RANK");
    if (std::getenv("PMI_RANK")) return env_int("PMI_RANK");
    return env_int("PMIX_RANK");
}

#ifndef KILN_HAVE_MPI

bool mpi_available() { return false; }

core::Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
    return core::error(StatusCode::kUnsupported)
           << "this kiln was built without MPI (install libopenmpi-dev, e.g. with scripts/setup, and rebuild)";
}

core::Result<std::unique_ptr<Communicator>> make_mpi_subgroup(int) { return make_mpi_communicator(); }

#else

bool mpi_available() { return true; }

namespace {

class MpiCommunicator final : public Communicator {
public:
    explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
        if (comm_ != MPI_COMM_WORLD) {
            MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
            name_ = "rank " + std::to_string(world_rank_) + " (rank " + std::to_string(rank_) + " of a group of " +
                    std::to_string(size_) + ")";
        } else {
            name_ = "rank " + std::to_string(rank_) + " of " + std::to_string(size_);
        }
    }
    // A subgroup's MPI_Comm is left to MPI_Finalize (MPI_Comm_free is collective: a rank on its way
    // out must not wait for the others).
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* kind() const override { return "mpi"; }

    Status all_reduce_sum(float* data, int64_t count) override {
        KILN_RETURN_IF_ERROR(fits(count, "all_reduce"));
        MPI_Request req;
        return start_and_wait(
            MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, comm_, &req), req,
            "all_reduce", count * 4);
    }
    Status all_gather(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(fits(bytes, "all_gather"));
        MPI_Request req;
        return start_and_wait(
            MPI_Iallgather(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE, comm_, &req), req,
            "all_gather", bytes);
    }
    Status reduce_scatter_sum(const float* in, float* out, int64_t count) override {
        KILN_RETURN_IF_ERROR(fits(count, "reduce_scatter"));
        MPI_Request req;
        return start_and_wait(
            MPI_Ireduce_scatter_block(in, out, int(count), MPI_FLOAT, MPI_SUM, comm_, &req), req,
            "reduce_scatter", count * 4 * size_);
    }
    Status all_to_all(const void* in, int64_t bytes, void* out) override {
        KILN_RETURN_IF_ERROR(fits(bytes, "all_to_all"));
        MPI_Request req;
        return start_and_wait(MPI_Ialltoall(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE, comm_, &req),
                              req, "all_to_all", bytes * size_);
    }
    Status broadcast(void* data, int64_t bytes, int root) override {
        KILN_RETURN_IF_ERROR(fits(bytes, "broadcast"));
        if (root < 0 || root >= size_) return core::error(StatusCode::kInvalidArgument) << "broadcast from rank " << root;
        MPI_Request req;
        return start_and_wait(MPI_Ibcast(data, int(bytes), MPI_BYTE, root, comm_, &req), req, "broadcast",
                              bytes);
    }
    // Point to point in pieces of at most 1 GiB (MPI counts are ints), matched piece by piece (an
    // empty message is one empty piece).
    Status send(const void* data, int64_t bytes, int dst) override {
        int64_t at = 0;
        do {
            const int64_t n = std::min(kPiece, bytes - at);
            MPI_Request req;
            KILN_RETURN_IF_ERROR(start_and_wait(
                MPI_Isend(static_cast<const uint8_t*>(data) + at, int(n), MPI_BYTE, dst, 0, comm_, &req), req, "send", n));
            at += n;
        } while (at < bytes);
        return Status::ok();
    }
    Status recv(void* data, int64_t bytes, int src) override {
        int64_t at = 0;
        do {
            const int64_t n = std::min(kPiece, bytes - at);
            MPI_Request req;
            KILN_RETURN_IF_ERROR(start_and_wait(
                MPI_Irecv(static_cast<uint8_t*>(data) + at, int(n), MPI_BYTE, src, 0, comm_, &req), req, "recv", n));
            at += n;
        } while (at < bytes);
        return Status::ok();
    }
    core::Result<std::unique_ptr<Pending>> start_recv(void* data, int64_t bytes, int src) override {
        return post("recv", bytes, [&](int64_t at, int64_t n, MPI_Request* req) {
            return MPI_Irecv(static_cast<uint8_t*>(data) + at, int(n), MPI_BYTE, src, 0, comm_, req);
        });
    }
    core::Result<std::unique_ptr<Pending>> start_send(const void* data, int64_t bytes, int dst) override {
        return post("send", bytes, [&](int64_t at, int64_t n, MPI_Request* req) {
            return MPI_Isend(static_cast<const uint8_t*>(data) + at, int(n), MPI_BYTE, dst, 0, comm_, req);
        });
    }
    void abort(int exit_code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, exit_code);
        std::_Exit(exit_code);
    }
    Status barrier() override {
        MPI_Request req;
        return start_and_wait(MPI_Ibarrier(comm_, &req), req, "barrier", 0);
    }

private:
    static constexpr int64_t kPiece = int64_t(1) << 30;
    static Status fits(int64_t n, const char* what) {
        if (n >= 0 && n <= INT_MAX) return Status::ok();
        return core::error(StatusCode::kInvalidArgument) << what << ": " << n << " elements exceed one MPI message";
    }
    // A posted send or receive in pieces of at most kPiece bytes: start(at, n, &req) posts one.
    template <class Start>
    core::Result<std::unique_ptr<Pending>> post(const char* what, int64_t bytes, Start start) {
        auto posted = std::make_unique<Posted>(*this, what, bytes);
        int64_t at = 0;
        do {
            const int64_t n = std::min(kPiece, bytes - at);
            MPI_Request req;
            if (int rc = start(at, n, &req); rc != MPI_SUCCESS) return mpi_error(rc, what);
            posted->reqs.push_back(req);
            at += n;
        } while (at < bytes);
        return std::unique_ptr<Pending>(std::move(posted));
    }
    // start_send's or start_recv's pieces' requests (cancelled if never waited for).
    struct Posted final : Pending {
        Posted(MpiCommunicator& c, const char* w, int64_t n) : comm(c), what(w), bytes(n) {}
        ~Posted() override {
            for (MPI_Request& r : reqs) {
                if (r == MPI_REQUEST_NULL) continue;
                MPI_Cancel(&r);
                MPI_Request_free(&r);
            }
        }
        Status wait() override {
            for (size_t i = 0; i < reqs.size(); ++i)
                KILN_RETURN_IF_ERROR(comm.wait_for(reqs[i], what, i == 0 ? bytes : 0));
            reqs.clear();
            return Status::ok();
        }
        MpiCommunicator& comm;
        const char* what;
        int64_t bytes;
        std::vector<MPI_Request> reqs;
    };
    Status start_and_wait(int rc, MPI_Request& req, const char* what, int64_t bytes) {
        if (rc != MPI_SUCCESS) return mpi_error(rc, what);
        return wait_for(req, what, bytes);
    }
    // Polls the request: spinning first (a tensor-parallel step's all-reduces are short and frequent),
    // then sleeping between polls (50 us, 1 ms after a second), so a long wait gives the core to the
    // rank's other threads.
    Status wait_for(MPI_Request& req, const char* what, int64_t bytes) {
        int rc = MPI_SUCCESS;
        const auto start = std::chrono::steady_clock::now();
        ++stats_.calls;
        stats_.bytes += bytes;
        const bool bounded = timeout_seconds_ > 0 && timeout_seconds_ < 1e9;
        const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          std::chrono::duration<double>(bounded ? timeout_seconds_ : 0.0));
        for (int64_t polls = 0;; ++polls) {
            int done = 0;
            rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_error(rc, what);
            if (done) {
                stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                return Status::ok();
            }
            if (polls < 20000) continue;
            const auto now = std::chrono::steady_clock::now();
            if (bounded && now > deadline) {
                std::fprintf(stderr,
                             "kiln: %s: %s did not complete within %.0f s: another rank died or stopped "
                             "answering; ending the job\n",
                             name_.c_str(), what, timeout_seconds_);
                std::fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 1);
                std::_Exit(1);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(now - start > std::chrono::seconds(1) ? 1000 : 50));
        }
    }
    Status mpi_error(int rc, const char* what) const {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        return core::error(StatusCode::kInternal)
               << "MPI " << what << " failed on " << name_ << ": " << std::string(text, size_t(len));
    }

    MPI_Comm comm_;
    int rank_ = 0, size_ = 1, world_rank_ = 0;
    std::string name_;  // for messages
};

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

}  // namespace

core::Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
    static std::once_flag once;
    static int init_rc = MPI_SUCCESS, provided = 0;
    std::call_once(once, [] {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) {
            MPI_Query_thread(&provided);
            return;
        }
        init_rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        if (init_rc == MPI_SUCCESS) {
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            std::atexit(finalize_at_exit);
        }
    });
    if (init_rc != MPI_SUCCESS) return core::error(StatusCode::kInternal) << "MPI_Init_thread failed (" << init_rc << ")";
    // The engine runs the collectives on its own thread, one thread at a time.
    if (provided < MPI_THREAD_SERIALIZED)
        return core::error(StatusCode::kUnsupported) << "the MPI library offers thread level " << provided
                                                     << "; kiln needs MPI_THREAD_SERIALIZED";
    return std::unique_ptr<Communicator>(new MpiCommunicator(MPI_COMM_WORLD));
}

core::Result<std::unique_ptr<Communicator>> make_mpi_subgroup(int color) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, make_mpi_communicator());
    if (color < 0) return core::error(StatusCode::kInvalidArgument) << "MPI subgroup color " << color;
    MPI_Comm comm;
    if (int rc = MPI_Comm_split(MPI_COMM_WORLD, color, world->rank(), &comm); rc != MPI_SUCCESS)
        return core::error(StatusCode::kInternal) << "MPI_Comm_split failed (" << rc << ")";
    return std::unique_ptr<Communicator>(new MpiCommunicator(comm));
}

#endif  // KILN_HAVE_MPI

}  // namespace kiln::dist

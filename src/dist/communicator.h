// Communicator: the collectives that tensor, pipeline and expert parallelism need, over a group of
// ranks (docs/parallel.md). Implementations: one rank alone (make_single_communicator), ranks as
// threads of one process (make_thread_group: tests, and one-process runs of the parallel code), MPI
// ranks (make_mpi_communicator: processes started by mpirun, on one host or many), and, in CUDA
// builds, NCCL ranks on device buffers (dist/cuda/nccl_communicator.h, bootstrapped through one of
// the others). Only src/dist includes mpi.h or nccl.h.
//
// Contract (every implementation):
// - Every rank of the group calls the same collectives in the same order with the same sizes; a
//   collective returns once this rank's part is done. Buffers are host memory.
// - all_reduce_sum sums in an order fixed by the group size alone, so a parallel step is
//   deterministic. The thread group gives every rank the same bits; MPI only recommends that (Open
//   MPI's algorithms do so in practice), which is why only rank 0's logits are ever used.
// - No collective waits forever: one that has not completed after timeout_seconds() fails. The
//   thread group returns the error (kInternal, naming the operation and the rank); the MPI group
//   prints it and brings the whole job down (MPI_Abort), because a peer that stopped answering
//   leaves the group in no state to go on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::dist {

// A send or receive posted by Communicator::start_send / start_recv, completed by wait().
class Pending {
public:
    virtual ~Pending() = default;
    // Returns once the buffer given to start_send / start_recv (which must live until then) is sent
    // or filled, or fails as send / recv do; bounded by the timeout in force at the start of the
    // wait. Call it once.
    virtual core::Status wait() = 0;
};

// What a rank's collectives have cost so far: calls, the bytes of its own buffers they carried (the
// message sizes: an all-reduce of n floats counts 4n, whatever the algorithm moves on the wire), and
// the seconds spent inside them, waiting for the others included.
struct CommStats {
    int64_t calls = 0;
    int64_t bytes = 0;
    double seconds = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* kind() const = 0;  // "single", "threads", "mpi", "nccl"

    // data [count] <- the element-wise sum of every rank's data [count].
    virtual core::Status all_reduce_sum(float* data, int64_t count) = 0;
    // out [size * bytes] <- every rank's in [bytes], in rank order.
    virtual core::Status all_gather(const void* in, int64_t bytes, void* out) = 0;
    // out [count] <- the sum over ranks of their in [rank * count, (rank + 1) * count).
    virtual core::Status reduce_scatter_sum(const float* in, float* out, int64_t count) = 0;
    // out [size * bytes]: block r <- rank r's in block [rank * bytes, (rank + 1) * bytes).
    virtual core::Status all_to_all(const void* in, int64_t bytes, void* out) = 0;
    // data [bytes] <- root's data [bytes].
    virtual core::Status broadcast(void* data, int64_t bytes, int root) = 0;
    // Point to point, matched in order between a pair of ranks.
    virtual core::Status send(const void* data, int64_t bytes, int dst) = 0;
    virtual core::Status recv(void* data, int64_t bytes, int src) = 0;
    // A receive posted now and waited for later: the peer's send can complete while this rank
    // computes (a pipeline's rank 0 posts the receive of a batch's logits and runs its stage on the
    // next batch meanwhile). Wait for the receives from one src in the order they were posted, with
    // no plain recv from src in between. The default runs recv in wait(), right for groups whose
    // sends never wait for the receiver (threads); MPI posts an MPI_Irecv at once.
    virtual core::Result<std::unique_ptr<Pending>> start_recv(void* data, int64_t bytes, int src);
    // A send posted now and waited for later, so the sender need not wait for a busy receiver (rank
    // 0 sends a step's plan to ranks still running the last one). In order with this rank's other
    // sends to dst. The default sends now (threads never wait for the receiver); MPI posts an
    // MPI_Isend.
    virtual core::Result<std::unique_ptr<Pending>> start_send(const void* data, int64_t bytes, int dst);
    virtual core::Status barrier() = 0;
    // Ends every rank of the job now (a rank that cannot go on once the group exists: the others
    // would wait for it). MPI: MPI_Abort, which does not return. One rank or threads: nothing.
    virtual void abort(int exit_code) { (void)exit_code; }

    // 0 (or anything not finite and positive): wait as long as it takes (a rank that waits for the
    // next step of an idle server).
    double timeout_seconds() const { return timeout_seconds_; }
    void set_timeout_seconds(double s) { timeout_seconds_ = s; }
    const CommStats& stats() const { return stats_; }

protected:
    double timeout_seconds_ = 120.0;
    CommStats stats_;
};

// A group of one: every collective is a copy or nothing.
std::unique_ptr<Communicator> make_single_communicator();

// n ranks that are threads of this process: element r is rank r, to be used by one thread each.
std::vector<std::unique_ptr<Communicator>> make_thread_group(int n);

// Whether this build has MPI, and whether this process was started by mpirun (Open MPI, MPICH or
// Slurm's PMI environment) with more than one rank.
bool mpi_available();
bool launched_by_mpirun();
// This process's rank as mpirun's environment gives it (before MPI starts); 0 outside mpirun.
int mpirun_rank();
// MPI_COMM_WORLD (MPI_Init_thread with MPI_THREAD_SERIALIZED on the first call; MPI_Finalize at
// process exit). kUnsupported in a build without MPI.
core::Result<std::unique_ptr<Communicator>> make_mpi_communicator();
// The ranks of MPI_COMM_WORLD that pass the same `color` (>= 0), ranked in world order
// (MPI_Comm_split: every world rank calls it, at the same point). A pipeline stage's
// tensor-parallel group. Its collectives' deadlines end the whole job, as the world's do.
core::Result<std::unique_ptr<Communicator>> make_mpi_subgroup(int color);

// The collective self-test run at start-up: a broadcast, an all-gather of ranks and an all-reduce whose
// sum every rank checks. kInternal naming what came back wrong.
core::Status self_test(Communicator& comm);

}  // namespace kiln::dist

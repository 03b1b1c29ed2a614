// Tensor-parallel ranks for kiln::Engine: opening the group and the workers' loop.
#include "api/parallel.h"

#include <cmath>
#include <cstdio>

#include "engine/tensor_parallel.h"
#include "kernels/cpu/matmul.h"
#include "loader/checkpoint.h"
#include "loader/tensor_parallel.h"
#include "model/cpu_model.h"

namespace kiln::api {

core::Result<ops::LinearOptions> linear_options(const EngineOptions& o) {
    ops::LinearOptions lo;
    if (!o.isa.empty()) {
        auto isa = kernels::cpu::parse_isa(o.isa);
        if (!isa) return core::error(core::StatusCode::kInvalidArgument) << "unknown ISA '" << o.isa << "'";
        if (!kernels::cpu::isa_supported(*isa))
            return core::error(core::StatusCode::kUnsupported) << "this CPU cannot run ISA " << o.isa;
        lo.isa = *isa;
    }
    lo.f32_activations = o.f32_activations;
    return lo;
}

core::Result<std::unique_ptr<dist::Communicator>> open_tensor_parallel(const EngineOptions& o) {
    const int n = o.tensor_parallel;
    if (n == 1) return std::unique_ptr<dist::Communicator>();
    auto bad = [] { return core::error(core::StatusCode::kInvalidArgument); };
    if (n < 1 || n > 4096) return bad() << "tensor parallel size must be in [1, 4096], got " << n;
    if (!(o.collective_timeout > 0) || !std::isfinite(o.collective_timeout))
        return bad() << "the collective timeout must be a positive number of seconds, got " << o.collective_timeout;
    if (o.device != "cpu")
        return core::error(core::StatusCode::kUnsupported) << "tensor parallelism runs on the CPU for now (MPI ranks)";
    if (!dist::launched_by_mpirun())
        return bad() << "tensor parallelism " << n << " runs one process per rank: start it with mpirun -np " << n
                     << " kiln ... --tp " << n;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::make_mpi_communicator());
    if (comm->size() != n)
        return bad() << "--tp " << n << " needs " << n << " ranks; mpirun started " << comm->size()
                     << " (mpirun -np " << n << ")";
    comm->set_timeout_seconds(o.collective_timeout);
    KILN_RETURN_IF_ERROR(dist::self_test(*comm));
    return comm;
}

namespace {

core::Status serve_steps(const EngineOptions& o, const ops::LinearOptions& lo, dist::Communicator& comm) {
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint whole, loader::load_checkpoint(o.model));
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint ck, loader::tp_slice(whole, comm.rank(), comm.size()));
    whole = loader::Checkpoint();  // the slice holds on to the mappings and buffers its views need
    const int threads = o.threads > 0 ? o.threads : core::ThreadPool::default_num_threads();
    core::ThreadPool pool(threads);
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<model::CpuModel> m,
                          model::create_model(ck, &pool, lo,
                                              o.mmap_weights ? model::WeightMemory::kFileMapping
                                                             : model::WeightMemory::kAnonymous));
    m->set_tensor_parallel(&comm);
    return engine::run_tp_follower(*m, comm);
}

}  // namespace

core::Status run_worker(const EngineOptions& o) {
    KILN_ASSIGN_OR_RETURN(const ops::LinearOptions lo, linear_options(o));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, open_tensor_parallel(o));
    if (!comm || comm->rank() == 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "run_worker is for ranks 1.. of a tensor-parallel group; rank 0 runs Engine::create";
    const core::Status st = serve_steps(o, lo, *comm);
    if (!st.is_ok()) {  // rank 0 waits for this one: end the job
        std::fprintf(stderr, "kiln: rank %d of %d: %s; ending the job\n", comm->rank(), comm->size(),
                     st.to_string().c_str());
        comm->abort(1);
    }
    return st;
}

}  // namespace kiln::api

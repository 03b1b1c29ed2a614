// Parallel ranks for kiln::Engine: opening the groups, each rank's checkpoint, the workers' loop.
#include "api/parallel.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "engine/parallel.h"
#include "kernels/cpu/matmul.h"
#include "loader/checkpoint.h"
#include "loader/pipeline_parallel.h"
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

dist::CommStats ParallelGroups::stats() const {
    dist::CommStats s;
    for (const dist::Communicator* c : {world.get(), stage_tp.get()})
        if (c) {
            s.calls += c->stats().calls;
            s.bytes += c->stats().bytes;
            s.seconds += c->stats().seconds;
        }
    return s;
}

core::Result<ParallelGroups> open_parallel(const EngineOptions& o) {
    ParallelGroups g;
    int tp = o.tensor_parallel;
    const int pp = o.pipeline_parallel, ep = o.expert_parallel;
    auto bad = [] { return core::error(core::StatusCode::kInvalidArgument); };
    if (tp < 1 || tp > 4096) return bad() << "tensor parallel size must be in [1, 4096], got " << tp;
    if (ep < 1 || ep > 4096) return bad() << "expert parallel size must be in [1, 4096], got " << ep;
    if (ep > 1 && tp > 1 && ep != tp)
        return bad() << "expert parallelism runs over the tensor-parallel ranks (the attention is split over them): "
                        "--ep "
                     << ep << " needs --tp " << ep << " (or no --tp), got --tp " << tp;
    if (ep > 1) tp = ep;
    g.ep = ep;
    if (pp < 1 || pp > 4096) return bad() << "pipeline parallel size must be in [1, 4096], got " << pp;
    if (tp == 1 && pp == 1) return g;
    const int n = tp * pp;
    const std::string flags = (ep > 1 && o.tensor_parallel == 1 ? " --ep " + std::to_string(ep)
                               : tp > 1                           ? " --tp " + std::to_string(tp)
                                                                  : std::string()) +
                              (pp > 1 ? " --pp " + std::to_string(pp) : std::string());
    if (!(o.collective_timeout > 0) || !std::isfinite(o.collective_timeout))
        return bad() << "the collective timeout must be a positive number of seconds, got " << o.collective_timeout;
    if (o.device != "cpu")
        return core::error(core::StatusCode::kUnsupported) << "parallelism across ranks runs on the CPU for now (MPI ranks)";
    if (!dist::launched_by_mpirun())
        return bad() << "parallelism over " << n << " ranks runs one process per rank: start it with mpirun -np " << n
                     << " kiln ..." << flags;
    KILN_ASSIGN_OR_RETURN(g.world, dist::make_mpi_communicator());
    if (g.world->size() != n)
        return bad() << flags.substr(1) << " needs " << n << " ranks; mpirun started " << g.world->size() << " (mpirun -np "
                     << n << ")";
    g.tp = tp;
    g.pp = pp;
    g.world->set_timeout_seconds(o.collective_timeout);
    KILN_RETURN_IF_ERROR(dist::self_test(*g.world));
    if (tp > 1 && pp > 1) {
        KILN_ASSIGN_OR_RETURN(g.stage_tp, dist::make_mpi_subgroup(g.stage()));
        g.stage_tp->set_timeout_seconds(o.collective_timeout);
        KILN_RETURN_IF_ERROR(dist::self_test(*g.stage_tp));
    }
    return g;
}

core::Result<loader::Checkpoint> rank_checkpoint(const loader::Checkpoint& ck, const ParallelGroups& g) {
    if (g.ep > 1 && !ck.config.moe())
        return core::error(core::StatusCode::kInvalidArgument)
               << "--ep " << g.ep << ": " << ck.path << " has no experts (use --tp for a dense model)";
    if (g.tp == 1 && g.pp == 1) return ck;
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint stage, loader::pp_slice(ck, g.stage(), g.pp));
    return loader::tp_slice(stage, g.tp_rank(), g.tp);
}

void attach(model::CpuModel& m, const ParallelGroups& g) {
    m.set_tensor_parallel(g.tensor_group());
    m.set_pipeline(g.pipeline_group());
}

namespace {

core::Status serve_steps(const EngineOptions& o, const ops::LinearOptions& lo, const ParallelGroups& g) {
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint whole, loader::load_checkpoint(o.model));
    KILN_ASSIGN_OR_RETURN(loader::Checkpoint ck, rank_checkpoint(whole, g));
    whole = loader::Checkpoint();  // the slice holds on to the mappings and buffers its views need
    const int threads = o.threads > 0 ? o.threads : core::ThreadPool::default_num_threads();
    core::ThreadPool pool(threads);
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<model::CpuModel> m,
                          model::create_model(ck, &pool, lo,
                                              o.mmap_weights ? model::WeightMemory::kFileMapping
                                                             : model::WeightMemory::kAnonymous));
    attach(*m, g);
    return engine::run_follower(*m, *m->step_group());
}

}  // namespace

core::Status run_worker(const EngineOptions& o) {
    KILN_ASSIGN_OR_RETURN(const ops::LinearOptions lo, linear_options(o));
    KILN_ASSIGN_OR_RETURN(const ParallelGroups g, open_parallel(o));
    if (!g.world || g.rank() == 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "run_worker is for ranks 1.. of a parallel job; rank 0 runs Engine::create";
    const core::Status st = serve_steps(o, lo, g);
    if (!st.is_ok()) {  // rank 0 waits for this one: end the job
        std::fprintf(stderr, "kiln: rank %d of %d: %s; ending the job\n", g.rank(), g.world->size(),
                     st.to_string().c_str());
        g.world->abort(1);
    }
    return st;
}

}  // namespace kiln::api

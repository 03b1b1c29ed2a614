// Pipeline-parallel slicing (pipeline_parallel.h).
#include "loader/pipeline_parallel.h"

#include <set>
#include <string>

#include "loader/layer_tensors.h"

namespace kiln::loader {

core::Result<std::pair<int64_t, int64_t>> pp_stage_layers(int64_t num_layers, int stage, int num_stages) {
    if (num_stages < 1 || stage < 0 || stage >= num_stages)
        return core::error(core::StatusCode::kInvalidArgument) << "pipeline stage " << stage << " of " << num_stages;
    if (num_stages > num_layers)
        return core::error(core::StatusCode::kInvalidArgument)
               << "pipeline parallelism " << num_stages << " over " << num_layers
               << " layers: each stage needs at least one layer";
    const int64_t base = num_layers / num_stages, extra = num_layers % num_stages;
    const int64_t begin = stage * base + std::min<int64_t>(stage, extra);
    return std::pair<int64_t, int64_t>(begin, begin + base + (stage < extra ? 1 : 0));
}

core::Result<Checkpoint> pp_slice(const Checkpoint& ck, int stage, int num_stages) {
    if (num_stages == 1 && stage == 0) return ck;
    if (ck.config.stage_begin != 0 || ck.config.stage_end_layer != 0)
        return core::error(core::StatusCode::kInvalidArgument) << "pp_slice: the checkpoint is a pipeline stage already";
    KILN_ASSIGN_OR_RETURN(const auto layers, pp_stage_layers(ck.config.num_layers, stage, num_stages));
    Checkpoint out = ck;
    out.config.stage_begin = layers.first;
    out.config.stage_end_layer = layers.second;
    std::set<std::string> keep;
    for (const TensorSpec& t : checkpoint_tensors(out.config)) keep.insert(t.name);
    std::erase_if(out.tensors, [&](const TensorRef& t) { return !keep.count(t.name); });
    KILN_RETURN_IF_ERROR(out.config.validate());
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(out));
    return out;
}

}  // namespace kiln::loader

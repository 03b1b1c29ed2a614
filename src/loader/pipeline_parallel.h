// Pipeline-parallel slicing at load time (docs/parallel.md): the layers are cut into `num_stages`
// contiguous runs, one per stage, and each stage's checkpoint holds only what its layers need: the
// first stage the token embeddings, the last the output layer (and the token embeddings when they
// are tied), every stage the final norm (a few floats). The step (model/cpu_model.h set_pipeline)
// passes the residual stream from stage to stage.
#pragma once

#include <cstdint>
#include <utility>

#include "core/status.h"
#include "loader/checkpoint.h"

namespace kiln::loader {

// Stage `stage` of `num_stages` runs layers [first, second): near-equal runs, the longer ones first
// (the last stage also runs the output layer). kInvalidArgument when there are more stages than layers.
core::Result<std::pair<int64_t, int64_t>> pp_stage_layers(int64_t num_layers, int stage, int num_stages);

// The checkpoint stage `stage` of `num_stages` runs: its config's stage_begin / stage_end_layer set,
// the other layers' tensors (and the embeddings or output layer it does not use) left out. The
// tensors are ck's (views of the same bytes). num_stages 1 returns ck as it is.
core::Result<Checkpoint> pp_slice(const Checkpoint& ck, int stage, int num_stages);

}  // namespace kiln::loader

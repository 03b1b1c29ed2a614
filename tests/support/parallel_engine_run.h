// The serving engine over a group of ranks, for the parallelism tests (tensor_parallel_test,
// pipeline_parallel_test): one rank's model with its groups set either follows rank 0's steps
// (engine::run_follower) or, on rank 0 or alone, runs 8 requests in one engine (greedy and seeded
// sampling, prompts sharing a prefix, blocks of 4 tokens so that tables span blocks, prompts in
// chunks of 24 tokens beside decodes) and returns each request's tokens and logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "engine/engine_core.h"
#include "engine/parallel.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "model/cpu_model.h"

namespace kiln::test {

struct EngineRun {
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::map<int64_t, std::vector<float>> logits;
    std::map<int64_t, std::vector<engine::FinishReason>> finished;  // each request's final callbacks
    core::Status status;
};

// ck: this rank's checkpoint; the tokenizer comes from tok_ck (a tiny family model has none). tp /
// world: the model's tensor-parallel group and pipeline world (null: none). lanes: EngineConfig::
// pipeline_lanes; max_batch_tokens: the step's size (a bigger one makes pipeline micro-batches).
// abort_after >= 0: requests 1 and 4 are aborted after that many steps.
inline EngineRun run_engine(const loader::Checkpoint& ck, const loader::Checkpoint& tok_ck, dist::Communicator* tp,
                            dist::Communicator* world, int32_t lanes = 0, int64_t max_batch_tokens = 24,
                            int abort_after = -1) {
    EngineRun out;
    core::ThreadPool pool(1);
    auto m = model::CpuModel::create(ck, &pool);
    if (!m.is_ok()) return {{}, {}, {}, m.status()};
    (*m)->set_tensor_parallel(tp);
    (*m)->set_pipeline(world);
    if (dist::Communicator* group = (*m)->step_group(); group && group->rank() != 0) {
        out.status = engine::run_follower(**m, *group);
        return out;
    }
    auto tok = loader::find_tokenizer(tok_ck, "");
    if (!tok.is_ok()) return {{}, {}, {}, tok.status()};
    const int64_t ids = std::min<int64_t>(500, ck.config.vocab_size - 3);
    engine::EngineConfig c;
    c.block_size = 4;
    c.num_kv_blocks = 200;
    c.max_batch_tokens = max_batch_tokens;
    c.pipeline_lanes = lanes;
    auto core = engine::EngineCore::create(m->get(), tok->get(), c);
    if (!core.is_ok()) return {{}, {}, {}, core.status()};
    for (int64_t id = 0; id < 8; ++id) {
        engine::Request r;
        for (int i = 0; i < 12 + 5 * int(id); ++i) r.prompt.push_back(int32_t((i < 10 ? i * 13 : i * 7 + id) % ids + 3));
        r.params.max_tokens = 10;
        r.params.ignore_eos = true;
        r.params.temperature = id % 2 ? 0.8f : 0.0f;
        r.params.seed = 100 + uint64_t(id);
        r.params.has_seed = id % 2;
        r.return_logits = true;
        r.on_output = [&out, id](const engine::StepOutput& o) {
            out.tokens[id].insert(out.tokens[id].end(), o.token_ids.begin(), o.token_ids.end());
            for (const auto& l : o.logits) out.logits[id].insert(out.logits[id].end(), l.begin(), l.end());
            if (o.finished) out.finished[id].push_back(o.finish_reason);
        };
        if (core::Status s = (*core)->add(id, std::move(r)); !s.is_ok()) return {{}, {}, {}, s};
    }
    for (int steps = 0; (*core)->step(); ++steps)
        if (steps + 1 == abort_after) {
            (*core)->abort(1);
            (*core)->abort(4);
        }
    return out;  // the core goes away here: the followers stop
}

}  // namespace kiln::test

// A mixture-of-experts MLP on the GPU in a fixed number of launches, with no host round trip (so a
// decode step stays one CUDA graph): the router's top-k (moe_route), the (row, slot) pairs grouped
// by expert (moe_group), each expert's gate/up and down products over its own rows in one grouped
// launch for all experts (moe_grouped_matmul: an expert that got no rows returns at once, so decode
// reads only the chosen experts' weights), and the weighted sum in ascending expert id
// (moe_combine). The semantics are ops/moe.h's (the CPU's): ties to the lower expert id, softmax over
// all experts, the chosen weights renormalized with norm_topk, every row summed in one order whatever
// else is in the batch. Device pointers throughout; callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::kernels::cuda {

// ids [rows, top_k], weights [rows, top_k] from logits [rows, E], as ops::moe_route (expf for
// std::exp: within a few ulp). 1 <= top_k <= E, else kInvalidArgument.
core::Status moe_route(const float* logits, int64_t rows, int64_t num_experts, int64_t top_k, bool norm_topk,
                       int32_t* ids, float* weights, cudaStream_t stream = nullptr);

// ops::MoeGroups on the device: offsets [E + 1], entries [rows * top_k] (r * top_k + j for every
// row r whose slot j chose expert e, experts in ascending id, each expert's rows in row order), and
// slot_pos [rows * top_k], the inverse (entries[slot_pos[i]] = i). One block; each thread owns
// experts and reads every id (rows * top_k of them) twice: microseconds for a decode step, a few
// hundred for an 8k-token prompt. E <= 1024.
core::Status moe_group(const int32_t* ids, int64_t rows, int64_t top_k, int64_t num_experts, int32_t* offsets,
                       int32_t* entries, int32_t* slot_pos, cudaStream_t stream = nullptr);

// The experts' matrices of one kind (every expert's gate/up, or every down), stacked: expert e's
// [n, k] matrix is rows [e n, (e + 1) n) of w, of `type`: kF32, kBF16, kF16 (any k) or a block type
// kernels/cuda decodes (gemv_blocks_supports; k whole blocks, a multiple of 32).
struct ExpertMatrices {
    core::DType type = core::DType::kF32;
    const void* w = nullptr;
    int64_t num_experts = 0, n = 0, k = 0;
};

// y [N, n] with N = rows * top_k entries in moe_group's order: entry i (of expert e, offsets[e] <= i
// < offsets[e + 1]) is expert e's matrix times its input row, that row x[entries[i] / top_k] of x
// [rows, k] when `entries` is set (the gate/up product of the layer input), else x[i] of x [N, k]
// (the down product of the activations). One launch over (expert, 4 weight rows); a warp per weight
// row decodes each 32-element group once per 8 of the expert's rows (the block GEMV's scheme), f32
// activations and accumulation.
core::Status moe_grouped_matmul(const ExpertMatrices& w, const float* x, const int32_t* entries, int64_t top_k,
                                const int32_t* offsets, int64_t num_entries, float* y, cudaStream_t stream = nullptr);

// out [rows, H] = each row's top_k expert outputs y [N, H] (grouped order: slot j of row r at
// slot_pos[r top_k + j]) times their weights, summed in ascending expert id from 0, unfused
// multiply then add, as the CPU's moe_mlp.
core::Status moe_combine(const int32_t* ids, const float* weights, const int32_t* slot_pos, const float* y,
                         int64_t rows, int64_t top_k, int64_t H, float* out, cudaStream_t stream = nullptr);

// out [rows, H] += sigmoid(gate[r]) * y[r] (a shared expert's output under its gate, Qwen2-MoE).
core::Status add_sigmoid_gated_rows(const float* gate, const float* y, int64_t rows, int64_t H, float* out,
                                    cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda

// The step between the fused Q/K/V projection and attention on the GPU, in one kernel: the
// projection's bias (Qwen2), the per-head q/k RMSNorm (Qwen3), RoPE on q and k, then q to its own
// buffer and k, v into their slots of the paged KV cache (rows of any KvDtype: f32, IEEE half rounded
// once, or int8 / fp8 codes with a scale per token and KV head, quantized as kernels/ref/kv_quant.h
// does): "RoPE fused with the KV-cache write" of issue "CUDA backend". The same arithmetic as the
// CPU path (model/cpu_model.cc layer_forward): kernels/ref rmsnorm and rope, the RoPE angle and its sine
// and cosine in double, the rotation in f32 without FMA. Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::cuda {

// Device pointers; shapes in the comments (Q = num_heads * head_dim, KV = num_kv_heads * head_dim).
struct QkvRopeKvWrite {
    const float* qkv = nullptr;          // [num_tokens, Q + 2 KV]: q heads, k heads, v heads
    const float* bias = nullptr;         // [Q + 2 KV], or null
    const float* q_norm = nullptr;       // [head_dim] weight of q's per-head RMSNorm, or null
    const float* k_norm = nullptr;       // [head_dim], or null
    float eps = 0.0f;                    // of the q/k norms
    const int32_t* positions = nullptr;  // [num_tokens]
    const int64_t* slots = nullptr;      // [num_tokens] cache row of each token's k and v
    const double* inv_freq = nullptr;    // [head_dim / 2]
    float* q_out = nullptr;              // [num_tokens, num_heads, head_dim]
    void* k_cache = nullptr;             // [num_slots] rows of dtype (kernels/kernel_params.h)
    void* v_cache = nullptr;             // same
    KvDtype dtype = KvDtype::kF32;
    int64_t num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
};

// kInvalidArgument for bad sizes (head_dim even, at most 256) or null pointers. Slots are the
// caller's invariant (checked on the host against the pool when the batch is built).
core::Status qkv_rope_kv_write(const QkvRopeKvWrite& a, cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda

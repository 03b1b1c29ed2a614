// Linear layers on the CPU: a weight matrix bound once, at load time, to the kernel that multiplies
// it (kernels/cpu/matmul.h, at the ISA picked from CPUID or forced by the caller), so the per-call
// path does no lookups. Quantized weights multiply activations rounded to 8-bit blocks (ActQ8 /
// ActQ8K, as llama.cpp does; I8 weights: whole tokens, ActI8Row, then times the weights' row scale)
// unless f32_activations asks for the reference path, which dequantizes
// each weight row to f32 and matches a float reference to rounding (kernels::ref::matmul_tile).
// Work is split along output rows (slices start at multiples of 32; one token tile: guided slices
// that shrink toward the end of the op) and token tiles only, so results do not depend on the thread
// count.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/transformer.h"

namespace kiln::ops {

struct LinearOptions {
    kernels::cpu::Isa isa = kernels::cpu::best_isa();
    // Quantized weights times f32 activations (the scalar reference path): slow, but equal to a float
    // forward pass up to rounding. Float weights (F32/F16/BF16) always use f32 activations.
    bool f32_activations = false;
    // Repack the weights at load where this ISA has a packed kernel (kernels/cpu/matmul.h,
    // PackedMatmulKernel: the integer layouts give the row kernels' bits, the float panels and
    // K-quants agree within rounding). The packed copy is new memory; the original is needed only
    // where something else reads it (a tied embedding's rows), and model::create_model releases it
    // otherwise.
    bool pack = true;
    // Packs over this pool's threads (32-row slices) when given; the packed bytes are the same.
    core::ThreadPool* pool = nullptr;
};

struct Linear {
    kernels::ref::WeightView w;                          // [rows, cols] as stored; data null when packed
    const kernels::MatmulKernel* kernel = nullptr;  // nullptr: the f32 reference path
    kernels::cpu::Isa isa = kernels::cpu::Isa::kRef;     // the ISA of `kernel`
    const kernels::PackedMatmulKernel* packed_kernel = nullptr;  // with `packed`: used instead of kernel->gemm
    std::shared_ptr<const uint8_t> packed;                            // the repacked weights, or null
};

// What make_linear would build, without building it: the kernel (nullptr: the f32 reference path),
// its ISA, and the packed kernel and bytes when the weights are repacked at load.
struct LinearPlan {
    const kernels::MatmulKernel* kernel = nullptr;
    kernels::cpu::Isa isa = kernels::cpu::Isa::kRef;
    const kernels::PackedMatmulKernel* packed_kernel = nullptr;
    size_t packed_bytes = 0;
};
core::Result<LinearPlan> plan_linear(const kernels::ref::WeightView& w, const LinearOptions& options);

// kUnsupported when the CPU lacks options.isa or no path handles the weight type.
core::Result<Linear> make_linear(const kernels::ref::WeightView& w, const LinearOptions& options);

// Weights that read the same input fused into one repacked matrix at load: Q, K and V (interleave
// 0: their rows one after the other, so y is [Q | K | V] as linear_group writes it), or gate and up
// (interleave kSwigluBlock: blocks of that many rows from each part in turn, for
// linear_swiglu_fused). One matrix means one input quantization, one task list and one weight
// stream per task. Only when every part has the same dtype and width, no I8 row scales, rows a
// multiple of `interleave` (when > 0), and make_linear would repack it (the packed copy owns the
// bytes; the parts' own data is not referenced afterwards); std::nullopt otherwise (the caller keeps
// the parts apart: linear_group / linear_swiglu). Per row the arithmetic is the parts' own, so the
// results are bit-identical to theirs.
inline constexpr int64_t kSwigluBlock = 32;
core::Result<std::optional<Linear>> fuse_linears(std::span<const kernels::ref::WeightView> parts, int64_t interleave,
                                                 const LinearOptions& options);

// "f32", "bf16", "int8 per 32", "int8 per 256", "int8 per token".
const char* act_format_name(kernels::ActFormat f);

// y [m, l.w.rows] = x [m, l.w.cols] @ W^T (+ bias [l.w.rows]). scratch holds the quantized
// activations; it grows to the largest m seen and is reused, so steady-state decode allocates nothing.
core::Status linear(core::ThreadPool& pool, const float* x, int64_t m, const Linear& l, const float* bias, float* y,
                    std::vector<uint8_t>& scratch);

// Several linears over the same input, written side by side: y [m, sum of rows], part p filling the
// columns after those of parts 0..p-1 (e.g. Q, K and V; or gate and up). The input is quantized
// once per activation format and all parts run as one parallel job, which is what fusing the
// matrices would buy, without copying weights of possibly different types.
struct LinearPart {
    const Linear* linear = nullptr;
    const float* bias = nullptr;  // [linear->w.rows] or nullptr
};
core::Status linear_group(core::ThreadPool& pool, const float* x, int64_t m, std::span<const LinearPart> parts,
                          float* y, std::vector<uint8_t>& scratch);

// The FFN's gate and up projections with SwiGLU in their epilogue: gate_up [m, 2F] = [x W_gate^T |
// x W_up^T] (as linear_group), and act [m, F] = silu(gate) * up, each task applying it to the rows
// of both that it has just computed (kernels/cpu/activation.h at gate.isa: kRef on the f32 reference
// path), instead of a separate
// pass over gate_up. Bit-identical to linear_group followed by silu_mul_rows at that ISA.
// gate and up must have the same shape (kInvalidArgument otherwise).
core::Status linear_swiglu(core::ThreadPool& pool, const float* x, int64_t m, const Linear& gate, const Linear& up,
                           float* gate_up, float* act, std::vector<uint8_t>& scratch);

// The same over gate and up fused by fuse_linears(.., kSwigluBlock, ..) (2F rows, F a multiple of
// kSwigluBlock): gate_up [m, 2F] holds blocks of 32 gate then 32 up columns in turn, act [m, F] =
// silu(gate) * up. Bit-identical to linear_swiglu on the unfused parts.
core::Status linear_swiglu_fused(core::ThreadPool& pool, const float* x, int64_t m, const Linear& gate_up,
                                 float* gate_up_out, float* act, std::vector<uint8_t>& scratch);

}  // namespace kiln::ops

// embedding.h: one block per token, threads across the row (bf16 -> f32 widens exactly).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/embedding.h"

namespace kiln::kernels::cuda {
namespace {

template <class T, class O>
__global__ void embedding_kernel(const T* table, int64_t vocab, int64_t hidden, const int32_t* ids, O* out) {
    const int32_t id = ids[blockIdx.x];
    O* dst = out + int64_t(blockIdx.x) * hidden;  // [hidden]
    const bool valid = id >= 0 && id < vocab;
    const T* src = table + (valid ? int64_t(id) : 0) * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
        dst[i] = detail::from_float<O>(valid ? detail::to_float(src[i]) : 0.0f);
}

template <class T, class O>
core::Status launch(const T* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n, O* out,
                    cudaStream_t stream) {
    if (vocab <= 0 || hidden <= 0 || n < 0 || n > int64_t(0x7fffffff))
        return core::error(core::StatusCode::kInvalidArgument)
               << "embedding: vocab " << vocab << ", hidden " << hidden << ", tokens " << n;
    if (n == 0) return core::Status::ok();
    if (!table || !ids || !out) return core::error(core::StatusCode::kInvalidArgument) << "embedding: null pointer";
    embedding_kernel<T, O><<<unsigned(n), 256, 0, stream>>>(table, vocab, hidden, ids, out);
    return launch_status("embedding_kernel");
}

}  // namespace

core::Status embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n, float* out,
                       cudaStream_t stream) {
    return launch(table, vocab, hidden, ids, n, out, stream);
}

core::Status embedding(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                       __nv_bfloat16* out, cudaStream_t stream) {
    return launch(table, vocab, hidden, ids, n, out, stream);
}

core::Status embedding(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                       float* out, cudaStream_t stream) {
    return launch(table, vocab, hidden, ids, n, out, stream);
}

}  // namespace kiln::kernels::cuda

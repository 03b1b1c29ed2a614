// kiln's GPU benchmarks for the device check (issue "CUDA backend"; scripts/device-check runs it): the
// device's memory read bandwidth, measured first, then each kernel at llama-3-8b shapes as GB/s
// against that bandwidth (decode: quantized GEMV, bf16 GEMM at m = 1, split-KV attention) or TFLOP/s
// (prefill GEMM, m = 2048; the block GEMM at 512 / 2048 tokens; prefill attention, beside
// scripts/sdpa_bench.py's PyTorch figures), and device sampling's time per step. Buffers are zero-filled
// (timing does not depend on the values). One JSON object per line on stdout, a table on stderr. Not a test: nothing
// here is registered with CTest.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_quant.h"
#include "kernels/cuda/gemv_quant.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/timing.h"

namespace kc = kiln::kernels::cuda;
using kiln::core::Status;

namespace {

double g_read_gbps = 0;

void report(const std::string& bench, double ms, double bytes, double flops) {
    const double gbps = bytes / (ms * 1e6), tflops = flops / (ms * 1e9);
    std::printf("{\"bench\": \"%s\", \"ms\": %.6f, \"gbps\": %.2f, \"pct_of_read_bw\": %.1f, \"tflops\": %.2f}\n",
                bench.c_str(), ms, gbps, 100.0 * gbps / g_read_gbps, tflops);
    std::fprintf(stderr, "| %-44s | %9.4f | %8.1f | %5.1f%% | %7.2f |\n", bench.c_str(), ms, gbps,
                 100.0 * gbps / g_read_gbps, tflops);
}

kiln::core::Result<kc::DeviceBuffer> zeros(size_t bytes) {
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer b, kc::DeviceBuffer::allocate(bytes));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemset(b.data(), 0, bytes));
    return b;
}

kiln::core::Result<kc::DeviceBuffer> upload_ints(const std::vector<int32_t>& v) {
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer b, kc::DeviceBuffer::allocate(v.size() * 4));
    KILN_RETURN_IF_ERROR(b.copy_from_host(v.data(), v.size() * 4));
    return b;
}

Status bench_gemv() {
    for (kiln::core::DType type : {kiln::core::DType::kQ8_0, kiln::core::DType::kQ4_0, kiln::core::DType::kQ4_1}) {
        for (int64_t n : {4096, 14336}) {
            const int64_t k = 4096;
            const size_t wbytes = size_t(n * k / 32) * kiln::core::dtype_info(type).block_bytes;
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer w, zeros(wbytes));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer x, zeros(size_t(k) * 4));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer y, zeros(size_t(n) * 4));
            KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&] {
                                      return kc::gemv_blocks(type, w.data(), n, k, x.as<float>(), 1, y.as<float>());
                                  }));
            report("gemv_" + std::string(kiln::core::dtype_name(type)) + "/" + std::to_string(n) + "x4096/m:1", ms,
                   double(wbytes), 2.0 * double(n * k));
        }
    }
    return Status::ok();
}

Status bench_gemm() {
    KILN_ASSIGN_OR_RETURN(auto gemm, kc::Gemm::create());
    for (int64_t m : {1, 2048}) {
        for (int64_t n : {4096, 14336}) {
            const int64_t k = 4096;
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer x, zeros(size_t(m * k) * 2));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer w, zeros(size_t(n * k) * 2));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer y, zeros(size_t(m * n) * 2));
            KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&] {
                                      return gemm->run(x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(),
                                                       y.as<__nv_bfloat16>(), m, n, k);
                                  }));
            report("gemm_bf16/m:" + std::to_string(m) + "/" + std::to_string(n) + "x4096", ms,
                   double(n * k + m * k + m * n) * 2, 2.0 * double(m * n * k));
        }
    }
    return Status::ok();
}

// The block GEMM of prompt-sized steps (tensor cores, f16 activations) at 512 and 2048 tokens.
Status bench_gemm_blocks() {
    for (kiln::core::DType type : {kiln::core::DType::kQ8_0, kiln::core::DType::kQ4_0, kiln::core::DType::kQ4_1}) {
        for (int64_t m : {512, 2048}) {
            const int64_t n = 14336, k = 4096;
            const size_t wbytes = size_t(n * k / 32) * kiln::core::dtype_info(type).block_bytes;
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer w, zeros(wbytes));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer x, zeros(size_t(m * k) * 2));
            KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer y, zeros(size_t(m * n) * 4));
            KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&] {
                                      return kc::gemm_blocks(type, w.data(), n, k, x.as<__half>(), m, y.as<float>());
                                  }));
            report("gemm_" + std::string(kiln::core::dtype_name(type)) + "/m:" + std::to_string(m) + "/14336x4096", ms,
                   double(wbytes) + double(m * k) * 2 + double(m * n) * 4, 2.0 * double(m * n * k));
        }
    }
    return Status::ok();
}

// Sampling 64 rows of a 128256-token vocabulary (llama-3) with top-p 0.9 (and top-k 50 on half the
// rows): the cost per decode step of a batch of 64 sampling requests.
Status bench_sample() {
    const int64_t rows = 64, vocab = 128256;
    std::vector<float> logits = std::vector<float>(size_t(rows * vocab));
    uint32_t state = 1;
    for (float& l : logits) {  // a spread of logits (the selections' cost depends on the values)
        state = state * 1664525u + 1013904223u;
        l = float(state >> 8) * (8.0f / 16777216.0f);
    }
    auto params = std::vector<kiln::kernels::SampleRow>(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
        params[size_t(r)].temperature = 0.8f;
        params[size_t(r)].top_p = 0.9f;
        params[size_t(r)].top_k = r % 2 ? 50 : 0;
        params[size_t(r)].u = 0.5;
    }
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer src, kc::DeviceBuffer::allocate(logits.size() * 4));
    KILN_RETURN_IF_ERROR(src.copy_from_host(logits.data(), logits.size() * 4));
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer work, zeros(logits.size() * 4));
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dp, kc::DeviceBuffer::allocate(params.size() * sizeof(params[0])));
    KILN_RETURN_IF_ERROR(dp.copy_from_host(params.data(), params.size() * sizeof(params[0])));
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer ids, zeros(size_t(rows) * 4));
    KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&]() -> Status {  // the kernel works in place
                              KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(work.data(), src.data(), logits.size() * 4,
                                                                        cudaMemcpyDeviceToDevice));
                              return kc::sample_rows(work.as<float>(), rows, vocab,
                                                     dp.as<kiln::kernels::SampleRow>(), nullptr, 0,
                                                     ids.as<int32_t>());
                          }));
    report("sample/top_p:0.9/rows:64/vocab:128256 (incl. copy)", ms, 2.0 * double(logits.size()) * 4, 0.0);
    return Status::ok();
}

// A split-KV batch over an f16 pool of llama-3-8b heads (32 query heads over 8 KV heads of 128).
kc::DecodeAttentionBatch f16_batch(const kc::DeviceBuffer& k, const kc::DeviceBuffer& v, int64_t block,
                                   const kc::DeviceBuffer& table, int64_t blocks_per_seq, const kc::DeviceBuffer& lens,
                                   int64_t num_seqs, int64_t max_kv_len) {
    kc::DecodeAttentionBatch b;
    b.k = k.data();
    b.v = v.data();
    b.dtype = kiln::kernels::KvDtype::kF16;
    b.block_size = block;
    b.block_tables = table.as<int32_t>();
    b.max_blocks_per_seq = blocks_per_seq;
    b.kv_lens = lens.as<int32_t>();
    b.num_seqs = num_seqs;
    b.num_heads = 32;
    b.num_kv_heads = 8;
    b.head_dim = 128;
    b.max_kv_len = max_kv_len;
    return b;
}

Status bench_decode_attention() {
    const int64_t heads = 32, kv_heads = 8, dim = 128, kv_len = 4096, block = 16;
    for (int64_t seqs : {1, 64}) {
        const int64_t blocks_per_seq = kv_len / block, num_blocks = seqs * blocks_per_seq;
        const size_t pool_bytes = size_t(num_blocks * block * kv_heads * dim) * 2;  // f16
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer k, zeros(pool_bytes));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer v, zeros(pool_bytes));
        std::vector<int32_t> table = std::vector<int32_t>(size_t(num_blocks));
        const std::vector<int32_t> lens = std::vector<int32_t>(size_t(seqs), int32_t(kv_len));
        for (int64_t i = 0; i < num_blocks; ++i) table[size_t(i)] = int32_t(i);
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dt, upload_ints(table));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dl, upload_ints(lens));
        const kc::DecodeAttentionBatch b = f16_batch(k, v, block, dt, blocks_per_seq, dl, seqs, kv_len);
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer q, zeros(size_t(seqs * heads * dim) * 4));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer out, zeros(size_t(seqs * heads * dim) * 4));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer ws, zeros(kc::decode_attention_workspace_floats(b) * 4));
        KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&] {
                                  return kc::decode_attention(q.as<float>(), b, out.as<float>(), ws.as<float>());
                              }));
        report("decode_attention_f16/32x8x128/kv:4096/seqs:" + std::to_string(seqs), ms, 2.0 * double(pool_bytes),
               4.0 * double(seqs * heads * kv_len * dim));
    }
    return Status::ok();
}

// Prefill attention, a causal prompt of T tokens of one sequence at llama-3-8b heads, both ways the
// model runs it (model/cuda/cuda_model.cc): the tensor-core kernel (f16 pools, the default) and the
// fallback of one split-KV query per prompt token (decode_attention with table_rows). FLOPs counted as the useful
// causal work, 4 * heads * dim * T (T + 1) / 2, the count scripts/sdpa_bench.py uses for PyTorch's
// scaled_dot_product_attention on the same shapes.
Status bench_prefill_attention() {
    const int64_t heads = 32, kv_heads = 8, dim = 128, block = 16;
    for (int64_t T : {512, 2048}) {
        const int64_t blocks = T / block;
        const size_t pool_bytes = size_t(T * kv_heads * dim) * 2;  // f16
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer k, zeros(pool_bytes));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer v, zeros(pool_bytes));
        std::vector<int32_t> table = std::vector<int32_t>(size_t(blocks)), lens = std::vector<int32_t>(size_t(T));
        for (int64_t i = 0; i < blocks; ++i) table[size_t(i)] = int32_t(i);
        for (int64_t t = 0; t < T; ++t) lens[size_t(t)] = int32_t(t + 1);
        const std::vector<int32_t> rows = std::vector<int32_t>(size_t(T), 0);
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dt, upload_ints(table));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dl, upload_ints(lens));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dr, upload_ints(rows));
        kc::DecodeAttentionBatch b = f16_batch(k, v, block, dt, blocks, dl, T, T);
        b.table_rows = dr.as<int32_t>();
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer q, zeros(size_t(T * heads * dim) * 4));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer out, zeros(size_t(T * heads * dim) * 4));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer ws, zeros(kc::decode_attention_workspace_floats(b) * 4));
        const double flops = 4.0 * double(heads * dim) * double(T) * double(T + 1) / 2.0;
        KILN_ASSIGN_OR_RETURN(const double ms, kc::median_ms([&] {
                                  return kc::decode_attention(q.as<float>(), b, out.as<float>(), ws.as<float>());
                              }));
        report("prefill_attention_splitkv_f16/32x8x128/causal/T:" + std::to_string(T), ms, 2.0 * double(pool_bytes),
               flops);
        // The tensor-core kernel the model runs on f16 pools: one sequence in tiles of 64 queries.
        const int64_t tiles = T / kc::kPrefillTileQueries;
        std::vector<int32_t> tile_q0 = std::vector<int32_t>(size_t(tiles));
        for (int64_t i = 0; i < tiles; ++i) tile_q0[size_t(i)] = int32_t(i * kc::kPrefillTileQueries);
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dq0, upload_ints(tile_q0));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dseq, upload_ints(std::vector<int32_t>(size_t(tiles), 0)));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dzero, upload_ints({0}));
        KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer dnq, upload_ints({int32_t(T)}));
        kc::PrefillAttentionBatch p;
        p.k = k.data();
        p.v = v.data();
        p.block_size = block;
        p.block_tables = dt.as<int32_t>();
        p.max_blocks_per_seq = blocks;
        p.q_starts = dzero.as<int32_t>();
        p.positions0 = dzero.as<int32_t>();
        p.num_queries = dnq.as<int32_t>();
        p.tile_seqs = dseq.as<int32_t>();
        p.tile_q0 = dq0.as<int32_t>();
        p.num_tiles = tiles;
        p.num_heads = heads;
        p.num_kv_heads = kv_heads;
        p.head_dim = dim;
        KILN_ASSIGN_OR_RETURN(const double tc_ms,
                              kc::median_ms([&] { return kc::prefill_attention(q.as<float>(), p, out.as<float>()); }));
        report("prefill_attention_tc_f16/32x8x128/causal/T:" + std::to_string(T), tc_ms, 2.0 * double(pool_bytes),
               flops);
    }
    return Status::ok();
}

}  // namespace

int main() {
    if (kc::device_count() == 0) {
        std::fprintf(stderr, "gpu_bench: no CUDA device\n");
        return 2;
    }
    auto info = kc::device_info(0);
    if (!info.is_ok()) {
        std::fprintf(stderr, "gpu_bench: %s\n", info.status().to_string().c_str());
        return 1;
    }
    auto bw = kc::read_bandwidth_gbps();
    if (!bw.is_ok()) {
        std::fprintf(stderr, "gpu_bench: %s\n", bw.status().to_string().c_str());
        return 1;
    }
    g_read_gbps = *bw;
    std::printf("{\"bench\": \"device\", \"name\": \"%s\", \"sm\": %d%d, \"sms\": %d, \"read_gbps\": %.1f}\n",
                info->name.c_str(), info->sm_major, info->sm_minor, info->num_sms, g_read_gbps);
    std::fprintf(stderr, "%s (sm_%d%d, %d SMs): read bandwidth %.1f GB/s (best of 10 passes over 4 GiB)\n\n",
                 info->name.c_str(), info->sm_major, info->sm_minor, info->num_sms, g_read_gbps);
    std::fprintf(stderr, "| %-44s | %9s | %8s | %6s | %7s |\n|---|---|---|---|---|\n", "bench", "ms", "GB/s", "% bw",
                 "TFLOP/s");
    for (Status (*b)() :
         {bench_gemv, bench_gemm, bench_gemm_blocks, bench_decode_attention, bench_prefill_attention, bench_sample}) {
        const Status st = b();
        if (!st.is_ok()) {
            std::fprintf(stderr, "gpu_bench: %s\n", st.to_string().c_str());
            return 1;
        }
    }
    return 0;
}

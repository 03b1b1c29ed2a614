// Threaded ops (src/ops/transformer_ops) against the scalar references (kernels/ref/transformer) over
// odd shapes, every weight dtype the models use and 1 vs 3 threads. Splitting never changes the
// arithmetic, so results must match bit for bit; the references themselves are checked against
// double-precision loops over fully dequantized weights.
#include "ops/transformer_ops.h"

#include <gtest/gtest.h>

#include "ops/linear.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu/activation.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/transformer.h"

namespace kiln::ops {
namespace {

using core::DType;
namespace ref = kernels::ref;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

void put_f16(uint8_t* p, float v) {
    uint16_t h = core::f32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// Random weights of [rows, cols] in `dtype`, with block scales kept small and finite.
std::vector<uint8_t> random_weights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
    const auto& info = core::dtype_info(dtype);
    size_t bytes = size_t(*core::dtype_bytes(dtype, uint64_t(rows * cols)));
    std::vector<uint8_t> buf(bytes);
    std::mt19937 rng(seed);
    if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
        std::vector<float> v = randn(size_t(rows * cols), seed, 0.5f);
        for (size_t i = 0; i < v.size(); ++i) {
            if (dtype == DType::kF32) std::memcpy(&buf[i * 4], &v[i], 4);
            if (dtype == DType::kF16) put_f16(&buf[i * 2], v[i]);
            if (dtype == DType::kBF16) {
                uint16_t h = core::f32_to_bf16(v[i]);
                std::memcpy(&buf[i * 2], &h, 2);
            }
        }
        return buf;
    }
    for (uint8_t& b : buf) b = uint8_t(rng());
    for (size_t off = 0; off < bytes; off += info.block_bytes) {
        uint8_t* blk = &buf[off];
        switch (dtype) {
            case DType::kQ8_0:
            case DType::kQ4_0:
                put_f16(blk, 0.01f);
                break;
            case DType::kQ4_1:
                put_f16(blk, 0.01f);
                put_f16(blk + 2, -0.05f);
                break;
            case DType::kQ4_K:
                put_f16(blk, 0.01f);
                put_f16(blk + 2, 0.002f);
                break;
            case DType::kQ6_K:
                put_f16(blk + 208, 0.001f);
                break;
            default:
                ADD_FAILURE() << "no generator for " << core::dtype_name(dtype);
        }
    }
    return buf;
}

struct MatmulCase {
    DType dtype;
    int64_t m, n, k;
};

TEST(TransformerOps, MatmulMatchesReference) {
    const DType dtypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                            DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K};
    core::ThreadPool pool1(1), pool3(3);
    uint32_t seed = 1;
    for (DType dt : dtypes) {
        const int64_t block = core::dtype_info(dt).block_size;
        for (int64_t m : {1, 7, 33}) {
            for (int64_t n : {1, 7, 127}) {
                for (int64_t kb : {1, 3}) {
                    const int64_t k = dt == DType::kF32 || block == 1 ? (kb == 1 ? 7 : 127) : block * kb;
                    ++seed;
                    std::vector<uint8_t> wbuf = random_weights(dt, n, k, seed);
                    WeightView w = ref::make_weight_view(wbuf.data(), dt, n, k);
                    std::vector<float> x = randn(size_t(m * k), seed + 1000);  // [m, k]
                    std::vector<float> bias = randn(size_t(n), seed + 2000);   // [n]
                    std::vector<float> want(size_t(m * n)), got1(size_t(m * n)), got3(size_t(m * n));
                    ref::matmul(x.data(), w, bias.data(), want.data(), m);
                    ASSERT_TRUE(matmul(pool1, x.data(), m, w, bias.data(), got1.data()).is_ok());
                    ASSERT_TRUE(matmul(pool3, x.data(), m, w, bias.data(), got3.data()).is_ok());
                    ASSERT_EQ(0, std::memcmp(want.data(), got1.data(), want.size() * 4))
                        << core::dtype_name(dt) << " seed " << seed;
                    ASSERT_EQ(0, std::memcmp(want.data(), got3.data(), want.size() * 4))
                        << core::dtype_name(dt) << " seed " << seed;
                    // The reference against a double-precision product of the dequantized matrix.
                    std::vector<float> wf(size_t(n * k));
                    ASSERT_TRUE(ref::dequantize_row(dt, wbuf.data(), wf.data(), n * k).is_ok());
                    double max_err = 0;
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j) {
                            double acc = bias[size_t(j)], mag = std::abs(acc);  // error relative to sum |terms|
                            for (int64_t p = 0; p < k; ++p) {
                                const double term = double(x[size_t(i * k + p)]) * wf[size_t(j * k + p)];
                                acc += term;
                                mag += std::abs(term);
                            }
                            max_err = std::max(max_err, std::abs(acc - want[size_t(i * n + j)]) / (1 + mag));
                        }
                    EXPECT_LT(max_err, 1e-5) << core::dtype_name(dt) << " m" << m << " n" << n << " k" << k;
                }
            }
        }
    }
}

// ops::linear_group (parts of different types and activation formats, with biases, side by side)
// equals each part run alone by ops::linear, for every ISA this CPU runs, with 1 and 3 threads; and
// each part's kernel output is the quantized-activation product (checked against the f32 reference
// within the 8-bit rounding of the activations).
TEST(TransformerOps, LinearGroupEqualsSeparateLinears) {
    const struct {
        DType dtype;
        int64_t rows;
    } spec[] = {{DType::kQ4_1, 70}, {DType::kF16, 9}, {DType::kQ6_K, 33}, {DType::kQ8_0, 16}};
    const int64_t k = 512;
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::vector<float>> biases;
    int64_t total = 0;
    for (size_t i = 0; i < std::size(spec); ++i) {
        bufs.push_back(random_weights(spec[i].dtype, spec[i].rows, k, 50 + uint32_t(i)));
        biases.push_back(randn(size_t(spec[i].rows), 60 + uint32_t(i)));
        total += spec[i].rows;
    }
    for (kernels::cpu::Isa isa : kernels::cpu::kAllIsas) {
        if (!kernels::cpu::isa_supported(isa)) continue;
        for (bool f32 : {false, true}) {
            LinearOptions o;
            o.isa = isa;
            o.f32_activations = f32;
            std::vector<Linear> lin;
            for (size_t i = 0; i < std::size(spec); ++i) {
                auto l = make_linear(ref::make_weight_view(bufs[i].data(), spec[i].dtype, spec[i].rows, k), o);
                ASSERT_TRUE(l.is_ok()) << l.status().to_string();
                lin.push_back(*l);
            }
            std::vector<LinearPart> parts;
            for (size_t i = 0; i < lin.size(); ++i) parts.push_back({&lin[i], i % 2 ? nullptr : biases[i].data()});
            for (int threads : {1, 3}) {
                core::ThreadPool pool(threads);
                for (int64_t m : {1, 5, 40}) {
                    std::vector<float> x = randn(size_t(m * k), uint32_t(m));  // [m, k]
                    std::vector<float> y(size_t(m * total), NAN);              // [m, total]
                    std::vector<uint8_t> scratch;
                    ASSERT_TRUE(linear_group(pool, x.data(), m, parts, y.data(), scratch).is_ok());
                    int64_t col = 0;
                    for (size_t i = 0; i < lin.size(); ++i) {
                        const int64_t n = lin[i].w.rows;
                        std::vector<float> alone(size_t(m * n));  // [m, n]
                        ASSERT_TRUE(linear(pool, x.data(), m, lin[i], parts[i].bias, alone.data(), scratch).is_ok());
                        for (int64_t t = 0; t < m; ++t) {
                            for (int64_t r = 0; r < n; ++r) {
                                ASSERT_EQ(y[size_t(t * total + col + r)], alone[size_t(t * n + r)])
                                    << kernels::cpu::isa_name(isa) << " f32 " << f32 << " part " << i << " m " << m
                                    << " t " << t << " r " << r;
                            }
                        }
                        col += n;
                    }
                }
            }
        }
    }
}

TEST(TransformerOps, SiluMulRowsMatchesReference) {
    for (int threads : {1, 3}) {
        core::ThreadPool pool(threads);
        for (int64_t m : {1, 2, 5}) {
            for (int64_t n : {1, 7, 5000}) {
                std::vector<float> gu = randn(size_t(m * 2 * n), uint32_t(m * n), 2.0f);  // [m, 2n]
                std::vector<float> got(size_t(m * n)), want(size_t(m * n));
                ASSERT_TRUE(silu_mul_rows(pool, gu.data(), got.data(), m, n, kernels::cpu::Isa::kRef).is_ok());
                for (int64_t t = 0; t < m; ++t)
                    ref::silu_mul(&gu[size_t(t * 2 * n)], &gu[size_t(t * 2 * n + n)], &want[size_t(t * n)], n);
                ASSERT_EQ(got, want) << "threads " << threads << " m " << m << " n " << n;
            }
        }
    }
}

// ops::linear_swiglu (SwiGLU in the gate/up epilogue) equals linear_group over {gate, up} followed
// by silu_mul_rows at gate's ISA (kRef on the f32 reference path), bit for bit, for packed and unpacked weight types, row counts
// that end inside a 32-row group, 1 and 3 threads and the f32 reference path.
TEST(TransformerOps, LinearSwigluEqualsGroupThenSilu) {
    const int64_t k = 256;
    for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kQ4_K}) {
        for (int64_t F : {83, 172}) {
            std::vector<uint8_t> gbuf = random_weights(dt, F, k, 70), ubuf = random_weights(dt, F, k, 71);
            for (kernels::cpu::Isa isa : kernels::cpu::kAllIsas) {
                if (!kernels::cpu::isa_supported(isa)) continue;
                for (bool f32 : {false, true}) {
                    LinearOptions o;
                    o.isa = isa;
                    o.f32_activations = f32;
                    auto gate = make_linear(ref::make_weight_view(gbuf.data(), dt, F, k), o);
                    auto up = make_linear(ref::make_weight_view(ubuf.data(), dt, F, k), o);
                    ASSERT_TRUE(gate.is_ok() && up.is_ok());
                    const LinearPart parts[] = {{&*gate, nullptr}, {&*up, nullptr}};
                    for (int threads : {1, 3}) {
                        core::ThreadPool pool(threads);
                        for (int64_t m : {1, 5, 40}) {
                            std::vector<float> x = randn(size_t(m * k), uint32_t(m + 5));
                            std::vector<float> gu(size_t(m * 2 * F), NAN), act(size_t(m * F), NAN);
                            std::vector<float> gu_want(gu.size()), act_want(act.size());
                            std::vector<uint8_t> scratch;
                            ASSERT_TRUE(linear_group(pool, x.data(), m, parts, gu_want.data(), scratch).is_ok());
                            ASSERT_TRUE(silu_mul_rows(pool, gu_want.data(), act_want.data(), m, F, gate->isa).is_ok());
                            ASSERT_TRUE(
                                linear_swiglu(pool, x.data(), m, *gate, *up, gu.data(), act.data(), scratch).is_ok());
                            const char* what = kernels::cpu::isa_name(isa);
                            ASSERT_EQ(0, std::memcmp(gu.data(), gu_want.data(), gu.size() * 4))
                                << core::dtype_name(dt) << " " << what << " f32 " << f32 << " m " << m;
                            ASSERT_EQ(0, std::memcmp(act.data(), act_want.data(), act.size() * 4))
                                << core::dtype_name(dt) << " " << what << " f32 " << f32 << " m " << m;
                        }
                    }
                }
            }
        }
    }
    // gate and up of different heights
    LinearOptions o;
    std::vector<uint8_t> a = random_weights(DType::kF32, 8, 16, 1), b = random_weights(DType::kF32, 9, 16, 2);
    auto ga = make_linear(ref::make_weight_view(a.data(), DType::kF32, 8, 16), o);
    auto ub = make_linear(ref::make_weight_view(b.data(), DType::kF32, 9, 16), o);
    ASSERT_TRUE(ga.is_ok() && ub.is_ok());
    core::ThreadPool pool(1);
    std::vector<float> x(16, 1.0f), gu(2 * 9), act(9);
    std::vector<uint8_t> scratch;
    EXPECT_EQ(linear_swiglu(pool, x.data(), 1, *ga, *ub, gu.data(), act.data(), scratch).code(),
              core::StatusCode::kInvalidArgument);
}

// Q/K/V and gate/up fused into one repacked matrix (fuse_linears): linear over the fused Q/K/V and
// linear_swiglu_fused give the unfused parts' bits (gate_up de-interleaved from its 32-column
// blocks), for every type with a packed kernel at every SIMD level, decode and prefill tiles, 1 and 3
// threads, biases; and the cases that cannot fuse say so (std::nullopt) instead of fusing.
TEST(TransformerOps, FusedLinearsEqualTheirParts) {
    const int64_t k = 256, Q = 96, KV = 32, F = 96;
    int fused_types = 0;  // (type, level) pairs that fused and were compared
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                     DType::kQ6_K}) {
        std::vector<uint8_t> qb = random_weights(dt, Q, k, 80), kb = random_weights(dt, KV, k, 81),
                             vb = random_weights(dt, KV, k, 82), gb = random_weights(dt, F, k, 83),
                             ub = random_weights(dt, F, k, 84);
        const ref::WeightView qkv_views[] = {ref::make_weight_view(qb.data(), dt, Q, k),
                                             ref::make_weight_view(kb.data(), dt, KV, k),
                                             ref::make_weight_view(vb.data(), dt, KV, k)};
        const ref::WeightView gu_views[] = {ref::make_weight_view(gb.data(), dt, F, k),
                                            ref::make_weight_view(ub.data(), dt, F, k)};
        const std::vector<float> bias = randn(size_t(Q + 2 * KV), 85);
        for (kernels::cpu::Isa isa :
             {kernels::cpu::Isa::kAvx2, kernels::cpu::Isa::kAvxVnni, kernels::cpu::Isa::kAvx512,
              kernels::cpu::Isa::kAvx512Vnni}) {
            if (!kernels::cpu::isa_supported(isa)) continue;
            LinearOptions o;
            o.isa = isa;
            auto fq = fuse_linears(qkv_views, 0, o);
            auto fg = fuse_linears(gu_views, kSwigluBlock, o);
            ASSERT_TRUE(fq.is_ok() && fg.is_ok());
            const std::string what = std::string(core::dtype_name(dt)) + " " + kernels::cpu::isa_name(isa);
            auto plan = plan_linear(qkv_views[0], o);
            ASSERT_TRUE(plan.is_ok());
            ASSERT_EQ(fq->has_value(), plan->packed_kernel != nullptr) << what;
            ASSERT_EQ(fg->has_value(), plan->packed_kernel != nullptr) << what;
            if (!fq->has_value()) continue;
            ++fused_types;
            std::vector<Linear> parts;
            for (const ref::WeightView& v : qkv_views) parts.push_back(*make_linear(v, o));
            for (const ref::WeightView& v : gu_views) parts.push_back(*make_linear(v, o));
            const LinearPart qkv_parts[] = {
                {&parts[0], bias.data()}, {&parts[1], bias.data() + Q}, {&parts[2], bias.data() + Q + KV}};
            for (int threads : {1, 3}) {
                core::ThreadPool pool(threads);
                for (int64_t m : {1, 5, 40}) {
                    const std::vector<float> x = randn(size_t(m * k), uint32_t(m + 9));
                    std::vector<uint8_t> scratch;
                    std::vector<float> want(size_t(m * (Q + 2 * KV))), got(want.size(), NAN);
                    ASSERT_TRUE(linear_group(pool, x.data(), m, qkv_parts, want.data(), scratch).is_ok());
                    ASSERT_TRUE(linear(pool, x.data(), m, **fq, bias.data(), got.data(), scratch).is_ok());
                    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what << " qkv m " << m;
                    std::vector<float> gu_want(size_t(m * 2 * F)), act_want(size_t(m * F));
                    std::vector<float> gu(gu_want.size(), NAN), act(act_want.size(), NAN);
                    ASSERT_TRUE(
                        linear_swiglu(pool, x.data(), m, parts[3], parts[4], gu_want.data(), act_want.data(), scratch)
                            .is_ok());
                    ASSERT_TRUE(linear_swiglu_fused(pool, x.data(), m, **fg, gu.data(), act.data(), scratch).is_ok());
                    ASSERT_EQ(0, std::memcmp(act.data(), act_want.data(), act.size() * 4)) << what << " act m " << m;
                    for (int64_t t = 0; t < m; ++t) {
                        for (int64_t j = 0; j < F; ++j) {
                            const int64_t blk = j / kSwigluBlock, off = j % kSwigluBlock;
                            const float* row = gu.data() + t * 2 * F + blk * 2 * kSwigluBlock;
                            ASSERT_EQ(row[off], gu_want[size_t(t * 2 * F + j)]) << what << " gate " << j;
                            ASSERT_EQ(row[kSwigluBlock + off], gu_want[size_t(t * 2 * F + F + j)])
                                << what << " up " << j;
                        }
                    }
                }
            }
        }
    }
    // The comparisons above ran: every type packs at the AVX-512 levels; at AVX2 alone (e.g. an AMD
    // EPYC without AVX-512) only the integer ones Q8_0, Q4_0, Q4_1 do.
    if (kernels::cpu::isa_supported(kernels::cpu::Isa::kAvx512)) {
        EXPECT_GE(fused_types, 5);
    } else if (kernels::cpu::isa_supported(kernels::cpu::Isa::kAvx2)) {
        EXPECT_GE(fused_types, 3);
    }
    // Not fusable: mixed types, rows not a multiple of the interleave, the scalar level (never packs).
    std::vector<uint8_t> a = random_weights(DType::kQ8_0, 64, 256, 1), b = random_weights(DType::kQ4_0, 64, 256, 2);
    LinearOptions o;
    const ref::WeightView mixed[] = {ref::make_weight_view(a.data(), DType::kQ8_0, 64, 256),
                                     ref::make_weight_view(b.data(), DType::kQ4_0, 64, 256)};
    auto r = fuse_linears(mixed, 0, o);
    ASSERT_TRUE(r.is_ok());
    EXPECT_FALSE(r->has_value());
    const ref::WeightView odd[] = {ref::make_weight_view(a.data(), DType::kQ8_0, 48, 256),
                                   ref::make_weight_view(a.data(), DType::kQ8_0, 48, 256)};
    r = fuse_linears(odd, kSwigluBlock, o);
    ASSERT_TRUE(r.is_ok());
    EXPECT_FALSE(r->has_value());
    o.isa = kernels::cpu::Isa::kRef;
    const ref::WeightView same[] = {mixed[0], mixed[0]};
    r = fuse_linears(same, 0, o);
    ASSERT_TRUE(r.is_ok());
    EXPECT_FALSE(r->has_value());
}

TEST(TransformerOps, MatmulRejectsBadArguments) {
    core::ThreadPool pool(1);
    std::vector<uint8_t> wbuf(64);
    WeightView w{wbuf.data(), DType::kI32, 1, 16, 64};
    float x[16] = {}, y[1];
    EXPECT_EQ(matmul(pool, x, 1, w, nullptr, y).code(), core::StatusCode::kUnsupported);
    w.dtype = DType::kF32;
    w.row_bytes = 60;
    EXPECT_EQ(matmul(pool, x, 1, w, nullptr, y).code(), core::StatusCode::kInvalidArgument);
}

TEST(TransformerOps, RmsnormRopeSiluMatchReference) {
    core::ThreadPool pool3(3);
    for (int64_t m : {1, 7, 127}) {
        for (int64_t n : {8, 64, 130}) {
            std::vector<float> x = randn(size_t(m * n), uint32_t(m * n)), w = randn(size_t(n), 7);
            std::vector<float> want(x.size()), got(x.size());
            for (int64_t i = 0; i < m; ++i) ref::rmsnorm(&x[size_t(i * n)], w.data(), &want[size_t(i * n)], n, 1e-5f);
            ASSERT_TRUE(rmsnorm(pool3, x.data(), w.data(), got.data(), m, n, 1e-5f).is_ok());
            ASSERT_EQ(want, got);

            const int64_t heads = 2, head_dim = n / 2;
            if (head_dim % 2) continue;
            std::vector<int32_t> pos(static_cast<size_t>(m));
            for (int64_t t = 0; t < m; ++t) pos[size_t(t)] = int32_t(3 * t + 1);
            auto inv = ref::rope_inv_freqs(head_dim, ref::RopeParams{});
            std::vector<float> a = x, b = x;
            ref::rope(a.data(), m, heads, head_dim, pos.data(), inv);
            ASSERT_TRUE(rope(pool3, b.data(), m, heads, head_dim, pos.data(), inv).is_ok());
            ASSERT_EQ(a, b);
            // Rotation keeps the norm of every pair.
            for (size_t i = 0; i + 1 < x.size(); i += 2)
                EXPECT_NEAR(std::hypot(a[i], a[i + 1]), std::hypot(x[i], x[i + 1]), 1e-5);
        }
        std::vector<float> g = randn(size_t(m * 5000), 3), u = randn(size_t(m * 5000), 4);
        std::vector<float> want(g.size()), got(g.size());
        ref::silu_mul(g.data(), u.data(), want.data(), int64_t(g.size()));
        ASSERT_TRUE(silu_mul(pool3, g.data(), u.data(), got.data(), int64_t(g.size()), kernels::cpu::Isa::kRef).is_ok());
        ASSERT_EQ(want, got);
        // At the best ISA: the SIMD kernel's bits, however the threads split the array.
        kernels::cpu::find_silu_mul_kernel(kernels::cpu::best_isa())(g.data(), u.data(), want.data(),
                                                                    int64_t(g.size()));
        ASSERT_TRUE(silu_mul(pool3, g.data(), u.data(), got.data(), int64_t(g.size())).is_ok());
        ASSERT_EQ(want, got);
    }
}

TEST(TransformerOps, Llama3RopeFrequencies) {
    // Llama-3.1 values: factor 8, low 1, high 4, original context 8192, theta 500000.
    ref::RopeParams p;
    p.theta = 500000;
    p.scaling = ref::RopeScalingKind::kLlama3;
    p.factor = 8;
    p.low_freq_factor = 1;
    p.high_freq_factor = 4;
    p.original_max_position_embeddings = 8192;
    auto scaled = ref::rope_inv_freqs(128, p);
    auto plain = ref::rope_inv_freqs(128, ref::RopeParams{500000});
    const double kPi = 3.14159265358979323846;
    for (size_t i = 0; i < scaled.size(); ++i) {
        double wavelen = 2 * kPi / plain[i];
        if (wavelen < 8192 / 4.0)
            EXPECT_DOUBLE_EQ(scaled[i], plain[i]) << i;
        else if (wavelen > 8192 / 1.0)
            EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
        else
            EXPECT_TRUE(scaled[i] < plain[i] && scaled[i] > plain[i] / 8) << i;
    }
    EXPECT_DOUBLE_EQ(scaled[0], 1.0);
}

TEST(TransformerOps, AttentionMatchesReferenceAndNaive) {
    core::ThreadPool pool1(1), pool3(3);
    for (int64_t kv_len : {1, 7, 127}) {
        for (int64_t num_tokens : {int64_t(1), std::min<int64_t>(kv_len, 5), kv_len}) {
            for (int64_t window : {0, 4}) {
                AttentionShape s{num_tokens, 6, 2, 10, window};
                std::vector<float> q = randn(size_t(num_tokens * 6 * 10), 11);  // [T, H, D]
                std::vector<float> k = randn(size_t(kv_len * 2 * 10), 12);      // [L, KVH, D]
                std::vector<float> v = randn(size_t(kv_len * 2 * 10), 13);      // [L, KVH, D]
                KvSpan kv{k.data(), v.data(), kv_len};
                std::vector<float> want(q.size()), got1(q.size()), got3(q.size());
                ref::attention(q.data(), kv, s, want.data());
                ASSERT_TRUE(attention(pool1, q.data(), kv, s, got1.data()).is_ok());
                ASSERT_TRUE(attention(pool3, q.data(), kv, s, got3.data()).is_ok());
                // The tiled kernel (ops::batch_attention): the same bits for any thread count, the
                // reference's values within fp32 rounding.
                ASSERT_EQ(got1, got3);
                for (size_t i = 0; i < want.size(); ++i)
                    ASSERT_NEAR(got1[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
                // Naive double-precision attention.
                for (int64_t t = 0; t < num_tokens; ++t) {
                    const int64_t pos = kv_len - num_tokens + t;
                    for (int64_t h = 0; h < 6; ++h) {
                        const int64_t kvh = h / 3;
                        std::vector<double> p;
                        double mx = -1e300, sum = 0;
                        for (int64_t j = 0; j <= pos; ++j) {
                            if (window && pos - j >= window) {
                                p.push_back(-1e300);
                                continue;
                            }
                            double d = 0;
                            for (int64_t e = 0; e < 10; ++e)
                                d += double(q[size_t((t * 6 + h) * 10 + e)]) * k[size_t((j * 2 + kvh) * 10 + e)];
                            p.push_back(d / std::sqrt(10.0));
                            mx = std::max(mx, p.back());
                        }
                        for (double& x : p) {
                            x = x < -1e299 ? 0 : std::exp(x - mx);
                            sum += x;
                        }
                        for (int64_t e = 0; e < 10; ++e) {
                            double o = 0;
                            for (int64_t j = 0; j <= pos; ++j)
                                o += p[size_t(j)] / sum * v[size_t((j * 2 + kvh) * 10 + e)];
                            EXPECT_NEAR(o, want[size_t((t * 6 + h) * 10 + e)], 1e-5);
                        }
                    }
                }
            }
        }
    }
    AttentionShape bad{2, 6, 4, 10, 0};
    float dummy[200] = {};
    KvSpan kv{dummy, dummy, 2};
    EXPECT_FALSE(attention(pool1, dummy, kv, bad, dummy).is_ok());
}

}  // namespace
}  // namespace kiln::ops

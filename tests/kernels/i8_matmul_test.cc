// I8 weights x per-token int8 activations (W8A8; kernels/cpu/simd_i8_kernels.h, ActFormat::kI8Row):
//  (a) the activation quantizer of every ISA writes the ref bytes, and the ref's q and d are
//      quant::quantize_int8_rows' (the format kiln quantize writes for weights);
//  (b) every ISA's gemm, unpacked and (avx512-vnni) packed, equals the ref kernel bit for bit (the
//      integer dot is exact, then one float multiply): rows not a multiple of 8, row ranges from
//      multiples of 8, k not a multiple of 4 or 32, decode and prefill, padded strides;
//  (c) at the longest row the kernels take (kI8MaxK) with every product at +-127 * 127, the exact
//      value, on every ISA (no int32 or int16 overflow);
//  (d) the ref kernel against the f32 product of the dequantized weights with the unrounded input,
//      within the activation rounding;
//  (e) ops::linear: the row scale is applied, I8 without scales is refused, longer rows take the
//      f32 path, and a group of an I8 and an F32 part equals each part alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/quant_matmul.h"
#include "kernels/ref/transformer.h"
#include "ops/linear.h"
#include "quant/int_quant.h"

namespace kiln::kernels::cpu {
namespace {

using core::DType;

bool runnable(Isa isa) {
    return isa == Isa::kRef || (isa_supported(isa) && find_matmul_kernel(DType::kQ8_0, isa) != nullptr);
}

std::vector<uint8_t> random_i8(int64_t rows, int64_t stride, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> w(size_t(rows * stride));
    for (uint8_t& b : w) {
        int v = int(rng() % 255) - 127;  // -127 .. 127, as the quantizer writes
        b = uint8_t(int8_t(v));
    }
    return w;
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n * k));
    for (float& v : x) v = nd(rng);
    if (n * k > 5) x[3] = 0.0f;
    return x;
}

// n activation rows of k at stride arb (>= act_row_bytes).
std::vector<uint8_t> quantize_rows(const MatmulKernel& kern, const std::vector<float>& x, int64_t n, int64_t k,
                                   size_t arb) {
    std::vector<uint8_t> a(size_t(n) * arb, 0xcd);
    for (int64_t t = 0; t < n; ++t) kern.quantize_row(x.data() + t * k, a.data() + size_t(t) * arb, k);
    return a;
}

TEST(I8Matmul, ActivationRowsMatchTheReferenceQuantizer) {
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    ASSERT_NE(ref, nullptr);
    EXPECT_EQ(ref->act, ActFormat::kI8Row);
    for (int64_t k : {1, 4, 31, 172, 576, 4100}) {
        std::vector<float> x = random_x(3, k, uint32_t(k));
        x[size_t(k - 1)] *= 40.0f;  // an outlier sets the scale
        for (float& v : std::span<float>(x).subspan(size_t(2 * k))) v = 0.0f;  // an all-zero row: d = 1
        const size_t arb = ref->act_row_bytes(k);
        ASSERT_EQ(arb, sizeof(ActI8Row) + size_t(i8_row_padded(k)));
        const std::vector<uint8_t> want = quantize_rows(*ref, x, 3, k, arb);
        auto q = quant::quantize_int8_rows(x, 3, k);
        ASSERT_TRUE(q.is_ok());
        for (int64_t t = 0; t < 3; ++t) {
            ActI8Row h;
            std::memcpy(&h, want.data() + size_t(t) * arb, sizeof(h));
            EXPECT_EQ(h.d, q->scales[size_t(t)]) << "k " << k << " row " << t;
            int32_t sum = 0;
            for (int64_t j = 0; j < i8_row_padded(k); ++j) {
                const int8_t v = int8_t(want[size_t(t) * arb + sizeof(h) + size_t(j)]);
                EXPECT_EQ(v, j < k ? q->data[size_t(t * k + j)] : 0) << "k " << k << " row " << t << " j " << j;
                sum += v;
            }
            EXPECT_EQ(h.sum, sum);
        }
        for (Isa isa : kAllIsas) {
            if (!runnable(isa)) continue;
            const MatmulKernel* kern = find_matmul_kernel(DType::kI8, isa);
            ASSERT_NE(kern, nullptr) << isa_name(isa);
            EXPECT_EQ(quantize_rows(*kern, x, 3, k, arb), want) << isa_name(isa) << " k " << k;
        }
    }
}

// Every ISA's kernels (unpacked, and packed where the ISA packs I8) against the ref, bit for bit.
void expect_all_isas_equal(const std::vector<uint8_t>& w, size_t wrb, int64_t rows, const std::vector<uint8_t>& act,
                           size_t arb, int64_t n, int64_t k, int64_t r0, int64_t r1, const char* what) {
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    std::vector<float> want(size_t(n * rows), NAN);
    ref->gemm(w.data(), wrb, act.data(), arb, n, k, want.data(), rows, r0, r1);
    for (Isa isa : kAllIsas) {
        if (isa == Isa::kRef || !runnable(isa)) continue;
        const MatmulKernel* kern = find_matmul_kernel(DType::kI8, isa);
        std::vector<float> got(size_t(n * rows), NAN);
        kern->gemm(w.data(), wrb, act.data(), arb, n, k, got.data(), rows, r0, r1);
        for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " " << isa_name(isa) << " index " << i;
        const PackedMatmulKernel* pk = find_packed_matmul_kernel(DType::kI8, isa);
        if (!pk) continue;
        std::vector<uint8_t> packed(pk->packed_bytes(rows, k));
        pk->pack(w.data(), wrb, rows, k, packed.data());
        std::vector<float> gp(size_t(n * rows), NAN);
        pk->gemm(packed.data(), act.data(), arb, n, k, gp.data(), rows, r0, r1);
        for (size_t i = 0; i < gp.size(); ++i)
            ASSERT_EQ(std::memcmp(&gp[i], &want[i], 4), 0) << what << " packed " << isa_name(isa) << " index " << i;
    }
}

TEST(I8Matmul, EveryIsaEqualsTheReferenceBitForBit) {
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    for (int64_t k : {4, 30, 172, 576, 1029}) {
        for (int64_t rows : {13, 40, 77}) {
            const size_t wrb = size_t(k) + (rows == 13 ? 5 : 0);  // a padded stride too
            const std::vector<uint8_t> w = random_i8(rows, int64_t(wrb), uint32_t(k * rows));
            for (int64_t n : {1, 3, 9, 17}) {
                const size_t arb = ref->act_row_bytes(k) + (n == 3 ? 12 : 0);
                const std::vector<uint8_t> act = quantize_rows(*ref, random_x(n, k, uint32_t(n + k)), n, k, arb);
                const std::string what = "k " + std::to_string(k) + " rows " + std::to_string(rows) + " n " +
                                         std::to_string(n);
                expect_all_isas_equal(w, wrb, rows, act, arb, n, k, 0, rows, what.c_str());
                expect_all_isas_equal(w, wrb, rows, act, arb, n, k, 16, rows - 3, (what + " [16, rows-3)").c_str());
            }
        }
    }
}

TEST(I8Matmul, LongestRowAtFullScaleIsExact) {
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    const int64_t k = kI8MaxK, rows = 9, n = 2;
    std::vector<uint8_t> w(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < k; ++j) w[size_t(r * k + j)] = uint8_t(int8_t(r % 2 ? -127 : 127));
    }
    std::vector<float> x(size_t(n * k));
    for (int64_t j = 0; j < k; ++j) x[size_t(j)] = 2.0f, x[size_t(k + j)] = -3.0f;  // q = +127, -127
    const size_t arb = ref->act_row_bytes(k);
    const std::vector<uint8_t> act = quantize_rows(*ref, x, n, k, arb);
    expect_all_isas_equal(w, size_t(k), rows, act, arb, n, k, 0, rows, "full scale");
    std::vector<float> y(size_t(n * rows));
    ref->gemm(w.data(), size_t(k), act.data(), arb, n, k, y.data(), rows, 0, rows);
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            const double dot = double(k) * 127.0 * 127.0 * (r % 2 ? -1 : 1) * (t ? -1 : 1);
            const float d = t ? 3.0f / 127.0f : 2.0f / 127.0f;
            EXPECT_EQ(y[size_t(t * rows + r)], d * float(dot)) << "t " << t << " r " << r;
        }
    }
}

TEST(I8Matmul, ReferenceIsTheF32ProductWithinActivationRounding) {
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    const int64_t k = 172, rows = 21, n = 5;
    const std::vector<uint8_t> w = random_i8(rows, k, 3);
    const std::vector<float> x = random_x(n, k, 4);
    const size_t arb = ref->act_row_bytes(k);
    const std::vector<uint8_t> act = quantize_rows(*ref, x, n, k, arb);
    std::vector<float> y(size_t(n * rows));
    ref->gemm(w.data(), size_t(k), act.data(), arb, n, k, y.data(), rows, 0, rows);
    for (int64_t t = 0; t < n; ++t) {
        ActI8Row h;
        std::memcpy(&h, act.data() + size_t(t) * arb, sizeof(h));
        for (int64_t r = 0; r < rows; ++r) {
            double exact = 0, bound = 0;
            for (int64_t j = 0; j < k; ++j) {
                const double wj = int8_t(w[size_t(r * k + j)]);
                exact += wj * x[size_t(t * k + j)];
                bound += std::fabs(wj) * h.d * 0.5;  // |x - d q| <= d / 2 per element
            }
            EXPECT_NEAR(y[size_t(t * rows + r)], exact, bound * 1.0001 + 1e-3) << "t " << t << " r " << r;
        }
    }
}

TEST(I8Linear, RowScalesPathsAndGroups) {
    core::ThreadPool pool(2);
    const int64_t rows = 19, cols = 172, m = 4;
    const std::vector<uint8_t> w = random_i8(rows, cols, 9);
    std::vector<float> scale(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) scale[size_t(r)] = 0.001f * float(r + 1);
    ref::WeightView wv = ref::make_weight_view(w.data(), DType::kI8, rows, cols);
    EXPECT_FALSE(ops::make_linear(wv, {}).is_ok()) << "I8 without row scales";
    wv.row_scale = scale.data();
    const std::vector<float> x = random_x(m, cols, 11);
    std::vector<float> want(size_t(m * rows));
    ref::matmul(x.data(), wv, nullptr, want.data(), m);  // f32 over q * scale
    std::vector<uint8_t> scratch;
    for (Isa isa : kAllIsas) {
        if (!runnable(isa)) continue;
        ops::LinearOptions o;
        o.isa = isa;
        auto l = ops::make_linear(wv, o);
        ASSERT_TRUE(l.is_ok()) << l.status().to_string();
        ASSERT_NE(l->kernel, nullptr) << isa_name(isa);
        std::vector<float> y(size_t(m * rows), NAN);
        ASSERT_TRUE(ops::linear(pool, x.data(), m, *l, nullptr, y.data(), scratch).is_ok());
        for (int64_t t = 0; t < m; ++t) {
            const float amax = [&] {
                float a = 0;
                for (int64_t j = 0; j < cols; ++j) a = std::max(a, std::fabs(x[size_t(t * cols + j)]));
                return a;
            }();
            for (int64_t r = 0; r < rows; ++r) {
                // activation rounding: sum |w| * d / 2 with |w| <= 127 * scale
                const double bound = double(cols) * 127.0 * scale[size_t(r)] * amax / 127.0 * 0.5;
                EXPECT_NEAR(y[size_t(t * rows + r)], want[size_t(t * rows + r)], bound) << isa_name(isa);
            }
        }
        // with an F32 part in the same group: each part's columns as when run alone
        std::vector<float> fw(size_t(7 * cols));
        for (size_t i = 0; i < fw.size(); ++i) fw[i] = 0.01f * float(int(i % 13) - 6);
        auto lf = ops::make_linear(ref::make_weight_view(fw.data(), DType::kF32, 7, cols), o);
        ASSERT_TRUE(lf.is_ok());
        const ops::LinearPart parts[] = {{&*lf, nullptr}, {&*l, nullptr}};
        std::vector<float> g(size_t(m * (7 + rows))), yf(size_t(m * 7));
        ASSERT_TRUE(ops::linear_group(pool, x.data(), m, parts, g.data(), scratch).is_ok());
        ASSERT_TRUE(ops::linear(pool, x.data(), m, *lf, nullptr, yf.data(), scratch).is_ok());
        for (int64_t t = 0; t < m; ++t) {
            for (int64_t r = 0; r < 7; ++r) EXPECT_EQ(g[size_t(t * (7 + rows) + r)], yf[size_t(t * 7 + r)]);
            for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(g[size_t(t * (7 + rows) + 7 + r)], y[size_t(t * rows + r)]);
        }
    }
    // rows longer than the kernels' limit take the f32 reference path
    const int64_t long_cols = kI8MaxK + 4;
    const std::vector<uint8_t> lw = random_i8(2, long_cols, 5);
    ref::WeightView lv = ref::make_weight_view(lw.data(), DType::kI8, 2, long_cols);
    lv.row_scale = scale.data();
    auto l = ops::make_linear(lv, {});
    ASSERT_TRUE(l.is_ok());
    EXPECT_EQ(l->kernel, nullptr);
}

}  // namespace
}  // namespace kiln::kernels::cpu

// The CUDA elementwise kernels (kernels/cuda: embedding, add_rmsnorm, silu_mul_rows, rope) against kernels/ref
// over a grid of shapes (1, odd widths, widths past a block's threads, many rows), f32 within fp32
// rounding of another summation order and bf16 within a bf16 ulp or two of the reference run on the
// same bf16-rounded inputs. Without a CUDA device the kernel comparisons skip; argument checks run
// anyway (they fail before any launch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cuda {
namespace {

using test::download;
using test::randn;
using test::upload;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = core::f32_to_bf16(v[i]);
    return b;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& b) {
    std::vector<float> v(b.size());
    for (size_t i = 0; i < b.size(); ++i) v[i] = core::bf16_to_f32(b[i]);
    return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    double max_err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(double(want[i])));
        if (!(err <= max_err)) {
            max_err = err;
            worst = i;
        }
    }
    EXPECT_LE(max_err, rel) << what << ": worst at " << worst << " got " << got[worst] << " want " << want[worst];
}

#define KILN_NEED_DEVICE() \
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaElementwise, ArgumentChecksWithoutLaunching) {
    float* p = reinterpret_cast<float*>(16);  // never dereferenced: every call fails validation first
    EXPECT_EQ(add_rmsnorm(p, nullptr, p, p, 1, 0, 1e-5f).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(add_rmsnorm(p, nullptr, p, p, -1, 8, 1e-5f).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(add_rmsnorm(nullptr, nullptr, p, p, 2, 8, 1e-5f).code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(add_rmsnorm(p, nullptr, p, p, 0, 8, 1e-5f).is_ok());  // no rows: nothing to launch
    EXPECT_EQ(silu_mul_rows(p, p, 1, 0).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(silu_mul_rows(nullptr, p, 1, 4).code(), core::StatusCode::kInvalidArgument);
    const int32_t* pos = reinterpret_cast<const int32_t*>(16);
    const double* f = reinterpret_cast<const double*>(16);
    EXPECT_EQ(rope(p, 1, 2, 7, 14, pos, f).code(), core::StatusCode::kInvalidArgument);  // odd head_dim
    EXPECT_EQ(rope(p, 1, 2, 8, 15, pos, f).code(), core::StatusCode::kInvalidArgument);  // stride < row
    EXPECT_EQ(rope(p, 1, 2, 8, 16, nullptr, f).code(), core::StatusCode::kInvalidArgument);
}

TEST(CudaElementwise, EmbeddingCopiesRows) {
    KILN_NEED_DEVICE();
    const int64_t vocab = 97, hidden = 300;
    const std::vector<float> table = randn(size_t(vocab * hidden), 4);
    const std::vector<int32_t> ids = {0, 96, 5, 5, 42, -1, 97};  // the last two out of range: zero rows
    const int64_t n = int64_t(ids.size());
    DeviceBuffer dt = upload(table), di = upload(ids), dout = upload(std::vector<float>(size_t(n * hidden), 7.0f));
    ASSERT_TRUE(embedding(dt.as<float>(), vocab, hidden, di.as<int32_t>(), n, dout.as<float>()).is_ok());
    const std::vector<float> got = download<float>(dout, size_t(n * hidden));
    const std::vector<uint16_t> tb = to_bf16(table);
    DeviceBuffer et = upload(tb), eout = upload(std::vector<uint16_t>(size_t(n * hidden), 1));
    ASSERT_TRUE(
        embedding(et.as<__nv_bfloat16>(), vocab, hidden, di.as<int32_t>(), n, eout.as<__nv_bfloat16>()).is_ok());
    const std::vector<uint16_t> gotb = download<uint16_t>(eout, size_t(n * hidden));
    for (int64_t t = 0; t < n; ++t) {
        const int32_t id = ids[size_t(t)];
        for (int64_t i = 0; i < hidden; ++i) {
            const size_t o = size_t(t * hidden + i);
            const bool valid = id >= 0 && id < vocab;
            ASSERT_EQ(got[o], valid ? table[size_t(id * hidden + i)] : 0.0f) << "token " << t << " col " << i;
            ASSERT_EQ(gotb[o], valid ? tb[size_t(id * hidden + i)] : uint16_t(0)) << "bf16 token " << t << " col " << i;
        }
    }
    EXPECT_EQ(embedding(dt.as<float>(), 0, hidden, di.as<int32_t>(), n, dout.as<float>()).code(),
              core::StatusCode::kInvalidArgument);
}

TEST(CudaElementwise, AddRmsnormMatchesReference) {
    KILN_NEED_DEVICE();
    for (int64_t n : {1, 7, 64, 576, 2048, 4097, 8192}) {
        for (int64_t rows : {1, 3, 130}) {
            for (bool with_add : {false, true}) {
                const std::string what =
                    "n " + std::to_string(n) + " rows " + std::to_string(rows) + (with_add ? " add" : "");
                const size_t total = size_t(rows * n);
                std::vector<float> x = randn(total, uint32_t(n + rows)), add = randn(total, 7, 0.5f);
                const std::vector<float> w = randn(size_t(n), 9, 0.2f);
                // f32
                std::vector<float> want_x = x, want_y(total);
                for (int64_t r = 0; r < rows; ++r) {
                    float* xr = want_x.data() + r * n;
                    if (with_add)
                        for (int64_t i = 0; i < n; ++i) xr[i] += add[size_t(r * n + i)];
                    ref::rmsnorm(xr, w.data(), want_y.data() + r * n, n, 1e-5f);
                }
                DeviceBuffer dx = upload(x), da = upload(add), dw = upload(w), dy = upload(std::vector<float>(total));
                ASSERT_TRUE(add_rmsnorm(dx.as<float>(), with_add ? da.as<float>() : nullptr, dw.as<float>(),
                                        dy.as<float>(), rows, n, 1e-5f)
                                .is_ok());
                expect_close(download<float>(dy, total), want_y, 1e-5f, "f32 y " + what);
                expect_close(download<float>(dx, total), want_x, 0.0f, "f32 x " + what);
                // bf16: the reference on the same rounded inputs, the sum rounded to bf16 as stored
                const std::vector<uint16_t> xb = to_bf16(x), ab = to_bf16(add);
                std::vector<float> bx = from_bf16(xb), by(total);
                for (int64_t r = 0; r < rows; ++r) {
                    float* xr = bx.data() + r * n;
                    if (with_add)
                        for (int64_t i = 0; i < n; ++i)
                            xr[i] =
                                core::bf16_to_f32(core::f32_to_bf16(xr[i] + core::bf16_to_f32(ab[size_t(r * n + i)])));
                    ref::rmsnorm(xr, w.data(), by.data() + r * n, n, 1e-5f);
                }
                DeviceBuffer ex = upload(xb), ea = upload(ab), ey = upload(std::vector<uint16_t>(total));
                ASSERT_TRUE(add_rmsnorm(ex.as<__nv_bfloat16>(), with_add ? ea.as<__nv_bfloat16>() : nullptr,
                                        dw.as<float>(), ey.as<__nv_bfloat16>(), rows, n, 1e-5f)
                                .is_ok());
                expect_close(from_bf16(download<uint16_t>(ey, total)), by, 1e-2f, "bf16 y " + what);
                expect_close(from_bf16(download<uint16_t>(ex, total)), bx, 0.0f, "bf16 x " + what);
            }
        }
    }
}

TEST(CudaElementwise, SiluMulRowsMatchesReference) {
    KILN_NEED_DEVICE();
    for (int64_t F : {1, 31, 172, 5632}) {
        for (int64_t rows : {1, 5, 64}) {
            const std::vector<float> gu = randn(size_t(rows * 2 * F), uint32_t(F * 3 + rows), 3.0f);
            std::vector<float> want(size_t(rows * F));
            for (int64_t r = 0; r < rows; ++r)
                ref::silu_mul(gu.data() + r * 2 * F, gu.data() + r * 2 * F + F, want.data() + r * F, F);
            DeviceBuffer dg = upload(gu), da = upload(std::vector<float>(want.size()));
            ASSERT_TRUE(silu_mul_rows(dg.as<float>(), da.as<float>(), rows, F).is_ok());
            const std::string what = "F " + std::to_string(F) + " rows " + std::to_string(rows);
            expect_close(download<float>(da, want.size()), want, 2e-6f, "f32 " + what);
            const std::vector<uint16_t> gb = to_bf16(gu);
            const std::vector<float> gr = from_bf16(gb);
            for (int64_t r = 0; r < rows; ++r)
                ref::silu_mul(gr.data() + r * 2 * F, gr.data() + r * 2 * F + F, want.data() + r * F, F);
            DeviceBuffer eg = upload(gb), ea = upload(std::vector<uint16_t>(want.size()));
            ASSERT_TRUE(silu_mul_rows(eg.as<__nv_bfloat16>(), ea.as<__nv_bfloat16>(), rows, F).is_ok());
            expect_close(from_bf16(download<uint16_t>(ea, want.size())), want, 1e-2f, "bf16 " + what);
        }
    }
}

// The f32-residual, 16-bit-output overloads (the GEMM input written directly) are the f32 kernels'
// values rounded once: bit for bit.
TEST(CudaElementwise, SixteenBitOutputsAreTheF32ValuesRounded) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t rows = 5, n = 1000, F = 700;
    const std::vector<float> x = randn(size_t(rows * n), 31, 2.0f), add = randn(x.size(), 32), w = randn(size_t(n), 33);
    const std::vector<float> gu = randn(size_t(rows * 2 * F), 34, 3.0f);
    DeviceBuffer x32 = upload(x), a32 = upload(add), dw = upload(w), y32 = upload(std::vector<float>(x.size()));
    ASSERT_TRUE(add_rmsnorm(x32.as<float>(), a32.as<float>(), dw.as<float>(), y32.as<float>(), rows, n, 1e-5f).is_ok());
    const std::vector<float> want = download<float>(y32, x.size()), want_x = download<float>(x32, x.size());
    for (bool half : {false, true}) {
        DeviceBuffer xb = upload(x), ab = upload(add), yb = upload(std::vector<uint16_t>(x.size()));
        const core::Status st =
            half ? add_rmsnorm(xb.as<float>(), ab.as<float>(), dw.as<float>(), yb.as<__half>(), rows, n, 1e-5f)
                 : add_rmsnorm(xb.as<float>(), ab.as<float>(), dw.as<float>(), yb.as<__nv_bfloat16>(), rows, n, 1e-5f);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        const std::vector<uint16_t> got = download<uint16_t>(yb, x.size());
        const std::vector<float> got_x = download<float>(xb, x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(got_x[i], want_x[i]) << i;
            ASSERT_EQ(got[i], half ? core::f32_to_fp16(want[i]) : core::f32_to_bf16(want[i]))
                << (half ? "f16 " : "bf16 ") << i;
        }
    }
    DeviceBuffer dg = upload(gu), a32o = upload(std::vector<float>(size_t(rows * F)));
    ASSERT_TRUE(silu_mul_rows(dg.as<float>(), a32o.as<float>(), rows, F).is_ok());
    const std::vector<float> want_act = download<float>(a32o, size_t(rows * F));
    for (bool half : {false, true}) {
        DeviceBuffer o16 = upload(std::vector<uint16_t>(size_t(rows * F)));
        const core::Status st = half ? silu_mul_rows(dg.as<float>(), o16.as<__half>(), rows, F)
                                     : silu_mul_rows(dg.as<float>(), o16.as<__nv_bfloat16>(), rows, F);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        const std::vector<uint16_t> got = download<uint16_t>(o16, size_t(rows * F));
        for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], half ? core::f32_to_fp16(want_act[i]) : core::f32_to_bf16(want_act[i])) << i;
    }
}

TEST(CudaElementwise, RopeMatchesReference) {
    KILN_NEED_DEVICE();
    ref::RopeParams p;
    p.theta = 500000.0;
    p.scaling = ref::RopeScalingKind::kLlama3;
    p.factor = 32.0;
    p.original_max_position_embeddings = 8192;
    for (int64_t head_dim : {2, 64, 128}) {
        const std::vector<double> inv_freq = ref::rope_inv_freqs(head_dim, p);
        for (int64_t heads : {1, 8}) {
            const int64_t tokens = 37, row = heads * head_dim, stride = row + 2 * head_dim;  // q inside a qkv row
            const std::vector<float> x = randn(size_t(tokens * stride), uint32_t(head_dim + heads));
            std::vector<int32_t> pos = std::vector<int32_t>(size_t(tokens));
            for (int64_t t = 0; t < tokens; ++t) pos[size_t(t)] = int32_t(t * 3571 % 131072);
            std::vector<float> want = x;
            for (int64_t t = 0; t < tokens; ++t)
                ref::rope(want.data() + t * stride, 1, heads, head_dim, &pos[size_t(t)], inv_freq);
            DeviceBuffer dx = upload(x), dp = upload(pos), df = upload(inv_freq);
            ASSERT_TRUE(
                rope(dx.as<float>(), tokens, heads, head_dim, stride, dp.as<int32_t>(), df.as<double>()).is_ok());
            const std::string what = "head_dim " + std::to_string(head_dim) + " heads " + std::to_string(heads);
            expect_close(download<float>(dx, x.size()), want, 1e-6f, "f32 " + what);  // the rest of each row untouched
            const std::vector<uint16_t> xb = to_bf16(x);
            std::vector<float> wb = from_bf16(xb);
            for (int64_t t = 0; t < tokens; ++t)
                ref::rope(wb.data() + t * stride, 1, heads, head_dim, &pos[size_t(t)], inv_freq);
            DeviceBuffer ex = upload(xb);
            ASSERT_TRUE(rope(ex.as<__nv_bfloat16>(), tokens, heads, head_dim, stride, dp.as<int32_t>(), df.as<double>())
                            .is_ok());
            expect_close(from_bf16(download<uint16_t>(ex, x.size())), wb, 1e-2f, "bf16 " + what);
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda

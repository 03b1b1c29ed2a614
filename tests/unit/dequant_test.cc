// Hand-built blocks for every type kernels::ref::dequantize_row handles. Each test PACKS chosen
// quantized values into the block layout (written here from ggml-common.h / the gguf-py layout
// diagrams, independently of the decoder) and expects the layout's formula applied to the chosen
// values. Scales are powers of two (fp16 0x3800 = 0.5, 0x3400 = 0.25, 0x3000 = 0.125, 0xbc00 = -1)
// so every expected value is exact and compared with ==.
#include "kernels/ref/dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::kernels::ref {
namespace {

using core::DType;

constexpr uint16_t kHalf = 0x3800;     // 0.5
constexpr uint16_t kQuarter = 0x3400;  // 0.25
constexpr uint16_t kEighth = 0x3000;   // 0.125
constexpr uint16_t kMinusOne = 0xbc00;

void put_u16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
    b[off] = uint8_t(v & 0xff);
    b[off + 1] = uint8_t(v >> 8);
}

std::vector<float> decode(DType type, const std::vector<uint8_t>& bytes, int64_t n) {
    std::vector<float> out(size_t(n), -999.0f);
    core::Status st = dequantize_row(type, bytes.data(), out.data(), n);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
}

void expect_all_eq(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << " element " << i;
}

TEST(Dequant, PlainFloats) {
    const float f32_vals[] = {1.5f, -0.0f, 3.0e38f, -1e-45f};
    std::vector<uint8_t> f32(sizeof(f32_vals));
    std::memcpy(f32.data(), f32_vals, sizeof(f32_vals));
    expect_all_eq(decode(DType::kF32, f32, 4), {1.5f, -0.0f, 3.0e38f, -1e-45f}, "f32");

    // fp16: 1, -2, max normal 65504, smallest subnormal 2^-24, +inf, -0.
    std::vector<uint8_t> f16(12);
    const uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000};
    for (int i = 0; i < 6; ++i) put_u16(f16, 2 * i, h[i]);
    std::vector<float> got = decode(DType::kF16, f16, 6);
    expect_all_eq(got, {1.0f, -2.0f, 65504.0f, 0x1p-24f, INFINITY, -0.0f}, "f16");
    EXPECT_TRUE(std::signbit(got[5]));

    // bf16 is the top half of an fp32: 1, -3, +inf, smallest subnormal (fp32 bits 0x00010000 = 2^-133).
    std::vector<uint8_t> bf16(8);
    const uint16_t b[] = {0x3f80, 0xc040, 0x7f80, 0x0001};
    for (int i = 0; i < 4; ++i) put_u16(bf16, 2 * i, b[i]);
    expect_all_eq(decode(DType::kBF16, bf16, 4), {1.0f, -3.0f, INFINITY, 0x1p-133f}, "bf16");
}

// Legacy 32-element blocks. qs[j]: low nibble = element j, high nibble = element j + 16.
void pack_nibbles(std::vector<uint8_t>& b, size_t qs_off, const int* q /* 32 values, low 4 bits used */) {
    for (int j = 0; j < 16; ++j) b[qs_off + j] = uint8_t((q[j] & 15) | (q[j + 16] & 15) << 4);
}

TEST(Dequant, Q4_0TwoBlocks) {
    // block_q4_0 { fp16 d; u8 qs[16]; } (18 bytes), x = d * (q - 8).
    std::vector<uint8_t> b(36);
    std::vector<float> want;
    for (int blk = 0; blk < 2; ++blk) {
        int q[32];
        for (int i = 0; i < 32; ++i) q[i] = (i * 7 + blk * 3) % 16;
        put_u16(b, 18 * blk, blk == 0 ? kHalf : kMinusOne);
        pack_nibbles(b, 18 * blk + 2, q);
        for (int i = 0; i < 32; ++i) want.push_back((blk == 0 ? 0.5f : -1.0f) * float(q[i] - 8));
    }
    expect_all_eq(decode(DType::kQ4_0, b, 64), want, "q4_0");
}

TEST(Dequant, Q4_1) {
    // block_q4_1 { fp16 d; fp16 m; u8 qs[16]; } (20 bytes), x = d * q + m.
    std::vector<uint8_t> b(20);
    int q[32];
    for (int i = 0; i < 32; ++i) q[i] = (i * 5 + 1) % 16;
    put_u16(b, 0, kHalf);
    put_u16(b, 2, kMinusOne);
    pack_nibbles(b, 4, q);
    std::vector<float> want;
    for (int i = 0; i < 32; ++i) want.push_back(0.5f * float(q[i]) - 1.0f);
    expect_all_eq(decode(DType::kQ4_1, b, 32), want, "q4_1");
}

// Q5: the low 4 bits as Q4, bit 4 of element i is bit i of the little-endian u32 qh.
void pack_q5(std::vector<uint8_t>& b, size_t qh_off, const int* q) {
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) qh |= uint32_t((q[i] >> 4) & 1) << i;
    for (int k = 0; k < 4; ++k) b[qh_off + k] = uint8_t(qh >> (8 * k));
    pack_nibbles(b, qh_off + 4, q);
}

TEST(Dequant, Q5_0) {
    // block_q5_0 { fp16 d; u8 qh[4]; u8 qs[16]; } (22 bytes), x = d * (q - 16).
    std::vector<uint8_t> b(22);
    int q[32];
    for (int i = 0; i < 32; ++i) q[i] = (i * 11 + 3) % 32;
    put_u16(b, 0, kHalf);
    pack_q5(b, 2, q);
    std::vector<float> want;
    for (int i = 0; i < 32; ++i) want.push_back(0.5f * float(q[i] - 16));
    expect_all_eq(decode(DType::kQ5_0, b, 32), want, "q5_0");
}

TEST(Dequant, Q5_1) {
    // block_q5_1 { fp16 d; fp16 m; u8 qh[4]; u8 qs[16]; } (24 bytes), x = d * q + m.
    std::vector<uint8_t> b(24);
    int q[32];
    for (int i = 0; i < 32; ++i) q[i] = (i * 13 + 7) % 32;
    put_u16(b, 0, kQuarter);
    put_u16(b, 2, kMinusOne);
    pack_q5(b, 4, q);
    std::vector<float> want;
    for (int i = 0; i < 32; ++i) want.push_back(0.25f * float(q[i]) - 1.0f);
    expect_all_eq(decode(DType::kQ5_1, b, 32), want, "q5_1");
}

TEST(Dequant, Q8_0AndQ8_1) {
    // block_q8_0 { fp16 d; i8 qs[32]; } (34 bytes); block_q8_1 { fp16 d; fp16 s; i8 qs[32]; } (36).
    std::vector<uint8_t> b0(34), b1(36);
    std::vector<float> want;
    put_u16(b0, 0, kQuarter);
    put_u16(b1, 0, kQuarter);
    put_u16(b1, 2, 0x7c00);  // s is only for dot products: even inf must not leak into the values
    for (int i = 0; i < 32; ++i) {
        int8_t q = int8_t(i * 37 % 256 - 128);
        b0[2 + i] = uint8_t(q);
        b1[4 + i] = uint8_t(q);
        want.push_back(0.25f * float(q));
    }
    expect_all_eq(decode(DType::kQ8_0, b0, 32), want, "q8_0");
    expect_all_eq(decode(DType::kQ8_1, b1, 32), want, "q8_1");
}

// K-quants: 256 elements per super-block. Q2_K/Q3_K 2-bit planes: element e lies in half e / 128;
// with r = e % 128, its bits are (2 * (r / 32), +1) of byte 32 * half + r % 32 of qs.
void pack_2bit(std::vector<uint8_t>& b, size_t qs_off, int e, int q2) {
    int half = e / 128, r = e % 128;
    b[qs_off + 32 * half + r % 32] |= uint8_t((q2 & 3) << (2 * (r / 32)));
}

TEST(Dequant, Q2_K) {
    // block_q2_K { u8 scales[16]; u8 qs[64]; fp16 d; fp16 dmin; } (84 bytes).
    // scales[i] = scale (low nibble) | min (high nibble) of sub-block i (16 elements);
    // x = d * scale * q - dmin * min.
    std::vector<uint8_t> b(84);
    int sc[16], mn[16], q[256];
    for (int i = 0; i < 16; ++i) {
        sc[i] = (i * 5 + 2) % 16;
        mn[i] = (i * 3 + 1) % 16;
        b[i] = uint8_t(sc[i] | mn[i] << 4);
    }
    for (int e = 0; e < 256; ++e) {
        q[e] = (e * 7 + e / 16) % 4;
        pack_2bit(b, 16, e, q[e]);
    }
    put_u16(b, 80, kHalf);
    put_u16(b, 82, kQuarter);
    std::vector<float> want;
    for (int e = 0; e < 256; ++e) want.push_back(0.5f * float(sc[e / 16]) * float(q[e]) - 0.25f * float(mn[e / 16]));
    expect_all_eq(decode(DType::kQ2_K, b, 256), want, "q2_k");
}

TEST(Dequant, Q3_K) {
    // block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; fp16 d; } (110 bytes).
    // Element value v in -4..3: low 2 bits in qs (as Q2_K), and the hmask bit SET means "no -4":
    // v = low - (hbit ? 0 : 4). The hmask bit of element e is bit (e / 32) of hmask[e % 32].
    // 16 six-bit scales S (used as S - 32), packed per the gguf-py diagram (A..P = scales 0..15):
    //   bytes 0..7:  IIIIAAAA JJJJBBBB ... PPPPHHHH  (low 4 bits)
    //   bytes 8..11: MMIIEEAA NNJJFFBB OOKKGGCC PPLLHHDD  (high 2 bits)
    std::vector<uint8_t> b(110);
    int S[16], v[256];
    for (int i = 0; i < 16; ++i) S[i] = (i * 23 + 5) % 64;
    for (int i = 0; i < 8; ++i) b[96 + i] = uint8_t((S[i] & 15) | (S[i + 8] & 15) << 4);
    for (int k = 0; k < 4; ++k) {
        b[104 + k] = uint8_t((S[k] >> 4) | (S[k + 4] >> 4) << 2 | (S[k + 8] >> 4) << 4 | (S[k + 12] >> 4) << 6);
    }
    for (int e = 0; e < 256; ++e) {
        v[e] = (e * 5 + e / 32) % 8 - 4;
        bool hbit = v[e] >= 0;
        pack_2bit(b, 32, e, hbit ? v[e] : v[e] + 4);
        if (hbit) b[e % 32] |= uint8_t(1u << (e / 32));
    }
    put_u16(b, 108, kHalf);
    std::vector<float> want;
    for (int e = 0; e < 256; ++e) want.push_back(0.5f * float(S[e / 16] - 32) * float(v[e]));
    expect_all_eq(decode(DType::kQ3_K, b, 256), want, "q3_k");
}

// Q4_K/Q5_K: 8 sub-blocks of 32 with 6-bit scales sc and mins m, 12 bytes (gguf-py diagram):
//   0..3: EEAAAAAA ..  (sc0..3, top bits of sc4..7)   4..7: eeaaaaaa .. (m0..3, top bits of m4..7)
//   8..11: eeeeEEEE .. (low 4 bits of sc4..7, then of m4..7)
void pack_k4_scales(std::vector<uint8_t>& b, size_t off, const int* sc, const int* m) {
    for (int j = 0; j < 4; ++j) {
        b[off + j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
        b[off + 4 + j] = uint8_t(m[j] | (m[j + 4] >> 4) << 6);
        b[off + 8 + j] = uint8_t((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

// Element e (sub-block e / 32) sits in qs byte 32 * (e / 64) + e % 32: low nibble for even
// sub-blocks, high nibble for odd ones.
void pack_k4_nibble(std::vector<uint8_t>& b, size_t qs_off, int e, int q4) {
    b[qs_off + 32 * (e / 64) + e % 32] |= uint8_t((q4 & 15) << (4 * ((e / 32) % 2)));
}

TEST(Dequant, Q4_KTwoBlocks) {
    // block_q4_K { fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128]; } (144 bytes),
    // x = d * sc * q - dmin * m.
    std::vector<uint8_t> b(288);
    std::vector<float> want;
    for (int blk = 0; blk < 2; ++blk) {
        const size_t o = 144 * size_t(blk);
        int sc[8], m[8], q[256];
        for (int j = 0; j < 8; ++j) {
            sc[j] = (j * 19 + 40 + blk) % 64;  // values >= 16 exercise the packed top bits
            m[j] = (j * 29 + 33) % 64;
        }
        pack_k4_scales(b, o + 4, sc, m);
        for (int e = 0; e < 256; ++e) {
            q[e] = (e * 3 + e / 32 + blk) % 16;
            pack_k4_nibble(b, o + 16, e, q[e]);
        }
        put_u16(b, o, blk == 0 ? kHalf : kEighth);
        put_u16(b, o + 2, kQuarter);
        const float d = blk == 0 ? 0.5f : 0.125f;
        for (int e = 0; e < 256; ++e) want.push_back(d * float(sc[e / 32]) * float(q[e]) - 0.25f * float(m[e / 32]));
    }
    expect_all_eq(decode(DType::kQ4_K, b, 512), want, "q4_k");
}

TEST(Dequant, Q5_K) {
    // block_q5_K { fp16 d; fp16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } (176 bytes),
    // q = nibble (as Q4_K) | bit (e / 32) of qh[e % 32] << 4; x = d * sc * q - dmin * m.
    std::vector<uint8_t> b(176);
    int sc[8], m[8], q[256];
    for (int j = 0; j < 8; ++j) {
        sc[j] = (j * 21 + 17) % 64;
        m[j] = (j * 13 + 50) % 64;
    }
    pack_k4_scales(b, 4, sc, m);
    for (int e = 0; e < 256; ++e) {
        q[e] = (e * 9 + e / 32) % 32;
        pack_k4_nibble(b, 48, e, q[e]);
        b[16 + e % 32] |= uint8_t(((q[e] >> 4) & 1) << (e / 32));
    }
    put_u16(b, 0, kHalf);
    put_u16(b, 2, kEighth);
    std::vector<float> want;
    for (int e = 0; e < 256; ++e) want.push_back(0.5f * float(sc[e / 32]) * float(q[e]) - 0.125f * float(m[e / 32]));
    expect_all_eq(decode(DType::kQ5_K, b, 256), want, "q5_k");
}

TEST(Dequant, Q6_K) {
    // block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d; } (210 bytes), x = d * scale * (q - 32).
    // Per 128-element half h (ql + 64h, qh + 32h), for l in 0..31 (ggml dequantize_row_q6_K):
    //   element l      : low nibble of ql[l],      qh[l] bits 0-1
    //   element l + 32 : low nibble of ql[l + 32], qh[l] bits 2-3
    //   element l + 64 : high nibble of ql[l],     qh[l] bits 4-5
    //   element l + 96 : high nibble of ql[l + 32], qh[l] bits 6-7
    std::vector<uint8_t> b(210);
    int8_t scale[16];
    int q[256];
    for (int i = 0; i < 16; ++i) {
        scale[i] = int8_t((i * 41 + 3) % 256 - 128);
        b[192 + i] = uint8_t(scale[i]);
    }
    for (int e = 0; e < 256; ++e) q[e] = (e * 7 + e / 16) % 64;
    for (int h = 0; h < 2; ++h) {
        uint8_t* ql = b.data() + 64 * h;
        uint8_t* qh = b.data() + 128 + 32 * h;
        const int* qq = q + 128 * h;
        for (int l = 0; l < 32; ++l) {
            ql[l] = uint8_t((qq[l] & 15) | (qq[l + 64] & 15) << 4);
            ql[l + 32] = uint8_t((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
            qh[l] = uint8_t((qq[l] >> 4) | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 | (qq[l + 96] >> 4) << 6);
        }
    }
    put_u16(b, 208, kHalf);
    std::vector<float> want;
    for (int e = 0; e < 256; ++e) want.push_back(0.5f * float(scale[e / 16]) * float(q[e] - 32));
    expect_all_eq(decode(DType::kQ6_K, b, 256), want, "q6_k");
}

TEST(Dequant, Q8_K) {
    // block_q8_K { f32 d; i8 qs[256]; i16 bsums[16]; } (292 bytes), x = d * q.
    std::vector<uint8_t> b(292, 0xff);  // bsums garbage must not matter
    const float d = -0.125f;
    std::memcpy(b.data(), &d, 4);
    std::vector<float> want;
    for (int e = 0; e < 256; ++e) {
        int8_t q = int8_t(e * 91 % 256 - 128);
        b[4 + e] = uint8_t(q);
        want.push_back(-0.125f * float(q));
    }
    expect_all_eq(decode(DType::kQ8_K, b, 256), want, "q8_k");
}

TEST(Dequant, Errors) {
    std::vector<uint8_t> b(300);
    std::vector<float> out(300);
    core::Status st = dequantize_row(DType::kI8, b.data(), out.data(), 4);
    EXPECT_EQ(st.code(), core::StatusCode::kUnsupported);
    EXPECT_NE(st.message().find("i8"), std::string::npos) << st.message();
    EXPECT_EQ(dequantize_row(DType::kQ4_0, b.data(), out.data(), 33).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(dequantize_row(DType::kQ6_K, b.data(), out.data(), 128).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(dequantize_row(DType::kF16, b.data(), out.data(), -2).code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(dequantize_row(DType::kQ4_K, nullptr, nullptr, 0).is_ok());
    EXPECT_FALSE(dequant_supported(DType::kF8E4M3));
    EXPECT_TRUE(dequant_supported(DType::kQ8_K));
}

}  // namespace
}  // namespace kiln::kernels::ref

// Cross-checks kernels::ref::dequantize_row against gguf-py (an independent implementation) on the
// seeded random blocks in tests/golden/data/dequant_golden.bin (scripts/gen_dequant_golden.py
// documents the format and regenerates it). Comparison is bit-exact: gguf-py computes in fp32 in
// ggml's operation order, as the reference does. One deliberate difference: MXFP4's E2M1 code 8 is
// -0 in the OCP MX spec, which kiln follows, and 0 in ggml's int8 table (kvalues_mxfp4), so there
// -0.0 against +0.0 is accepted (equal as numbers) and counted; every other bit must match.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "core/numeric.h"
#include "formats/ggml_type.h"
#include "kernels/ref/dequant.h"
#include "support/test_support.h"

namespace kiln {
namespace {

std::string golden_path() {
    // This file is tests/unit/dequant_golden_test.cc; the data lives in tests/golden/data.
    return (std::filesystem::path(__FILE__).parent_path().parent_path() / "golden/data/dequant_golden.bin").string();
}

uint32_t read_u32(const std::vector<uint8_t>& b, size_t off) {
    uint32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
}

TEST(DequantGolden, MatchesGgufPyBitExactly) {
    std::vector<uint8_t> blob = test::read_file(golden_path());
    ASSERT_GE(blob.size(), 12u) << golden_path();
    ASSERT_EQ(std::memcmp(blob.data(), "KDQG", 4), 0);
    ASSERT_EQ(read_u32(blob, 4), 1u);
    const uint32_t num_records = read_u32(blob, 8);
    size_t off = 12;
    std::set<core::DType> seen;
    for (uint32_t r = 0; r < num_records; ++r) {
        ASSERT_LE(off + 12, blob.size());
        const uint32_t ggml_type = read_u32(blob, off), n = read_u32(blob, off + 4), nbytes = read_u32(blob, off + 8);
        off += 12;
        ASSERT_LE(off + nbytes + size_t(n) * 4, blob.size());
        std::optional<core::DType> dtype = formats::dtype_from_ggml(ggml_type);
        ASSERT_TRUE(dtype.has_value()) << "ggml type " << ggml_type;
        ASSERT_EQ(core::dtype_bytes(*dtype, n), uint64_t(nbytes)) << core::dtype_name(*dtype);
        const uint8_t* src = blob.data() + off;
        std::vector<float> expected(n), got(n, -12345.0f);
        std::memcpy(expected.data(), blob.data() + off + nbytes, size_t(n) * 4);
        off += nbytes + size_t(n) * 4;

        ASSERT_TRUE(kernels::ref::dequantize_row(*dtype, src, got.data(), n).is_ok());
        int mismatches = 0, signed_zeros = 0;
        for (uint32_t i = 0; i < n; ++i) {
            if (*dtype == core::DType::kMxfp4 && core::f32_bits(got[i]) == 0x80000000u &&
                core::f32_bits(expected[i]) == 0) {
                ++signed_zeros;
                continue;
            }
            if (core::f32_bits(got[i]) != core::f32_bits(expected[i])) {
                if (++mismatches <= 5) {
                    ADD_FAILURE() << core::dtype_name(*dtype) << " element " << i << ": got " << got[i] << " (0x"
                                  << std::hex << core::f32_bits(got[i]) << "), gguf-py " << expected[i] << " (0x"
                                  << core::f32_bits(expected[i]) << std::dec << ")";
                }
            }
        }
        EXPECT_EQ(mismatches, 0) << core::dtype_name(*dtype);
        if (*dtype == core::DType::kMxfp4) {
            EXPECT_GT(signed_zeros, 0) << "the MXFP4 record should hold code 8";
        }
        seen.insert(*dtype);
    }
    EXPECT_EQ(off, blob.size());
    // Every type gguf-py decodes that kiln reads is covered (q8_1 and q8_k it cannot: dequant_test covers
    // them; gguf-py's NVFP4 is ggml's block layout, not kiln's kNvfp4, which no GGUF file carries).
    for (core::DType t :
         {core::DType::kF32, core::DType::kF16, core::DType::kBF16, core::DType::kQ4_0, core::DType::kQ4_1,
          core::DType::kQ5_0, core::DType::kQ5_1, core::DType::kQ8_0, core::DType::kQ2_K, core::DType::kQ3_K,
          core::DType::kQ4_K, core::DType::kQ5_K, core::DType::kQ6_K, core::DType::kMxfp4}) {
        EXPECT_TRUE(seen.count(t)) << core::dtype_name(t) << " missing from " << golden_path();
    }
}

}  // namespace
}  // namespace kiln

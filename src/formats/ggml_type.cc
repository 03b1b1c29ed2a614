// ggml type id <-> core::DType table (see ggml_type.h).
#include "formats/ggml_type.h"

namespace kiln::formats {
namespace {

struct GgmlPair {
    GgmlType id;
    core::DType dtype;
};

constexpr GgmlPair kPairs[] = {
    {GgmlType::kF32, core::DType::kF32},     {GgmlType::kF16, core::DType::kF16},
    {GgmlType::kQ4_0, core::DType::kQ4_0},   {GgmlType::kQ4_1, core::DType::kQ4_1},
    {GgmlType::kQ5_0, core::DType::kQ5_0},   {GgmlType::kQ5_1, core::DType::kQ5_1},
    {GgmlType::kQ8_0, core::DType::kQ8_0},   {GgmlType::kQ8_1, core::DType::kQ8_1},
    {GgmlType::kQ2_K, core::DType::kQ2_K},   {GgmlType::kQ3_K, core::DType::kQ3_K},
    {GgmlType::kQ4_K, core::DType::kQ4_K},   {GgmlType::kQ5_K, core::DType::kQ5_K},
    {GgmlType::kQ6_K, core::DType::kQ6_K},   {GgmlType::kQ8_K, core::DType::kQ8_K},
    {GgmlType::kI8, core::DType::kI8},       {GgmlType::kI16, core::DType::kI16},
    {GgmlType::kI32, core::DType::kI32},     {GgmlType::kI64, core::DType::kI64},
    {GgmlType::kF64, core::DType::kF64},     {GgmlType::kBF16, core::DType::kBF16},
    {GgmlType::kMxfp4, core::DType::kMxfp4},   {GgmlType::kIq4Nl, core::DType::kIq4Nl},
    {GgmlType::kIq4Xs, core::DType::kIq4Xs},   {GgmlType::kTq1_0, core::DType::kTq1_0},
    {GgmlType::kTq2_0, core::DType::kTq2_0},
};

// Names for every id in ggml.h up to MXFP4 (39), so errors can say what an unsupported tensor is.
// clang-format off
constexpr const char* kNames[] = {
    "f32", "f16", "q4_0", "q4_1", "q4_2 (removed)", "q4_3 (removed)", "q5_0", "q5_1",             //  0..7
    "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k",                               //  8..15
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",                // 16..23
    "i8", "i16", "i32", "i64", "f64", "iq1_m", "bf16", "q4_0_4_4 (removed)",                      // 24..31
    "q4_0_4_8 (removed)", "q4_0_8_8 (removed)", "tq1_0", "tq2_0", "iq4_nl_4_4 (removed)",        // 32..36
    "iq4_nl_4_8 (removed)", "iq4_nl_8_8 (removed)", "mxfp4",                                      // 37..39
};
// clang-format on

}  // namespace

std::optional<core::DType> dtype_from_ggml(uint32_t ggml_type_id) {
    for (const GgmlPair& p : kPairs)
        if (uint32_t(p.id) == ggml_type_id) return p.dtype;
    return std::nullopt;
}

std::optional<uint32_t> ggml_from_dtype(core::DType dtype) {
    for (const GgmlPair& p : kPairs)
        if (p.dtype == dtype) return uint32_t(p.id);
    return std::nullopt;
}

const char* ggml_type_name(uint32_t ggml_type_id) {
    if (ggml_type_id < sizeof(kNames) / sizeof(kNames[0])) return kNames[ggml_type_id];
    return "unknown";
}

}  // namespace kiln::formats

// DType table. Block byte sizes follow ggml-common.h (block_q4_0 = fp16 d + 16 nibble bytes, ...,
// block_mxfp4 = E8M0 e + 16 nibble bytes); nvfp4, e4m3_b32 and mxfp8 are kiln's own blocks (see dtype.h).
#include "core/dtype.h"

#include <cctype>
#include <string>

namespace kiln::core {
namespace {

constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4, true, false},      {"f16", 1, 2, true, false},     {"bf16", 1, 2, true, false},
    {"f64", 1, 8, true, false},      {"i8", 1, 1, false, false},     {"u8", 1, 1, false, false},
    {"i16", 1, 2, false, false},     {"i32", 1, 4, false, false},    {"i64", 1, 8, false, false},
    {"bool", 1, 1, false, false},    {"f8_e4m3", 1, 1, false, false}, {"f8_e5m2", 1, 1, false, false},
    {"q4_0", 32, 18, false, true},   {"q4_1", 32, 20, false, true},  {"q5_0", 32, 22, false, true},
    {"q5_1", 32, 24, false, true},   {"q8_0", 32, 34, false, true},  {"q8_1", 32, 36, false, true},
    {"q2_k", 256, 84, false, true},  {"q3_k", 256, 110, false, true}, {"q4_k", 256, 144, false, true},
    {"q5_k", 256, 176, false, true}, {"q6_k", 256, 210, false, true}, {"q8_k", 256, 292, false, true},
    {"mxfp4", 32, 17, false, true},  {"nvfp4", 16, 10, false, true}, {"e4m3_b32", 32, 36, false, true},
    {"mxfp8", 32, 33, false, true},  {"iq4_nl", 32, 18, false, true}, {"iq4_xs", 256, 136, false, true},
    {"tq1_0", 256, 54, false, true}, {"tq2_0", 256, 66, false, true},
};
constexpr int kNumTypes = sizeof(kInfos) / sizeof(kInfos[0]);
static_assert(kNumTypes == int(DType::kTq2_0) + 1, "kInfos must list every DType in order");

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfos[int(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
    std::string lower;
    for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
    for (int i = 0; i < kNumTypes; ++i)
        if (kInfos[i].name == lower) return DType(i);
    return std::nullopt;
}

std::optional<uint64_t> dtype_bytes(DType t, uint64_t num_elements) {
    const DTypeInfo& info = dtype_info(t);
    if (num_elements % info.block_size != 0) return std::nullopt;
    uint64_t blocks = num_elements / info.block_size;
    if (blocks > UINT64_MAX / info.block_bytes) return std::nullopt;
    return blocks * info.block_bytes;
}

}  // namespace kiln::core

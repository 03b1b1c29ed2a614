// libFuzzer target for the GGUF reader: parses the input with GgufFile::parse and, when it parses,
// reads every metadata value, every byte of every tensor and dequantizes each tensor's first row, so
// ASan/UBSan flag any read the parser's bounds checks let through. Corpus: tests/fuzz/corpus/gguf.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/gguf.h"
#include "kernels/ref/dequant.h"

using kiln::formats::GgufFile;
using kiln::formats::GgufTensorInfo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kiln::core::Result<GgufFile> r = GgufFile::parse(data, size, "fuzz.gguf");
    if (!r.is_ok()) return 0;
    const GgufFile& g = *r;
    for (const std::string& key : g.keys()) {
        const kiln::formats::GgufValue* v = g.find(key);
        if (v) (void)v->to_string(4);
        (void)g.get_string_array(key);
        (void)g.get_float_array(key);
        (void)g.get_int_array(key);
    }
    volatile uint8_t sink = 0;
    std::vector<float> row;
    for (const GgufTensorInfo& t : g.tensors()) {
        const uint8_t* p = g.tensor_data(t);
        uint8_t x = 0;
        for (uint64_t i = 0; i < t.num_bytes; ++i) x ^= p[i];
        sink = sink ^ x;
        if (t.num_elements() == 0 || !kiln::kernels::ref::dequant_supported(t.dtype)) continue;
        const uint64_t row_len = t.shape.empty() ? 1 : t.shape.back();
        row.resize(size_t(row_len));  // a row's bytes lie inside the file, so this is bounded by the input
        kiln::core::Status st = kiln::kernels::ref::dequantize_row(t.dtype, p, row.data(), int64_t(row_len));
        if (!st.is_ok()) __builtin_trap();  // parse guarantees whole blocks per row
    }
    return 0;
}

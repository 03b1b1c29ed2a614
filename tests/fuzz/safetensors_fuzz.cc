// libFuzzer target for the safetensors reader: any input must parse or fail with a Status, never
// crash; after a successful parse every tensor byte must be readable (ASan checks the bounds).
#include <cstddef>
#include <cstdint>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto file = kiln::formats::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    if (!file.is_ok()) return 0;
    volatile uint8_t sink = 0;
    for (const kiln::formats::SafetensorsTensorInfo& t : file->tensors()) {
        const uint8_t* p = file->tensor_data(t);
        uint8_t acc = 0;
        for (uint64_t i = 0; i < t.num_bytes; ++i) acc ^= p[i];
        sink = sink ^ acc;
        (void)t.num_elements();
    }
    for (const auto& [k, v] : file->metadata()) sink = sink ^ uint8_t(k.size() + v.size());
    (void)sink;
    return 0;
}

// GgufWriter: builds a GGUF v3 file (spec: ggml docs/gguf.md) from metadata values and tensors.
// Metadata keeps first-insertion order (set() on an existing key replaces its value in place).
// Alignment is general.alignment when set (it must then be a nonzero power-of-two u32), else 32;
// tensor data starts at an aligned offset and every tensor is padded to the alignment, in the order
// the tensors were added (a file without tensors ends right after the metadata, as gguf-py writes
// vocab-only files). Values are written with exactly their GgufType, so copying a GgufFile's
// metadata into a writer reproduces it byte for byte.
// Preconditions of add_tensor (programming errors, checked with KILN_CHECK): a name not added before,
// at most 4 dims, a row length that is a whole number of blocks, num_bytes matching the shape, and
// data that stays alive until write()/to_bytes(). Malformed GgufValues (array items whose type is not
// the array's element type, nesting past kGgufMaxArrayDepth) make write() fail with a Status.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/gguf.h"

namespace kiln::formats {

class GgufWriter {
public:
    void set(const std::string& key, GgufValue v);
    void add_tensor(std::string name, core::DType dtype, std::vector<uint64_t> shape /* row-major */, const void* data,
                    uint64_t num_bytes);

    // Checks every value and general.alignment; write() and to_bytes() call it.
    core::Status validate() const;
    core::Status write(const std::string& path) const;
    // The whole file in memory (tests, fuzz seeds). KILN_CHECKs validate().
    std::vector<uint8_t> to_bytes() const;

    class Sink;  // byte destination of emit(); defined in gguf_writer.cc

private:
    struct Tensor {
        std::string name;
        core::DType dtype;
        std::vector<uint64_t> shape;  // row-major
        const void* data;
        uint64_t num_bytes;
    };
    void emit(Sink& out) const;
    uint64_t alignment() const;

    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<Tensor> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace kiln::formats

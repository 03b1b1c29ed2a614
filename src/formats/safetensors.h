// safetensors reader and writer, plus sharded checkpoints (model.safetensors.index.json).
// Spec: huggingface/safetensors README "Format": u64 little-endian header length N, N bytes of JSON
// {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}},
// then the data section; offsets are relative to the start of the data section.
// Invariants after a successful open/parse: every tensor's [begin, end) lies inside the data
// section, end - begin == elements * dtype size, no two tensors overlap, names are unique. The
// reader accepts holes between tensors (the reference implementation rejects them); the writer
// never makes any: like HF, it orders tensors by element size (largest first) so each tensor is
// aligned to its element size, and pads the header with spaces so the data section starts at a
// multiple of 8.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace kiln::formats {

// Caps on what a header may claim before anything is allocated from it.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t(100) << 20;
inline constexpr size_t kSafetensorsMaxRank = 16;

// safetensors dtype string ("F32", "BF16", "F8_E4M3", ...) <-> DType. nullopt when there is none.
std::optional<core::DType> safetensors_dtype_from_name(std::string_view name);
std::optional<std::string_view> safetensors_dtype_name(core::DType dtype);

struct SafetensorsTensorInfo {
    std::string name;
    core::DType dtype = core::DType::kF32;
    std::vector<uint64_t> shape;  // row-major, innermost last
    uint64_t offset = 0;          // relative to the data section
    uint64_t num_bytes = 0;
    uint64_t num_elements() const;
};

class SafetensorsFile {
public:
    static core::Result<SafetensorsFile> open(const std::string& path);
    // Parses an in-memory image (fuzzing, tests) without copying: `data` must outlive the object.
    // `name` is used in error messages.
    static core::Result<SafetensorsFile> parse(const uint8_t* data, size_t size, const std::string& name);

    const std::string& path() const { return path_; }
    uint64_t data_offset() const { return data_offset_; }  // 8 + header length
    // Tensors in data order (ascending offset).
    const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
    const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
    const uint8_t* tensor_data(const SafetensorsTensorInfo& t) const { return base_ + data_offset_ + t.offset; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    std::shared_ptr<core::MappedFile> file_;  // null when parsed from memory
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    std::string path_;
    uint64_t data_offset_ = 0;
    std::vector<SafetensorsTensorInfo> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// A checkpoint spread over one or more safetensors files. Each shard is opened (mapped) once.
class SafetensorsSet {
public:
    struct Entry {
        size_t shard_idx = 0;
        size_t tensor_idx = 0;
    };

    // `path`: a .safetensors file; or a directory holding model.safetensors.index.json (weight_map
    // names the shard of each tensor), or else model.safetensors, or else any *.safetensors files.
    // A tensor name present in two shards, a weight_map entry whose shard lacks the tensor, or a
    // shard name that leaves the directory is an error.
    static core::Result<SafetensorsSet> open(const std::string& path);

    const std::vector<SafetensorsFile>& shards() const { return shards_; }
    size_t num_tensors() const { return order_.size(); }
    // i-th tensor in shard order, then data order within a shard.
    const SafetensorsTensorInfo& tensor(size_t i) const;
    const uint8_t* tensor_data(size_t i) const;
    const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
    const uint8_t* find_data(const std::string& name) const;
    // __metadata__ of the first shard (HF writes the same metadata into every shard).
    const std::map<std::string, std::string>& metadata() const;

private:
    core::Status add_shard(SafetensorsFile file);

    std::vector<SafetensorsFile> shards_;
    std::vector<Entry> order_;
    std::map<std::string, size_t> index_;  // name -> position in order_
};

// One tensor to write. `data` must hold exactly `num_bytes` == elements * dtype size bytes.
struct SafetensorsTensorIn {
    std::string name;
    core::DType dtype = core::DType::kF32;
    std::vector<uint64_t> shape;
    const void* data = nullptr;
    uint64_t num_bytes = 0;
};

core::Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensorIn>& tensors,
                               const std::map<std::string, std::string>& metadata);
// The same file image in memory (tests, small files).
core::Result<std::vector<uint8_t>> safetensors_to_bytes(const std::vector<SafetensorsTensorIn>& tensors,
                                                        const std::map<std::string, std::string>& metadata);

}  // namespace kiln::formats

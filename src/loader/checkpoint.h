// Checkpoint: kiln's in-memory view of a model file of any supported format (GGUF, HF safetensors
// directory or file, llama2.c .bin): the config, the tensors and the metadata to carry along.
// Invariants of a loaded Checkpoint:
// - Tensor names are canonical GGUF names (token_embd.weight, blk.N.attn_q.weight, ...,
//   output_norm.weight, output.weight; output.weight is absent when embeddings are tied). Tensors
//   a format adds that kiln does not know keep their file names.
// - Q/K rows (attn_q/attn_k weights and biases, attn_q_norm/attn_k_norm) are in Meta's
//   interleaved-pair RoPE order, whatever the file held: HF files and GGUF qwen2/qwen3 files
//   (rotate-half order) are permuted on load, into buffers the Checkpoint owns.
// - Every tensor of the architecture is present with the shape the config implies and a dtype kiln
//   can read (check_checkpoint_tensors), so model code may index without re-checking.
// - TensorRef::data stays valid as long as the Checkpoint (or a copy of it) lives: `owners` holds
//   the file mappings and owned buffers. Data is mmap'd and read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "kernels/ref/transformer.h"
#include "loader/metadata_json.h"
#include "loader/model_config.h"
#include "loader/weight_names.h"

namespace kiln::loader {

struct TensorRef {
    std::string name;
    core::DType dtype = core::DType::kF32;
    std::vector<uint64_t> shape;  // row-major, innermost last
    const uint8_t* data = nullptr;
    uint64_t num_bytes = 0;
    // I8 weight matrices only (W8A8 per output channel, from compressed-tensors INT8): one f32 scale
    // per row, row r = int8 values * row_scale[r]; owned like data.
    const float* row_scale = nullptr;
    // The buffer holding `data` when this tensor alone owns it (converted at load: decompressed or
    // RoPE-permuted), so that dropping it frees the memory; null when `data` lies in a file mapping
    // or a buffer in Checkpoint::owners.
    std::shared_ptr<const void> storage;
    uint64_t num_elements() const;
};

// safetensors __metadata__ key carrying a GGUF tokenizer as JSON (metadata_json.h).
inline constexpr const char* kGgufTokenizerMetadataKey = "kiln.gguf_tokenizer";

struct Checkpoint {
    std::string format;  // "gguf", "safetensors" or "llama2c"
    std::string path;
    ModelConfig config;
    std::vector<TensorRef> tensors;  // file order
    // Metadata to carry into other formats, in file order: from a GGUF, every key except
    // general.architecture, general.alignment and the {arch}.* hyper-parameters; from safetensors,
    // the GGUF tokenizer carried in kGgufTokenizerMetadataKey.
    GgufMetadata gguf_metadata;
    std::string tokenizer_path;                                  // tokenizer.json next to an HF checkpoint, else ""
    std::optional<formats::GenerationConfig> generation_config;  // generation_config.json, if any
    std::vector<std::shared_ptr<const void>> owners;             // keep TensorRef::data alive
    std::shared_ptr<const formats::GgufFile> gguf;               // the parsed file when format is "gguf"

    const TensorRef* find(const std::string& name) const;
    const formats::GgufValue* find_metadata(const std::string& key) const;
    uint64_t num_params() const;
};

// Detects the format: a directory is an HF checkpoint, "GGUF" magic a GGUF file, a .safetensors
// name (or a safetensors-looking header) a safetensors file with config.json beside it, anything
// else a llama2.c checkpoint.
core::Result<Checkpoint> load_checkpoint(const std::string& path);
// Drops the layers from n on (their blk.<i>.* tensors) and says so in the config: the first n layers
// over the same tensor data (kiln convert --layers, self-speculation's draft). kInvalidArgument unless
// 1 <= n < the checkpoint's layer count.
core::Status keep_first_layers(Checkpoint& checkpoint, int64_t n);
// Moves every tensor except those named in `keep` into one anonymous mapping (huge pages advised)
// that the Checkpoint owns, so background reclaim of file-backed pages cannot slow a benchmark or a
// server; the file pages it copied from are then released (core::release_mapped_pages). `keep`
// names tensors left where they are (the matrices the model reads only through repacked copies:
// copying them would cost their size for nothing). kOutOfMemory when it cannot be allocated.
core::Status copy_to_anonymous(Checkpoint& checkpoint, const std::vector<std::string>& keep = {});
// Lets go of the named tensors' bytes, for matrices that, once repacked, the model never reads
// again: a tensor that owns its buffer (TensorRef::storage) frees it and is left with data = null;
// file-mapped bytes are released from the resident set (core::release_mapped_pages) and stay
// readable. Returns the bytes freed or released.
uint64_t release_tensor_bytes(Checkpoint& checkpoint, const std::vector<std::string>& names);
core::Result<Checkpoint> load_gguf_checkpoint(const std::string& path);
core::Result<Checkpoint> load_hf_checkpoint(const std::string& path);
core::Result<Checkpoint> load_llama2c_checkpoint(const std::string& path);

// The architecture's tensors, each present with the shape the config implies (kCorrupt naming the
// tensor otherwise) and a usable dtype (kUnsupported otherwise): weight matrices one that
// kernels::ref::dequantize_row decodes (or I8 with row scales), norm weights and biases f32, f16 or bf16. Extra tensors are
// allowed.
core::Status check_checkpoint_tensors(const Checkpoint& checkpoint);

// True when `t` can serve as a weight matrix: a dtype kernels::ref::dequantize_row decodes, or I8
// with row scales.
bool matrix_dtype_supported(const TensorRef& t);
// The weight view of a 2-D `t` (row scales included); `t` must be a whole number of blocks per row
// (KILN_CHECK, as make_weight_view).
kernels::ref::WeightView weight_view_of(const TensorRef& t);

// All of `t` (float, block-quantized, or I8 with row scales) decoded to f32 into dst [num_elements].
core::Status dequantize_tensor_to(const TensorRef& t, float* dst);

// A copy of `t` whose rows are permuted into `to` RoPE order (weight_names.h) in a new buffer that
// is appended to `owners` (then any permuted row scales); the copy's `storage` is null.
core::Result<TensorRef> permute_tensor(const TensorRef& t, int64_t num_heads, RopeOrder to,
                                       std::vector<std::shared_ptr<const void>>* owners);

}  // namespace kiln::loader

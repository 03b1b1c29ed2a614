// llama2.c checkpoint reader (karpathy/llama2.c run.c, legacy "version 0" export). Layout: 7 x int32
// header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means an untied classifier follows), then float32 arrays, each stacked over layers:
// token_embedding_table [vocab, dim], rms_att_weight [layers, dim], wq [layers, dim, dim],
// wk [layers, kv_dim, dim], wv [layers, kv_dim, dim], wo [layers, dim, dim],
// rms_ffn_weight [layers, dim], w1 [layers, hidden, dim], w2 [layers, dim, hidden],
// w3 [layers, hidden, dim], rms_final_weight [dim], freq_cis_real [seq_len, head_size / 2],
// freq_cis_imag [seq_len, head_size / 2], then wcls [vocab, dim] only when untied.
// Q/K rows are in Meta's order (RoPE on interleaved pairs). Invariants after open/parse: every
// header value is positive and under its cap, n_heads divides dim, n_kv_heads divides n_heads, the
// head size is even, and every array lies inside the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"

namespace kiln::formats {

struct Llama2cHeader {
    int32_t dim = 0;
    int32_t hidden_dim = 0;
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t vocab_size = 0;  // absolute value
    int32_t seq_len = 0;
    bool shared_classifier = true;  // header vocab_size was positive
    int32_t head_size() const { return dim / n_heads; }
    int32_t kv_dim() const { return head_size() * n_kv_heads; }
};

// One float32 array of the file (stacked over layers where the format stacks it).
struct Llama2cArray {
    std::string name;             // "token_embedding_table", "wq", ... as in run.c
    std::vector<uint64_t> shape;  // row-major
    uint64_t offset = 0;          // byte offset in the file
    uint64_t num_bytes = 0;
};

class Llama2cFile {
public:
    static constexpr size_t kHeaderBytes = 28;

    static core::Result<Llama2cFile> open(const std::string& path);
    // In-memory image; `data` must outlive the object. `name` is used in error messages.
    static core::Result<Llama2cFile> parse(const uint8_t* data, size_t size, const std::string& name);

    const std::string& path() const { return path_; }
    const Llama2cHeader& header() const { return header_; }
    const std::vector<Llama2cArray>& arrays() const { return arrays_; }
    const Llama2cArray* find(const std::string& name) const;
    const uint8_t* array_data(const Llama2cArray& a) const { return base_ + a.offset; }

private:
    std::shared_ptr<core::MappedFile> file_;
    const uint8_t* base_ = nullptr;
    std::string path_;
    Llama2cHeader header_;
    std::vector<Llama2cArray> arrays_;
};

}  // namespace kiln::formats

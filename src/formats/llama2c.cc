// llama2.c checkpoint reader (see llama2c.h).
#include "formats/llama2c.h"

#include "core/bytes.h"

namespace kiln::formats {
namespace {

using core::StatusCode;

constexpr int32_t kMaxDim = 1 << 16;
constexpr int32_t kMaxHidden = 1 << 20;
constexpr int32_t kMaxLayers = 1024;
constexpr int32_t kMaxHeads = 1024;
constexpr int32_t kMaxVocab = 1 << 22;
constexpr int32_t kMaxSeqLen = 1 << 24;
constexpr uint32_t kV1Magic = 0x616b3432;  // "ak42": llama2.c's later export versions

core::Result<Llama2cHeader> parse_header(const uint8_t* data, size_t size, const std::string& name) {
    if (size < Llama2cFile::kHeaderBytes)
        return core::error(StatusCode::kCorrupt) << name << ": " << size << " bytes, shorter than the "
                                                 << Llama2cFile::kHeaderBytes << "-byte llama2.c header";
    if (uint32_t(core::load_i32_le(data)) == kV1Magic)
        return core::error(StatusCode::kUnsupported) << name << ": llama2.c versioned export (magic \"ak42\") is "
                                                     << "not supported; export with the legacy (version 0) format";
    int32_t v[7];
    for (int i = 0; i < 7; ++i) v[i] = core::load_i32_le(data + 4 * i);
    Llama2cHeader h;
    h.dim = v[0];
    h.hidden_dim = v[1];
    h.n_layers = v[2];
    h.n_heads = v[3];
    h.n_kv_heads = v[4];
    h.shared_classifier = v[5] > 0;
    h.vocab_size = v[5] == INT32_MIN ? 0 : (v[5] < 0 ? -v[5] : v[5]);
    h.seq_len = v[6];
    struct Field {
        const char* name;
        int32_t value;
        int32_t max;
        int byte_offset;
    };
    const Field fields[] = {{"dim", h.dim, kMaxDim, 0},
                            {"hidden_dim", h.hidden_dim, kMaxHidden, 4},
                            {"n_layers", h.n_layers, kMaxLayers, 8},
                            {"n_heads", h.n_heads, kMaxHeads, 12},
                            {"n_kv_heads", h.n_kv_heads, kMaxHeads, 16},
                            {"vocab_size", h.vocab_size, kMaxVocab, 20},
                            {"seq_len", h.seq_len, kMaxSeqLen, 24}};
    for (const Field& f : fields)
        if (f.value <= 0 || f.value > f.max)
            return core::error(StatusCode::kCorrupt)
                   << name << ": header " << f.name << " " << f.value << " at byte offset " << f.byte_offset
                   << " is outside [1, " << f.max << "] (not a llama2.c checkpoint?)";
    if (h.dim % h.n_heads != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": header n_heads " << h.n_heads << " does not divide dim " << h.dim;
    if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": header n_kv_heads " << h.n_kv_heads << " does not divide n_heads " << h.n_heads;
    if (h.head_size() % 2 != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": head size " << h.head_size() << " is odd (RoPE rotates pairs)";
    return h;
}

}  // namespace

core::Result<Llama2cFile> Llama2cFile::open(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(core::MappedFile mapped, core::MappedFile::open(path));
    auto file = std::make_shared<core::MappedFile>(std::move(mapped));
    KILN_ASSIGN_OR_RETURN(Llama2cFile f, parse(file->data(), file->size(), path));
    f.file_ = std::move(file);
    return f;
}

core::Result<Llama2cFile> Llama2cFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    KILN_ASSIGN_OR_RETURN(Llama2cHeader h, parse_header(data, size, name));
    Llama2cFile f;
    f.base_ = data;
    f.path_ = name;
    f.header_ = h;
    // The caps keep every product below 2^62 bytes.
    const uint64_t dim = uint64_t(h.dim), hidden = uint64_t(h.hidden_dim), layers = uint64_t(h.n_layers);
    const uint64_t vocab = uint64_t(h.vocab_size), kv_dim = uint64_t(h.kv_dim()), seq = uint64_t(h.seq_len);
    const uint64_t half_head = uint64_t(h.head_size()) / 2;
    std::vector<std::pair<const char*, std::vector<uint64_t>>> layout = {
        {"token_embedding_table", {vocab, dim}}, {"rms_att_weight", {layers, dim}}, {"wq", {layers, dim, dim}},
        {"wk", {layers, kv_dim, dim}},           {"wv", {layers, kv_dim, dim}},     {"wo", {layers, dim, dim}},
        {"rms_ffn_weight", {layers, dim}},       {"w1", {layers, hidden, dim}},     {"w2", {layers, dim, hidden}},
        {"w3", {layers, hidden, dim}},           {"rms_final_weight", {dim}},       {"freq_cis_real", {seq, half_head}},
        {"freq_cis_imag", {seq, half_head}},
    };
    if (!h.shared_classifier) layout.push_back({"wcls", {vocab, dim}});
    uint64_t offset = kHeaderBytes;
    for (auto& [array_name, shape] : layout) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        Llama2cArray a{array_name, shape, offset, n * 4};
        if (a.num_bytes > size - offset)
            return core::error(StatusCode::kCorrupt)
                   << name << ": array " << array_name << " (" << a.num_bytes << " bytes at byte offset " << offset
                   << ") runs past the end of the file (" << size << " bytes)";
        offset += a.num_bytes;
        f.arrays_.push_back(std::move(a));
    }
    return f;
}

const Llama2cArray* Llama2cFile::find(const std::string& name) const {
    for (const Llama2cArray& a : arrays_)
        if (a.name == name) return &a;
    return nullptr;
}

}  // namespace kiln::formats

// safetensors reader/writer (see safetensors.h). Every header value is checked before use: the
// header length against the file size and a cap, each shape product against overflow, each byte
// range against the data section, and the ranges against each other.
#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/bytes.h"
#include "formats/json_brief.h"

namespace kiln::formats {
namespace {

using core::DType;
using core::StatusCode;
using nlohmann::json;

struct DTypeName {
    const char* name;
    DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"F32", DType::kF32}, {"F16", DType::kF16},   {"BF16", DType::kBF16},      {"F64", DType::kF64},
    {"I8", DType::kI8},   {"U8", DType::kU8},     {"I16", DType::kI16},        {"I32", DType::kI32},
    {"I64", DType::kI64}, {"BOOL", DType::kBool}, {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2},
};

std::string supported_dtype_list() {
    std::string s;
    for (const DTypeName& d : kDTypeNames) s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

std::optional<uint64_t> json_u64(const json& j) {
    if (j.is_number_unsigned()) return j.get<uint64_t>();
    if (j.is_number_integer() && j.get<int64_t>() >= 0) return uint64_t(j.get<int64_t>());
    return std::nullopt;
}

// One tensor entry of the header. `data_size` is the size of the data section.
core::Result<SafetensorsTensorInfo> parse_tensor_entry(const std::string& where, const std::string& name,
                                                       const json& entry, uint64_t data_size) {
    const std::string pre = where + ": tensor '" + name + "': ";
    if (!entry.is_object()) return core::error(StatusCode::kCorrupt) << pre << "entry is not a JSON object";
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string())
        return core::error(StatusCode::kCorrupt) << pre << "missing or non-string \"dtype\"";
    if (sh == entry.end() || !sh->is_array())
        return core::error(StatusCode::kCorrupt) << pre << "missing or non-array \"shape\"";
    if (off == entry.end() || !off->is_array() || off->size() != 2)
        return core::error(StatusCode::kCorrupt) << pre << "\"data_offsets\" must be an array [begin, end]";

    SafetensorsTensorInfo t;
    t.name = name;
    std::string dtype_str = dt->get<std::string>();
    std::optional<DType> dtype = safetensors_dtype_from_name(dtype_str);
    if (!dtype)
        return core::error(StatusCode::kUnsupported)
               << where << ": tensor '" << name << "': dtype '" << dtype_str
               << "' is not supported (supported: " << supported_dtype_list() << ")";
    t.dtype = *dtype;
    if (sh->size() > kSafetensorsMaxRank)
        return core::error(StatusCode::kCorrupt)
               << pre << "shape has " << sh->size() << " dimensions, over the limit of " << kSafetensorsMaxRank;
    uint64_t num_elements = 1;
    for (const json& d : *sh) {
        std::optional<uint64_t> v = json_u64(d);
        if (!v)
            return core::error(StatusCode::kCorrupt)
                   << pre << "shape entry " << json_brief(d) << " is not a non-negative integer";
        if (*v != 0 && num_elements > UINT64_MAX / *v)
            return core::error(StatusCode::kCorrupt)
                   << pre << "shape overflows 64 bits at dimension " << t.shape.size() << " (" << *v << ")";
        num_elements *= *v;
        t.shape.push_back(*v);
    }
    std::optional<uint64_t> begin = json_u64((*off)[0]);
    std::optional<uint64_t> end = json_u64((*off)[1]);
    if (!begin || !end)
        return core::error(StatusCode::kCorrupt) << pre << "data_offsets [" << json_brief((*off)[0]) << ", "
                                                 << json_brief((*off)[1]) << "] are not non-negative integers";
    if (*end < *begin)
        return core::error(StatusCode::kCorrupt) << pre << "data_offsets end " << *end << " before begin " << *begin;
    if (*end > data_size)
        return core::error(StatusCode::kCorrupt)
               << pre << "data_offsets end " << *end << " past the end of the data (" << data_size << " bytes)";
    std::optional<uint64_t> want = core::dtype_bytes(t.dtype, num_elements);
    if (!want)
        return core::error(StatusCode::kCorrupt)
               << pre << "shape " << core::shape_string(t.shape) << " overflows 64 bits in bytes";
    if (*end - *begin != *want)
        return core::error(StatusCode::kCorrupt)
               << pre << "data_offsets span " << (*end - *begin) << " bytes but shape " << core::shape_string(t.shape)
               << " of " << dtype_str << " needs " << *want;
    t.offset = *begin;
    t.num_bytes = *want;
    return t;
}

// Parses the JSON header; `data_size` is the size of the data section that follows it.
core::Status parse_header(const std::string& where, std::string_view header, uint64_t data_size,
                          std::vector<SafetensorsTensorInfo>* tensors, std::map<std::string, std::string>* metadata) {
    // nlohmann keeps the last of duplicate keys silently; the callback sees every top-level key.
    std::set<std::string> seen;
    std::string duplicate;
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
            if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
                duplicate = parsed.get<std::string>();
        }
        return true;
    };
    json root;
    try {
        root = json::parse(header.begin(), header.end(), on_event, /*allow_exceptions=*/false);
    } catch (const json::exception& e) {  // defensive: callbacks or conversions may still throw
        return core::error(StatusCode::kCorrupt)
               << where << ": header at byte offset 8 is not valid JSON: " << e.what();
    }
    if (root.is_discarded())
        return core::error(StatusCode::kCorrupt)
               << where << ": header at byte offset 8 (" << header.size() << " bytes) is not valid JSON";
    if (!root.is_object())
        return core::error(StatusCode::kCorrupt) << where << ": header at byte offset 8 is not a JSON object";
    if (!duplicate.empty())
        return core::error(StatusCode::kCorrupt) << where << ": header names '" << duplicate << "' twice";

    for (auto it = root.begin(); it != root.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object())
                return core::error(StatusCode::kCorrupt) << where << ": __metadata__ is not a JSON object";
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string())
                    return core::error(StatusCode::kCorrupt)
                           << where << ": __metadata__ value of '" << m.key() << "' is not a string";
                (*metadata)[m.key()] = m->get<std::string>();
            }
            continue;
        }
        KILN_ASSIGN_OR_RETURN(SafetensorsTensorInfo t, parse_tensor_entry(where, it.key(), *it, data_size));
        tensors->push_back(std::move(t));
    }

    std::stable_sort(
        tensors->begin(), tensors->end(),
        [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < tensors->size(); ++i) {
        const SafetensorsTensorInfo& prev = (*tensors)[i - 1];
        const SafetensorsTensorInfo& cur = (*tensors)[i];
        if (cur.offset < prev.offset + prev.num_bytes)
            return core::error(StatusCode::kCorrupt)
                   << where << ": tensor '" << cur.name << "' (data_offsets [" << cur.offset << ", "
                   << cur.offset + cur.num_bytes << "]) overlaps tensor '" << prev.name << "' (data_offsets ["
                   << prev.offset << ", " << prev.offset + prev.num_bytes << "])";
    }
    return core::Status::ok();
}

}  // namespace

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
    for (const DTypeName& d : kDTypeNames)
        if (name == d.name) return d.dtype;
    return std::nullopt;
}

std::optional<std::string_view> safetensors_dtype_name(DType dtype) {
    for (const DTypeName& d : kDTypeNames)
        if (dtype == d.dtype) return std::string_view(d.name);
    return std::nullopt;
}

uint64_t SafetensorsTensorInfo::num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;  // cannot overflow: checked at parse
    return n;
}

core::Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(core::MappedFile mapped, core::MappedFile::open(path));
    auto file = std::make_shared<core::MappedFile>(std::move(mapped));
    KILN_ASSIGN_OR_RETURN(SafetensorsFile f, parse(file->data(), file->size(), path));
    f.file_ = std::move(file);
    return f;
}

core::Result<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    if (size < 8)
        return core::error(StatusCode::kCorrupt)
               << name << ": " << size << " bytes, too short for the 8-byte header length";
    uint64_t header_len = core::load_u64_le(data);
    if (header_len > kSafetensorsMaxHeaderBytes)
        return core::error(StatusCode::kCorrupt)
               << name << ": header length " << header_len << " at byte offset 0 is over the limit of "
               << kSafetensorsMaxHeaderBytes << " bytes";
    if (header_len > size - 8)
        return core::error(StatusCode::kCorrupt)
               << name << ": header length " << header_len << " at byte offset 0 runs past the end of the file ("
               << size << " bytes)";
    SafetensorsFile f;
    f.base_ = data;
    f.size_ = size;
    f.path_ = name;
    f.data_offset_ = 8 + header_len;
    std::string_view header(reinterpret_cast<const char*>(data + 8), size_t(header_len));
    KILN_RETURN_IF_ERROR(parse_header(name, header, size - f.data_offset_, &f.tensors_, &f.metadata_));
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
    return f;
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- sharded checkpoints ----

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxShards = 100000;

// Shard file names from model.safetensors.index.json, in first-mention order, and the
// tensor -> shard map.
core::Status read_index(const std::string& index_path, std::vector<std::string>* shard_names,
                        std::map<std::string, std::string>* weight_map) {
    KILN_ASSIGN_OR_RETURN(std::string text, core::read_text_file(index_path, size_t(64) << 20));
    json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object())
        return core::error(StatusCode::kCorrupt) << index_path << ": not a valid JSON object";
    auto wm = root.find("weight_map");
    if (wm == root.end() || !wm->is_object())
        return core::error(StatusCode::kCorrupt) << index_path << ": missing \"weight_map\" object";
    std::set<std::string> seen;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it->is_string())
            return core::error(StatusCode::kCorrupt)
                   << index_path << ": weight_map entry '" << it.key() << "' is not a file name";
        std::string shard = it->get<std::string>();
        if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
            shard.find('\\') != std::string::npos)
            return core::error(StatusCode::kCorrupt) << index_path << ": weight_map entry '" << it.key() << "': shard '"
                                                     << shard << "' is not a plain file name";
        if (seen.insert(shard).second) shard_names->push_back(shard);
        if (shard_names->size() > kMaxShards)
            return core::error(StatusCode::kCorrupt) << index_path << ": more than " << kMaxShards << " shards";
        (*weight_map)[it.key()] = shard;
    }
    if (shard_names->empty()) return core::error(StatusCode::kCorrupt) << index_path << ": weight_map is empty";
    return core::Status::ok();
}

}  // namespace

core::Status SafetensorsSet::add_shard(SafetensorsFile file) {
    size_t shard_idx = shards_.size();
    for (size_t i = 0; i < file.tensors().size(); ++i) {
        const std::string& name = file.tensors()[i].name;
        auto [it, inserted] = index_.emplace(name, order_.size());
        if (!inserted)
            return core::error(StatusCode::kCorrupt) << file.path() << ": tensor '" << name << "' is also in "
                                                     << shards_[order_[it->second].shard_idx].path();
        order_.push_back({shard_idx, i});
    }
    shards_.push_back(std::move(file));
    return core::Status::ok();
}

core::Result<SafetensorsSet> SafetensorsSet::open(const std::string& path) {
    SafetensorsSet set;
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
        KILN_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
        KILN_RETURN_IF_ERROR(set.add_shard(std::move(f)));
        return set;
    }
    fs::path dir(path);
    fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
        std::vector<std::string> shard_names;
        std::map<std::string, std::string> weight_map;
        KILN_RETURN_IF_ERROR(read_index(index.string(), &shard_names, &weight_map));
        std::map<std::string, size_t> shard_idx;
        for (const std::string& s : shard_names) {
            KILN_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open((dir / s).string()));
            shard_idx[s] = set.shards_.size();
            KILN_RETURN_IF_ERROR(set.add_shard(std::move(f)));
        }
        for (const auto& [tensor, shard] : weight_map) {
            auto it = set.index_.find(tensor);
            if (it == set.index_.end() || set.order_[it->second].shard_idx != shard_idx[shard])
                return core::error(StatusCode::kCorrupt) << index.string() << ": weight_map puts tensor '" << tensor
                                                         << "' in " << shard << ", which does not hold it";
        }
        return set;
    }
    std::vector<std::string> files;
    if (fs::exists(dir / "model.safetensors", ec)) {
        files.push_back((dir / "model.safetensors").string());
    } else {
        // increment(ec), not the range-for's operator++, which throws on a read error.
        std::error_code list_ec;
        for (fs::directory_iterator it(dir, list_ec), end; !list_ec && it != end; it.increment(list_ec))
            if (it->path().extension() == ".safetensors") files.push_back(it->path().string());
        if (list_ec)
            return core::error(StatusCode::kIo) << path << ": cannot list the directory: " << list_ec.message();
        std::sort(files.begin(), files.end());
    }
    if (files.empty())
        return core::error(StatusCode::kNotFound) << path << ": no model.safetensors.index.json or .safetensors files";
    for (const std::string& f : files) {
        KILN_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::open(f));
        KILN_RETURN_IF_ERROR(set.add_shard(std::move(sf)));
    }
    return set;
}

const SafetensorsTensorInfo& SafetensorsSet::tensor(size_t i) const {
    return shards_[order_[i].shard_idx].tensors()[order_[i].tensor_idx];
}

const uint8_t* SafetensorsSet::tensor_data(size_t i) const {
    return shards_[order_[i].shard_idx].tensor_data(tensor(i));
}

const SafetensorsTensorInfo* SafetensorsSet::find_tensor(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensor(it->second);
}

const uint8_t* SafetensorsSet::find_data(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : tensor_data(it->second);
}

const std::map<std::string, std::string>& SafetensorsSet::metadata() const {
    static const std::map<std::string, std::string> kEmpty;
    return shards_.empty() ? kEmpty : shards_[0].metadata();
}

// ---- writer ----

namespace {

struct Layout {
    std::string header;         // JSON plus space padding; 8 + header.size() is a multiple of 8
    std::vector<size_t> order;  // tensor indices in data order
    uint64_t data_bytes = 0;
};

core::Result<Layout> plan_layout(const std::vector<SafetensorsTensorIn>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
    Layout layout;
    std::set<std::string> names;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const SafetensorsTensorIn& t = tensors[i];
        if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
            return core::error(StatusCode::kInvalidArgument)
                   << "safetensors writer: tensor name '" << t.name << "' is empty, reserved or repeated";
        if (!safetensors_dtype_name(t.dtype))
            return core::error(StatusCode::kUnsupported)
                   << "safetensors writer: tensor '" << t.name << "': dtype " << core::dtype_name(t.dtype)
                   << " has no safetensors equivalent";
        uint64_t n = 1;
        for (uint64_t d : t.shape) {
            if (d != 0 && n > UINT64_MAX / d)
                return core::error(StatusCode::kInvalidArgument)
                       << "safetensors writer: tensor '" << t.name << "': shape overflows";
            n *= d;
        }
        std::optional<uint64_t> want = core::dtype_bytes(t.dtype, n);
        if (!want || *want != t.num_bytes || (t.num_bytes > 0 && !t.data))
            return core::error(StatusCode::kInvalidArgument)
                   << "safetensors writer: tensor '" << t.name << "': " << t.num_bytes << " bytes of data for " << n
                   << " elements of " << core::dtype_name(t.dtype);
        layout.order.push_back(i);
    }
    // Largest element first keeps every tensor aligned to its element size without holes.
    std::stable_sort(layout.order.begin(), layout.order.end(), [&](size_t a, size_t b) {
        return core::dtype_info(tensors[a].dtype).block_bytes > core::dtype_info(tensors[b].dtype).block_bytes;
    });
    nlohmann::ordered_json root = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json meta = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) meta[k] = v;
        root["__metadata__"] = std::move(meta);
    }
    for (size_t i : layout.order) {
        const SafetensorsTensorIn& t = tensors[i];
        nlohmann::ordered_json e;
        e["dtype"] = std::string(*safetensors_dtype_name(t.dtype));
        e["shape"] = t.shape;
        e["data_offsets"] = {layout.data_bytes, layout.data_bytes + t.num_bytes};
        root[t.name] = std::move(e);
        layout.data_bytes += t.num_bytes;
    }
    try {
        layout.header = root.dump();
    } catch (const nlohmann::json::exception& e) {
        return core::error(StatusCode::kInvalidArgument)
               << "safetensors writer: header is not valid UTF-8: " << e.what();
    }
    while ((8 + layout.header.size()) % 8 != 0) layout.header += ' ';
    return layout;
}

}  // namespace

core::Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensorIn>& tensors,
                               const std::map<std::string, std::string>& metadata) {
    KILN_ASSIGN_OR_RETURN(Layout layout, plan_layout(tensors, metadata));
    std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return core::error(StatusCode::kIo) << tmp << ": cannot create";
        uint8_t len[8];
        core::store_u64_le(layout.header.size(), len);
        out.write(reinterpret_cast<const char*>(len), 8);
        out.write(layout.header.data(), std::streamsize(layout.header.size()));
        for (size_t i : layout.order)
            out.write(static_cast<const char*>(tensors[i].data), std::streamsize(tensors[i].num_bytes));
        out.flush();
        if (!out) return core::error(StatusCode::kIo) << tmp << ": write failed";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return core::error(StatusCode::kIo) << path << ": cannot rename from " << tmp << ": " << ec.message();
    return core::Status::ok();
}

core::Result<std::vector<uint8_t>> safetensors_to_bytes(const std::vector<SafetensorsTensorIn>& tensors,
                                                        const std::map<std::string, std::string>& metadata) {
    KILN_ASSIGN_OR_RETURN(Layout layout, plan_layout(tensors, metadata));
    std::vector<uint8_t> bytes(8 + layout.header.size() + layout.data_bytes);
    core::store_u64_le(layout.header.size(), bytes.data());
    std::memcpy(bytes.data() + 8, layout.header.data(), layout.header.size());
    uint8_t* p = bytes.data() + 8 + layout.header.size();
    for (size_t i : layout.order) {
        if (tensors[i].num_bytes) std::memcpy(p, tensors[i].data, tensors[i].num_bytes);
        p += tensors[i].num_bytes;
    }
    return bytes;
}

}  // namespace kiln::formats

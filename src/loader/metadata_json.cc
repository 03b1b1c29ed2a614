// GGUF metadata <-> JSON (see metadata_json.h).
#include "loader/metadata_json.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln::loader {
namespace {

using core::StatusCode;
using formats::GgufType;
using formats::GgufValue;
using nlohmann::json;

uint64_t unsigned_max(GgufType t) {
    switch (t) {
        case GgufType::kU8:
            return 0xff;
        case GgufType::kU16:
            return 0xffff;
        case GgufType::kU32:
            return 0xffffffffu;
        default:
            return UINT64_MAX;
    }
}

int64_t signed_max(GgufType t) {
    switch (t) {
        case GgufType::kI8:
            return INT8_MAX;
        case GgufType::kI16:
            return INT16_MAX;
        case GgufType::kI32:
            return INT32_MAX;
        default:
            return INT64_MAX;
    }
}

std::optional<GgufType> type_from_name(const std::string& name) {
    for (uint32_t i = 0; i <= uint32_t(GgufType::kF64); ++i)
        if (name == formats::gguf_type_name(GgufType(i))) return GgufType(i);
    return std::nullopt;
}

// Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), as nlohmann's dump demands.
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n >= s.size()) return false;  // truncated sequence
        for (size_t k = 1; k <= n; ++k) {
            unsigned char cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

json encode_string(const std::string& s) {
    if (valid_utf8(s)) return s;
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(2 * s.size());
    for (unsigned char c : s) {
        hex += kHex[c >> 4];
        hex += kHex[c & 15];
    }
    return json{{"hex", hex}};
}

std::optional<std::string> decode_string(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (!j.is_object() || j.size() != 1 || !j.contains("hex") || !j["hex"].is_string()) return std::nullopt;
    const std::string& hex = j["hex"].get_ref<const std::string&>();
    if (hex.size() % 2 != 0) return std::nullopt;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    std::string out;
    for (size_t i = 0; i < hex.size(); i += 2) {
        int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        out += char(hi * 16 + lo);
    }
    return out;
}

json encode_value(const GgufValue& v) {
    if (formats::gguf_is_unsigned(v.type)) return v.u;
    if (formats::gguf_is_signed(v.type)) return v.i;
    switch (v.type) {
        case GgufType::kBool:
            return v.u != 0;
        case GgufType::kF32:
        case GgufType::kF64:
            if (std::isnan(v.f)) return "nan";
            if (std::isinf(v.f)) return v.f > 0 ? "inf" : "-inf";
            return v.f;
        case GgufType::kString:
            return encode_string(v.s);
        case GgufType::kArray: {
            json items = json::array();
            for (const GgufValue& e : v.array) items.push_back(encode_value(e));
            return json{{"elem_type", formats::gguf_type_name(v.elem_type)}, {"items", std::move(items)}};
        }
        default:
            return nullptr;
    }
}

struct Decoder {
    std::string where;
    uint64_t budget = formats::kGgufMaxMetadataElements;

    core::Status bad(const std::string& key, const std::string& what) const {
        return core::error(StatusCode::kCorrupt) << where << ": GGUF metadata '" << key << "': " << what;
    }

    core::Result<GgufValue> decode(const std::string& key, const json& j, GgufType t, uint32_t depth) {
        if (budget == 0) return bad(key, "too many elements");
        --budget;
        GgufValue v;
        v.type = t;
        if (formats::gguf_is_unsigned(t)) {
            if (!j.is_number_integer() || (!j.is_number_unsigned() && j.get<int64_t>() < 0) ||
                j.get<uint64_t>() > unsigned_max(t))
                return bad(key, "value out of range for " + std::string(formats::gguf_type_name(t)));
            v.u = j.get<uint64_t>();
        } else if (formats::gguf_is_signed(t)) {
            if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)))
                return bad(key, "value is not a signed integer");
            int64_t i = j.get<int64_t>();
            if (i > signed_max(t) || i < -signed_max(t) - 1) return bad(key, "value out of range");
            v.i = i;
        } else if (t == GgufType::kBool) {
            if (!j.is_boolean()) return bad(key, "value is not a boolean");
            v.u = j.get<bool>() ? 1 : 0;
        } else if (t == GgufType::kF32 || t == GgufType::kF64) {
            if (j.is_number()) {
                v.f = j.get<double>();
            } else if (j.is_string() && (j == "nan" || j == "inf" || j == "-inf")) {
                v.f = j == "nan" ? std::numeric_limits<double>::quiet_NaN()
                                 : (j == "inf" ? 1.0 : -1.0) * std::numeric_limits<double>::infinity();
            } else {
                return bad(key, "value is not a number");
            }
            if (t == GgufType::kF32) v.f = double(float(v.f));
        } else if (t == GgufType::kString) {
            std::optional<std::string> s = decode_string(j);
            if (!s) return bad(key, "value is not a string");
            v.s = std::move(*s);
        } else {  // array
            if (depth >= formats::kGgufMaxArrayDepth) return bad(key, "arrays nested too deep");
            if (!j.is_object() || !j.contains("elem_type") || !j["elem_type"].is_string() || !j.contains("items") ||
                !j["items"].is_array())
                return bad(key, "array value must be {\"elem_type\": T, \"items\": [...]}");
            std::optional<GgufType> et = type_from_name(j["elem_type"].get<std::string>());
            if (!et) return bad(key, "unknown element type");
            v.elem_type = *et;
            const json& items = j["items"];
            if (items.size() > budget) return bad(key, "too many elements");
            v.array.reserve(items.size());
            for (const json& e : items) {
                KILN_ASSIGN_OR_RETURN(GgufValue item, decode(key, e, *et, depth + 1));
                v.array.push_back(std::move(item));
            }
        }
        return v;
    }
};

}  // namespace

std::string gguf_metadata_to_json(const GgufMetadata& metadata) {
    json out = json::array();
    for (const auto& [key, value] : metadata) {
        json e;
        e["key"] = encode_string(key);
        e["type"] = formats::gguf_type_name(value.type);
        e["value"] = encode_value(value);
        out.push_back(std::move(e));
    }
    return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

core::Result<GgufMetadata> gguf_metadata_from_json(const std::string& text, const std::string& where) {
    json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_array())
        return core::error(StatusCode::kCorrupt) << where << ": GGUF metadata JSON is not a JSON array";
    Decoder d{where};
    GgufMetadata out;
    for (const json& e : root) {
        if (!e.is_object() || !e.contains("key") || !e.contains("type") || !e.contains("value") ||
            !e["type"].is_string())
            return core::error(StatusCode::kCorrupt) << where << ": GGUF metadata entry is not {key, type, value}";
        std::optional<std::string> key = decode_string(e["key"]);
        std::optional<GgufType> type = type_from_name(e["type"].get<std::string>());
        if (!key || !type)
            return core::error(StatusCode::kCorrupt) << where << ": GGUF metadata entry has a bad key or type";
        KILN_ASSIGN_OR_RETURN(GgufValue v, d.decode(*key, e["value"], *type, 0));
        out.emplace_back(std::move(*key), std::move(v));
    }
    return out;
}

}  // namespace kiln::loader

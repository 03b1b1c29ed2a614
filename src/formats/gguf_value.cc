// GgufValue helpers: type names, conversions, printing, equality and the gguf_* value makers.
#include <charconv>
#include <cstring>
#include <limits>
#include <sstream>

#include "formats/gguf.h"

namespace kiln::formats {
namespace {

void append_quoted(std::ostringstream& os, const std::string& s) {
    os << '"';
    for (char c : s) {
        unsigned char u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            os << '\\' << c;
        } else if (c == '\n') {
            os << "\\n";
        } else if (c == '\t') {
            os << "\\t";
        } else if (u < 0x20 || u == 0x7f) {
            static const char kHex[] = "0123456789abcdef";
            os << "\\x" << kHex[u >> 4] << kHex[u & 15];
        } else {
            os << c;
        }
    }
    os << '"';
}

template <typename F>
void append_float(std::ostringstream& os, F v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
    os.write(buf, res.ptr - buf);
}

GgufValue scalar(GgufType t) {
    GgufValue v;
    v.type = t;
    return v;
}
GgufValue make_u(GgufType t, uint64_t x) {
    GgufValue v = scalar(t);
    v.u = x;
    return v;
}
GgufValue make_i(GgufType t, int64_t x) {
    GgufValue v = scalar(t);
    v.i = x;
    return v;
}
GgufValue make_f(GgufType t, double x) {
    GgufValue v = scalar(t);
    v.f = x;
    return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::kU8:
            return "u8";
        case GgufType::kI8:
            return "i8";
        case GgufType::kU16:
            return "u16";
        case GgufType::kI16:
            return "i16";
        case GgufType::kU32:
            return "u32";
        case GgufType::kI32:
            return "i32";
        case GgufType::kF32:
            return "f32";
        case GgufType::kBool:
            return "bool";
        case GgufType::kString:
            return "string";
        case GgufType::kArray:
            return "array";
        case GgufType::kU64:
            return "u64";
        case GgufType::kI64:
            return "i64";
        case GgufType::kF64:
            return "f64";
    }
    return "unknown";
}

std::optional<int64_t> GgufValue::as_int() const {
    if (gguf_is_signed(type)) return i;
    if (gguf_is_unsigned(type) || type == GgufType::kBool) {
        if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return int64_t(u);
    }
    return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
    if (type == GgufType::kF32 || type == GgufType::kF64) return f;
    if (gguf_is_signed(type)) return double(i);
    if (gguf_is_unsigned(type)) return double(u);
    return std::nullopt;
}

std::string GgufValue::to_string(size_t max_items) const {
    std::ostringstream os;
    if (gguf_is_unsigned(type)) {
        os << u;
    } else if (gguf_is_signed(type)) {
        os << i;
    } else if (type == GgufType::kF32) {
        append_float(os, float(f));
    } else if (type == GgufType::kF64) {
        append_float(os, f);
    } else if (type == GgufType::kBool) {
        os << (u ? "true" : "false");
    } else if (type == GgufType::kString) {
        append_quoted(os, s);
    } else if (type == GgufType::kArray) {
        os << '[';
        for (size_t k = 0; k < array.size() && k < max_items; ++k)
            os << (k ? ", " : "") << array[k].to_string(max_items);
        if (array.size() > max_items) os << ", ... (" << array.size() << " " << gguf_type_name(elem_type) << ")";
        os << ']';
    }
    return os.str();
}

bool GgufValue::operator==(const GgufValue& o) const {
    if (type != o.type) return false;
    if (gguf_is_unsigned(type) || type == GgufType::kBool) return u == o.u;
    if (gguf_is_signed(type)) return i == o.i;
    if (type == GgufType::kF32 || type == GgufType::kF64) return std::memcmp(&f, &o.f, sizeof(f)) == 0;
    if (type == GgufType::kString) return s == o.s;
    return elem_type == o.elem_type && array == o.array;
}

GgufValue gguf_u8(uint8_t v) {
    return make_u(GgufType::kU8, v);
}
GgufValue gguf_i8(int8_t v) {
    return make_i(GgufType::kI8, v);
}
GgufValue gguf_u16(uint16_t v) {
    return make_u(GgufType::kU16, v);
}
GgufValue gguf_i16(int16_t v) {
    return make_i(GgufType::kI16, v);
}
GgufValue gguf_u32(uint32_t v) {
    return make_u(GgufType::kU32, v);
}
GgufValue gguf_i32(int32_t v) {
    return make_i(GgufType::kI32, v);
}
GgufValue gguf_u64(uint64_t v) {
    return make_u(GgufType::kU64, v);
}
GgufValue gguf_i64(int64_t v) {
    return make_i(GgufType::kI64, v);
}
GgufValue gguf_f32(float v) {
    return make_f(GgufType::kF32, v);
}
GgufValue gguf_f64(double v) {
    return make_f(GgufType::kF64, v);
}
GgufValue gguf_bool(bool v) {
    return make_u(GgufType::kBool, v ? 1 : 0);
}
GgufValue gguf_string(std::string v) {
    GgufValue r = scalar(GgufType::kString);
    r.s = std::move(v);
    return r;
}

GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items) {
    GgufValue r = scalar(GgufType::kArray);
    r.elem_type = elem_type;
    r.array = std::move(items);
    return r;
}

GgufValue gguf_string_array(const std::vector<std::string>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (const std::string& x : v) items.push_back(gguf_string(x));
    return gguf_array(GgufType::kString, std::move(items));
}

GgufValue gguf_f32_array(const std::vector<float>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (float x : v) items.push_back(gguf_f32(x));
    return gguf_array(GgufType::kF32, std::move(items));
}

GgufValue gguf_i32_array(const std::vector<int32_t>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (int32_t x : v) items.push_back(gguf_i32(x));
    return gguf_array(GgufType::kI32, std::move(items));
}

}  // namespace kiln::formats

// json_brief: a short rendering of a file-controlled JSON value for error messages. Scalars are
// dumped (strings cut to 60 bytes, invalid UTF-8 replaced, so dump() cannot throw); arrays and
// objects are only named by type and size, because dump() recurses and a header holding a 100k-deep
// nested array would overflow the stack.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kiln::formats {

inline std::string json_brief(const nlohmann::json& v) {
    constexpr size_t kMaxChars = 60;
    if (v.is_array()) return "array of size " + std::to_string(v.size());
    if (v.is_object()) return "object of size " + std::to_string(v.size());
    if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxChars) {
        nlohmann::json cut = v.get_ref<const std::string&>().substr(0, kMaxChars);
        return cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "...";
    }
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiln::formats

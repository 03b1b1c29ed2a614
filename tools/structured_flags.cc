#include "structured_flags.h"

#include <fstream>
#include <sstream>

namespace kiln::tools {
namespace {

bool read_all(const std::string& path, std::string& text) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    return true;
}

}  // namespace

bool parse_structured_flags(const Args& args, StructuredOutput& out, std::string* error) {
    out = {};
    int given = 0;
    if (auto v = args.get("--json-schema")) {
        ++given;
        out.kind = "json_schema";
        const size_t first = v->find_first_not_of(" \t\r\n");
        const bool inline_json = first != std::string::npos && ((*v)[first] == '{' || v->substr(first) == "true");
        if (inline_json) {
            out.value = *v;
        } else if (!read_all(*v, out.value)) {
            *error = "cannot read the JSON schema file '" + *v + "'";
            return false;
        }
    }
    if (args.has("--json-object")) ++given, out.kind = "json_object";
    if (auto v = args.get("--regex")) ++given, out.kind = "regex", out.value = *v;
    if (auto v = args.get("--grammar")) {
        ++given;
        out.kind = "grammar";
        if (!read_all(*v, out.value)) {
            *error = "cannot read the grammar file '" + *v + "'";
            return false;
        }
    }
    const std::vector<std::string> choices = args.get_all("--choice");
    if (!choices.empty()) ++given, out.kind = "choice", out.choices = choices;
    if (given > 1) {
        *error = "give at most one of --json-schema, --json-object, --regex, --choice, --grammar";
        return false;
    }
    return true;
}

}  // namespace kiln::tools

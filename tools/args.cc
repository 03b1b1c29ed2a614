// Args parser (see args.h). A lone "-" is a positional (standard input); "--" ends options.
#include "args.h"

#include <cstdio>

namespace kiln::tools {

bool Args::parse(int argc, char** argv, int first) {
    bool only_positional = false;
    for (int i = first; i < argc; ++i) {
        std::string a = argv[i];
        if (only_positional || a == "-" || a.empty() || a[0] != '-') {
            positional_.push_back(a);
            continue;
        }
        if (a == "--") {
            only_positional = true;
            continue;
        }
        std::string value;
        bool has_value = false;
        if (size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_value = true;
        }
        if (flags_.count(a)) {
            if (has_value) {
                error_ = "option " + a + " takes no value";
                return false;
            }
            set_.insert(a);
        } else if (options_.count(a)) {
            if (!has_value) {
                if (i + 1 >= argc) {
                    error_ = "option " + a + " needs a value";
                    return false;
                }
                value = argv[++i];
            }
            set_.insert(a);
            values_[a].push_back(value);
        } else {
            error_ = "unknown option " + a;
            return false;
        }
    }
    return true;
}

std::optional<std::string> Args::get(const std::string& opt) const {
    auto it = values_.find(opt);
    if (it == values_.end()) return std::nullopt;
    return it->second.back();
}

std::vector<std::string> Args::get_all(const std::string& opt) const {
    auto it = values_.find(opt);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::optional<int64_t> int_option(const Args& args, const char* cmd, const char* flag, int64_t def, int64_t lo,
                                  int64_t hi) {
    auto v = args.get(flag);
    if (!v) return def;
    try {
        size_t used = 0;
        long long x = std::stoll(*v, &used);
        if (used == v->size() && x >= lo && x <= hi) return int64_t(x);
    } catch (...) {
    }
    std::fprintf(stderr, "kiln %s: %s needs an integer in [%lld, %lld], got '%s'\n", cmd, flag, (long long)lo,
                 (long long)hi, v->c_str());
    return std::nullopt;
}

}  // namespace kiln::tools

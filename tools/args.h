// A small command-line parser for the kiln subcommands: --flag, --opt VALUE / --opt=VALUE,
// -m VALUE, and positionals. Unknown options are errors, never silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln::tools {

class Args {
public:
    // `flags`: options without a value; `options`: options that take one. Names include dashes.
    Args(std::set<std::string> flags, std::set<std::string> options)
        : flags_(std::move(flags)), options_(std::move(options)) {}
    // Parses argv[first..argc). Returns false and sets error() on an unknown or incomplete option.
    bool parse(int argc, char** argv, int first);
    const std::string& error() const { return error_; }

    bool has(const std::string& flag) const { return set_.count(flag) > 0; }
    // The last value given for `opt` (nullopt if absent); get_all: every value, in order.
    std::optional<std::string> get(const std::string& opt) const;
    std::vector<std::string> get_all(const std::string& opt) const;
    // The value of the long spelling if given, else of the short one (e.g. "--model", "-m").
    std::optional<std::string> get_either(const std::string& long_opt, const std::string& short_opt) const {
        auto v = get(long_opt);
        return v ? v : get(short_opt);
    }
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::set<std::string> flags_, options_, set_;
    std::map<std::string, std::vector<std::string>> values_;
    std::vector<std::string> positional_;
    std::string error_;
};

// a ∪ b, for building an Args from shared option sets.
inline std::set<std::string> merged(std::set<std::string> a, const std::set<std::string>& b) {
    a.insert(b.begin(), b.end());
    return a;
}

// The integer value of option `flag` (`def` when absent); nullopt after printing
// "kiln CMD: FLAG needs an integer in [lo, hi], got 'V'" when it is not one in that range.
std::optional<int64_t> int_option(const Args& args, const char* cmd, const char* flag, int64_t def, int64_t lo,
                                  int64_t hi);

}  // namespace kiln::tools

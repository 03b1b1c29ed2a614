// `kiln tokenize` and `kiln detokenize`: thin command-line wrappers over kiln::tokenizer.
// MODEL may be a GGUF file, an HF tokenizer.json (or a directory holding one) or a llama2.c
// tokenizer .bin, or a model folder whose checkpoint carries a tokenizer (loader::load_tokenizer). Exit codes: 0 ok, 1 failure, 2 usage error.
#include <chrono>
#include <climits>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "commands.h"
#include "loader/checkpoint_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tools {
namespace {

constexpr const char* kTokenizeUsage =
    "usage: kiln tokenize -m MODEL [--no-special] [--no-parse-special] [--ids] [--pieces] [--each-line] TEXT|-\n"
    "\n"
    "Encodes TEXT (or, with '-', all of standard input exactly as given) and prints the token ids on one\n"
    "line, separated by spaces.\n"
    "\n"
    "  -m, --model MODEL    a .gguf file, an HF tokenizer.json or a directory holding one (its\n"
    "                       tokenizer_config.json is read too), a llama2.c tokenizer .bin, or a\n"
    "                       model folder written by kiln convert\n"
    "  --no-special         add no BOS/EOS (or other post-processor tokens)\n"
    "  --no-parse-special   treat control tokens written in the text (e.g. <|eot_id|>) as plain text;\n"
    "                       user-defined added tokens are still matched, as in llama.cpp and HF\n"
    "  --ids                print the ids (the default)\n"
    "  --pieces             print the tokens' vocabulary strings instead (with --ids: ids line, then\n"
    "                       pieces line); \\n, \\r, \\t, \\\\ and other control bytes are escaped\n"
    "  --each-line          encode every input line separately (without its \"\\n\") and print one\n"
    "                       output line per input line\n"
    "  --stats              print load and encode times, bytes and tokens to standard error\n";

constexpr const char* kDetokenizeUsage =
    "usage: kiln detokenize -m MODEL [--skip-special] IDS...|-\n"
    "\n"
    "Decodes token ids (arguments, or standard input with '-'; separated by spaces, commas or\n"
    "newlines) and prints the text exactly, without adding a newline.\n"
    "\n"
    "  -m, --model MODEL    as for kiln tokenize\n"
    "  --skip-special       drop control tokens (BOS, EOS, ...) from the output\n";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string read_stdin() {
    std::cin >> std::noskipws;
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::string escape_piece(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c == '\\')
            out += "\\\\";
        else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02X", c);
            out += buf;
        } else {
            out += char(c);
        }
    }
    return out;
}

int usage_error(const char* cmd, const std::string& msg, const char* usage) {
    std::fprintf(stderr, "kiln %s: %s\n%s", cmd, msg.c_str(), usage);
    return 2;
}

void print_line(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids, bool print_ids, bool pieces) {
    std::string line;
    if (print_ids) {
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
        line += '\n';
    }
    if (pieces) {
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + escape_piece(tok.token_text(ids[i]));
        line += '\n';
    }
    std::fwrite(line.data(), 1, line.size(), stdout);
}

// Parses ids separated by spaces, commas or newlines; false on anything else.
bool parse_ids(const std::string& s, std::vector<int32_t>& ids) {
    size_t i = 0;
    while (i < s.size()) {
        if (s[i] == ' ' || s[i] == ',' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
            ++i;
            continue;
        }
        size_t j = i;
        if (s[j] == '-') ++j;
        while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
        if (j == i || (j == i + 1 && s[i] == '-') || j - i > 11) return false;
        if (j < s.size() && !(s[j] == ' ' || s[j] == ',' || s[j] == '\n' || s[j] == '\r' || s[j] == '\t')) return false;
        long long v = std::stoll(s.substr(i, j - i));
        if (v < INT32_MIN || v > INT32_MAX) return false;
        ids.push_back(int32_t(v));
        i = j;
    }
    return true;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
    Args args({"--no-special", "--no-parse-special", "--ids", "--pieces", "--each-line", "--stats", "--help", "-h"},
              {"-m", "--model"});
    if (!args.parse(argc, argv, 2)) return usage_error("tokenize", args.error(), kTokenizeUsage);
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kTokenizeUsage, stdout);
        return 0;
    }
    std::optional<std::string> model = args.get("-m") ? args.get("-m") : args.get("--model");
    if (!model) return usage_error("tokenize", "missing -m MODEL", kTokenizeUsage);
    if (args.positional().size() != 1)
        return usage_error("tokenize", "expected exactly one TEXT argument (or - for standard input)", kTokenizeUsage);
    const auto t_start = Clock::now();
    auto tok = kiln::loader::load_tokenizer(*model);
    if (!tok.is_ok()) {
        std::fprintf(stderr, "kiln tokenize: %s\n", tok.status().to_string().c_str());
        return 1;
    }
    const double load_s = seconds_since(t_start);
    const std::string text = args.positional()[0] == "-" ? read_stdin() : args.positional()[0];
    const bool add_special = !args.has("--no-special"), parse_special = !args.has("--no-parse-special");
    const bool pieces = args.has("--pieces"), print_ids = !pieces || args.has("--ids");
    double encode_s = 0;
    size_t num_tokens = 0;
    auto encode = [&](std::string_view t) {
        const auto t0 = Clock::now();
        std::vector<int32_t> ids = (*tok)->encode(t, add_special, parse_special);
        encode_s += seconds_since(t0);
        num_tokens += ids.size();
        print_line(**tok, ids, print_ids, pieces);
    };
    if (!args.has("--each-line")) {
        encode(text);
    } else {
        for (size_t pos = 0; pos < text.size();) {
            size_t nl = text.find('\n', pos);
            size_t end = nl == std::string::npos ? text.size() : nl;
            encode(std::string_view(text).substr(pos, end - pos));
            pos = end + 1;
        }
    }
    if (args.has("--stats"))
        std::fprintf(stderr, "kiln tokenize: load %.6f s, encode %.6f s, %zu bytes, %zu tokens, %.2f MB/s\n", load_s,
                     encode_s, text.size(), num_tokens, encode_s > 0 ? double(text.size()) / encode_s / 1e6 : 0.0);
    return std::fflush(stdout) == 0 ? 0 : 1;
}

int cmd_detokenize(int argc, char** argv) {
    Args args({"--skip-special", "--help", "-h"}, {"-m", "--model"});
    if (!args.parse(argc, argv, 2)) return usage_error("detokenize", args.error(), kDetokenizeUsage);
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kDetokenizeUsage, stdout);
        return 0;
    }
    std::optional<std::string> model = args.get("-m") ? args.get("-m") : args.get("--model");
    if (!model) return usage_error("detokenize", "missing -m MODEL", kDetokenizeUsage);
    if (args.positional().empty()) return usage_error("detokenize", "no ids given", kDetokenizeUsage);
    std::vector<int32_t> ids;
    for (const std::string& a : args.positional())
        if (!parse_ids(a == "-" ? read_stdin() : a, ids))
            return usage_error("detokenize", "not a list of token ids: '" + a + "'", kDetokenizeUsage);
    auto tok = kiln::loader::load_tokenizer(*model);
    if (!tok.is_ok()) {
        std::fprintf(stderr, "kiln detokenize: %s\n", tok.status().to_string().c_str());
        return 1;
    }
    for (int32_t id : ids)
        if (id < 0 || id >= (*tok)->vocab_size()) {
            std::fprintf(stderr, "kiln detokenize: id %d is outside the vocabulary (%d tokens)\n", id,
                         (*tok)->vocab_size());
            return 1;
        }
    std::string text = (*tok)->decode(ids, args.has("--skip-special"));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace kiln::tools

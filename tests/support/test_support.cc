// Test helpers (see test_support.h).
#include "support/test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace kiln::test {

std::string testdata_dir() {
    if (const char* env = std::getenv("KILN_TESTDATA")) return env;
    return KILN_TESTDATA_DIR;
}

std::string testdata(const std::string& rel) { return testdata_dir() + "/" + rel; }

bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

std::string temp_dir(const std::string& name) {
    std::filesystem::path p = std::filesystem::path(KILN_BINARY_DIR) / "test_tmp" / name;
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p.string();
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string smollm2_path() {
    if (const char* env = std::getenv("KILN_SMOLLM2"); env && *env) return env;
    std::filesystem::path cache;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
        cache = x;
    } else {
        const char* home = std::getenv("HOME");
        cache = std::filesystem::path(home ? home : ".") / ".cache";
    }
    return (cache / "kiln" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

std::vector<TopK> parse_topk(const std::string& text) {
    std::vector<TopK> rows;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        int pos = 0;
        TopK r;
        ls >> pos >> r.input_id;
        std::string item;
        while (ls >> item) {
            size_t colon = item.find(':');
            r.top.push_back({std::stoi(item.substr(0, colon)), std::stod(item.substr(colon + 1))});
        }
        rows.push_back(r);
    }
    return rows;
}

std::vector<int32_t> parse_input_ids(const std::string& text) {
    std::vector<int32_t> ids;
    if (text.empty() || text[0] != '#') return ids;
    std::string first = text.substr(0, text.find('\n'));
    size_t open = first.rfind('['), close = first.rfind(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return ids;
    std::string s = first.substr(open + 1, close - open - 1);
    for (char& c : s) c = c == ',' ? ' ' : c;
    std::istringstream in(s);
    int32_t v;
    while (in >> v) ids.push_back(v);
    return ids;
}

std::string kiln_binary() { return std::string(KILN_BINARY_DIR) + "/bin/kiln"; }

bool strict() {
    const char* env = std::getenv("KILN_TEST_STRICT");
    return env && std::string(env) == "1";
}

}  // namespace kiln::test

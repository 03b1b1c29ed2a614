// Test helpers (see test_support.h).
#include "support/test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

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

std::string kiln_binary() { return std::string(KILN_BINARY_DIR) + "/bin/kiln"; }

}  // namespace kiln::test

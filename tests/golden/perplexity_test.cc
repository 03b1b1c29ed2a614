// Perplexity of stories260K against ppl_golden.txt, a float64 reference forward pass
// (../shared/testdata/SOURCES.md): the first 3 unique non-empty lines of eval/tinystories_excerpt.txt,
// each tokenized as BOS + encode(line) and truncated to 257 ids, every position scored (256 next-token
// predictions per line, 768 in all). The setup and the figures (mean NLL, ppl) are read from that
// file, never copied here. We run fp32 activations, so the mean NLL must match within 1e-4 relative. Scoring here is the same log-softmax in double that
// `kiln perplexity` uses; the windowing of that command is checked by tests/scripts/perplexity_cli_test.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::model {
namespace {

// What ppl_golden.txt states: "first N unique lines ... truncated to L ids, T tokens scored: mean NLL X,
// ppl P".
struct PplGolden {
    size_t num_lines = 0, num_ids = 0;
    int64_t num_scored = 0;
    double mean_nll = 0, ppl = 0;
};

bool parse_golden(const std::string& text, PplGolden* g) {
    std::smatch m;
    static const std::regex re(
        R"(first (\d+) unique lines.*truncated to (\d+) ids, (\d+) tokens scored: mean NLL ([0-9.]+), ppl ([0-9.]+))");
    if (!std::regex_search(text, m, re)) return false;
    g->num_lines = std::stoul(m[1]);
    g->num_ids = std::stoul(m[2]);
    g->num_scored = std::stoll(m[3]);
    g->mean_nll = std::stod(m[4]);
    g->ppl = std::stod(m[5]);
    return true;
}

double nll_of(const float* row, int64_t vocab, int32_t target) {
    float max_logit = row[0];
    for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, row[i]);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
    return std::log(sum) - (double(row[target]) - max_logit);
}

TEST(Perplexity, Stories260KMatchesFp64Reference) {
    const std::string dir = test::testdata("models/stories260K");
    const std::string text_path = test::testdata("eval/tinystories_excerpt.txt");
    if (!test::file_exists(dir + "/stories260K.bin") || !test::file_exists(text_path)) KILN_SKIP_MISSING() << "no test data";
    PplGolden golden;
    ASSERT_TRUE(parse_golden(test::read_text(dir + "/ppl_golden.txt"), &golden)) << dir << "/ppl_golden.txt";
    auto ck = loader::load_checkpoint(dir + "/stories260K.bin");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto tok = tokenizer::Tokenizer::from_llama2c(dir + "/tok512.bin");
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    core::ThreadPool pool(3);
    auto model = CpuModel::create(*ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const int64_t V = (*model)->config().vocab_size;

    std::ifstream in(text_path);
    std::vector<std::string> lines;
    std::set<std::string> seen;
    for (std::string line; lines.size() < golden.num_lines && std::getline(in, line);)
        if (!line.empty() && seen.insert(line).second) lines.push_back(line);
    ASSERT_EQ(lines.size(), golden.num_lines);

    double nll = 0;
    int64_t count = 0;
    for (const std::string& line : lines) {
        std::vector<int32_t> ids = (*tok)->encode(line);  // starts with BOS
        ASSERT_FALSE(ids.empty());
        ASSERT_EQ(ids[0], (*tok)->bos_id());
        ASSERT_GE(ids.size(), golden.num_ids);
        ids.resize(golden.num_ids);
        KvCache cache((*model)->config(), int64_t(golden.num_ids));
        auto logits = (*model)->forward(ids, cache, /*all_logits=*/true);  // [257, vocab]
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        for (size_t j = 0; j + 1 < ids.size(); ++j) nll += nll_of(logits->data() + j * size_t(V), V, ids[j + 1]);
        count += int64_t(ids.size()) - 1;
    }
    ASSERT_EQ(count, golden.num_scored);
    const double mean = nll / double(count);
    std::printf("[ stories260K ] mean NLL %.6f (golden %.6f, rel err %.2g), ppl %.4f (golden %.4f)\n", mean,
                golden.mean_nll, std::abs(mean - golden.mean_nll) / golden.mean_nll, std::exp(mean), golden.ppl);
    EXPECT_NEAR(mean, golden.mean_nll, 1e-4 * golden.mean_nll);
    EXPECT_NEAR(std::exp(mean), golden.ppl, 1e-3);
}

}  // namespace
}  // namespace kiln::model

// Perplexity of stories260K against ppl_golden.txt, a float64 reference forward pass
// (../shared/testdata/SOURCES.md): the first 3 unique non-empty lines of eval/tinystories_excerpt.txt,
// each tokenized as BOS + encode(line) and truncated to 257 ids, every position scored (256 next-token
// predictions per line, 768 in all): mean NLL 1.529805, ppl 4.6173. We run fp32 activations, so the
// mean NLL must match within 1e-4 relative. Scoring here is the same log-softmax in double that
// `kiln perplexity` uses; the windowing of that command is checked by tests/scripts/perplexity_cli_test.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::model {
namespace {

constexpr double kGoldenMeanNll = 1.529805;
constexpr double kGoldenPpl = 4.6173;

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
    if (!test::file_exists(dir + "/stories260K.bin") || !test::file_exists(text_path)) GTEST_SKIP() << "no test data";
    auto ck = load_checkpoint(dir + "/stories260K.bin");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto tok = tokenizer::Tokenizer::from_llama2c(dir + "/tok512.bin");
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    core::ThreadPool pool(3);
    auto model = LlamaModel::create(*ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const int64_t V = (*model)->config().vocab_size;

    std::ifstream in(text_path);
    std::vector<std::string> lines;
    std::set<std::string> seen;
    for (std::string line; lines.size() < 3 && std::getline(in, line);)
        if (!line.empty() && seen.insert(line).second) lines.push_back(line);
    ASSERT_EQ(lines.size(), 3u);

    double nll = 0;
    int64_t count = 0;
    for (const std::string& line : lines) {
        std::vector<int32_t> ids = (*tok)->encode(line);  // starts with BOS
        ASSERT_FALSE(ids.empty());
        ASSERT_EQ(ids[0], (*tok)->bos_id());
        ASSERT_GE(ids.size(), 257u);
        ids.resize(257);
        KvCache cache((*model)->config(), 257);
        auto logits = (*model)->forward(ids, cache, /*all_logits=*/true);  // [257, vocab]
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        for (size_t j = 0; j + 1 < ids.size(); ++j) nll += nll_of(logits->data() + j * size_t(V), V, ids[j + 1]);
        count += int64_t(ids.size()) - 1;
    }
    ASSERT_EQ(count, 768);
    const double mean = nll / double(count);
    std::printf("[ stories260K ] mean NLL %.6f (golden %.6f, rel err %.2g), ppl %.4f (golden %.4f)\n", mean,
                kGoldenMeanNll, std::abs(mean - kGoldenMeanNll) / kGoldenMeanNll, std::exp(mean), kGoldenPpl);
    EXPECT_NEAR(mean, kGoldenMeanNll, 1e-4 * kGoldenMeanNll);
    EXPECT_NEAR(std::exp(mean), kGoldenPpl, 1e-3);
}

}  // namespace
}  // namespace kiln::model

// stories260K end to end against goldens from an independent float64 forward pass
// (../shared/testdata/SOURCES.md): teacher-forced top-5 logits of BOS + "Once upon a time" within
// 1e-4, and 256 greedy tokens from BOS alone, id for id and as text. Run on the llama2.c .bin and on
// its GGUF and safetensors (HF, Q/K rows permuted on write and back on load) conversions, with 1
// and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "loader/checkpoint.h"
#include "loader/convert.h"
#include "model/cpu_model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::model {
namespace {

std::string dir() {
    return test::testdata("models/stories260K");
}

std::vector<int32_t> parse_ids(const std::string& text) {
    size_t at = text.find("\nids [");
    std::vector<int32_t> ids;
    if (at == std::string::npos) return ids;
    std::string s = text.substr(at + 6);
    s = s.substr(0, s.find(']'));
    std::replace(s.begin(), s.end(), ',', ' ');
    std::istringstream in(s);
    int32_t v;
    while (in >> v) ids.push_back(v);
    return ids;
}

class Stories260K : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (!test::file_exists(dir() + "/stories260K.bin")) KILN_SKIP_MISSING() << "no test data";
        std::string path = dir() + "/stories260K.bin";
        if (GetParam() != "llama2c") {
            std::string out = test::temp_dir("stories260k_golden_" + GetParam());
            out += GetParam() == "gguf" ? "/m.gguf" : "/hf";
            loader::ConvertOptions o;
            o.to = GetParam();
            ASSERT_TRUE(loader::convert_checkpoint(path, out, o).is_ok());
            path = out;
        }
        auto ck = loader::load_checkpoint(path);
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        ck_ = std::move(ck).value();
        auto tok = tokenizer::Tokenizer::from_llama2c(dir() + "/tok512.bin");
        ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
        tok_ = std::move(tok).value();
    }
    Checkpoint ck_;
    std::unique_ptr<tokenizer::Tokenizer> tok_;
};

TEST_P(Stories260K, TeacherForcedTop5) {
    std::vector<test::TopK> want = test::parse_topk(test::read_text(dir() + "/logits_top5_once_upon_a_time.txt"));
    ASSERT_EQ(want.size(), 5u);
    std::vector<int32_t> ids = tok_->encode("Once upon a time");
    ASSERT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
    for (int threads : {1, 3}) {
        core::ThreadPool pool(threads);
        auto model = CpuModel::create(ck_, &pool);
        ASSERT_TRUE(model.is_ok()) << model.status().to_string();
        KvCache cache((*model)->config(), 64);
        auto logits = (*model)->forward(ids, cache, /*all_logits=*/true);
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        const int64_t V = (*model)->config().vocab_size;
        double max_err = 0;
        for (size_t t = 0; t < want.size(); ++t) {
            EXPECT_EQ(want[t].input_id, ids[t]);
            const float* row = logits->data() + t * size_t(V);
            std::vector<int32_t> order(static_cast<size_t>(V));
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                              [&](int32_t a, int32_t b) { return row[a] > row[b]; });
            for (size_t r = 0; r < 5; ++r) {
                EXPECT_EQ(order[r], want[t].top[r].first) << "position " << t << " rank " << r;
                const double err = std::abs(double(row[want[t].top[r].first]) - want[t].top[r].second);
                max_err = std::max(max_err, err);
            }
        }
        EXPECT_LE(max_err, 1e-4) << GetParam() << " threads " << threads;
        std::printf("[ %s threads=%d ] top-5 logits max abs error %.3g (tolerance 1e-4)\n", GetParam().c_str(), threads,
                    max_err);
    }
}

TEST_P(Stories260K, Greedy256FromBos) {
    std::vector<int32_t> want = parse_ids(test::read_text(dir() + "/greedy_empty_prompt_256.ids.txt"));
    ASSERT_EQ(want.size(), 256u);
    core::ThreadPool pool(3);
    auto model = CpuModel::create(ck_, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const int64_t V = (*model)->config().vocab_size;
    KvCache cache((*model)->config(), 512);
    std::vector<int32_t> got, next = {1};
    for (int step = 0; step < 256; ++step) {
        auto logits = (*model)->forward(next, cache, false);
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        int32_t best = int32_t(std::max_element(logits->begin(), logits->begin() + V) - logits->begin());
        got.push_back(best);
        next = {best};
    }
    EXPECT_EQ(got, want);
    std::string text = tok_->decode(got);
    std::string want_text = test::read_text(dir() + "/greedy_empty_prompt_256.txt");
    if (!want_text.empty() && want_text.back() == '\n' && (text.empty() || text.back() != '\n')) want_text.pop_back();
    EXPECT_EQ(text, want_text);
}

INSTANTIATE_TEST_SUITE_P(Formats, Stories260K, ::testing::Values("llama2c", "gguf", "safetensors"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::model

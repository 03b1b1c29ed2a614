// The public kiln::Engine (include/kiln/engine.h) on stories260K: requests added while another is
// running join it (they are not queued behind it), abort() ends a running request from another
// thread, bad requests are errors without a callback, and the destructor ends what is left with
// kAbort. Ordering only, no timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "support/test_support.h"

namespace kiln {
namespace {

struct Track {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<uint64_t> finish_order;
    std::vector<FinishReason> reasons;
    int tokens = 0;
    void wait_finished(size_t n) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return finish_order.size() >= n; });
    }
};

Request make(Track& t, int max_tokens, const std::string& prompt) {
    Request r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.on_output = [&t](const RequestOutput& o) {
        std::lock_guard<std::mutex> lock(t.mu);
        t.tokens += int(o.token_ids.size());
        if (o.finished) {
            t.finish_order.push_back(o.request_id);
            t.reasons.push_back(o.finish_reason);
            t.cv.notify_all();
        }
    };
    return r;
}

TEST(EngineApi, RequestsJoinARunningOneAndAbortWorks) {
    const std::string model = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(model)) KILN_SKIP_MISSING() << "no test data";
    EngineOptions o;
    o.model = model;
    o.threads = 2;
    Status st;
    auto engine = Engine::create(o, &st);
    ASSERT_TRUE(engine) << st.message;
    Track t;
    uint64_t long_id = 0, short_id = 0;
    // 480 tokens: far longer than the short request below.
    ASSERT_TRUE(engine->add_request(make(t, 480, "Once upon a time"), &long_id).ok());
    ASSERT_TRUE(engine->add_request(make(t, 4, "The cat"), &short_id).ok());
    t.wait_finished(1);
    {
        std::lock_guard<std::mutex> lock(t.mu);
        ASSERT_EQ(t.finish_order[0], short_id) << "the short request waited for the long one";
        EXPECT_EQ(t.reasons[0], FinishReason::kLength);
    }
    engine->abort(long_id);
    t.wait_finished(2);
    EXPECT_EQ(t.finish_order[1], long_id);
    EXPECT_EQ(t.reasons[1], FinishReason::kAbort);
    engine->abort(long_id);  // finished: a no-op
    EngineStats s = engine->stats();
    EXPECT_EQ(s.num_running + s.num_waiting, 0);
    EXPECT_EQ(s.kv_blocks_in_use, 0);

    uint64_t id = 0;
    Request bad = make(t, 4, "x");
    bad.sampling.top_p = 2.0f;
    EXPECT_FALSE(engine->add_request(bad, &id).ok());
    Request huge = make(t, 100000, "x");
    EXPECT_FALSE(engine->add_request(huge, &id).ok());

    ASSERT_TRUE(engine->add_request(make(t, 480, "Lily"), &id).ok());
    engine.reset();  // ends the running request
    std::lock_guard<std::mutex> lock(t.mu);
    ASSERT_EQ(t.finish_order.size(), 3u) << "every request ends exactly once";
    EXPECT_EQ(t.finish_order[2], id);
    EXPECT_EQ(t.reasons[2], FinishReason::kAbort);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Logprobs come one per generated token, match a log_softmax of the raw logits row the token was
// sampled from (Request::return_logits), and describe the model, not the sampling temperature.
TEST(EngineApi, LogprobsAreTheRawLogSoftmax) {
    const std::string model = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(model)) KILN_SKIP_MISSING() << "no test data";
    EngineOptions o;
    o.model = model;
    o.threads = 2;
    Status st;
    auto engine = Engine::create(o, &st);
    ASSERT_TRUE(engine) << st.message;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::vector<int32_t> ids;
    std::vector<TokenLogprobs> lps;
    std::vector<std::vector<float>> rows;
    Request r;
    r.prompt = "Once upon a time";
    r.sampling.temperature = 1.7f;
    r.sampling.seed = 5;
    r.sampling.has_seed = true;
    r.sampling.max_tokens = 24;
    r.sampling.logprobs = 4;
    r.return_logits = true;
    r.on_output = [&](const RequestOutput& out) {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
        lps.insert(lps.end(), out.logprobs.begin(), out.logprobs.end());
        rows.insert(rows.end(), out.logits.begin(), out.logits.end());
        done = out.finished;
        cv.notify_all();
    };
    ASSERT_TRUE(engine->add_request(std::move(r), nullptr).ok());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    ASSERT_FALSE(ids.empty());
    ASSERT_EQ(lps.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<float>& x = rows[i];
        double m = -1e30, sum = 0;
        for (float v : x) m = std::max(m, double(v));
        for (float v : x) sum += std::exp(double(v) - m);
        const double lse = m + std::log(sum);
        EXPECT_EQ(lps[i].token_id, ids[i]);
        EXPECT_NEAR(lps[i].logprob, x[size_t(ids[i])] - lse, 1e-4);
        ASSERT_EQ(lps[i].top.size(), 4u);
        const auto best = std::max_element(x.begin(), x.end());
        EXPECT_EQ(lps[i].top[0].first, int32_t(best - x.begin()));
        EXPECT_NEAR(lps[i].top[0].second, *best - lse, 1e-4);
        EXPECT_GE(lps[i].top[0].second, lps[i].logprob);
    }
    Request bad;
    bad.prompt = "x";
    bad.sampling.logprobs = 21;
    EXPECT_EQ(engine->add_request(std::move(bad), nullptr).code, Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kiln

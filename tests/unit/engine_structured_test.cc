// Structured output through the public kiln::Engine on SmolLM2: every finished output is a sentence
// of its grammar (checked with the reference matcher, grammar::full_match, not the masks that made
// it), a grammar that can go no further ends the request with "stop", bad specs are refused naming
// the part, and the constraint keeps the engine's promises: a seeded request's tokens are the same
// alone and batched with others, and greedy output is the same with n-gram speculation on.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/gbnf.h"
#include "kiln/engine.h"
#include "support/test_support.h"

namespace kiln {
namespace {

struct Result {
    std::string text;
    std::vector<int32_t> ids;
    FinishReason reason = FinishReason::kNone;
    std::string error;
};

// Runs the requests together and waits for all of them.
std::vector<Result> run(Engine& engine, std::vector<Request> reqs) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Result> out(reqs.size());
    size_t done = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].on_output = [&, i](const RequestOutput& o) {
            std::lock_guard<std::mutex> lock(mu);
            out[i].text += o.text;
            out[i].ids.insert(out[i].ids.end(), o.token_ids.begin(), o.token_ids.end());
            if (o.finished) {
                out[i].reason = o.finish_reason;
                out[i].error = o.error;
                ++done;
                cv.notify_all();
            }
        };
    }
    std::vector<uint64_t> ids;
    const Status st = engine.add_requests(std::move(reqs), &ids);
    EXPECT_TRUE(st.ok()) << st.message;
    if (!st.ok()) return {};
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == out.size(); });
    return out;
}

Request make(const std::string& prompt, const StructuredOutput& so, uint64_t seed, int max_tokens = 64) {
    Request r;
    r.prompt = prompt;
    r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
    r.sampling.seed = seed;
    r.sampling.has_seed = true;
    r.sampling.max_tokens = max_tokens;
    r.sampling.structured = so;
    return r;
}

grammar::Grammar grammar_of(const StructuredOutput& so) {
    grammar::StructuredSpec spec;
    EXPECT_TRUE(grammar::parse_kind(so.kind, spec.kind));
    spec.value = so.value;
    spec.choices = so.choices;
    auto text = grammar::spec_to_gbnf(spec);
    EXPECT_TRUE(text.is_ok()) << text.status().message();
    auto g = grammar::parse_gbnf(*text);
    EXPECT_TRUE(g.is_ok()) << g.status().message();
    return std::move(*g);
}

class EngineStructured : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string path = test::smollm2_path();
        if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
        EngineOptions o;
        o.model = path;
        o.threads = 2;
        Status st;
        engine_ = Engine::create(o, &st);
        ASSERT_TRUE(engine_) << st.message;
    }
    std::unique_ptr<Engine> engine_;
};

const char* kPrompt = "<|im_start|>user\nDescribe a cat as JSON.<|im_end|>\n<|im_start|>assistant\n";

TEST_F(EngineStructured, OutputsAreSentencesOfTheirGrammar) {
    std::vector<StructuredOutput> specs = {
        {"choice", "", {"yes", "no", "it depends"}},
        {"regex", "[0-9]{3}-[a-z]{2,5}", {}},
        {"json_schema", R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 30}, "indoor": {"type": "boolean"}},
            "required": ["name", "age", "indoor"]})", {}},
        {"json_object", "", {}},
        {"grammar", "root ::= \"(\" [a-c]+ \")\"", {}},
    };
    for (const StructuredOutput& so : specs) {
        const grammar::Grammar g = grammar_of(so);
        std::vector<Request> reqs;
        for (uint64_t seed = 0; seed < 6; ++seed) reqs.push_back(make(kPrompt, so, seed, 96));
        const std::vector<Result> got = run(*engine_, std::move(reqs));
        int stopped = 0;
        for (const Result& r : got) {
            ASSERT_NE(r.reason, FinishReason::kError) << so.kind << ": " << r.error;
            if (r.reason == FinishReason::kStop) {
                ++stopped;
                EXPECT_TRUE(grammar::full_match(g, r.text)) << so.kind << ": '" << r.text << "'";
            }
        }
        // Bounded languages (all but json_object) always finish within 96 tokens.
        if (so.kind != "json_object") {
            EXPECT_EQ(stopped, int(got.size())) << so.kind;
        }
    }
}

TEST_F(EngineStructured, ChoiceEndsWithoutEos) {
    // "no" admits nothing after it: the request stops there, before the model could say more.
    const auto got = run(*engine_, {make(kPrompt, {"choice", "", {"no"}}, 0, 20)});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].text, "no");
    EXPECT_EQ(got[0].reason, FinishReason::kStop);
}

TEST_F(EngineStructured, BadSpecsAreRefusedNamingThePart) {
    struct Case {
        StructuredOutput so;
        Status::Code code;
        const char* needle;
    } cases[] = {
        {{"json_schema", R"({"type": "object", "not": {}})", {}}, Status::Code::kUnsupported, "not"},
        {{"json_schema", "{", {}}, Status::Code::kInvalidArgument, "not valid JSON"},
        {{"regex", "(a", {}}, Status::Code::kInvalidArgument, "regex"},
        {{"regex", "(?=a)b", {}}, Status::Code::kUnsupported, "look"},
        {{"grammar", "root ::= nothing", {}}, Status::Code::kInvalidArgument, "undefined rule"},
        {{"choice", "", {}}, Status::Code::kInvalidArgument, "empty"},
        {{"yaml", "", {}}, Status::Code::kInvalidArgument, "kind"},
    };
    for (const Case& c : cases) {
        Request r = make(kPrompt, c.so, 1);
        uint64_t id = 0;
        const Status st = engine_->add_request(std::move(r), &id);
        ASSERT_FALSE(st.ok()) << c.so.kind << " " << c.so.value;
        EXPECT_EQ(st.code, c.code) << st.message;
        EXPECT_NE(st.message.find(c.needle), std::string::npos) << st.message;
    }
}

TEST_F(EngineStructured, BatchInvariantAndUnchangedBySpeculation) {
    const StructuredOutput so = {"json_schema", R"({"type": "object", "properties": {"colors":
        {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 4}}, "required": ["colors"]})", {}};
    const auto alone = run(*engine_, {make(kPrompt, so, 7)});
    std::vector<Request> batch;
    batch.push_back(make("<|im_start|>user\nHi<|im_end|>\n", {}, 3));
    batch.push_back(make(kPrompt, so, 7));
    batch.push_back(make(kPrompt, {"regex", "[a-z ]{1,40}", {}}, 9));
    const auto together = run(*engine_, std::move(batch));
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(together.size(), 3u);
    EXPECT_EQ(alone[0].ids, together[1].ids);
    EXPECT_EQ(alone[0].text, together[1].text);

    EngineOptions o;
    o.model = test::smollm2_path();
    o.threads = 2;
    o.speculative = "ngram";
    o.spec_max_batch = 0;
    Status st;
    auto spec = Engine::create(o, &st);
    ASSERT_TRUE(spec) << st.message;
    const auto greedy = run(*engine_, {make(kPrompt, so, 0)});
    const auto greedy_spec = run(*spec, {make(kPrompt, so, 0)});
    ASSERT_EQ(greedy.size(), 1u);
    ASSERT_EQ(greedy_spec.size(), 1u);
    EXPECT_EQ(greedy[0].ids, greedy_spec[0].ids);
    EXPECT_EQ(greedy[0].reason, FinishReason::kStop);
}

}  // namespace
}  // namespace kiln

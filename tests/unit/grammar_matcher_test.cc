// The grammar engine's own checks: GBNF parsing (and its errors), the reference matcher on small
// grammars, and the fast token masks (grammar/matcher.h) against the brute force they stand for:
// a token is allowed exactly when the text so far plus its bytes is still a prefix of a sentence
// (checked by stepping a copy of the state through the bytes, never through the precomputed tables).
// Vocabularies: a random one over a small alphabet, and SmolLM2's real one.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::grammar {
namespace {

Grammar parse(const std::string& text) {
    core::Result<Grammar> g = parse_gbnf(text);
    EXPECT_TRUE(g.is_ok()) << g.status().message() << "\n" << text;
    return g.is_ok() ? std::move(*g) : Grammar{};
}

TEST(Gbnf, ReferenceMatcher) {
    struct Case {
        const char* grammar;
        const char* text;
        bool match;
    } cases[] = {
        {R"(root ::= "ab" | "a" [0-9]+)", "a123", true},
        {R"(root ::= "ab" | "a" [0-9]+)", "ab", true},
        {R"(root ::= "ab" | "a" [0-9]+)", "a", false},
        {"root ::= x{2,4}\nx ::= [a-c]", "abca", true},
        {"root ::= x{2,4}\nx ::= [a-c]", "a", false},
        {"root ::= x{2,4}\nx ::= [a-c]", "abcab", false},
        {"root ::= x{2,}\nx ::= [a-c]", "abcabcabc", true},
        {R"(root ::= [^"\\]*)", "h\xc3\xa9llo \xe4\xb8\xad", true},
        {R"(root ::= [^"\\]*)", "h\"", false},
        {R"(root ::= [^"\\]*)", "\xc3", false},          // half a character is not a character
        {R"(root ::= [^"\\]*)", "\xed\xa0\x80", false},  // nor is an encoded surrogate
        {R"(root ::= ("a"?)* "b")", "aaab", true},
        {R"(root ::= "\u00e9" .)", "\xc3\xa9\xf0\x9f\x98\x80", true},
        {R"(root ::= "\x41" 'b' # comment
              "\t")", "Ab\t", true},
        {"root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"[\" root? \"]\"", "1,[2,[]],[[3]]", true},
        {"root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"[\" root? \"]\"", "1,[2,[],[[3]]", false},
        {"root ::= [a-z]{0,3}", "", true},
        {"root ::= [a-z]{0,3}", "abcd", false},
    };
    for (const Case& c : cases) {
        const Grammar g = parse(c.grammar);
        EXPECT_EQ(full_match(g, c.text), c.match) << c.grammar << " on '" << c.text << "'";
    }
}

TEST(Gbnf, ErrorsNameTheProblem) {
    struct Case {
        const char* grammar;
        const char* needle;
    } cases[] = {
        {"root ::= a", "undefined rule 'a'"},
        {"x ::= \"a\"", "no 'root' rule"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= x\nx ::= y \"a\" | \"c\"\ny ::= x", "left-recursive"},
        {"root ::= \"a\" root", "can never finish"},
        {"root ::= [b-a]", "out of order"},
        {"root ::= \"a", "unterminated string"},
        {"root ::= [a", "unterminated character class"},
        {"root ::= \"a\"{3,2}", "n < m"},
        {"root ::= \"a\"{20000}", "repetition bound"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"\\q\"", "bad escape"},
        {"root ::= \"a\" )", "unbalanced"},
        {"root ::= [^\\x00-\\U0010FFFF]", "matches nothing"},
        {"root ::= (\"a\"?){0,40}", "can be empty more than 32 times"},
    };
    std::string big = "root ::=";  // 9 bytes per {0,10000}: 60 of them expand past 500,000 rules
    for (int i = 0; i < 60; ++i) big += " \"a\"{0,10000}";
    EXPECT_NE(parse_gbnf(big).status().message().find("too large"), std::string::npos);
    for (const Case& c : cases) {
        core::Result<Grammar> g = parse_gbnf(c.grammar);
        ASSERT_FALSE(g.is_ok()) << c.grammar;
        EXPECT_EQ(g.status().code(), core::StatusCode::kInvalidArgument) << c.grammar;
        EXPECT_NE(g.status().message().find(c.needle), std::string::npos) << c.grammar << ": " << g.status().message();
    }
}

TEST(Gbnf, DeepNestingIsRefusedNotACrash) {
    const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    core::Result<Grammar> g = parse_gbnf(deep);
    ASSERT_FALSE(g.is_ok());
    EXPECT_NE(g.status().message().find("nested deeper than 200"), std::string::npos);
    EXPECT_TRUE(parse_gbnf("root ::= " + std::string(150, '(') + "\"a\"" + std::string(150, ')')).is_ok());
}

// Choices compile to a trie of rules: every choice is a whole sentence, and nothing else is (its
// prefixes, extensions, or other strings).
TEST(Gbnf, ChoicesAsATrie) {
    StructuredSpec spec;
    spec.kind = StructuredSpec::Kind::kChoice;
    spec.choices = {"no", "no way", "not now", "yes", "y", "n\xc3\xa9", "n\xc3\xa9" "e", "yes", "\"q\""};
    auto text = spec_to_gbnf(spec);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    const Grammar g = parse(*text);
    for (const std::string& c : spec.choices) EXPECT_TRUE(full_match(g, c)) << c << "\n" << *text;
    for (const char* c : {"", "n", "no ", "no wa", "not", "ye", "yess", "n\xc3", "x", "q"})
        EXPECT_FALSE(full_match(g, c)) << c << "\n" << *text;
    spec.choices.assign(10001, "a");
    EXPECT_FALSE(spec_to_gbnf(spec).is_ok());
}

TEST(Gbnf, LiteralRoundTrip) {
    const std::string s = "a\"b\\c\nd\te\x01 \xc3\xa9";
    const Grammar g = parse("root ::= " + gbnf_literal(s));
    EXPECT_TRUE(full_match(g, s));
    EXPECT_FALSE(full_match(g, s + "x"));
}

bool bit(const std::vector<uint64_t>& m, int32_t i) { return (m[size_t(i) >> 6] >> (i & 63)) & 1; }

// Random walks through the grammar, choosing among allowed tokens (with `content`, among those with
// a byte other than whitespace when there are any: JSON's whitespace would fill the walk otherwise);
// at every step the mask must equal the brute force over the whole vocabulary, and can_end must
// agree with the reference matcher.
void check_masks_against_brute_force(const std::shared_ptr<CompiledGrammar>& cg, int walks, int steps, uint32_t seed,
                                     bool content = false) {
    std::mt19937 rng(seed);
    const TokenTable& vt = cg->vocab();
    int64_t checked = 0, allowed_total = 0;
    std::vector<bool> usable(size_t(vt.vocab_size()), false);  // not excluded and with bytes
    for (int32_t id : vt.sorted()) usable[size_t(id)] = true;
    for (int w = 0; w < walks; ++w) {
        Matcher m(cg);
        std::string text;
        for (int step = 0; step < steps; ++step) {
            std::vector<uint64_t> mask;
            m.fill_mask(mask);
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < vt.vocab_size(); ++id) {
                Matcher probe = m;
                const bool ok = usable[size_t(id)] && probe.accept_bytes(vt.bytes(id));
                ASSERT_EQ(bit(mask, id), ok) << "token " << id << " '" << vt.bytes(id) << "' after '" << text << "'";
                if (ok) allowed.push_back(id);
                ++checked;
            }
            allowed_total += int64_t(allowed.size());
            EXPECT_EQ(m.can_end(), full_match(cg->grammar(), text)) << text;
            if (allowed.empty() || m.must_end()) break;
            if (content) {
                std::vector<int32_t> inked;
                for (int32_t id : allowed)
                    if (vt.bytes(id).find_first_not_of(" \t\n") != std::string::npos) inked.push_back(id);
                if (!inked.empty()) allowed = std::move(inked);
            }
            const int32_t id = allowed[rng() % allowed.size()];
            ASSERT_TRUE(m.accept_token(id));
            text += vt.bytes(id);
        }
    }
    EXPECT_GT(allowed_total, 0);
    EXPECT_GT(checked, 0);
}

const char* kJsonish = R"(
root ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= str ":" ws ( num | str | root | "[" ws ( num ( "," ws num )* )? "]" ) ws
str ::= "\"" ( [^"\\] | "\\" ["\\nt] )* "\""
num ::= "-"? [0-9]+ ( "." [0-9]+ )?
ws ::= | " " | "\n" [ ]{0,4}
)";

TEST(Matcher, MasksMatchBruteForceOnARandomVocabulary) {
    std::mt19937 rng(7);
    const std::string alpha = "{}[]:,. -ab1\"\\n";
    std::vector<std::string> vocab;
    std::vector<bool> excluded;
    for (int i = 0; i < 2000; ++i) {
        std::string s;
        const int n = 1 + int(rng() % 5);
        for (int j = 0; j < n; ++j) s += alpha[rng() % alpha.size()];
        vocab.push_back(s);
        excluded.push_back(i % 97 == 0);  // a few "control tokens": never allowed
    }
    vocab.push_back("");  // no bytes: never allowed
    excluded.push_back(false);
    auto vt = std::make_shared<TokenTable>(vocab, excluded);
    // Classes made on first use (no warm-up), and mostly at compile time by the warm-up walks.
    auto cold = CompiledGrammar::compile(parse(kJsonish), vt, /*warm_up_tokens=*/0);
    const int64_t cold_positions = cold->stats().positions;
    check_masks_against_brute_force(cold, 40, 40, 1);
    EXPECT_GT(cold->stats().context_dependent, 0);  // the runtime check had work to do
    auto warm = CompiledGrammar::compile(parse(kJsonish), vt, CompiledGrammar::kWarmUpTokens,
                                         /*warm_up_seconds=*/600.0);  // bounded by tokens (sanitizers are slow)
    EXPECT_GT(warm->stats().positions, cold_positions);
    EXPECT_EQ(warm->stats().cached_masks, 0);  // the warm-up's per-state masks are dropped
    check_masks_against_brute_force(warm, 40, 40, 2);
}

TEST(Matcher, EmptyAndFinishedStates) {
    auto vt = std::make_shared<TokenTable>(std::vector<std::string>{"a", "b", "ab"}, std::vector<bool>{});
    auto cg = CompiledGrammar::compile(parse(R"(root ::= "a" "b"?)"), vt);
    Matcher m(cg);
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.accept_token(1));  // "b" first: refused, state unchanged
    EXPECT_TRUE(m.accept_token(0));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.must_end());
    EXPECT_TRUE(m.accept_token(1));
    EXPECT_TRUE(m.must_end());
    std::vector<uint64_t> mask;
    m.fill_mask(mask);
    EXPECT_EQ(mask[0], 0u);
}

// SentencePiece: a text's first token is written without its dummy-prefix space (the decoder drops
// it), so the first mask judges tokens by those bytes; a lone dummy-prefix piece adds nothing.
TEST(Matcher, FirstTokenUsesItsFirstBytes) {
    const std::vector<std::string> bytes = {" {", " ", "{", "}", " }"};
    auto vt = std::make_shared<TokenTable>(bytes, std::vector<bool>{},
                                           std::vector<std::pair<int32_t, std::string>>{{0, "{"}, {1, ""}, {4, "}"}});
    auto cg = CompiledGrammar::compile(parse(R"(root ::= "{" "}")"), vt);
    Matcher m(cg);
    std::vector<uint64_t> mask;
    m.fill_mask(mask);
    EXPECT_EQ(mask[0], 0b00111u);  // " {" (as "{"), " " (nothing), "{"; not "}" nor " }"
    Matcher lone = m;
    EXPECT_TRUE(lone.accept_token(1));  // nothing added: still expecting "{", now as a later token
    lone.fill_mask(mask);
    EXPECT_EQ(mask[0], 0b00100u);  // " {" is " {" now: refused
    EXPECT_TRUE(m.accept_token(0));
    m.fill_mask(mask);
    EXPECT_EQ(mask[0], 0b01000u);  // "}" only: " }" keeps its space after the first token
    EXPECT_TRUE(m.accept_token(3));
    EXPECT_TRUE(m.must_end());
}

TEST(Matcher, SmolLM2VocabularyAgainstBruteForce) {
    const std::string path = test::smollm2_path();
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto tok = tokenizer::Tokenizer::load(path);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    GrammarCompiler compiler(token_table(**tok));
    StructuredSpec spec;
    spec.kind = StructuredSpec::Kind::kGrammar;
    spec.value = kJsonish;
    auto cg = compiler.compile(spec);
    ASSERT_TRUE(cg.is_ok()) << cg.status().message();
    check_masks_against_brute_force(*cg, 3, 25, 3);
    // The cache hands back the same compiled grammar.
    auto again = compiler.compile(spec);
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(again->get(), cg->get());
    spec.kind = StructuredSpec::Kind::kChoice;
    spec.choices = {"yes", "no", "maybe so"};
    auto choice = compiler.compile(spec);
    ASSERT_TRUE(choice.is_ok()) << choice.status().message();
    check_masks_against_brute_force(*choice, 5, 10, 4);
    // Bounded strings: a chain's rank R_k takes its short tokens' classes from the chain's top rank
    // (matcher.cc mask_for; narrow classes such as UTF-8 lead bytes from rank 2, broad ones from
    // kMinDerived); the walks must still equal brute force at every rank.
    spec.kind = StructuredSpec::Kind::kGrammar;
    spec.value = R"(root ::= "\"" ch{0,40} "\"" ( ", \"" [a-z ]{0,30} "\"" )?
ch ::= [^"\\] | "\\" ["\\n])";
    auto bounded = compiler.compile(spec);
    ASSERT_TRUE(bounded.is_ok()) << bounded.status().message();
    check_masks_against_brute_force(*bounded, 4, 30, 5);
    // The same through the JSON Schema converter: strings with escapes (a \u chain inside the
    // character), several bounds, in an array and nested.
    spec.kind = StructuredSpec::Kind::kJsonSchema;
    spec.value = R"({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 9},
        "b": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
        "c": {"type": "object", "properties": {"d": {"type": "string", "maxLength": 30}}, "required": ["d"]}},
        "required": ["a", "b", "c"]})";
    auto schema = compiler.compile(spec);
    ASSERT_TRUE(schema.is_ok()) << schema.status().message();
    check_masks_against_brute_force(*schema, 4, 40, 6, /*content=*/true);
}

}  // namespace
}  // namespace kiln::grammar

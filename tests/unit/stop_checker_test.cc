// StopChecker: stop strings split across streamed pieces, false partial matches, several stop
// strings, UTF-8 split across pieces, stop ids / EOS, and a randomized check against a byte-at-a-time
// reference.
#include "sampling/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kiln::sampling {
namespace {

// Feeds pieces; returns everything emitted (including finish() when no stop) and the stop index.
std::pair<std::string, int32_t> run(StopChecker& sc, const std::vector<std::string>& pieces) {
    std::string out;
    for (const std::string& p : pieces) {
        auto o = sc.append(p);
        out += o.text;
        if (o.stopped) return {out, o.stop_idx};
    }
    out += sc.finish();
    return {out, -1};
}

TEST(StopChecker, StopStringSplitAcrossPieces) {
    StopChecker sc({"###"});
    auto a = sc.append("Hello #");
    EXPECT_EQ(a.text, "Hello ");
    EXPECT_FALSE(a.stopped);
    auto b = sc.append("#");
    EXPECT_EQ(b.text, "");
    EXPECT_FALSE(b.stopped);
    auto c = sc.append("# world");
    EXPECT_TRUE(c.stopped);
    EXPECT_EQ(c.stop_idx, 0);
    EXPECT_EQ(c.text, "");
    EXPECT_TRUE(sc.stopped());
    EXPECT_EQ(sc.append("more").text, "");  // ignored after the stop
    EXPECT_EQ(sc.finish(), "");
}

TEST(StopChecker, StopInsideOnePieceEmitsTheTextBefore) {
    StopChecker sc({"</s>"});
    auto o = sc.append("abc</s>def");
    EXPECT_TRUE(o.stopped);
    EXPECT_EQ(o.text, "abc");
}

TEST(StopChecker, PartialMatchThatIsNotAStopIsReleased) {
    StopChecker sc({"</s>"});
    EXPECT_EQ(sc.append("a<").text, "a");
    EXPECT_EQ(sc.append("/").text, "");
    EXPECT_EQ(sc.append("x").text, "</x");  // the prefix broke: all held text goes out
    EXPECT_EQ(sc.append("<</").text, "<");  // "<" cannot start a match any more, "</" still can
    EXPECT_EQ(sc.finish(), "</");           // end of generation releases what was held
}

TEST(StopChecker, OverlappingPrefixRestartsCorrectly) {
    // "aab" inside "aaab": the first "aa" is a false start but the match begins one byte later.
    StopChecker sc({"aab"});
    auto [text, idx] = run(sc, {"a", "a", "a", "b", "c"});
    EXPECT_EQ(idx, 0);
    EXPECT_EQ(text, "a");
}

TEST(StopChecker, MultipleStopStringsFirstCompletedWins) {
    {
        // "wor" completes before "hello world" would.
        StopChecker sc({"hello world", "wor"});
        auto o = sc.append("hello world");
        EXPECT_TRUE(o.stopped);
        EXPECT_EQ(o.stop_idx, 1);
        EXPECT_EQ(o.text, "hello ");
    }
    {
        // Both complete on the same byte: the earlier-starting (longer) one is excluded whole.
        StopChecker sc({"bc", "abc"});
        auto o = sc.append("xabcy");
        EXPECT_EQ(o.stop_idx, 1);
        EXPECT_EQ(o.text, "x");
    }
    {
        StopChecker sc({"STOP", "END"});
        auto [text, idx] = run(sc, {"the E", "N", "D is near STOP"});
        EXPECT_EQ(idx, 1);
        EXPECT_EQ(text, "the ");
    }
    {
        // A held prefix of one stop string while another completes.
        StopChecker sc({"abcd", "bx"});
        auto [text, idx] = run(sc, {"zab", "x"});
        EXPECT_EQ(idx, 1);
        EXPECT_EQ(text, "za");
    }
}

TEST(StopChecker, NoStopStringsPassesTextThrough) {
    StopChecker sc({});
    EXPECT_EQ(sc.append("abc").text, "abc");
    EXPECT_EQ(sc.append("").text, "");
    EXPECT_EQ(sc.finish(), "");
}

TEST(StopChecker, Utf8NeverSplitAcrossEmits) {
    // "你好" = E4 BD A0 E5 A5 BD, "。" = E3 80 82, fed in byte-split pieces.
    StopChecker sc({"。"});
    auto a = sc.append("\xE4\xBD");
    EXPECT_EQ(a.text, "");  // incomplete character held
    auto b = sc.append("\xA0\xE5\xA5\xBD\xE3\x80");
    EXPECT_EQ(b.text, "你好");  // "\xE3\x80" could be the start of "。": held
    auto c = sc.append("\x82more");
    EXPECT_TRUE(c.stopped);
    EXPECT_EQ(c.text, "");

    // A multi-byte stop string whose first bytes match a different character.
    StopChecker sc2({"。"});
    EXPECT_EQ(sc2.append("x\xE3\x80").text, "x");
    EXPECT_EQ(sc2.append("\x81y").text, "\xE3\x80\x81y");  // "、" is not the stop
    EXPECT_EQ(sc2.finish(), "");

    // Without stop strings an incomplete tail is still held until complete.
    StopChecker sc3({});
    EXPECT_EQ(sc3.append("é\xF0\x9F").text, "é");
    EXPECT_EQ(sc3.append("\x98\x80!").text, "\xF0\x9F\x98\x80!");
}

TEST(StopChecker, StopTokens) {
    SamplingParams p;
    p.stop_ids = {5};
    StopChecker sc(p, {2});
    EXPECT_TRUE(sc.is_stop_token(5));
    EXPECT_TRUE(sc.is_stop_token(2));
    EXPECT_FALSE(sc.is_stop_token(3));
    p.ignore_eos = true;
    StopChecker ignore(p, {2});
    EXPECT_FALSE(ignore.is_stop_token(2));
    EXPECT_TRUE(ignore.is_stop_token(5));
}

// Reference: scan the full text byte by byte; the first byte at which any stop string completes ends
// it, and the earliest-starting stop string ending there is excluded.
std::pair<std::string, int32_t> reference(const std::string& text, const std::vector<std::string>& stops) {
    for (size_t end = 1; end <= text.size(); ++end) {
        int32_t best = -1;
        size_t best_start = 0;
        for (size_t i = 0; i < stops.size(); ++i) {
            const std::string& s = stops[i];
            if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
                if (best < 0 || end - s.size() < best_start) {
                    best = int32_t(i);
                    best_start = end - s.size();
                }
            }
        }
        if (best >= 0) return {text.substr(0, best_start), best};
    }
    return {text, -1};
}

TEST(StopChecker, RandomPiecesMatchByteAtATimeReference) {
    std::mt19937 rng(1234);
    const std::vector<std::string> stops = {"abc", "cab", "bb", "abab"};
    for (int iter = 0; iter < 2000; ++iter) {
        std::string text;
        int len = int(rng() % 30);
        for (int i = 0; i < len; ++i) text += char('a' + rng() % 3);
        std::vector<std::string> pieces;
        for (size_t pos = 0; pos < text.size();) {
            size_t n = std::min<size_t>(text.size() - pos, rng() % 5);
            pieces.push_back(text.substr(pos, n));
            pos += n;
        }
        StopChecker sc(stops);
        auto got = run(sc, pieces);
        auto want = reference(text, stops);
        EXPECT_EQ(got, want) << "text " << text;
        if (got != want) break;
    }
}

}  // namespace
}  // namespace kiln::sampling

// Data parallelism's router (server/router.h): a prompt whose prefix went to a replica goes there
// again unless that replica has more than the slack in flight beyond the least busy; other prompts go
// to the least busy replica, ties in turn; load is what was picked and not yet released; prefixes
// count in whole blocks; the least recently used are forgotten beyond capacity; only usable replicas
// are picked. `kiln router`'s URL and request parsing (server/proxy.h).
#include "server/router.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "server/proxy.h"

namespace kiln::server {
namespace {

std::vector<int32_t> prompt(int32_t seed, int len) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(seed * 1000 + i);
    return p;
}

TEST(PrefixRouter, NewPromptsSpreadOverIdleReplicas) {
    PrefixRouter r(3, 4);
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(r.pick(prompt(i, 20)), i % 3);  // ties in turn
        r.release(i % 3);
    }
    EXPECT_EQ(r.prefix_routed(), 0);
    EXPECT_EQ(r.routed(), 4);
}

TEST(PrefixRouter, NewPromptsGoToTheLeastBusy) {
    PrefixRouter r(3, 4);
    EXPECT_EQ(r.pick(prompt(1, 20), 5), 0);  // 5 sequences (n = 5) on replica 0
    EXPECT_EQ(r.pick(prompt(2, 20), 2), 1);
    EXPECT_EQ(r.pick(prompt(3, 20), 1), 2);
    EXPECT_EQ(r.pick(prompt(4, 20), 1), 2);  // loads 5, 2, 1: the least busy
    EXPECT_EQ(r.load(2), 2);
    r.release(0, 5);
    EXPECT_EQ(r.load(0), 0);
    EXPECT_EQ(r.pick(prompt(5, 20)), 0);
}

TEST(PrefixRouter, ASharedPrefixGoesWhereItWentUnlessThatReplicaIsTooBusy) {
    PrefixRouter r(2, 4, /*slack=*/2);
    const std::vector<int32_t> a = prompt(7, 16);  // 4 blocks
    EXPECT_EQ(r.pick(a), 0);
    // a's first 2 blocks and then something else: replica 0 again, though it is the busier one
    std::vector<int32_t> b(a.begin(), a.begin() + 8);
    for (int i = 0; i < 9; ++i) b.push_back(-i);
    EXPECT_EQ(r.pick(b), 0);
    EXPECT_EQ(r.pick(b), 0);  // 2 in flight there, none on replica 1: within the slack of 2
    EXPECT_EQ(r.prefix_routed(), 2);
    // now 3 in flight on replica 0, none on 1: the prefix is given up for the idle replica, which
    // then owns those blocks
    EXPECT_EQ(r.pick(b), 1);
    r.release(0, 3);
    EXPECT_EQ(r.pick(b), 1);
    EXPECT_EQ(r.prefix_routed(), 3);
}

TEST(PrefixRouter, ABurstIsSpreadByTheRoutersOwnCounts) {
    // the same system prompt for 12 requests at once, none released: the prefix keeps them on one
    // replica only up to the slack, then the others take their share
    PrefixRouter r(3, 4, /*slack=*/2);
    std::vector<int> count(3, 0);
    for (int i = 0; i < 12; ++i) ++count[size_t(r.pick(prompt(9, 32)))];
    for (int c : count) EXPECT_GE(c, 2) << count[0] << " " << count[1] << " " << count[2];
}

TEST(PrefixRouter, OnlyWholeBlocksCount) {
    PrefixRouter r(2, 8);
    EXPECT_EQ(r.pick(prompt(1, 7)), 0);  // shorter than a block: nothing remembered
    r.release(0);
    EXPECT_EQ(r.pick(prompt(1, 7)), 1);  // so the same prompt goes in turn
    r.release(1);
    EXPECT_EQ(r.pick(prompt(2, 8)), 0);
    r.release(0);
    EXPECT_EQ(r.pick(prompt(2, 15)), 0);  // the first 8 tokens match; the 7 that follow do not matter
    // a different first block shares nothing, even with the same second block: the least busy
    std::vector<int32_t> other = prompt(3, 8);
    const std::vector<int32_t> two = prompt(2, 16);
    other.insert(other.end(), two.begin() + 8, two.end());
    EXPECT_EQ(r.pick(other), 1);
}

TEST(PrefixRouter, ForgetsTheLeastRecentlyUsedBeyondCapacity) {
    PrefixRouter r(2, 4, 2, /*capacity=*/4);
    EXPECT_EQ(r.pick(prompt(1, 8)), 0);  // 2 blocks
    r.release(0);
    EXPECT_EQ(r.pick(prompt(2, 8)), 1);  // 2 more: full
    r.release(1);
    EXPECT_EQ(r.pick(prompt(1, 8)), 0);  // prompt 1 used again: the most recent
    r.release(0);
    EXPECT_EQ(r.pick(prompt(3, 8)), 0);  // 2 more: prompt 2's blocks, the least recent, forgotten
    r.release(0);
    EXPECT_EQ(r.pick(prompt(1, 8)), 0);  // still known
    r.release(0);
    EXPECT_EQ(r.pick(prompt(2, 8)), 1);  // forgotten: the least busy, in turn (replica 1)
    EXPECT_EQ(r.prefix_routed(), 2);
}

TEST(PrefixRouter, ThreadSafe) {
    PrefixRouter r(4, 4);
    std::vector<std::thread> t;
    for (int k = 0; k < 4; ++k)
        t.emplace_back([&, k] {
            for (int i = 0; i < 500; ++i) r.release(r.pick(prompt(k * 1000 + i % 37, 24)));
        });
    for (auto& th : t) th.join();
    EXPECT_EQ(r.routed(), 2000);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.load(i), 0);
}

TEST(PrefixRouter, OnlyUsableReplicasArePicked) {
    PrefixRouter r(3, 4);
    EXPECT_EQ(r.pick(prompt(1, 8)), 0);
    r.release(0);
    const std::vector<bool> not0 = {false, true, true}, none = {false, false, false};
    EXPECT_EQ(r.pick(prompt(1, 12), 1, &not0), 1);  // prompt 1's replica is out: the least busy usable
    EXPECT_EQ(r.pick(prompt(2, 8), 1, &not0), 2);
    EXPECT_EQ(r.pick(prompt(3, 8), 1, &none), -1);
    EXPECT_EQ(r.prefix_routed(), 0);
    EXPECT_EQ(r.pick(prompt(1, 12)), 1);  // its blocks are now replica 1's
    EXPECT_EQ(r.prefix_routed(), 1);
}

// `kiln router`'s request parsing (server/proxy.h); the proxy itself: tests/server/router_proxy_test.sh.
TEST(Proxy, WorkerUrls) {
    std::string err;
    auto a = parse_worker_url("http://10.0.0.2:8001/", &err);
    ASSERT_TRUE(a) << err;
    EXPECT_EQ(a->host, "10.0.0.2");
    EXPECT_EQ(a->port, 8001);
    a = parse_worker_url("http://node3", &err);
    ASSERT_TRUE(a) << err;
    EXPECT_EQ(a->port, 80);
    for (const char* bad : {"https://h:1", "h:8000", "http://", "http://h:", "http://h:99999", "http://h:80/v1", "http://:80"})
        EXPECT_FALSE(parse_worker_url(bad, &err)) << bad;
}

TEST(Proxy, AffinityTextOfRequests) {
    std::string err;
    EXPECT_EQ(affinity_text(R"({"prompt": "Once upon", "max_tokens": 3})", false, &err), "Once upon");
    EXPECT_EQ(affinity_text(R"({"prompt": [1, 22, 333]})", false, &err), "1 22 333 ");
    EXPECT_EQ(affinity_text(R"({"prompt": ["first", "second"]})", false, &err), "first");
    EXPECT_EQ(affinity_text(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})",
                            true, &err),
              "system\nBe brief.\nuser\nHi\n");
    EXPECT_EQ(affinity_text(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"x": [[1]]}]}]})",
                            true, &err),
              "user\nHi\n");  // content parts: their texts
    // A conversation that goes on starts with the earlier one's text: the same worker's prefix.
    const auto one = affinity_text(R"({"messages": [{"role": "user", "content": "Hi"}]})", true, &err);
    const auto two = affinity_text(
        R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})", true, &err);
    ASSERT_TRUE(one && two);
    EXPECT_EQ(two->rfind(*one, 0), 0u);
    for (const char* bad : {"{not json", "[1]", R"({"max_tokens": 3})", R"({"prompt": 5})", R"({"prompt": [1, "x"]})"})
        EXPECT_FALSE(affinity_text(bad, false, &err)) << bad;
    EXPECT_FALSE(affinity_text(R"({"messages": "hi"})", true, &err));
    EXPECT_FALSE(affinity_text(R"({"messages": ["hi"]})", true, &err));
}

}  // namespace
}  // namespace kiln::server

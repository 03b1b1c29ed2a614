// dist/communicator.h on one rank and on thread groups of 2, 3 and 4 ranks (the MPI communicator
// runs the same checks under mpirun: tests/dist/mpi_collectives_test.cc); a collective that a rank
// never joins fails after the timeout instead of hanging.
#include <gtest/gtest.h>

#include <thread>

#include "support/dist_checks.h"

namespace kiln::dist {
namespace {

TEST(Dist, SingleRank) {
    auto c = make_single_communicator();
    EXPECT_EQ(c->size(), 1);
    kiln::testing::check_collectives(*c);
    EXPECT_FALSE(c->broadcast(nullptr, 0, 1).is_ok());
    EXPECT_FALSE(c->send(nullptr, 0, 0).is_ok());
}

TEST(Dist, ThreadGroups) {
    for (int n : {2, 3, 4}) {
        auto group = make_thread_group(n);
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) threads.emplace_back([&, r] {
            EXPECT_EQ(group[size_t(r)]->rank(), r);
            EXPECT_EQ(group[size_t(r)]->size(), n);
            kiln::testing::check_collectives(*group[size_t(r)]);
        });
        for (auto& t : threads) t.join();
    }
}

TEST(Dist, AMissingRankTimesOut) {
    auto group = make_thread_group(2);
    group[0]->set_timeout_seconds(0.2);
    float x = 1.0f;
    const core::Status s = group[0]->all_reduce_sum(&x, 1);  // rank 1 never comes
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("all_reduce timed out"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("rank 0 of 2"), std::string::npos) << s.to_string();
    group[0]->set_timeout_seconds(0.2);
    int64_t v = 0;
    EXPECT_FALSE(group[0]->recv(&v, sizeof(v), 1).is_ok());
}

TEST(Dist, MpiWithoutMpirun) {
    // Outside mpirun this process is not one of several ranks.
    EXPECT_FALSE(launched_by_mpirun());
}

}  // namespace
}  // namespace kiln::dist

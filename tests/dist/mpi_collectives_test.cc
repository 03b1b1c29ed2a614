// The MPI communicator under mpirun (tests/CMakeLists.txt runs it with -np 2 and -np 4): every rank
// runs the same checks as the thread groups (support/dist_checks.h). Only rank 0 prints.
#include <gtest/gtest.h>

#include "support/dist_checks.h"

namespace kiln::dist {
namespace {

Communicator* g_comm = nullptr;

TEST(MpiDist, Collectives) {
    ASSERT_TRUE(launched_by_mpirun());
    ASSERT_NE(g_comm, nullptr);
    EXPECT_STREQ(g_comm->kind(), "mpi");
    kiln::testing::check_collectives(*g_comm);
}

}  // namespace
}  // namespace kiln::dist

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    auto comm = kiln::dist::make_mpi_communicator();
    if (!comm.is_ok()) {
        std::fprintf(stderr, "%s\n", comm.status().to_string().c_str());
        return 1;
    }
    kiln::dist::g_comm = comm->get();
    if ((*comm)->rank() != 0) {  // one report, from rank 0; the others' failures still fail the job
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
    }
    const int rc = RUN_ALL_TESTS();
    if (rc != 0) std::fprintf(stderr, "mpi_collectives_test: failures on rank %d\n", (*comm)->rank());
    return rc;
}

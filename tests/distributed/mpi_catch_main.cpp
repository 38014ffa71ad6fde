// Catch2's main for the distributed tests: every rank runs every test case, reports its own result, and
// all ranks exit with the worst status, so a failure on one rank fails the test on all.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <string>

#include <tapegrad/framework/distributed/process_group.h>

int main(int argc, char** argv) {
  const auto world = tapegrad::distributed::ProcessGroup::world();
  Catch::Session session;
  // Note: each rank names itself in the test run's name, so interleaved reports can be told apart.
  session.configData().name = "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.world_size());
  int failed = session.applyCommandLine(argc, argv);
  if (failed == 0) failed = session.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return std::min(worst, 255);
}

// For the ctest abort_on_throw: rank 1 throws inside run_or_abort while rank 0 waits in a barrier. The test
// passes when mpirun reports rank 1's message (and finishes at all: a hang hits the ctest timeout).
#include <chrono>
#include <thread>

#include <tapegrad/framework/distributed/process_group.h>

int main() {
  return tapegrad::distributed::run_or_abort([] {
    const auto world = tapegrad::distributed::ProcessGroup::world();
    if (world.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      tapegrad::fail("a deliberate failure on rank {}", world.rank());
    }
    world.barrier();  // rank 0 would wait here forever without the abort
  });
}

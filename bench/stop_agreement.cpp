// The cost of the ranks agreeing on a stop: one dist::max_over_ranks (an MPI_Allreduce of one int on
// the host) before every step of `mixgrad train` under mpirun (tools/train.cpp, stop_agreed).
//
//   mpirun -n 2 build/bench/stop_agreement [--calls 200] [--repeats 50]
//   (as root: mpirun --allow-run-as-root; on a machine with fewer cores than ranks: --oversubscribe)
//
// Each repeat times `calls` agreements back to back on every rank (a barrier first, not timed); the
// figure is rank 0's median over the repeats of the time per agreement, after 3 repeats of warm-up.
// Compare it with a step's time (bench/data_parallel, docs/data-parallel.md): the agreement adds
// that much to every step of a data-parallel run. Without mpirun it says so and times nothing.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "mixgrad.h"

using namespace mg;

int main(int argc, char** argv) {
  int calls = 200, repeats = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--calls") calls = std::atoi(argv[i + 1]);
    if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
  }
  if (!dist::launched_by_mpirun()) {
    fmt::print("bench/stop_agreement: start it under mpirun (mpirun -n 2 {}): one process has nobody to agree with\n",
               argv[0]);
    return 0;
  }
  auto group = dist::init_process_group(Device::cpu());
  std::vector<double> per_call_us;
  for (int r = 0; r < repeats + 3; ++r) {
    dist::max_over_ranks(0);  // start together
    const auto start = bench::Clock::now();
    for (int c = 0; c < calls; ++c) dist::max_over_ranks(0);
    const double seconds = std::chrono::duration<double>(bench::Clock::now() - start).count();
    if (r >= 3) per_call_us.push_back(seconds / calls * 1e6);
  }
  if (group->rank() == 0)
    fmt::print(
        "{}\nstop agreement on {} ranks (MPI_Allreduce of one int): {:.2f} us per step (median of {} x {} calls; "
        "min {:.2f}, max {:.2f})\n",
        bench::machine_lines(), group->size(), bench::median(per_call_us), repeats, calls,
        *std::min_element(per_call_us.begin(), per_call_us.end()),
        *std::max_element(per_call_us.begin(), per_call_us.end()));
  return 0;
}

// A data-parallel job in which rank 1 fails while rank 0 waits for it in an all-reduce, as a rank
// meeting bad input would. tests/test_dist_cli.cpp runs it under mpirun -n 2 and checks that the
// job ends, with rank 1's message and a non-zero status, instead of leaving rank 0 waiting forever:
// dist::abort_job is what mixgrad's programs call on an error in a data-parallel job.
#include "mixgrad.h"

int main() {
  std::shared_ptr<mg::dist::ProcessGroup> group = mg::dist::init_process_group(mg::Device::cpu());
  try {
    if (group->rank() == 1) throw mg::Error("poisoned: rank 1 met bad input");
    mg::Tensor gradient = mg::zeros({4});
    group->all_reduce(gradient);  // rank 0 waits here for rank 1, which never comes
    return 0;
  } catch (const mg::Error& error) {
    mg::dist::abort_job(error.what());
  }
}

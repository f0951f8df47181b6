// The backends behind dist/process_group.h, for process_group.cpp alone: each is defined in its own
// file, compiled only where CMake found its engine (MG_WITH_MPI, MG_WITH_NCCL).
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace mg::dist::detail {

void init_mpi();  // MPI_Init_thread once; MPI_Finalize at exit
std::shared_ptr<ProcessGroup> make_mpi_group();  // MPI_COMM_WORLD, CPU tensors
std::shared_ptr<ProcessGroup> make_nccl_group(Device device);  // NCCL over the world, its id sent by MPI
[[noreturn]] void mpi_abort(int status);
bool mpi_initialized();
void mpi_check_same(const std::string& what, const std::string& value);
int mpi_max(int value);  // MPI_Allreduce(MAX) of one int over MPI_COMM_WORLD

}  // namespace mg::dist::detail

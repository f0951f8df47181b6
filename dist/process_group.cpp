#include "dist/process_group.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dist/backends.h"

namespace mg::dist {

namespace {

const char* op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : op == ReduceOp::Mean ? "avg" : "max"; }

// The first of the launcher's variables that is set: Open MPI's, then the PMI ones of MPICH and Slurm.
int environment_number(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return fallback;
}

}  // namespace

void ProcessGroup::check_tensor(const char* collective, const Tensor& tensor, ReduceOp op) const {
  MG_CHECK(tensor.defined(), "dist::{} ({} group): the tensor is undefined", collective, backend());
  MG_CHECK(tensor.device() == device(),
           "dist::{}: the tensor is on {}, but this {} group reduces tensors on {}; "
           "move it there first, or use the group made by init_process_group({})",
           collective, tensor.device(), backend(), device(), tensor.device());
  MG_CHECK(op != ReduceOp::Max || tensor.dtype() == DType::F32 || tensor.dtype() == DType::F64 ||
               tensor.dtype() == DType::I32,
           "dist::{}: {} of a {} tensor {} is not supported; the max is kept for f32, f64 and i32 flags (cast "
           "to f32 first)",
           collective, op_name(op), tensor.dtype(), tensor.shape());
  MG_CHECK(!is_coded(tensor.dtype()) || std::string_view(collective) == "broadcast",
           "dist::{}: the {} tensor {} holds codes ({} bits each), which cannot be summed as they lie; "
           "reduce the f32 or bf16 values and quantise the result",
           collective, tensor.dtype(), tensor.shape(), dtype_info(tensor.dtype()).bits);
  MG_CHECK((tensor.dtype() != DType::U8 && tensor.dtype() != DType::BOOL) ||
               std::string_view(collective) == "broadcast",
           "dist::{}: a {} tensor {} would wrap or stop being 0 and 1 when summed; broadcast it, or reduce it as "
           "i32 (x.to(DType::I32))",
           collective, tensor.dtype(), tensor.shape());
  MG_CHECK(op != ReduceOp::Mean || is_floating(tensor.dtype()),
           "dist::{}: the avg of an {} tensor {} would not be a "
           "whole number; sum it, or cast it to f32 first",
           collective, tensor.dtype(), tensor.shape());
}

bool available() {
#ifdef MG_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool nccl_available() {
#ifdef MG_WITH_NCCL
  return true;
#else
  return false;
#endif
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

int launched_world_size() { return environment_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1); }

int local_rank() { return environment_number({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0); }

std::shared_ptr<ProcessGroup> init_process_group(Device device) {
#ifdef MG_WITH_MPI
  detail::init_mpi();
  if (device.is_cpu()) return detail::make_mpi_group();
#ifdef MG_WITH_NCCL
  return detail::make_nccl_group(device);
#else
  throw Error(fmt::format("dist::init_process_group({}): this mixgrad has no NCCL backend (it needs a CUDA build, "
                          "-DMG_CUDA=ON, and NCCL: nccl.h and libnccl from the CUDA Toolkit or libnccl-dev); "
                          "train on the CPU over MPI instead",
                          device));
#endif
#else
  throw Error(fmt::format("dist::init_process_group({}): this mixgrad was built without MPI; install Open MPI "
                          "(apt-get install libopenmpi-dev openmpi-bin) and rebuild with -DMG_DIST=AUTO or ON",
                          device));
#endif
}

void abort_job(const std::string& message) {
  const int rank = environment_number({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
  const int size = launched_world_size();
  if (size > 1)
    std::fprintf(stderr, "error (rank %d of %d): %s\n", rank, size, message.c_str());
  else
    std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
#ifdef MG_WITH_MPI
  if (detail::mpi_initialized()) detail::mpi_abort(1);
#endif
  std::exit(1);
}

void check_same_on_every_rank(const std::string& what, const std::string& value) {
#ifdef MG_WITH_MPI
  detail::mpi_check_same(what, value);
#else
  (void)what, (void)value;  // one process: nothing to compare with
#endif
}

int max_over_ranks(int value) {
#ifdef MG_WITH_MPI
  if (detail::mpi_initialized()) return detail::mpi_max(value);
#endif
  return value;
}

}  // namespace mg::dist

// Process groups: the ranks of a data-parallel job and the collectives they run together, through
// an existing communication engine: MPI (Open MPI) for CPU tensors, NCCL for CUDA tensors.
//
//   $ mpirun -n 2 ./my_program
//   auto group = dist::init_process_group(Device::cpu());   // MPI_Init once; NCCL for Device::cuda()
//   Tensor grad = ...;                                       // the same shape and dtype on every rank
//   group->all_reduce(grad, dist::ReduceOp::Sum);            // every rank now holds the sum
//   group->broadcast(weights, /*root=*/0);                   // every rank now holds rank 0's values
//
// Rules every rank must follow, as with any collective library: the same collectives, in the same
// order, on tensors of the same shape and dtype. A rank that skips one leaves the others waiting in
// it; that is why mixgrad's programs end the whole job (abort()) when one rank fails.
//
// Guarantees:
// - After all_reduce every rank holds the same bytes: Open MPI's algorithms reduce each element
//   either once and copy it (ring) or pairwise in an order that commutes (recursive doubling), and
//   NCCL's ring ends with an all-gather. With 2 ranks an f32 sum is a + b, which is b + a.
// - f32, f64 and i32 are reduced in their own type. Over MPI, f16 and bf16 are summed in f32 and
//   rounded to their dtype once per pairwise step of the algorithm (with 2 ranks, exactly once);
//   NCCL sums them in their own type.
// - CPU collectives return when done. CUDA collectives are queued on the device's stream
//   (kernels/cuda/runtime.h), after the work that made the tensor: no host wait.
// - all_reduce_async returns at once with a Work to wait on; the tensor must not be read or written
//   until then. Data-parallel training (train/data_parallel.h) launches gradient buckets this way
//   while backward goes on.
// Built with MPI only where CMake found it (MG_DIST=AUTO, like MG_CUDA): dist::available() says so,
// and init_process_group() otherwise throws an mg::Error that says how to build it in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "kernels/reduce.h"  // ReduceOp

namespace mg::dist {

// The reductions are the kernels' (kernels/reduce.h), one enum: Sum; Mean, PyTorch's AVG for a
// collective (the sum times 1 / size, rounded once more; floating dtypes); Max (f32, f64, i32).
using ReduceOp = kernels::ReduceOp;

// An operation in flight. wait() returns when the result is in the tensor (on a GPU: when it is
// queued before any later work on the stream); test() lets the engine progress and says whether it
// is done. Destroying a Work that was not waited for waits.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi" or "nccl"
  virtual Device device() const = 0;  // where its tensors must be

  // In place on every rank: `tensor` becomes the elementwise sum, mean or max over the ranks.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) { all_reduce_async(tensor, op)->wait(); }
  virtual std::unique_ptr<Work> all_reduce_async(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // In place: every rank's `tensor` takes root's values.
  virtual void broadcast(Tensor& tensor, int root = 0) = 0;
  virtual void barrier() = 0;

 protected:
  // The checks every backend makes before a tensor reaches the engine (an mg::Error naming the
  // collective, the tensor and the group otherwise).
  void check_tensor(const char* collective, const Tensor& tensor, ReduceOp op) const;
};

// Whether this mixgrad was built with MPI (MG_DIST found Open MPI), and with NCCL (and CUDA).
bool available();
bool nccl_available();

// Whether this process was started by mpirun/mpiexec (the launcher's environment variables), and the
// world size it announces (1 when not launched so). Read without initialising MPI.
bool launched_by_mpirun();
int launched_world_size();

// The process group of all ranks (MPI_COMM_WORLD) for tensors on `device`: MPI for the CPU, NCCL for
// a CUDA device (its unique id broadcast over MPI; each rank uses the device it is given: one GPU
// per rank, usually Device::cuda(local_rank())). Initialises MPI on the first call; MPI_Finalize
// runs at exit. Throws where MPI (or NCCL) was not built in.
std::shared_ptr<ProcessGroup> init_process_group(Device device);

// This rank's index among the ranks of its node (OMPI_COMM_WORLD_LOCAL_RANK): the GPU it should take.
int local_rank();

// Ends the whole job: prints `message` on stderr with this rank's number, then MPI_Abort, which
// makes mpirun stop every rank. Use it for an error one rank may meet alone: the others would wait in
// their next collective forever. Outside an MPI job it prints and exits with status 1.
[[noreturn]] void abort_job(const std::string& message);

// Throws the same mg::Error on every rank unless every rank of the job passes the same `value`
// (rank 0's is the reference): programs check their options this way before the first collective
// that depends on them. A collective over MPI_COMM_WORLD: every rank must call it, after
// init_process_group.
void check_same_on_every_rank(const std::string& what, const std::string& value);

// The largest of every rank's `value`: one all-reduce of an int over MPI_COMM_WORLD on the host, which
// no GPU work waits for. It is also a barrier (no rank returns before every rank has called it). How
// the ranks agree on a flag only some of them have seen, such as a stop asked for by a signal
// (tools/train.cpp). Outside an MPI job (or before init_process_group) it returns `value`.
int max_over_ranks(int value);

}  // namespace mg::dist

// The NCCL backend of dist/process_group.h: every rank drives one GPU, and collectives run on the
// device's stream (kernels/cuda/runtime.h), ordered after the kernels that made their tensors and
// before those that read them, so the host never waits for them.
//
// NCCL needs one id shared by all ranks before they can talk: rank 0 makes it and MPI broadcasts
// it (MPI_COMM_WORLD is initialised by then). f16 and bf16 are reduced by NCCL in their own type
// (ncclFloat16, ncclBfloat16).
// Built only with a real CUDA build and NCCL (MG_WITH_NCCL); its test, tests/test_dist_nccl.cpp,
// skips without a GPU.
#include <mpi.h>
#include <nccl.h>

#include <fmt/format.h>

#include "dist/backends.h"
#include "kernels/cuda/runtime.h"

namespace mg::dist::detail {

namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  throw Error(fmt::format("dist: {} failed: {}", call, ncclGetErrorString(result)));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::I32:
      return ncclInt32;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I64:
      return ncclInt64;
    case DType::E4M3:
    case DType::E5M2:
    case DType::E2M1:
    case DType::E8M0:
    case DType::U8:
    case DType::BOOL:
      return ncclUint8;  // broadcast only (ProcessGroup::check_tensor)
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Mean:
      return ncclAvg;  // NCCL 2.10 and later
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

// Queued on the stream: later work on it runs after the collective, which is all a step needs.
class StreamOrderedWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class NcclGroup : public ProcessGroup {
 public:
  explicit NcclGroup(Device device) : device_(device) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    cuda::DeviceGuard guard(device_.index);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclGroup() override { ncclCommDestroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return device_; }

  std::unique_ptr<Work> all_reduce_async(Tensor& tensor, ReduceOp op) override {
    check_tensor("all_reduce", tensor, op);
    cuda::DeviceGuard guard(device_.index);
    check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                             nccl_type(tensor.dtype()), nccl_op(op), comm_, cuda::stream(device_.index)),
               "ncclAllReduce");
    return std::make_unique<StreamOrderedWork>();
  }

  void broadcast(Tensor& tensor, int root) override {
    check_tensor("broadcast", tensor, ReduceOp::Sum);
    MG_CHECK(root >= 0 && root < size_, "dist::broadcast: root {} is not a rank of this group of {}", root, size_);
    cuda::DeviceGuard guard(device_.index);
    // A packed dtype (E2M1, two a byte) goes as its bytes, ncclUint8's elements.
    const auto count = static_cast<std::size_t>(tensor.numel() / packed_group(tensor.dtype()));
    check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count, nccl_type(tensor.dtype()), root, comm_,
                             cuda::stream(device_.index)),
               "ncclBroadcast");
    tensor.impl().storage->bump_version();
  }

  // NCCL has no barrier: the ranks meet in MPI once the device's queued work is done.
  void barrier() override {
    cuda::synchronize(device_.index);
    MPI_Barrier(MPI_COMM_WORLD);
  }

 private:
  Device device_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(Device device) {
  MG_CHECK(device.is_cuda(), "dist::init_process_group: NCCL reduces CUDA tensors, not {}", device);
  return std::make_shared<NcclGroup>(device);
}

}  // namespace mg::dist::detail

// The MPI backend of dist/process_group.h: MPI_COMM_WORLD over Open MPI, for CPU tensors.
//
// Every MPI call runs on the thread that called the collective (MPI_THREAD_FUNNELED: mixgrad's
// kernel threads never call MPI). Errors come back as codes (MPI_ERRORS_RETURN) and become an
// mg::Error with MPI's own message. f16 and bf16 have no MPI type: they travel as 2-byte words and
// are reduced by a user operation that sums in f32 and rounds once to the dtype.
#include <mpi.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/scalar_types.h"
#include "dist/backends.h"
#include "kernels/elementwise.h"

namespace mg::dist::detail {

namespace {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(fmt::format("dist: {} failed: {}", call, std::string(text, static_cast<std::size_t>(length))));
}

// inout[i] = round(in[i] + inout[i]) with the sum in f32: the reduction MPI applies pairwise.
template <typename Half>
void sum_in_f32(void* in, void* inout, int* count, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = Half(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

MPI_Op f16_sum = MPI_OP_NULL;
MPI_Op bf16_sum = MPI_OP_NULL;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (f16_sum != MPI_OP_NULL) MPI_Op_free(&f16_sum);
  if (bf16_sum != MPI_OP_NULL) MPI_Op_free(&bf16_sum);
  MPI_Finalize();
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::F16:
    case DType::BF16:
      return MPI_UINT16_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::E4M3:
    case DType::E5M2:
    case DType::E2M1:
    case DType::E8M0:
    case DType::U8:
    case DType::BOOL:
      return MPI_UINT8_T;  // broadcast only (ProcessGroup::check_tensor)
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::F16) return f16_sum;
  if (dtype == DType::BF16) return bf16_sum;
  return op == ReduceOp::Max ? MPI_MAX : MPI_SUM;  // Mean: the sum, divided when it is done
}

// The count of mpi_type's elements: a packed dtype (E2M1, two a byte) goes as its bytes.
int element_count(const Tensor& tensor, const char* collective) {
  const std::int64_t count = tensor.numel() / packed_group(tensor.dtype());
  MG_CHECK(count <= INT32_MAX,
           "dist::{}: {} has {} elements; MPI counts are int, so send at most 2^31 - 1 "
           "at a time",
           collective, tensor.shape(), count);
  return static_cast<int>(count);
}

// A nonblocking all-reduce. It keeps the tensor (and so its storage) alive until waited for, and
// divides an average's sum by the ranks once it is done.
class MpiWork : public Work {
 public:
  MpiWork(Tensor tensor, MPI_Request request, double divide_by)
      : tensor_(std::move(tensor)), request_(request), divide_by_(divide_by) {}
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    if (request_ != MPI_REQUEST_NULL) {
      int done = 0;
      check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) return false;
    }
    finish();
    return true;
  }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    finish();
  }

 private:
  void finish() {
    if (divide_by_ == 0.0) return;
    kernels::unary(kernels::UnaryOp::MulScalar, tensor_, tensor_, {.a = 1.0 / divide_by_});
    divide_by_ = 0.0;
  }
  Tensor tensor_;
  MPI_Request request_;
  double divide_by_;  // 0: nothing to divide (a sum, a max, or an average already divided)
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup() {
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

  std::unique_ptr<Work> all_reduce_async(Tensor& tensor, ReduceOp op) override {
    check_tensor("all_reduce", tensor, op);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), element_count(tensor, "all_reduce"),
                             mpi_type(tensor.dtype()), mpi_op(tensor.dtype(), op), MPI_COMM_WORLD, &request),
              "MPI_Iallreduce");
    return std::make_unique<MpiWork>(tensor, request, op == ReduceOp::Mean ? static_cast<double>(size_) : 0.0);
  }

  void broadcast(Tensor& tensor, int root) override {
    check_tensor("broadcast", tensor, ReduceOp::Sum);
    MG_CHECK(root >= 0 && root < size_, "dist::broadcast: root {} is not a rank of this group of {}", root, size_);
    check_mpi(MPI_Bcast(tensor.data_ptr(), element_count(tensor, "broadcast"), mpi_type(tensor.dtype()), root,
                        MPI_COMM_WORLD),
              "MPI_Bcast");
    tensor.impl().storage->bump_version();  // written in place, like copy_
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

void init_mpi() {
  if (mpi_initialized()) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Op_create(&sum_in_f32<Eigen::half>, /*commute=*/1, &f16_sum), "MPI_Op_create");
  check_mpi(MPI_Op_create(&sum_in_f32<Eigen::bfloat16>, /*commute=*/1, &bf16_sum), "MPI_Op_create");
}

std::shared_ptr<ProcessGroup> make_mpi_group() { return std::make_shared<MpiGroup>(); }

void mpi_abort(int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);  // MPI_Abort does not return; the compiler does not know
}

int mpi_max(int value) {
  int largest = value;
  check_mpi(MPI_Allreduce(&value, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return largest;
}

void mpi_check_same(const std::string& what, const std::string& value) {
  MG_CHECK(mpi_initialized(), "dist::check_same_on_every_rank: call dist::init_process_group first");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int length = static_cast<int>(value.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string reference = rank == 0 ? value : std::string(static_cast<std::size_t>(length), '\0');
  check_mpi(MPI_Bcast(reference.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  // The lowest rank that differs, so that every rank names the same one.
  int differs = reference == value ? INT32_MAX : rank;
  int first = 0;
  check_mpi(MPI_Allreduce(&differs, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (first == INT32_MAX) return;
  std::string theirs = rank == first ? value : std::string();
  int their_length = static_cast<int>(theirs.size());
  check_mpi(MPI_Bcast(&their_length, 1, MPI_INT, first, MPI_COMM_WORLD), "MPI_Bcast");
  theirs.resize(static_cast<std::size_t>(their_length));
  check_mpi(MPI_Bcast(theirs.data(), their_length, MPI_CHAR, first, MPI_COMM_WORLD), "MPI_Bcast");
  throw Error(fmt::format("dist: rank {} has {} '{}' but rank 0 has '{}'; every rank of a data-parallel job must be "
                          "started with the same arguments",
                          first, what, theirs, reference));
}

}  // namespace mg::dist::detail

#include "train/data_parallel.h"

#include <fmt/format.h>

#include <chrono>

#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"

namespace mg::train {

namespace {

constexpr const char* kName = "train::DataParallel";

// The elements of `t` as one row, sharing its storage (tensors are contiguous).
Tensor flat_view(const Tensor& t) { return t.reshape({t.numel()}); }

}  // namespace

DataParallel::DataParallel(std::shared_ptr<dist::ProcessGroup> group, nn::Module& model, DataParallelOptions options)
    : group_(std::move(group)), options_(options) {
  MG_CHECK(group_ != nullptr, "{}: the process group is null; make one with dist::init_process_group", kName);
  MG_CHECK(options_.bucket_bytes >= 1, "{}: bucket_bytes must be >= 1, got {}", kName, options_.bucket_bytes);
  MG_CHECK(is_floating(options_.wire_dtype) && options_.wire_dtype != DType::F64,
           "{}: the gradients travel as f32, "
           "f16 or bf16, not {}",
           kName, options_.wire_dtype);
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) parameters_.push_back(p);
  MG_CHECK(!parameters_.empty(), "{}: the model has no parameter that requires grad: nothing to synchronise", kName);
  for (const Tensor& p : parameters_)
    MG_CHECK(p.device() == group_->device(),
             "{}: a parameter {} {} is on {}, but the {} group reduces tensors on {}; "
             "move the model there first (model.to(device))",
             kName, p.shape(), p.dtype(), p.device(), group_->backend(), group_->device());

  // One starting point for every replica: rank 0's weights, and its buffers (BatchNorm's statistics).
  NoGradGuard no_grad;
  for (Tensor p : parameters_) group_->broadcast(p, 0);
  for (auto& [name, buffer] : model.named_buffers()) group_->broadcast(buffer, 0);

  // Buckets in reverse parameter order, each closed once it holds bucket_bytes on the wire.
  const std::int64_t wire_size = static_cast<std::int64_t>(dtype_size(options_.wire_dtype));
  std::int64_t elements = 0;
  for (std::size_t k = parameters_.size(); k-- > 0;) {
    if (buckets_.empty() || elements * wire_size >= options_.bucket_bytes) {
      buckets_.emplace_back();
      elements = 0;
    }
    Bucket& bucket = buckets_.back();
    where_[parameters_[k].id()] = {buckets_.size() - 1, bucket.parameters.size()};
    bucket.parameters.push_back(k);
    bucket.offsets.push_back(elements);
    elements += parameters_[k].numel();
    stats_.payload_bytes += parameters_[k].numel() * wire_size;
  }
  for (Bucket& bucket : buckets_) {
    const std::size_t last = bucket.parameters.back();
    const std::int64_t size = bucket.offsets.back() + parameters_[last].numel();
    bucket.flat = Tensor::empty({size}, {.dtype = options_.wire_dtype, .device = group_->device()});
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
}

DataParallel::~DataParallel() {
  if (syncing_) abandon();
}

std::vector<std::vector<std::size_t>> DataParallel::bucket_layout() const {
  std::vector<std::vector<std::size_t>> layout;
  for (const Bucket& bucket : buckets_) layout.push_back(bucket.parameters);
  return layout;
}

Tensor DataParallel::global_mean(const Tensor& local, double fraction) const {
  MG_CHECK(local.numel() == 1 && local.dtype() == DType::F32, "{}::global_mean: expects one f32 element, got {} {}",
           kName, local.shape(), local.dtype());
  MG_CHECK(fraction > 0.0 && fraction <= 1.0,
           "{}::global_mean: this rank's fraction of the batch must be in (0, 1], "
           "got {}",
           kName, fraction);
  NoGradGuard no_grad;
  Tensor mean = mul(local.detach(), fraction);
  group_->all_reduce(mean, dist::ReduceOp::Sum);
  return mean;
}

void DataParallel::begin() {
  MG_CHECK(!syncing_, "{}: a GradientSync is already open; finish it before the next backward", kName);
  for (Bucket& bucket : buckets_) bucket.ready = 0;
  stats_.launched_during_backward = 0;
  syncing_ = true;
  add_grad_ready_hook(this);
}

void DataParallel::ready(const Tensor& leaf) {
  auto found = where_.find(leaf.id());
  if (found == where_.end()) return;  // a leaf that is not one of the model's parameters
  Bucket& bucket = buckets_[found->second.first];
  MG_CHECK(!bucket.work,
           "{}: a second backward inside one GradientSync (parameter {} {} got another gradient after "
           "its bucket was sent); to accumulate micro-batches, run their backward passes without a GradientSync and "
           "open one around the last backward only",
           kName, leaf.shape(), leaf.dtype());
  if (++bucket.ready == bucket.parameters.size()) {
    launch(bucket);
    ++stats_.launched_during_backward;
  }
  // MPI moves a nonblocking collective along only inside MPI calls: give the ones in flight a turn.
  for (Bucket& other : buckets_)
    if (other.work) other.work->test();
}

void DataParallel::launch(Bucket& bucket) {
  NoGradGuard no_grad;
  const double size = static_cast<double>(group_->size());
  const bool divide_first = options_.wire_dtype != DType::F32;
  for (std::size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
    const Tensor& p = parameters_[bucket.parameters[slot]];
    Tensor part = bucket.flat.slice(bucket.offsets[slot], bucket.offsets[slot] + p.numel());
    const Tensor grad = p.grad();
    if (!grad.defined()) {  // no gradient reached it on this rank: it adds nothing to the sum
      kernels::cast(zeros({p.numel()}, {.dtype = options_.wire_dtype, .device = p.device()}), part);
      continue;
    }
    if (!divide_first) {
      kernels::cast(flat_view(grad), part);
      continue;
    }
    // Divided in f32, then rounded once to the wire dtype.
    Tensor divided = Tensor::empty({p.numel()}, {.dtype = DType::F32, .device = p.device()});
    kernels::unary(kernels::UnaryOp::MulScalar, flat_view(grad), divided, {.a = 1.0 / size});
    kernels::cast(divided, part);
  }
  bucket.work = group_->all_reduce_async(bucket.flat, dist::ReduceOp::Sum);
}

void DataParallel::unpack(Bucket& bucket) {
  NoGradGuard no_grad;
  bucket.work->wait();
  bucket.work.reset();
  const bool divide_after = options_.wire_dtype == DType::F32 && group_->size() > 1;
  if (divide_after) kernels::unary(kernels::UnaryOp::MulScalar, bucket.flat, bucket.flat, {.a = 1.0 / group_->size()});
  for (std::size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
    const Tensor& p = parameters_[bucket.parameters[slot]];
    if (!p.grad().defined())
      p.impl().grad = Tensor::empty(p.shape(), {.dtype = p.dtype(), .device = p.device()}).impl_ptr();
    Tensor grad = flat_view(p.grad());
    kernels::cast(bucket.flat.slice(bucket.offsets[slot], bucket.offsets[slot] + p.numel()), grad);
    grad.impl().storage->bump_version();
  }
}

void DataParallel::finish() {
  remove_grad_ready_hook(this);
  syncing_ = false;
  const auto start = std::chrono::steady_clock::now();
  for (Bucket& bucket : buckets_)
    if (!bucket.work) launch(bucket);  // a parameter without a gradient kept it open
  for (Bucket& bucket : buckets_) unpack(bucket);
  stats_.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DataParallel::abandon() {
  remove_grad_ready_hook(this);
  syncing_ = false;
  for (Bucket& bucket : buckets_)
    if (bucket.work) {
      bucket.work->wait();
      bucket.work.reset();
    }
}

GradientSync::GradientSync(DataParallel& replicas) : replicas_(replicas) { replicas_.begin(); }

GradientSync::~GradientSync() {
  if (!finished_) replicas_.abandon();
}

void GradientSync::finish() {
  finished_ = true;
  replicas_.finish();
}

}  // namespace mg::train

// DataParallel: one model replicated on every rank of a process group (dist/process_group.h), each
// rank training on its shard of every global batch, the gradients averaged so that every replica
// takes the same step. PyTorch's DistributedDataParallel, in a few hundred lines.
//
//   $ mpirun -n 2 build/mixgrad train ...      (tools/train.cpp; train::Trainer does what follows)
//   auto group = dist::init_process_group(Device::cpu());
//   train::DataParallel replicas(group, model);        // rank 0's weights (and buffers) to every rank
//   loader = data::DataLoader(x, y, {.batch_size = 128, .shard = {group->rank(), group->size()}});
//   per step:
//     loss = ... forward on this rank's rows ...
//     {
//       train::GradientSync sync(replicas);            // from here, buckets go out as they fill
//       mg::backward(scaler.scale(loss));
//       sync.finish();                                 // .grad = the mean of every rank's gradient
//     }
//     scaler.step(optimizer);                          // found_inf is a max over the ranks
//
// When what is reduced:
// - Gradients travel in buckets of about options.bucket_bytes, parameters in reverse order (backward
//   finishes the last layers first). A bucket is all-reduced (nonblocking) as soon as backward has
//   handed over the gradient of each of its parameters (autograd's GradReadyHook), so communication
//   overlaps the rest of backward; finish() sends the buckets still open (parameters that got no
//   gradient count as zeros), waits for all, and writes the mean into each .grad.
// - The mean: with f32 on the wire, the f32 sum over ranks times 1/size (for 2 ranks: (g0 + g1) / 2,
//   the bits one process gets by accumulating the two shards' gradients and halving). With f16 or
//   bf16 on the wire (half the bytes), each rank first divides its gradient by size in f32 (so the
//   sum cannot overflow where the mean would not), rounds it once to the wire dtype, and the sum is
//   taken in f32 at each step of the engine's reduction and rounded to the wire dtype.
// - The loss scaler needs no help from here: GradScaler reduces found_inf across the same group
//   (amp/grad_scaler.h), so every rank skips the same steps and keeps the same scale.
// Gradient accumulation: run the backward passes of the first micro-batches without a GradientSync
// (their gradients add up in .grad, nothing is sent) and open one around the last backward only: its
// buckets then carry the sums (PyTorch's no_sync()). A second backward inside one GradientSync is an
// error.
// Every rank must build its DataParallel with the same parameters, and run the same backward passes.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/tape.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace mg::train {

struct DataParallelOptions {
  // Bytes of gradient (on the wire) per bucket. PyTorch's default is 25 MiB, made for models of
  // millions of parameters; mixgrad's are small (the MLP's gradients are 0.9 MiB), so buckets are
  // smaller, and the first goes out while most of backward is still to run.
  std::int64_t bucket_bytes = 256 * 1024;
  DType wire_dtype = DType::F32;  // F16 or BF16: send half the bytes
};

// What the last finish() did, for reports and tests.
struct SyncStats {
  std::int64_t buckets = 0;
  std::int64_t launched_during_backward = 0;  // buckets sent before backward returned
  std::int64_t payload_bytes = 0;  // gradient bytes each rank hands to the all-reduce per step
  double wait_seconds = 0;  // finish()'s time in all-reduces: the communication backward did not hide
};

class DataParallel : private GradReadyHook {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (a collective), and lays out the
  // buckets. The model's parameters must be on the group's device, and stay the same tensors.
  DataParallel(std::shared_ptr<dist::ProcessGroup> group, nn::Module& model, DataParallelOptions options = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  dist::ProcessGroup& group() const { return *group_; }
  const DataParallelOptions& options() const { return options_; }
  const SyncStats& last_sync() const { return stats_; }
  // The buckets' parameters, as indices into model.parameters() (for docs and tests).
  std::vector<std::vector<std::size_t>> bucket_layout() const;

  // The mean over the whole global batch of a per-rank mean `local` (one f32 element): the sum over
  // ranks of local x fraction, where fraction is this rank's rows / the global batch's rows.
  Tensor global_mean(const Tensor& local, double fraction) const;

 private:
  friend class GradientSync;
  struct Bucket {
    std::vector<std::size_t> parameters;  // indices into parameters_
    std::vector<std::int64_t> offsets;  // where each one's gradient starts in `flat`
    Tensor flat;  // [elements] of the wire dtype, on the group's device
    std::size_t ready = 0;  // parameters whose gradient backward has handed over
    std::unique_ptr<dist::Work> work;  // the all-reduce in flight
  };
  void begin();  // GradientSync's constructor
  void finish();  // GradientSync::finish
  void abandon();  // a backward that threw: waits for what is in flight, sends nothing more
  void ready(const Tensor& leaf) override;
  void launch(Bucket& bucket);  // packs the bucket's gradients and starts its all-reduce
  void unpack(Bucket& bucket);  // the mean, into each parameter's .grad

  std::shared_ptr<dist::ProcessGroup> group_;
  DataParallelOptions options_;
  std::vector<Tensor> parameters_;
  std::vector<Bucket> buckets_;
  std::unordered_map<std::uint64_t, std::pair<std::size_t, std::size_t>> where_;  // parameter id -> (bucket, slot)
  bool syncing_ = false;
  SyncStats stats_;
};

// One backward's gradient synchronisation (see above). Without finish() (an exception), it waits
// for the buckets in flight and leaves the gradients as backward left them.
class GradientSync {
 public:
  explicit GradientSync(DataParallel& replicas);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;
  void finish();

 private:
  DataParallel& replicas_;
  bool finished_ = false;
};

}  // namespace mg::train

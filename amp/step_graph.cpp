// The recorder half of amp/step_graph.h: an OpObserver that copies what it sees, never a tensor.
#include <cstring>

#include "amp/step_graph.h"
#include "autograd/autocast.h"

namespace mg::amp {

namespace {

GraphTensor seen(const Tensor& t) {
  return {.id = t.id(), .shape = t.shape(), .dtype = t.dtype(), .parameter = t.is_leaf() && t.requires_grad()};
}

}  // namespace

StepRecorder::StepRecorder() {
  const CastCacheStats stats = cast_cache_stats();
  cache_hits_ = stats.hits;
  cache_misses_ = stats.misses;
  add_observer(this);
}

StepRecorder::~StepRecorder() { stop(); }

void StepRecorder::stop() {
  if (recording_) remove_observer(this);
  recording_ = false;
}

void StepRecorder::forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
                           const Tensor& output) {
  // The cache counts before it serves: a miss since the last op is the cast now seen being made for
  // the cache; a hit is a cached cast handed out again, to the first op after it that reads a cached
  // cast which an earlier op read already (an op may run sub-ops between the two).
  const CastCacheStats stats = cast_cache_stats();
  const bool missed = stats.misses > cache_misses_;
  pending_hits_ += stats.hits - cache_hits_;
  cache_hits_ = stats.hits;
  cache_misses_ = stats.misses;

  GraphOp node{.op = op, .scope = scope, .output = seen(output), .loss_scaling = loss_scaling_};
  const bool is_cast = std::strcmp(op, "cast") == 0;
  node.autocast = is_cast && autocast_enabled();
  node.cache_fill = is_cast && missed;
  for (const Tensor& input : inputs) {
    node.inputs.push_back(input.defined() ? seen(input) : GraphTensor{});
    const bool reread = input.defined() && cached_casts_read_.contains(input.id());
    node.cache_hit.push_back(reread && pending_hits_ > 0);
    if (node.cache_hit.back()) --pending_hits_;
  }
  for (const Tensor& input : inputs)
    if (input.defined() && cached_casts_.contains(input.id())) cached_casts_read_.insert(input.id());
  if (node.cache_fill) cached_casts_.insert(output.id());
  graph_.ops.push_back(std::move(node));
}

void StepRecorder::taped(std::size_t saved_bytes) {
  // Called right after forward() for the same op, when it went on the tape.
  if (graph_.ops.empty()) return;
  graph_.ops.back().taped = true;
  graph_.ops.back().saved_bytes = saved_bytes;
}

}  // namespace mg::amp

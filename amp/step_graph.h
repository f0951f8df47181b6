// One training step as a picture: what the tape holds after a forward pass, drawn with Graphviz.
//
//   amp::StepRecorder recorder;                  // an OpObserver of this thread, while alive
//   { Autocast region = recipe.autocast(); loss = cross_entropy(model(x), y); }
//   recorder.loss_scaling_begins();              // the next ops are the scaler's (loss x S)
//   Tensor scaled = scaler.scale(loss);
//   recorder.stop();                             // backward and the update are not ops to draw
//   std::string dot = amp::step_graph_dot(recorder.graph(), {.recipe = recipe, ...});
//
// The recorder only looks: it keeps shapes, dtypes and ids, never a tensor, so a recorded step runs
// the same bits as any other, and without a recorder there is nothing to pay. What it sees:
// - every forward op of the thread (OpObserver::forward), with its scope and its input and output
//   tensors, and whether it went on the tape with the bytes its backward keeps (OpObserver::taped);
// - which casts autocast made: a cast inside an enabled mg::Autocast region (a model's own mg::cast
//   there counts too: nothing tells the two apart). A cast made for the
//   weight-cast cache is seen as a cache miss of cast_cache_stats() just before it, and a later op
//   that reuses it as a hit (autograd/autocast.h): the picture marks both.
//
// step_graph_dot turns the record into Graphviz DOT text (a pure function: tests read the text).
// Ops are boxes named by op and scope; casts are their own hexagons; every edge is a tensor,
// labelled with its shape and coloured by its dtype (dtype_colour); parameters are the f32 masters
// where the recipe keeps masters or autocasts f32 weights; the loss scale enters at the loss and
// leaves at the unscale before the optimizer. Repeated blocks (the same ops in scopes that differ
// only by a number: "blocks.1", "blocks.2", ...) collapse into one node with their count, and at
// most max_nodes nodes are drawn.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "amp/recipe.h"
#include "autograd/tape.h"
#include "core/tensor.h"

namespace mg::amp {

// A tensor as the picture sees it: no data, only what names and draws it.
struct GraphTensor {
  std::uint64_t id = 0;  // Tensor::id(): the same tensor object is the same edge
  Shape shape = {};
  DType dtype = DType::F32;
  bool parameter = false;  // a leaf that requires grad
};

struct GraphOp {
  std::string op = {};  // the recorded name, e.g. "matmul", "cast"
  std::string scope = {};  // the NameScope it ran in ("" when none)
  std::vector<GraphTensor> inputs = {};
  GraphTensor output = {};
  bool taped = false;  // went on the tape (some input required grad, grad mode on)
  std::size_t saved_bytes = 0;  // what its backward keeps (OpObserver::taped); 0 when not taped
  bool autocast = false;  // a cast made inside an enabled Autocast region
  bool cache_fill = false;  // a weight cast made for autocast's weight-cast cache
  std::vector<bool> cache_hit = {};  // per input: a cached weight cast served again (no new cast)
  bool loss_scaling = false;  // run after StepRecorder::loss_scaling_begins(): the scaler's op
};

struct StepGraph {
  std::vector<GraphOp> ops;  // in the order they ran: the tape's order
};

class StepRecorder : public OpObserver {
 public:
  StepRecorder();  // starts recording this thread's ops
  ~StepRecorder() override;
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // The ops recorded from now on are the loss scaling (GradScaler::scale) of the step.
  void loss_scaling_begins() { loss_scaling_ = true; }
  // Stops recording (idempotent); the destructor does it too.
  void stop();
  const StepGraph& graph() const { return graph_; }

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override;
  void backward(const char*, const std::string&, const Tensor&, const Grads&) override {}
  void taped(std::size_t saved_bytes) override;

 private:
  StepGraph graph_;
  bool recording_ = true;
  bool loss_scaling_ = false;
  std::uint64_t cache_hits_;  // cast_cache_stats() after the last op seen
  std::uint64_t cache_misses_;
  std::uint64_t pending_hits_ = 0;  // hits counted, not yet found on an op's input
  std::set<std::uint64_t> cached_casts_;  // ids of the casts made for the cache
  std::set<std::uint64_t> cached_casts_read_;  // ... that an op has read
};

struct DotOptions {
  std::string title = {};  // the graph's label, e.g. "mlp, mixed_float16: one training step"
  Recipe recipe = Recipe::parse("fp32");  // masters, loss scaling
  double loss_scale = 1;  // S of the drawn step (GradScaler::get_scale() before it)
  std::string optimizer = "sgd";
  // Names of the tensors no op made, by Tensor::id(): "fc1.weight", "images". Unnamed, a parameter
  // is "parameter" and any other tensor "tensor".
  std::map<std::uint64_t, std::string> tensor_names = {};
  bool collapse_repeats = true;
  // Nodes for ops and the tensors they read, counted together; the ops past it become one
  // "... N more ops" node.
  std::size_t max_nodes = 120;
};

// The Graphviz colour of a dtype's edges: f32 blue, f16 red, bf16 green, FP8 orange (e4m3) and
// purple (e5m2), f64 grey, i32 black.
std::string_view dtype_colour(DType dtype);

// The record as a DOT digraph (see the top of this file for what is drawn).
std::string step_graph_dot(const StepGraph& graph, const DotOptions& options);

}  // namespace mg::amp

// Which of a run's recorded activation gradients are layers' outputs: what a framework materialises
// between layers, what a PyTorch backward hook on each module is handed (E3's Figure 3 counts these).
//
// e3_layer_outputs runs the model's forward once under an op observer: a module's output is the
// last op recorded in its scope (nn::Module::operator() opens it). Layers that only move data (a
// Flatten) and outputs that need no gradient are left out. in_backward_order then finds each layer's
// output among the run's activation-gradient entries (RunResult::histograms), which backward meets
// in reverse order, each layer's output before the ops inside the layer (a convolution's output
// before its GEMM rows and im2col, the LSTM's h sequence before its gates).
#pragma once

#include <string>
#include <vector>

#include "core/shape.h"
#include "tools/repro/runner.h"

namespace mg::tools::repro {

// A layer whose output gradient E3 counts as an activation gradient.
struct E3Layer {
  std::string module;  // its path in the model, as its scope names it: "3", "lstm"
  std::string type;  // "Conv2d", "LSTM"
  std::string entry;  // the op that made its output, as activation_names name it: "reshape [64, 16, 14, 14]"
  Shape shape{};  // of its output
  std::size_t index = 0;  // its gradient's slot in RunResult::histograms.activations (set by run_e3)
  std::string label() const;  // "3 Conv2d [64, 16, 14, 14]"
};

// The layers of `config`'s model whose output gets a gradient, in forward order (the first layer
// first): one forward pass of a fresh model on a batch of the run's shape, under an op observer.
// Layers that only move data (a Flatten: its output gradient is its input's, rearranged) and
// layers whose output needs no gradient are left out. Clears this thread's tape afterwards.
std::vector<E3Layer> e3_layer_outputs(const RunConfig& config);

// The layers (forward order) in the order backward meets their outputs, each pointed at its
// gradient's slot in `histograms.activations`. An mg::Error naming `model` and the layer when one
// is not found (the forward and the recorded backward disagree).
std::vector<E3Layer> in_backward_order(const std::vector<E3Layer>& forward_order, const GradientHistograms& histograms,
                                       const std::string& model);

}  // namespace mg::tools::repro

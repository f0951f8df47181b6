// LSTM: a multi-layer long short-term memory network over batch-first sequences (torch.nn.LSTM
// with batch_first = true). Per layer l and time step t, with x_t its input and [B, 4H] gates:
//
//   gates = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh      split into i | f | g | o, each [B, H]
//   c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
//   h_t = sigmoid(o) * tanh(c_t)
//
// The input projection of all T steps is one GEMM per layer; the recurrence over the steps is one
// op, mg::lstm_recurrence (autograd/lstm.cpp): the gates' pointwise math and backward through
// time in a kernel, as cuDNN fuses them, so a 64-step sequence costs a handful of tape nodes.
// Weights per layer: weight_ih_l{l} [4H, in], weight_hh_l{l} [4H, H], bias_ih_l{l}, bias_hh_l{l}
// [4H], from U(-1/sqrt(H), 1/sqrt(H)) as PyTorch's, in PyTorch's gate order (i, f, g, o).
//
// Mixed precision: under autocast the GEMMs run in f16 (f32 accumulation), but the initial state is
// f32, so the gates, the cell state c and the output h are f32: a cell state summed over hundreds
// of steps is kept in f32, like cuDNN's. Outside autocast the state has the weights' dtype.
#pragma once

#include <utility>

#include "core/generator.h"
#include "nn/module.h"

namespace mg::nn {

class LSTM : public Module {
 public:
  struct State {
    Tensor h, c;  // [num_layers, B, H] each; undefined: zeros
  };

  LSTM(std::int64_t input_size, std::int64_t hidden_size, std::int64_t num_layers = 1,
       Generator& generator = default_generator());
  // x [B, T, input_size] -> the last layer's h for every step, [B, T, hidden_size]; zero initial state.
  Tensor forward(const Tensor& x) override;
  // The same, from `initial` (for carrying state across chunks), also returning the final state.
  std::pair<Tensor, State> forward_with_state(const Tensor& x, const State& initial = {});
  std::string type_name() const override;

  std::int64_t hidden_size() const { return hidden_size_; }
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }

 private:
  struct Layer {
    Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  };
  std::int64_t input_size_, hidden_size_;
  std::vector<Layer> layers_;
};

}  // namespace mg::nn

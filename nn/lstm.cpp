#include "nn/lstm.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "core/factory.h"

namespace mg::nn {

LSTM::LSTM(std::int64_t input_size, std::int64_t hidden_size, std::int64_t num_layers, Generator& generator)
    : input_size_(input_size), hidden_size_(hidden_size) {
  MG_CHECK(input_size > 0 && hidden_size > 0 && num_layers > 0,
           "nn::LSTM: needs positive input_size, hidden_size and num_layers; got {}, {}, {}", input_size, hidden_size,
           num_layers);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const std::int64_t gates = 4 * hidden_size;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    const std::int64_t in = l == 0 ? input_size : hidden_size;
    Layer layer;
    layer.weight_ih = register_parameter(fmt::format("weight_ih_l{}", l),
                                         uniform({gates, in}, -bound, bound, generator));
    layer.weight_hh = register_parameter(fmt::format("weight_hh_l{}", l),
                                         uniform({gates, hidden_size}, -bound, bound, generator));
    layer.bias_ih = register_parameter(fmt::format("bias_ih_l{}", l), uniform({gates}, -bound, bound, generator));
    layer.bias_hh = register_parameter(fmt::format("bias_hh_l{}", l), uniform({gates}, -bound, bound, generator));
    layers_.push_back(layer);
  }
}

Tensor LSTM::forward(const Tensor& x) { return forward_with_state(x).first; }

std::pair<Tensor, LSTM::State> LSTM::forward_with_state(const Tensor& x, const State& initial) {
  MG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == input_size_,
           "{}: expects a batch-first input [batch, steps, {}], got {}", type_name(), input_size_,
           x.defined() ? x.shape() : Shape{});
  const std::int64_t batch = x.size(0), steps = x.size(1), H = hidden_size_;
  MG_CHECK(steps > 0, "{}: the sequence is empty (input {})", type_name(), x.shape());
  const Shape state_shape{num_layers(), batch, H};
  MG_CHECK(!initial.h.defined() || initial.h.shape() == state_shape, "{}: the initial h must be {}, got {}",
           type_name(), state_shape, initial.h.shape());
  MG_CHECK(!initial.c.defined() || initial.c.shape() == state_shape, "{}: the initial c must be {}, got {}",
           type_name(), state_shape, initial.c.shape());
  const DType state_dtype = autocast_enabled() ? DType::F32 : layers_[0].weight_hh.dtype();

  Tensor sequence = permute(x, {1, 0, 2});  // [T, B, in]: time-major, as lstm_recurrence takes it
  State final_state;
  std::vector<Tensor> final_h, final_c;
  for (std::int64_t l = 0; l < num_layers(); ++l) {
    const Layer& layer = layers_[static_cast<std::size_t>(l)];
    Tensor h = initial.h.defined() ? reshape(slice(initial.h, 0, l, l + 1), {batch, H})
                                   : zeros({batch, H}, {.dtype = state_dtype, .device = x.device()});
    Tensor c = initial.c.defined() ? reshape(slice(initial.c, 0, l, l + 1), {batch, H})
                                   : zeros({batch, H}, {.dtype = state_dtype, .device = x.device()});
    Tensor projected = linear(sequence, layer.weight_ih, layer.bias_ih);  // [T, B, 4H]: every step in one GEMM
    Tensor hc = lstm_recurrence(projected, layer.weight_hh, layer.bias_hh, h, c);  // [T, B, 2H]: (h_t, c_t)
    Tensor last = reshape(slice(hc, 0, steps - 1, steps), {batch, 2 * H});
    final_h.push_back(slice(last, 1, 0, H));
    final_c.push_back(slice(last, 1, H, 2 * H));
    sequence = slice(hc, 2, 0, H);  // [T, B, H]: the next layer's input
  }
  final_state.h = stack(final_h, 0);
  final_state.c = stack(final_c, 0);
  return {permute(sequence, {1, 0, 2}), final_state};
}

std::string LSTM::type_name() const {
  return fmt::format("LSTM({}, {}, num_layers={})", input_size_, hidden_size_, num_layers());
}

}  // namespace mg::nn

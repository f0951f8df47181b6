// CPU optimizer updates (kernels/optim.h). Each parameter is processed in chunks: the parameter,
// gradient and state are widened into C buffers (C = f32, or f64 for f64 parameters), one scalar
// update runs per element, and the results are rounded back on store. The lost-update count
// compares the stored parameter with the old one wherever the computed change was non-zero.
// Tests: build/tests/test_optim.
#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/optim.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 256;

char* bytes_at(const Tensor& t, std::int64_t start) {
  return static_cast<char*>(t.data_ptr()) + static_cast<std::size_t>(start) * dtype_size(t.dtype());
}

// Runs update(p, g, state) for every element; `state` holds the values of the state tensors, and
// update returns whether the change it computed was non-zero (before any rounding).
template <class C, std::size_t S, class Update>
void update_chunks(Tensor& param, const Tensor& grad, std::array<Tensor*, S> state, UpdateCount& count,
                   Update update) {
  C p[kChunk], old[kChunk], g[kChunk], stored[kChunk];
  C s[S > 0 ? S : 1][kChunk];
  bool changed[kChunk];
  const DType c = dtype_of<C>();
  for (std::int64_t start = 0; start < param.numel(); start += kChunk) {
    const std::int64_t n = std::min(kChunk, param.numel() - start);
    convert(bytes_at(param, start), param.dtype(), p, c, n);
    convert(bytes_at(grad, start), grad.dtype(), g, c, n);
    for (std::size_t k = 0; k < S; ++k) convert(bytes_at(*state[k], start), state[k]->dtype(), s[k], c, n);
    std::copy(p, p + n, old);
    for (std::int64_t i = 0; i < n; ++i) {
      std::array<C, S> values;
      for (std::size_t k = 0; k < S; ++k) values[k] = s[k][i];
      changed[i] = update(p[i], g[i], values);
      for (std::size_t k = 0; k < S; ++k) s[k][i] = values[k];
    }
    convert(p, c, bytes_at(param, start), param.dtype(), n);
    for (std::size_t k = 0; k < S; ++k) convert(s[k], c, bytes_at(*state[k], start), state[k]->dtype(), n);
    // What the parameter holds now: p itself, or p rounded to f16/bf16.
    const C* now = p;
    if (param.dtype() != c) {
      convert(bytes_at(param, start), param.dtype(), stored, c, n);
      now = stored;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      if (!changed[i]) continue;
      ++count.nonzero;
      count.lost += now[i] == old[i];
    }
  }
}

template <class C>
void sgd_typed(Tensor& param, const Tensor& grad, Tensor* buffer, const SgdHyper& h, UpdateCount& count) {
  const C lr = C(h.lr), momentum = C(h.momentum), dampening = C(h.dampening), decay = C(h.weight_decay);
  auto step = [&](C& p, C g, auto& s) {
    C d = g + decay * p;
    if constexpr (std::tuple_size_v<std::decay_t<decltype(s)>> == 1) {
      s[0] = h.first_step ? d : momentum * s[0] + (C(1) - dampening) * d;
      d = h.nesterov ? d + momentum * s[0] : s[0];
    }
    const C change = lr * d;
    p -= change;
    return change != C(0);
  };
  if (buffer) update_chunks<C, 1>(param, grad, {buffer}, count, step);
  else update_chunks<C, 0>(param, grad, {}, count, step);
}

template <class C>
void adam_typed(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, UpdateCount& count) {
  const C lr = C(h.lr), beta1 = C(h.beta1), beta2 = C(h.beta2), eps = C(h.eps), decay = C(h.weight_decay);
  const double t = static_cast<double>(h.step);
  const C step_size = C(h.lr / (1.0 - std::pow(h.beta1, t)));
  const C bias2_sqrt = C(std::sqrt(1.0 - std::pow(h.beta2, t)));
  update_chunks<C, 2>(param, grad, {&m, &v}, count, [&](C& p, C g, std::array<C, 2>& s) {
    const C decayed = h.decoupled_weight_decay ? p * (C(1) - lr * decay) : p;
    if (!h.decoupled_weight_decay) g += decay * p;
    s[0] = beta1 * s[0] + (C(1) - beta1) * g;
    s[1] = beta2 * s[1] + (C(1) - beta2) * g * g;
    const C change = step_size * s[0] / (std::sqrt(s[1]) / bias2_sqrt + eps);
    const bool changed = change != C(0) || decayed != p;
    p = decayed - change;
    return changed;
  });
}

}  // namespace

void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count) {
  if (param.dtype() == DType::F64) sgd_typed<double>(param, grad, momentum_buffer, hyper, count);
  else sgd_typed<float>(param, grad, momentum_buffer, hyper, count);
}

void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count) {
  if (param.dtype() == DType::F64) adam_typed<double>(param, grad, exp_avg, exp_avg_sq, hyper, count);
  else adam_typed<float>(param, grad, exp_avg, exp_avg_sq, hyper, count);
}

}  // namespace mg::kernels::cpu

// CPU optimizer updates (kernels/optim.h). Each parameter is processed in chunks: the parameter,
// gradient and state are read as C (C = f32, or f64 for f64 parameters) in place, or widened into
// C buffers when they hold f16/bf16; one scalar update runs per element, and buffered results are
// rounded back on store. The lost-update count
// compares the stored parameter with the old one wherever the computed change was non-zero.
// Tests: build/tests/test_optim.
#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/cpu/compute_type.h"
#include "kernels/optim.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kChunk = 256;

// Runs update(p, g, state) for every element; `state` holds the values of the state tensors, and
// update returns whether the change it computed was non-zero (before any rounding). Tensors that
// hold C are updated in place, so the f32 loop vectorizes and copies nothing.
template <class C, std::size_t S, class Update>
void update_chunks(Tensor& param, const Tensor& grad, std::array<Tensor*, S> state, UpdateCount& count,
                   Update update) {
  C p_buffer[kChunk], g_buffer[kChunk], s_buffer[S > 0 ? S : 1][kChunk], old[kChunk], stored[kChunk];
  unsigned char changed[kChunk];
  const DType c = dtype_of<C>();
  std::int64_t nonzero = 0, lost = 0;
  for (std::int64_t start = 0; start < param.numel(); start += kChunk) {
    const std::int64_t n = std::min(kChunk, param.numel() - start);
    C* p = values_at(param, start, n, p_buffer);
    const C* g = values_at(grad, start, n, g_buffer);
    std::array<C*, S> s;
    for (std::size_t k = 0; k < S; ++k) s[k] = values_at(*state[k], start, n, s_buffer[k]);
    auto update_one = [&](std::int64_t i) {
      std::array<C, S> values;
      for (std::size_t k = 0; k < S; ++k) values[k] = s[k][i];
      const bool changed = update(p[i], g[i], values);
      for (std::size_t k = 0; k < S; ++k) s[k][i] = values[k];
      return changed;
    };
    if (p != p_buffer) {
      // Updated in place in C: the stored value is p itself, compared right away.
      for (std::int64_t i = 0; i < n; ++i) {
        const C before = p[i];
        const bool changed = update_one(i);
        nonzero += changed;
        lost += changed & (p[i] == before);
      }
    } else {
      std::copy(p, p + n, old);
      for (std::int64_t i = 0; i < n; ++i) changed[i] = update_one(i);
      convert(p, c, bytes_at(param, start), param.dtype(), n);
      // What the parameter holds now is p rounded to f16/bf16.
      convert(bytes_at(param, start), param.dtype(), stored, c, n);
      for (std::int64_t i = 0; i < n; ++i) {
        nonzero += changed[i];
        lost += changed[i] & (stored[i] == old[i]);
      }
    }
    for (std::size_t k = 0; k < S; ++k)
      if (s[k] == s_buffer[k]) convert(s[k], c, bytes_at(*state[k], start), state[k]->dtype(), n);
  }
  count.nonzero += nonzero;
  count.lost += lost;
}

template <class C>
void sgd_typed(Tensor& param, const Tensor& grad, Tensor* buffer, const SgdHyper& h, UpdateCount& count) {
  const C lr = C(h.lr), momentum = C(h.momentum), dampening = C(h.dampening), decay = C(h.weight_decay);
  const bool first_step = h.first_step, nesterov = h.nesterov;  // copies: no aliasing in the loop
  auto step = [=](C& p, C g, auto& s) {
    C d = g + decay * p;
    if constexpr (std::tuple_size_v<std::decay_t<decltype(s)>> == 1) {
      s[0] = first_step ? d : momentum * s[0] + (C(1) - dampening) * d;
      d = nesterov ? d + momentum * s[0] : s[0];
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
  const bool decoupled = h.decoupled_weight_decay;
  update_chunks<C, 2>(param, grad, {&m, &v}, count, [=](C& p, C g, std::array<C, 2>& s) {
    const C decayed = decoupled ? p * (C(1) - lr * decay) : p;
    if (!decoupled) g += decay * p;
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

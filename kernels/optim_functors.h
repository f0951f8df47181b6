// The math of every optimizer update (kernels/optim.h), written once.
//
// One functor per optimizer updates one element in the compute type C (f32, f64 for f64 parameters):
// the CPU loop (kernels/cpu/optim.cpp) and the CUDA kernel (kernels/cuda/optim.cu) call the same
// operator(), which is why it is MG_HOST_DEVICE. Its constants are rounded to C once, on the host,
// when the functor is built from the hyper-parameters, and both backends receive the same values.
//
// Why `exact::`: both compilers fuse a product into a following add (nvcc always, GCC with
// -march=native), each at places of its own choosing, and one fused multiply-add rounds once where
// the pair rounds twice. So every multiply-add the formulas mean is an explicit fma, and on the GPU
// the other operations are intrinsics that are never fused. On the CPU a plain product here always
// feeds something other than a lone add (a product, a quotient, an fma's addend, a comparison as
// well as a subtraction), which GCC leaves unfused. That is what lets a GPU update be compared with
// the CPU's bit for bit, lost-update counts included.
#pragma once

#include <cmath>
#include <type_traits>

#include "core/host_device.h"
#include "kernels/optim.h"

namespace mg::kernels {

// Each operation rounded once, as written, and never fused with another.
namespace exact {

template <class C>
MG_HOST_DEVICE inline C mul(C a, C b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class C>
MG_HOST_DEVICE inline C add(C a, C b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class C>
MG_HOST_DEVICE inline C sub(C a, C b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fsub_rn(a, b);
  else
    return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
template <class C>
MG_HOST_DEVICE inline C div(C a, C b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fdiv_rn(a, b);
  else
    return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
template <class C>
MG_HOST_DEVICE inline C sqrt(C a) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fsqrt_rn(a);
  else
    return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// a * b + c, rounded once.
template <class C>
MG_HOST_DEVICE inline C fma(C a, C b, C c) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>)
    return __fmaf_rn(a, b, c);
  else
    return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace exact

// sgd: p -= lr * d, d = g + weight_decay * p, through the momentum buffer state[0] when Momentum.
template <class C, bool Momentum>
struct SgdUpdate {
  C lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;

  explicit SgdUpdate(const SgdHyper& h)
      : lr(C(h.lr)),
        momentum(C(h.momentum)),
        one_minus_dampening(C(1) - C(h.dampening)),
        weight_decay(C(h.weight_decay)),
        nesterov(h.nesterov),
        first_step(h.first_step) {}

  // Updates p (and state[0]) for the gradient g; returns whether the change lr * d was non-zero.
  MG_HOST_DEVICE bool operator()(C& p, C g, C* state) const {
    C d = exact::fma(weight_decay, p, g);
    if constexpr (Momentum) {
      C& buffer = state[0];
      buffer = first_step ? d : exact::fma(momentum, buffer, exact::mul(one_minus_dampening, d));
      d = nesterov ? exact::fma(momentum, buffer, d) : buffer;
    }
    const C change = exact::mul(lr, d);
    p = exact::sub(p, change);
    return change != C(0);
  }
};

// adam / adamw: state[0] = m, state[1] = v. Built from the hyper-parameters on the host; at_step(t)
// adds the bias corrections of update t (1 for the first), computed in f64 and rounded to C once:
// the kernels call it where they read the parameter's step count (on a GPU, on the device).
//
// Rounded as torch.optim.Adam / AdamW (1.13, single-tensor, CPU) round them, so that an f32 update is
// PyTorch's bit for bit (tests/test_optim_adam.cpp):
//   - every constant is a Python double rounded once to C: 1 - beta1 and 1 - beta2 are computed in
//     f64 first (1 - 0.999f in f32 is 0.00100001693, which would scale every v by 1.0000169), as are
//     AdamW's 1 - lr * weight_decay (product and difference each rounded, as Python does) and the
//     bias corrections;
//   - PyTorch's kernels fuse `a + alpha * b` (add_ with alpha, addcmul_) into one fma, after rounding
//     the product they read from mul_: m = fma(g, 1 - beta1, m * beta1) and
//     v = fma((1 - beta2) * g, g, v * beta2), the L2 term g = fma(p, weight_decay, g).
template <class C>
struct AdamUpdate {
  C beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  C decay_factor;  // AdamW's 1 - lr * weight_decay
  C step_size;  // lr / (1 - beta1^step)
  C bias2_sqrt;  // sqrt(1 - beta2^step)
  double lr, beta1_f64, beta2_f64;  // what at_step needs in f64
  bool decoupled;

  explicit AdamUpdate(const AdamHyper& h)
      : beta1(C(h.beta1)),
        one_minus_beta1(C(1.0 - h.beta1)),
        beta2(C(h.beta2)),
        one_minus_beta2(C(1.0 - h.beta2)),
        eps(C(h.eps)),
        weight_decay(C(h.weight_decay)),
        decay_factor(C(1.0 - rounded_product(h.lr, h.weight_decay))),
        step_size(C(0)),
        bias2_sqrt(C(1)),
        lr(h.lr),
        beta1_f64(h.beta1),
        beta2_f64(h.beta2),
        decoupled(h.decoupled_weight_decay) {}

  // The functor for update number `step`. ::pow and ::sqrt are the same functions in host and device
  // code; sqrt is correctly rounded on both, and CUDA's pow is within 2 ulp of f64, so the f32
  // constants agree with the CPU's unless a value lies within 2^-52 of an f32 rounding boundary.
  MG_HOST_DEVICE AdamUpdate at_step(std::int64_t step) const {
    AdamUpdate update = *this;
    update.step_size = C(lr / (1.0 - ::pow(beta1_f64, static_cast<double>(step))));
    update.bias2_sqrt = C(::sqrt(1.0 - ::pow(beta2_f64, static_cast<double>(step))));
    return update;
  }

  // Updates p, m and v for the gradient g; returns whether p was meant to change.
  MG_HOST_DEVICE bool operator()(C& p, C g, C* state) const {
    const C decayed = decoupled ? exact::mul(p, decay_factor) : p;
    if (!decoupled) g = exact::fma(p, weight_decay, g);
    C& m = state[0];
    C& v = state[1];
    m = exact::fma(g, one_minus_beta1, exact::mul(m, beta1));
    v = exact::fma(exact::mul(one_minus_beta2, g), g, exact::mul(v, beta2));
    const C denominator = exact::add(exact::div(exact::sqrt(v), bias2_sqrt), eps);
    const C change = exact::div(exact::mul(step_size, m), denominator);
    const bool changed = change != C(0) || decayed != p;
    p = exact::sub(decayed, change);
    return changed;
  }

 private:
  // a * b rounded to f64 on its own: the host compiler may not fuse it into the subtraction that
  // follows (-march=native contracts a * b + c into an fma wherever it can see both).
  static double rounded_product(double a, double b) {
    volatile double product = a * b;
    return product;
  }
};

// adagrad: state[0] = the sum of squared gradients. Built from the hyper-parameters on the host;
// at_step(t) adds the rate of update t (1 for the first), clr = lr / (1 + (t - 1) lr_decay), computed
// in f64 and rounded to C once: the kernels call it where they read the parameter's step count.
template <class C>
struct AdagradUpdate {
  C weight_decay, eps;
  C clr;  // the decayed learning rate of this update
  double lr, lr_decay;  // what at_step needs in f64

  explicit AdagradUpdate(const AdagradHyper& h)
      : weight_decay(C(h.weight_decay)), eps(C(h.eps)), clr(C(0)), lr(h.lr), lr_decay(h.lr_decay) {}

  // The functor for update number `step`. The denominator is one fma, rounded once on both backends
  // (written as a product and a sum, each compiler would fuse it or not as it likes).
  MG_HOST_DEVICE AdagradUpdate at_step(std::int64_t step) const {
    AdagradUpdate update = *this;
    update.clr = C(lr / ::fma(static_cast<double>(step - 1), lr_decay, 1.0));
    return update;
  }

  // Updates p and the sum for the gradient g; returns whether p was meant to change.
  MG_HOST_DEVICE bool operator()(C& p, C g, C* state) const {
    g = exact::fma(weight_decay, p, g);
    C& sum = state[0];
    sum = exact::fma(g, g, sum);
    const C change = exact::div(exact::mul(clr, g), exact::add(exact::sqrt(sum), eps));
    p = exact::sub(p, change);
    return change != C(0);
  }
};

// The Kahan-compensated store of an updated value (kernels/optim.h, UpdateRounding::Kahan): `old` is
// the stored value before the update, `updated` the update's f32 result, `compensation` what earlier
// roundings lost (read and written back), `round` rounds an f32 to the parameter's dtype and returns
// it as an f32. Four f32 additions, none fused with anything, so both backends agree bit for bit.
template <class Round>
MG_HOST_DEVICE inline float kahan_store(float old, float updated, float& compensation, const Round& round) {
  const float y = exact::add(exact::sub(updated, old), compensation);  // this update and the debt
  const float stored = round(exact::add(old, y));
  compensation = round(exact::sub(y, exact::sub(stored, old)));  // what rounding dropped
  return stored;
}

}  // namespace mg::kernels

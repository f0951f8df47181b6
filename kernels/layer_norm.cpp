// The fused layer norm's entry points (kernels/layer_norm.h): shapes, dtypes and devices checked
// against the LayerNormShape, then the CPU kernel (kernels/cpu/layer_norm.cpp).
#include "kernels/layer_norm.h"

#include <fmt/format.h>

#include "core/error.h"

namespace mg::kernels {

namespace {

DType compute_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// An undefined tensor passes when `optional`: weight and bias (1 and 0), and the gradients not wanted.
void check(const char* kernel, const Tensor& t, const char* what, std::int64_t count, std::int64_t last, DType dtype,
           bool optional = false) {
  if (optional && !t.defined()) return;
  MG_CHECK(t.defined() && t.numel() == count && (t.dim() == 0 ? 1 : t.size(-1)) == last && t.dtype() == dtype &&
               t.device().is_cpu(),
           "kernels::{}: {} must hold {} {} values in rows of {} on the CPU (a GPU composes layer_norm from its "
           "ops), got {}",
           kernel, what, count, dtype, last,
           t.defined() ? fmt::format("{} {} on {}", t.dtype(), t.shape(), t.device()) : std::string("undefined"));
}

void check_inputs(const char* kernel, const Tensor& x, const Tensor& weight, const Tensor& bias, DType affine,
                  const Tensor& mean, const Tensor& rstd, const LayerNormShape& s) {
  MG_CHECK(s.rows >= 0 && s.features >= 1 && s.eps >= 0,
           "kernels::{}: needs rows >= 0, features >= 1 and eps >= 0, got {} x {}, eps {}", kernel, s.rows, s.features,
           s.eps);
  MG_CHECK(is_floating(x.dtype()) && (affine == x.dtype() || affine == compute_dtype(x)),
           "kernels::{}: x must be floating and y, weight and bias of its dtype or of the compute type, got x {} "
           "and {}",
           kernel, x.dtype(), affine);
  check(kernel, x, "x", s.rows * s.features, s.features, x.dtype());
  check(kernel, weight, "weight", s.features, s.features, affine, true);
  check(kernel, bias, "bias", s.features, s.features, affine, true);
  check(kernel, mean, "mean", s.rows, s.rows, compute_dtype(x));
  check(kernel, rstd, "rstd", s.rows, s.rows, compute_dtype(x));
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const LayerNormShape& s, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  MG_CHECK(y.defined(), "kernels::layer_norm_forward: y must be defined");
  check_inputs("layer_norm_forward", x, weight, bias, y.dtype(), mean, rstd, s);
  check("layer_norm_forward", y, "y", s.rows * s.features, s.features, y.dtype());
  cpu::layer_norm_forward(x, weight, bias, s, y, mean, rstd);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const LayerNormShape& s, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  constexpr const char* kernel = "layer_norm_backward";
  MG_CHECK(dy.defined(), "kernels::{}: dy must be defined", kernel);
  check_inputs(kernel, x, weight, Tensor(), dy.dtype(), mean, rstd, s);
  check(kernel, dy, "dy", s.rows * s.features, s.features, dy.dtype());
  check(kernel, dx, "dx", s.rows * s.features, s.features, x.dtype(), true);
  check(kernel, dweight, "dweight", s.features, s.features, dy.dtype(), true);
  check(kernel, dbias, "dbias", s.features, s.features, dy.dtype(), true);
  MG_CHECK(!dweight.defined() || weight.defined(), "kernels::{}: dweight asked for without a weight", kernel);
  cpu::layer_norm_backward(dy, x, weight, mean, rstd, s, dx, dweight, dbias);
}

}  // namespace mg::kernels

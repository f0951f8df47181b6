// The fused attention kernels' entry points (kernels/attention.h): the shapes, dtypes and devices
// checked against the AttentionShape, then the CPU kernel (kernels/cpu/attention.cpp).
#include "kernels/attention.h"

#include <fmt/format.h>

#include "core/error.h"

namespace mg::kernels {

namespace {

// `shape` is [batch, rows, cols]; the tensor may have any leading dims that hold `batch` (q [B, H, T, D]).
void check(const char* kernel, const Tensor& t, const char* what, const Shape& shape, DType dtype) {
  MG_CHECK(t.defined() && t.dim() >= 1 && t.numel() == numel(shape) && t.size(-1) == shape.back() &&
               t.dtype() == dtype && t.device().is_cpu(),
           "kernels::{}: {} must be {} {} (or with the leading dim split) on the CPU (a GPU runs the unfused "
           "attention), got {}",
           kernel, what, dtype, shape,
           t.defined() ? fmt::format("{} {} on {}", t.dtype(), t.shape(), t.device()) : std::string("undefined"));
}

void check_inputs(const char* kernel, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s) {
  MG_CHECK(s.batch >= 0 && s.q_len >= 0 && s.kv_len >= 1 && s.head_dim >= 1 && s.value_dim >= 1 && s.dropout >= 0.0 &&
               s.dropout < 1.0,
           "kernels::{}: needs batch, q_len >= 0, kv_len, head_dim, value_dim >= 1 and dropout in [0, 1), got {} "
           "x {} x {} x {} x {}, dropout {}",
           kernel, s.batch, s.q_len, s.kv_len, s.head_dim, s.value_dim, s.dropout);
  check(kernel, q, "q", {s.batch, s.q_len, s.head_dim}, q.dtype());
  check(kernel, k, "k", {s.batch, s.kv_len, s.head_dim}, q.dtype());
  check(kernel, v, "v", {s.batch, s.kv_len, s.value_dim}, q.dtype());
}

DType lse_dtype(const Tensor& q) { return q.dtype() == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s, Tensor& out,
                       Tensor& lse) {
  check_inputs("attention_forward", q, k, v, s);
  check("attention_forward", out, "out", {s.batch, s.q_len, s.value_dim}, q.dtype());
  check("attention_forward", lse, "lse", {s.batch, s.q_len}, lse_dtype(q));
  cpu::attention_forward(q, k, v, s, out, lse);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                        const Tensor& lse, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* kernel = "attention_backward";
  check_inputs(kernel, q, k, v, s);
  check(kernel, out, "out", {s.batch, s.q_len, s.value_dim}, q.dtype());
  check(kernel, d_out, "d_out", {s.batch, s.q_len, s.value_dim}, q.dtype());
  check(kernel, lse, "lse", {s.batch, s.q_len}, lse_dtype(q));
  check(kernel, dq, "dq", q.shape(), q.dtype());
  check(kernel, dk, "dk", k.shape(), q.dtype());
  check(kernel, dv, "dv", v.shape(), q.dtype());
  cpu::attention_backward(q, k, v, out, d_out, lse, s, dq, dk, dv);
}

}  // namespace mg::kernels

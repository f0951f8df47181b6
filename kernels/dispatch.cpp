// The dispatch point: every kernel family enters here, and the device of its output picks the
// backend. Ops have already checked that all tensors share that device.
//
// The CPU backend is kernels/cpu/. The CUDA backend (kernels/cuda/) is arriving family by family:
// so far its runtime, caching allocator and copies between devices. A family without a CUDA
// kernel yet gives a tensor on a GPU the error of require_cpu instead of reaching host code with
// a device pointer.
#include "kernels/amp.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/conv.h"
#include "kernels/index.h"
#include "kernels/lstm.h"
#include "kernels/optim.h"
#include "kernels/pool.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/allocator.h"
#endif

namespace mg::kernels {

namespace {

#ifdef MG_WITH_CUDA
// Every CUDA storage comes from the caching allocator; registered before main() runs (this file
// is linked into every program that runs an op).
[[maybe_unused]] const bool cuda_allocator_registered = (set_allocator(DeviceType::CUDA, &mg::cuda::allocator()), true);
#endif

void require_cpu(const char* kernel, const Tensor& out) {
  MG_CHECK(out.device().is_cpu(),
           "kernel {}: no kernel for tensors on {} in this build (the CUDA backend is not part of it yet); "
           "create the tensors on the CPU", kernel, out.device());
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars) {
  require_cpu("unary", out);
  cpu::unary(op, x, out, scalars);
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, Scalars scalars) {
  require_cpu("binary", out);
  cpu::binary(op, a, b, out, scalars);
}

void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out) {
  require_cpu("ternary", out);
  cpu::ternary(op, x, y, z, out);
}

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape) {
  require_cpu("gemm", c);
  cpu::gemm(a, b, c, shape);
}

void reduce(ReduceOp op, const Tensor& x, const ReduceShape& shape, Tensor& out, Tensor* indices) {
  require_cpu("reduce", out);
  cpu::reduce(op, x, shape, out, indices);
}

void softmax(const Tensor& x, const ReduceShape& shape, bool log, Tensor& y) {
  require_cpu("softmax", y);
  cpu::softmax(x, shape, log, y);
}

void softmax_backward(const Tensor& y, const Tensor& dy, const ReduceShape& shape, bool log, Tensor& dx) {
  require_cpu("softmax_backward", dx);
  cpu::softmax_backward(y, dy, shape, log, dx);
}

void cross_entropy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index, Tensor& loss,
                   Tensor& lse) {
  require_cpu("cross_entropy", loss);
  cpu::cross_entropy(logits, labels, ignore_index, loss, lse);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                            const Tensor& row_weight, std::int64_t ignore_index, Tensor& dlogits) {
  require_cpu("cross_entropy_backward", dlogits);
  cpu::cross_entropy_backward(logits, labels, lse, row_weight, ignore_index, dlogits);
}

void copy_between_devices(const Tensor& src, Tensor& dst) {
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    cpu::cast(src, dst);  // same dtype: a plain copy
    return;
  }
#ifdef MG_WITH_CUDA
  cuda::copy_between_devices(src, dst);
#else
  MG_CHECK(false, "kernel copy_between_devices: {} to {}: this build has no CUDA backend", src.device(), dst.device());
#endif
}

void cast(const Tensor& x, Tensor& out) {
  require_cpu("cast", out);
  cpu::cast(x, out);
}

void permute(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  require_cpu("permute", out);
  cpu::permute(x, perm, out);
}

void copy_along_dim(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, int dim,
                    std::int64_t length) {
  require_cpu("copy_along_dim", dst);
  cpu::copy_along_dim(src, src_start, dst, dst_start, dim, length);
}

void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out) {
  require_cpu("gather_rows", out);
  cpu::gather_rows(table, indices, out);
}

void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table) {
  require_cpu("scatter_add_rows", grad_table);
  cpu::scatter_add_rows(grad, indices, grad_table);
}

void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out) {
  require_cpu("scatter_along_dim", out);
  cpu::scatter_along_dim(values, indices, shape, out);
}

void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
               Tensor& c_out, Tensor& hc, Tensor& h_x) {
  require_cpu("lstm_cell", hc);
  cpu::lstm_cell(gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                        const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  require_cpu("lstm_cell_backward", dgates);
  cpu::lstm_cell_backward(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
}

void im2col(const Tensor& x, const Window2d& window, Tensor& cols) {
  require_cpu("im2col", cols);
  cpu::im2col(x, window, cols);
}

void col2im(const Tensor& cols, const Window2d& window, Tensor& dx) {
  require_cpu("col2im", dx);
  cpu::col2im(cols, window, dx);
}

void max_pool2d(const Tensor& x, const Window2d& window, Tensor& out, Tensor& argmax) {
  require_cpu("max_pool2d", out);
  cpu::max_pool2d(x, window, out, argmax);
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& window, Tensor& dx) {
  require_cpu("max_pool2d_backward", dx);
  cpu::max_pool2d_backward(dout, argmax, window, dx);
}

void avg_pool2d(const Tensor& x, const Window2d& window, Tensor& out) {
  require_cpu("avg_pool2d", out);
  cpu::avg_pool2d(x, window, out);
}

void avg_pool2d_backward(const Tensor& dout, const Window2d& window, Tensor& dx) {
  require_cpu("avg_pool2d_backward", dx);
  cpu::avg_pool2d_backward(dout, window, dx);
}

void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, double factor, Tensor& found_inf) {
  // Everything is checked before any gradient is written (a public path: Optimizer::unscale_gradients).
  MG_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.dtype() == DType::F32,
           "kernel unscale: found_inf must be one f32 element");
  MG_CHECK(src.size() == dst.size(), "kernel unscale: {} sources but {} destinations", src.size(), dst.size());
  require_cpu("unscale", found_inf);
  for (std::size_t i = 0; i < src.size(); ++i) {
    MG_CHECK(src[i].defined() && dst[i].defined() && src[i].numel() == dst[i].numel() &&
                 is_floating(src[i].dtype()) && is_floating(dst[i].dtype()),
             "kernel unscale: gradient {} and its destination must be floating tensors of one size", i);
    require_cpu("unscale", src[i]);
    require_cpu("unscale", dst[i]);
  }
  cpu::unscale(src, dst, factor, found_inf);
}

void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count) {
  require_cpu("sgd", param);
  cpu::sgd(param, grad, momentum_buffer, hyper, count);
}

void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamHyper& hyper,
          UpdateCount& count) {
  require_cpu("adam", param);
  cpu::adam(param, grad, exp_avg, exp_avg_sq, hyper, count);
}

}  // namespace mg::kernels

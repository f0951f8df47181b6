// The dispatch point: every kernel family enters here, and the device of its output picks the
// backend: kernels/cpu/ for the CPU, kernels/cuda/ for a GPU (in builds with the CUDA backend). Ops
// have already checked that all tensors share that device. A GPU's memory and core's copy and fill
// come from register_cuda_backend, below, which core calls on the first use of a CUDA device.
#include <atomic>

#include "core/device_ops.h"
#include "kernels/amp.h"
#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/index.h"
#include "kernels/lstm.h"
#include "kernels/optim.h"
#include "kernels/pool.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/route.h"
#include "kernels/softmax.h"
#include "kernels/stochastic_round.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/allocator.h"
#endif

namespace mg::kernels {

#ifdef MG_WITH_CUDA
// What core takes from the CUDA backend (core/device_ops.h): every CUDA storage comes from the
// caching allocator, and core's factories and item() fill and move bytes with the backend's fill
// and copy. Core's cuda_backend() calls this once, when a CUDA device first needs memory or a copy,
// which is before any kernel below runs on one.
CudaBackend register_cuda_backend() {
  return {.allocator = &mg::cuda::allocator(), .ops = {.copy = &cuda::copy_bytes, .fill = &cuda::fill}};
}
#endif

namespace {

// The optional FusedStep arguments of the optimizer kernels: inv_scale and found_inf are one f32
// element each, the model copy and Kahan's compensation match the parameter, all on its device.
void check_fused_step(const char* kernel, const Tensor& param, const FusedStep& fused) {
  for (const auto& [flag, name] :
       {std::pair{fused.scaling.inv_scale, "inv_scale"}, std::pair{fused.scaling.found_inf, "found_inf"}}) {
    MG_CHECK(!flag || (flag->defined() && flag->numel() == 1 && flag->dtype() == DType::F32 &&
                       flag->device() == param.device()),
             "kernel {}: {} must be one f32 element on {}, the parameter's device", kernel, name, param.device());
  }
  if (const Tensor* copy = fused.model_copy) {
    MG_CHECK(copy->defined() && copy->shape() == param.shape() && is_floating(copy->dtype()) &&
                 copy->device() == param.device() && !copy->shares_storage_with(param),
             "kernel {}: the model copy must be a floating tensor of the parameter's shape {} on {}, with storage "
             "of its own",
             kernel, param.shape(), param.device());
  }
  if (fused.rounding == UpdateRounding::Kahan && is_low_precision(param.dtype())) {
    const Tensor* c = fused.compensation;
    MG_CHECK(c && c->defined() && c->shape() == param.shape() && c->dtype() == param.dtype() &&
                 c->device() == param.device() && !c->shares_storage_with(param),
             "kernel {}: Kahan rounding needs a compensation tensor of the parameter's shape {}, dtype {} and "
             "device {}, with storage of its own",
             kernel, param.shape(), param.dtype(), param.device());
  }
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& out, Scalars scalars) { MG_ROUTE(out, unary, op, x, out, scalars); }

void unary_grad(UnaryOp op, const Tensor& g, const Tensor& saved, Tensor& dx, Scalars scalars) {
  MG_ROUTE(dx, unary_grad, op, g, saved, dx, scalars);
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) { MG_ROUTE(out, binary, op, a, b, out); }

void ternary(TernaryOp op, const Tensor& x, const Tensor& y, const Tensor& z, Tensor& out) {
  MG_ROUTE(out, ternary, op, x, y, z, out);
}

// The GEMM's process-wide switches (kernels/gemm.h), read by both backends when a GEMM is queued: TF32
// is the GPU's, the f16 accumulator both.
namespace {
std::atomic<bool> tf32_allowed{false};
std::atomic<Accumulation> accumulation_mode{Accumulation::F32};
}  // namespace
void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }
void set_gemm_accumulation(Accumulation accumulation) {
  accumulation_mode.store(accumulation, std::memory_order_relaxed);
}
Accumulation gemm_accumulation() { return accumulation_mode.load(std::memory_order_relaxed); }

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape, const GemmEpilogue& epilogue) {
  MG_ROUTE(c, gemm, a, b, c, shape, epilogue);
}

PreparedGemmB prepare_gemm_b(const Tensor& b, const GemmShape& shape) {
  MG_CHECK(shape.batch == 1 && b.numel() == shape.k * shape.n,
           "kernels::prepare_gemm_b: needs one B of k x n = {} x {} elements, got batch {} and {} elements", shape.k,
           shape.n, shape.batch, b.numel());
  if (!b.device().is_cpu()) return {.shape = shape};  // a GPU multiplies f16 itself, and packs nothing
  return cpu::prepare_gemm_b(b, shape);
}

void gemm_prepared_b(const Tensor& a, const Tensor& b, const PreparedGemmB& prepared, Tensor& c,
                     const GemmShape& shape) {
  const GemmShape& p = prepared.shape;
  MG_CHECK(shape.batch == 1 && p.n == shape.n && p.k == shape.k && p.transpose_b == shape.transpose_b,
           "kernels::gemm_prepared_b: B was prepared for n {}, k {}{}, not for n {}, k {}{} (batch {})", p.n, p.k,
           p.transpose_b ? " (transposed)" : "", shape.n, shape.k, shape.transpose_b ? " (transposed)" : "",
           shape.batch);
  if (c.device().is_cpu()) return cpu::gemm_prepared_b(a, b, prepared, c, shape);
  gemm(a, b, c, shape);
}

void reduce(ReduceOp op, const Tensor& x, const ReduceShape& shape, Tensor& out, Tensor* indices) {
  MG_ROUTE(out, reduce, op, x, shape, out, indices);
}

void softmax(const Tensor& x, const ReduceShape& shape, bool log, Tensor& y) { MG_ROUTE(y, softmax, x, shape, log, y); }

void softmax_backward(const Tensor& y, const Tensor& dy, const ReduceShape& shape, bool log, Tensor& dx) {
  MG_ROUTE(dx, softmax_backward, y, dy, shape, log, dx);
}

void cross_entropy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index, Tensor& loss,
                   Tensor& row_stats) {
  MG_ROUTE(loss, cross_entropy, logits, labels, ignore_index, loss, row_stats);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_stats,
                            const Tensor& row_weight, std::int64_t ignore_index, Tensor& dlogits) {
  MG_ROUTE(dlogits, cross_entropy_backward, logits, labels, row_stats, row_weight, ignore_index, dlogits);
}

void copy_between_devices(const Tensor& src, Tensor& dst) {
  copy_bytes(src.data_ptr(), src.device(), dst.data_ptr(), dst.device(), src.nbytes(), "kernel copy_between_devices");
}

void cast(const Tensor& x, Tensor& out) { MG_ROUTE(out, cast, x, out); }

void permute(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  // Bytes move, not elements: a packed dtype's pair of elements cannot be parted.
  MG_CHECK(packed_group(x.dtype()) == 1,
           "kernels::permute: the {} tensor {} packs {} elements a byte, which a permutation would part; convert it "
           "first (x.to(DType::BF16)), permute, and convert back",
           x.dtype(), x.shape(), packed_group(x.dtype()));
  MG_ROUTE(out, permute, x, perm, out);
}

void copy_along_dim(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, int dim,
                    std::int64_t length) {
  MG_ROUTE(dst, copy_along_dim, src, src_start, dst, dst_start, dim, length);
}

void gather_rows(const Tensor& table, const Tensor& indices, Tensor& out) {
  MG_ROUTE(out, gather_rows, table, indices, out);
}

void scatter_add_rows(const Tensor& grad, const Tensor& indices, Tensor& grad_table) {
  MG_ROUTE(grad_table, scatter_add_rows, grad, indices, grad_table);
}

void scatter_along_dim(const Tensor& values, const Tensor& indices, const ReduceShape& shape, Tensor& out) {
  MG_ROUTE(out, scatter_along_dim, values, indices, shape, out);
}

void share_among_ties(const Tensor& g, const Tensor& x, const Tensor& max, Tensor& dx) {
  MG_ROUTE(dx, share_among_ties, g, x, max, dx);
}

void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
               Tensor& c_out, Tensor& hc, Tensor& h_x) {
  MG_ROUTE(hc, lstm_cell, gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                        const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  MG_ROUTE(dgates, lstm_cell_backward, acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
}

void im2col(const Tensor& x, const Window2d& window, Tensor& cols) { MG_ROUTE(cols, im2col, x, window, cols); }

void col2im(const Tensor& cols, const Window2d& window, Tensor& dx) { MG_ROUTE(dx, col2im, cols, window, dx); }

bool conv2d_implicit(const Tensor& x, const Window2d& window) {
  return x.device().is_cpu() && cpu::conv2d_implicit(x, window);  // the GPU convolves through im2col
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window, Tensor& y) {
  MG_CHECK(y.device().is_cpu(), "kernel conv2d_forward: runs on the CPU only (kernels::conv2d_implicit says where)");
  cpu::conv2d_forward(x, weight, bias, window, y);
}

void conv2d_input_grad(const Tensor& dy, const Tensor& weight, const Window2d& window, Tensor& dx) {
  MG_CHECK(dx.device().is_cpu(),
           "kernel conv2d_input_grad: runs on the CPU only (kernels::conv2d_implicit says where)");
  cpu::conv2d_input_grad(dy, weight, window, dx);
}

void conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& window, Tensor& dw) {
  MG_CHECK(dw.device().is_cpu(),
           "kernel conv2d_weight_grad: runs on the CPU only (kernels::conv2d_implicit says where)");
  cpu::conv2d_weight_grad(dy, x, window, dw);
}

void max_pool2d(const Tensor& x, const Window2d& window, Tensor& out, Tensor& argmax) {
  MG_ROUTE(out, max_pool2d, x, window, out, argmax);
}

void max_pool2d_backward(const Tensor& dout, const Tensor& argmax, const Window2d& window, Tensor& dx) {
  MG_ROUTE(dx, max_pool2d_backward, dout, argmax, window, dx);
}

void avg_pool2d(const Tensor& x, const Window2d& window, Tensor& out) { MG_ROUTE(out, avg_pool2d, x, window, out); }

void avg_pool2d_backward(const Tensor& dout, const Window2d& window, Tensor& dx) {
  MG_ROUTE(dx, avg_pool2d_backward, dout, window, dx);
}

namespace {

// The arguments of unscale and find_non_finite (dst empty), checked before any gradient is written:
// the factor and found_inf are one f32 element each, on the gradients' device.
void check_unscale(const char* kernel, const std::vector<Tensor>& src, const std::vector<Tensor>* dst,
                   const Tensor& factor, const Tensor& found_inf) {
  MG_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.dtype() == DType::F32,
           "kernel {}: found_inf must be one f32 element", kernel);
  const bool f64_on_cpu = factor.dtype() == DType::F64 && factor.device().is_cpu();  // for f64 gradients
  MG_CHECK(factor.defined() && factor.numel() == 1 && (factor.dtype() == DType::F32 || f64_on_cpu) &&
               factor.device() == found_inf.device(),
           "kernel {}: the factor must be one f32 element (or f64 on the CPU) on {}, found_inf's device", kernel,
           found_inf.device());
  MG_CHECK(!dst || src.size() == dst->size(), "kernel {}: {} sources but {} destinations", kernel, src.size(),
           dst ? dst->size() : 0);
  for (std::size_t i = 0; i < src.size(); ++i) {
    const Tensor* to = dst ? &(*dst)[i] : &src[i];
    MG_CHECK(src[i].defined() && to->defined() && src[i].numel() == to->numel() && is_floating(src[i].dtype()) &&
                 is_floating(to->dtype()),
             "kernel {}: gradient {} and its destination must be floating tensors of one size", kernel, i);
    MG_CHECK(src[i].device() == found_inf.device() && to->device() == found_inf.device(),
             "kernel {}: gradient {} is on {} and its destination on {}, but found_inf is on {}; one "
             "optimizer's gradients live on one device",
             kernel, i, src[i].device(), to->device(), found_inf.device());
  }
}

}  // namespace

void unscale(const std::vector<Tensor>& src, const std::vector<Tensor>& dst, const Tensor& factor, Tensor& found_inf) {
  check_unscale("unscale", src, &dst, factor, found_inf);
  MG_ROUTE(found_inf, unscale, src, dst, factor, found_inf);
}

void find_non_finite(const std::vector<Tensor>& src, const Tensor& factor, Tensor& found_inf) {
  check_unscale("find_non_finite", src, nullptr, factor, found_inf);
  MG_ROUTE(found_inf, unscale, src, {}, factor, found_inf);
}

void sgd(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdHyper& hyper, UpdateCount& count,
         const FusedStep& fused) {
  check_fused_step("sgd", param, fused);
  MG_ROUTE(param, sgd, param, grad, momentum_buffer, hyper, count, fused);
}

void adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& step, const AdamHyper& hyper,
          UpdateCount& count, const FusedStep& fused) {
  check_fused_step("adam", param, fused);
  MG_CHECK(step.defined() && step.numel() == 1 && step.dtype() == DType::I32 && step.device() == param.device(),
           "kernel adam: the step count must be one i32 element on {}, the parameter's device", param.device());
  MG_ROUTE(param, adam, param, grad, exp_avg, exp_avg_sq, step, hyper, count, fused);
}

void adagrad(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& step, const AdagradHyper& hyper,
             UpdateCount& count, const FusedStep& fused) {
  check_fused_step("adagrad", param, fused);
  MG_CHECK(step.defined() && step.numel() == 1 && step.dtype() == DType::I32 && step.device() == param.device(),
           "kernel adagrad: the step count must be one i32 element on {}, the parameter's device", param.device());
  MG_ROUTE(param, adagrad, param, grad, sum, step, hyper, count, fused);
}

void dropout_mask(std::uint64_t seed, std::uint64_t first_block, double p, Tensor& keep) {
  MG_ROUTE(keep, dropout_mask, seed, first_block, p, keep);
}

void stochastic_round(const Tensor& x, Tensor& out, const stochastic::RoundingStream& stream) {
  MG_CHECK(x.defined() && out.defined(), "kernel stochastic_round: x and out must be defined tensors");
  MG_CHECK(x.dtype() == DType::F32,
           "kernel stochastic_round: x must be f32, got {} {}; convert it first (x.to(DType::F32))", x.shape(),
           x.dtype());
  MG_CHECK(stochastic::rounds_to(out.dtype()),
           "kernel stochastic_round: out is {}, but stochastic rounding writes f16, bf16, e4m3, e5m2 or e2m1",
           out.dtype());
  MG_CHECK(x.shape() == out.shape() && x.device() == out.device(),
           "kernel stochastic_round: x {} on {} and out {} on {} must have one shape and device", x.shape(), x.device(),
           out.shape(), out.device());
  MG_ROUTE(out, stochastic_round, x, out, stream);
}

void update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& overflow_streak, const Tensor& found_inf,
                  const ScaleRule& rule) {
  MG_CHECK(scale.defined() && growth_tracker.defined() && found_inf.defined() && scale.numel() == 1 &&
               scale.dtype() == DType::F32 && growth_tracker.numel() == 1 && growth_tracker.dtype() == DType::I32 &&
               found_inf.numel() == 1 && found_inf.dtype() == DType::F32,
           "kernel update_scale: needs scale f32 [1], growth_tracker i32 [1] and found_inf f32 [1]");
  MG_CHECK(growth_tracker.device() == scale.device() && found_inf.device() == scale.device(),
           "kernel update_scale: scale ({}), growth_tracker ({}) and found_inf ({}) must be on one device",
           scale.device(), growth_tracker.device(), found_inf.device());
  MG_CHECK(rule.hysteresis == 1 ||
               (overflow_streak.defined() && overflow_streak.numel() == 1 && overflow_streak.dtype() == DType::I32 &&
                overflow_streak.device() == scale.device()),
           "kernel update_scale: hysteresis {} needs overflow_streak, i32 [1] on {}", rule.hysteresis, scale.device());
  check_rule(rule, "kernel update_scale");
  MG_ROUTE(scale, update_scale, scale, growth_tracker, overflow_streak, found_inf, rule);
}

void check_rule(const ScaleRule& rule, std::string_view owner) {
  MG_CHECK(rule.growth_factor > 1.0 && std::isfinite(rule.growth_factor), "{}: growth_factor must be > 1, got {}",
           owner, rule.growth_factor);
  MG_CHECK(rule.backoff_factor > 0.0 && rule.backoff_factor < 1.0, "{}: backoff_factor must be in (0, 1), got {}",
           owner, rule.backoff_factor);
  MG_CHECK(rule.growth_interval >= 1 && rule.growth_interval <= INT32_MAX,
           "{}: growth_interval must be in [1, 2^31), got {}", owner, rule.growth_interval);
  MG_CHECK(rule.hysteresis >= 1 && rule.hysteresis <= INT32_MAX,
           "{}: hysteresis must be >= 1 (1 backs off at every overflow) and below 2^31, got {}", owner,
           rule.hysteresis);
  MG_CHECK(rule.min_scale >= 0.0 && rule.max_scale >= rule.min_scale && rule.max_scale <= FLT_MAX,
           "{}: need 0 <= min_scale ({}) <= max_scale ({}) <= the largest f32", owner, rule.min_scale, rule.max_scale);
}

// On the CPU the kernels add to the caller's count directly: nothing to clear or read.
void clear_update_count([[maybe_unused]] Device device, [[maybe_unused]] const Tensor* found_inf) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) cuda::clear_update_count(device, found_inf);
#endif
}

void read_update_count([[maybe_unused]] Device device, [[maybe_unused]] UpdateCount& count) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) cuda::read_update_count(device, count);
#endif
}

}  // namespace mg::kernels

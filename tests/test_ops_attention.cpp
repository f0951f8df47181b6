// mg::scaled_dot_product_attention (autograd/attention.cpp; the CPU kernel kernels/cpu/attention.cpp):
// the fused op against its unfused composition (matmul, mul, where, softmax, dropout, matmul) run in
// f64 on the same inputs, forward and gradients, in f64, f32, bf16 and f16, with and without the
// causal mask, at odd lengths, q_len != kv_len, head_dim != value_dim, and a kv_len past one block of
// the online softmax; central differences in f64; the same dropout mask as mg::dropout; autocast;
// the saved bytes; nn::CausalSelfAttention; and the errors.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

struct Case {
  std::int64_t batch, q_len, kv_len, head_dim, value_dim;
  bool causal;
};

// The output and the gradients of sum(w * attention(q, k, v)) for fixed weights w.
struct Result {
  Tensor out, dq, dk, dv;
};

Result run(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& w, AttentionOptions options) {
  const Tensor q = q_in.detach().set_requires_grad(true), k = k_in.detach().set_requires_grad(true),
               v = v_in.detach().set_requires_grad(true);
  const Tensor out = scaled_dot_product_attention(q, k, v, options);
  backward(sum(mul(cast(out, w.dtype()), w)));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

struct Inputs {
  Tensor q, k, v, w;
};

Inputs inputs(const Case& c, DType dtype, std::uint64_t seed) {
  return {uniform_in({c.batch, c.q_len, c.head_dim}, dtype, seed, -1.0, 1.0),
          uniform_in({c.batch, c.kv_len, c.head_dim}, dtype, seed + 1, -1.0, 1.0),
          uniform_in({c.batch, c.kv_len, c.value_dim}, dtype, seed + 2, -1.0, 1.0),
          uniform_in({c.batch, c.q_len, c.value_dim}, dtype, seed + 3, -1.0, 1.0)};
}

// The largest |got - expected|, as doubles.
double max_error(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.shape() == expected.shape());
  const std::vector<double> a = got.to_vector<double>(), b = expected.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}
double max_abs(const Tensor& t) {
  double worst = 0;
  for (double x : t.to_vector<double>()) worst = std::max(worst, std::fabs(x));
  return worst;
}

// The unfused ops in f64 on the same values (the low-precision inputs are exact in f64).
Result reference(const Inputs& in, bool causal) {
  return run(in.q.to(DType::F64), in.k.to(DType::F64), in.v.to(DType::F64), in.w.to(DType::F64),
             {.causal = causal, .fused = false});
}

const std::vector<Case> kCases{
    {3, 7, 7, 5, 5, true},  // odd lengths, causal
    {2, 13, 13, 8, 6, false},  // head_dim != value_dim
    {2, 5, 9, 4, 4, false},  // q_len != kv_len
    {2, 9, 5, 4, 3, true},  // causal with more queries than keys: rows past the keys see them all
    {1, 150, 150, 16, 16, true},  // past one 64-key block: the online softmax rescales
    {1, 3, 140, 8, 8, false},  // three key blocks for every query
};

}  // namespace

TEST_CASE("scaled_dot_product_attention f64 and f32: the fused kernel equals the unfused ops, forward and gradients") {
  for (const Case& c : kCases) {
    for (DType dtype : {DType::F64, DType::F32}) {
      INFO(c.batch << "x" << c.q_len << "x" << c.kv_len << " d " << c.head_dim << "/" << c.value_dim << " causal "
                   << c.causal << " " << dtype);
      const Inputs in = inputs(c, dtype, 10);
      const Result fused = run(in.q, in.k, in.v, in.w, {.causal = c.causal});
      const Result ref = reference(in, c.causal);
      CHECK(fused.out.dtype() == dtype);
      // f64: both exact to rounding; f32: sums of ~kv_len products each, rounded once or a few times.
      const double tol = dtype == DType::F64 ? 1e-12 : 4e-6;
      CHECK(max_error(fused.out, ref.out) <= tol * std::max(1.0, max_abs(ref.out)));
      CHECK(max_error(fused.dq, ref.dq) <= tol * std::max(1.0, max_abs(ref.dq)));
      CHECK(max_error(fused.dk, ref.dk) <= tol * std::max(1.0, max_abs(ref.dk)));
      CHECK(max_error(fused.dv, ref.dv) <= tol * std::max(1.0, max_abs(ref.dv)));
    }
  }
}

TEST_CASE("scaled_dot_product_attention bf16 and f16: within the output's rounding of the f64 answer, closer than "
          "the unfused ops") {
  for (const Case& c : kCases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      INFO(c.batch << "x" << c.q_len << "x" << c.kv_len << " causal " << c.causal << " " << dtype);
      const Inputs in = inputs(c, dtype, 20);
      const Result fused = run(in.q, in.k, in.v, in.w, {.causal = c.causal});
      const Result unfused = run(in.q, in.k, in.v, in.w, {.causal = c.causal, .fused = false});
      const Result ref = reference(in, c.causal);
      const double eps = dtype_eps(dtype);
      // |out| <= max |v| <= 1: one rounding of the output is at most eps / 2 of it.
      const double fused_error = max_error(fused.out, ref.out);
      CHECK(fused_error <= eps / 2 * max_abs(ref.out) + 1e-6);
      // The unfused ops round the scores (then scale them, then round the weights for P v) first.
      CHECK(fused_error <= max_error(unfused.out, ref.out));
      // Gradients: D_t = dO . O reads the rounded output, and each gradient is rounded once.
      CHECK(max_error(fused.dq, ref.dq) <= 2 * eps * max_abs(ref.dq));
      CHECK(max_error(fused.dk, ref.dk) <= 2 * eps * max_abs(ref.dk));
      CHECK(max_error(fused.dv, ref.dv) <= 2 * eps * max_abs(ref.dv));
    }
  }
}

TEST_CASE("scaled_dot_product_attention: gradients by central differences in f64, with the mask and a scale") {
  const auto attention = [](bool causal) {
    return [causal](const std::vector<Tensor>& x) {
      return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal, .scale = 0.7});
    };
  };
  for (bool causal : {false, true}) {
    check_gradients(causal ? "sdpa causal" : "sdpa", attention(causal),
                    {random_f64({2, 5, 3}, -1, 1, 1), random_f64({2, 5, 3}, -1, 1, 2),
                     random_f64({2, 5, 4}, -1, 1, 3)});
  }
  // [batch, heads, T, D]: any leading dims.
  check_gradients("sdpa 4-d", attention(true),
                  {random_f64({2, 2, 4, 3}, -1, 1, 4), random_f64({2, 2, 4, 3}, -1, 1, 5),
                   random_f64({2, 2, 4, 3}, -1, 1, 6)});
}

TEST_CASE("scaled_dot_product_attention with dropout: the weights mg::dropout drops from the same generator position") {
  const Case c{2, 9, 9, 4, 4, true};
  const Inputs in = inputs(c, DType::F64, 30);
  Generator fused_generator(7), unfused_generator(7);
  const Result fused = run(in.q, in.k, in.v, in.w, {.causal = true, .dropout = 0.3, .generator = &fused_generator});
  const Result unfused = run(in.q, in.k, in.v, in.w,
                             {.causal = true, .dropout = 0.3, .fused = false, .generator = &unfused_generator});
  check_close(fused.out, unfused.out, 1e-12, 1e-12);
  check_close(fused.dq, unfused.dq, 1e-12, 1e-12);
  check_close(fused.dk, unfused.dk, 1e-12, 1e-12);
  check_close(fused.dv, unfused.dv, 1e-12, 1e-12);
  CHECK(fused_generator.offset() == unfused_generator.offset());  // the same words reserved
  const Result none = run(in.q, in.k, in.v, in.w, {.causal = true});
  CHECK(max_error(fused.out, none.out) > 0.01);  // something was dropped
  // The backward redraws the mask: central differences through a fixed generator position.
  check_gradients("sdpa dropout",
                  [](const std::vector<Tensor>& x) {
                    Generator generator(11);
                    return scaled_dot_product_attention(x[0], x[1], x[2], {.dropout = 0.25, .generator = &generator});
                  },
                  {random_f64({2, 4, 3}, -1, 1, 7), random_f64({2, 4, 3}, -1, 1, 8), random_f64({2, 4, 3}, -1, 1, 9)});
}

TEST_CASE("scaled_dot_product_attention under autocast: bf16 GEMM inputs, one node, no [T, T] tensor saved") {
  const Case c{8, 64, 64, 32, 32, true};
  const Inputs in = inputs(c, DType::F32, 40);
  const Tensor q = in.q.detach().set_requires_grad(true), k = in.k.detach().set_requires_grad(true),
               v = in.v.detach().set_requires_grad(true);
  std::size_t fused_saved = 0, unfused_saved = 0;
  Tensor fused_out, unfused_out;
  for (bool fused : {true, false}) {
    clear_tape();
    Autocast region(DType::BF16);
    Tensor out = scaled_dot_product_attention(q, k, v, {.causal = true, .fused = fused});
    (fused ? fused_saved : unfused_saved) = saved_tensor_bytes();
    (fused ? fused_out : unfused_out) = out;
    CHECK(out.dtype() == DType::BF16);
  }
  clear_tape();
  // Fused: the bf16 q, k, v, the output and an f32 log-sum-exp a row. Unfused: also the [8, 64, 64] scores and weights.
  const std::size_t bf16_inputs = 3 * 8 * 64 * 32 * 2, output = 8 * 64 * 32 * 2, lse = 8 * 64 * 4;
  CHECK(fused_saved == bf16_inputs + output + lse);
  CHECK(unfused_saved > fused_saved + 8 * 64 * 64 * 2);
  // Autocast's casts give the op the same bf16 inputs as casting by hand.
  const Tensor by_hand = scaled_dot_product_attention(in.q.to(DType::BF16), in.k.to(DType::BF16), in.v.to(DType::BF16),
                                                      {.causal = true});
  CHECK(max_error(fused_out, by_hand) == 0.0);
}

TEST_CASE("nn::CausalSelfAttention: the fused op and the unfused ops give the same outputs and gradients") {
  Generator generator(5);
  nn::CausalSelfAttention attention(16, 4, 0.0, generator);
  const Tensor x = uniform_in({3, 11, 16}, DType::F32, 50, -1.0, 1.0);
  std::vector<std::vector<double>> grads[2];
  Tensor outs[2];
  for (int fused = 0; fused < 2; ++fused) {
    attention.fused = fused == 1;
    attention.zero_grad();
    const Tensor xi = x.detach().set_requires_grad(true);
    outs[fused] = attention(xi);
    backward(sum(mul(outs[fused], outs[fused])));
    for (const Tensor& p : attention.parameters()) grads[fused].push_back(p.grad().to_vector<double>());
    grads[fused].push_back(xi.grad().to_vector<double>());
  }
  check_close(outs[1], outs[0], 1e-5, 1e-6);
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    INFO("gradient " << i);
    check_values(from_vector(grads[1][i], {static_cast<std::int64_t>(grads[1][i].size())}), grads[0][i], 1e-4, 1e-5);
  }
}

TEST_CASE("scaled_dot_product_attention: bad inputs name the op and the shapes") {
  const Tensor q = zeros({2, 4, 3}), k = zeros({2, 5, 3}), v = zeros({2, 5, 6});
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(q, zeros({2, 5, 4}), v),
                       doctest::Contains("mg::scaled_dot_product_attention: q [2, 4, 3], k [2, 5, 4]"), Error);
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(q, k, zeros({2, 4, 6})), doctest::Contains("do not fit"),
                       Error);
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(zeros({4}), k, v), doctest::Contains("leading dims"), Error);
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(q, zeros({2, 0, 3}), zeros({2, 0, 6})),
                       doctest::Contains("at least one key"), Error);
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(q, k, v, {.dropout = 1.0}),
                       doctest::Contains("dropout must be in [0, 1)"), Error);
  CHECK_THROWS_WITH_AS((void)scaled_dot_product_attention(q.to(DType::F16), k, v), doctest::Contains("f16"), Error);
  CHECK_THROWS_AS((void)scaled_dot_product_attention(q, k, v, {.scale = std::nan("")}), Error);
}

#ifdef MG_WITH_CUDA
TEST_CASE("scaled_dot_product_attention on a GPU: the unfused ops there, the CPU's fused kernel's answer") {
  if (!have_gpu()) return;
  const Case c{2, 9, 9, 4, 4, true};
  const Inputs in = inputs(c, DType::F32, 60);
  const Result cpu = run(in.q, in.k, in.v, in.w, {.causal = true});
  const Result gpu = run(in.q.to(Device::cuda()), in.k.to(Device::cuda()), in.v.to(Device::cuda()),
                         in.w.to(Device::cuda()), {.causal = true});
  CHECK(gpu.out.device().is_cuda());
  CHECK(max_error(gpu.out.to(Device::cpu()), cpu.out) <= 4e-6);
  CHECK(max_error(gpu.dq.to(Device::cpu()), cpu.dq) <= 4e-6 * std::max(1.0, max_abs(cpu.dq)));
  CHECK(max_error(gpu.dk.to(Device::cpu()), cpu.dk) <= 4e-6 * std::max(1.0, max_abs(cpu.dk)));
  CHECK(max_error(gpu.dv.to(Device::cpu()), cpu.dv) <= 4e-6 * std::max(1.0, max_abs(cpu.dv)));
}
#endif

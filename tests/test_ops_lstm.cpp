// mg::lstm_recurrence (autograd/lstm.cpp, kernels/cpu/lstm.cpp): the fused LSTM time loop.
// Forward values against the same recurrence written with plain mixgrad ops in f64, gradients of
// all five inputs by f64 central differences, the f16 path (f16 GEMM operands, f32 gates and state)
// against an f64 model of the same roundings, and bad input against errors. Also: nn::LSTM records
// a number of tape nodes that does not grow with the sequence length.
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// The recurrence with separate ops, one step at a time: returns [T, B, 2H] like lstm_recurrence.
// round_h: the GEMM operand h is rounded to f16 first (what the op does with f16 weights).
Tensor reference(const Tensor& gates_x, const Tensor& w, const Tensor& b, const Tensor& h0, const Tensor& c0,
                 bool round_h = false) {
  const std::int64_t T = gates_x.size(0), B = gates_x.size(1), H = w.size(1);
  Tensor h = h0, c = c0;
  std::vector<Tensor> steps;
  for (std::int64_t t = 0; t < T; ++t) {
    const Tensor h_used = round_h ? cast(cast(h, DType::F16), DType::F64) : h;
    Tensor gates = add(reshape(slice(gates_x, 0, t, t + 1), {B, 4 * H}), linear(h_used, w, b));
    Tensor i = sigmoid(slice(gates, 1, 0, H)), f = sigmoid(slice(gates, 1, H, 2 * H));
    Tensor g = tanh(slice(gates, 1, 2 * H, 3 * H)), o = sigmoid(slice(gates, 1, 3 * H, 4 * H));
    c = add(mul(f, c), mul(i, g));
    h = mul(o, tanh(c));
    steps.push_back(cat({h, c}, 1));
  }
  return stack(steps, 0);
}

struct Inputs {
  Tensor gates_x, w, b, h0, c0;
};

Inputs random_inputs(std::int64_t T, std::int64_t B, std::int64_t H, std::uint64_t seed, bool requires_grad = true) {
  return {random_f64({T, B, 4 * H}, -1.5, 1.5, seed, requires_grad),
          random_f64({4 * H, H}, -0.8, 0.8, seed + 1, requires_grad),
          random_f64({4 * H}, -0.5, 0.5, seed + 2, requires_grad),
          random_f64({B, H}, -0.9, 0.9, seed + 3, requires_grad),
          random_f64({B, H}, -2.0, 2.0, seed + 4, requires_grad)};
}

}  // namespace

TEST_CASE("lstm_recurrence: forward equals the step-by-step recurrence in f64") {
  NoGradGuard no_grad;
  for (auto [T, B, H] : {std::array<std::int64_t, 3>{1, 1, 1}, {3, 2, 3}, {7, 4, 5}}) {
    INFO("T " << T << " B " << B << " H " << H);
    const Inputs in = random_inputs(T, B, H, 10 * static_cast<std::uint64_t>(T), false);
    Tensor got = lstm_recurrence(in.gates_x, in.w, in.b, in.h0, in.c0);
    CHECK(got.shape() == Shape{T, B, 2 * H});
    CHECK(got.dtype() == DType::F64);
    check_close(got, reference(in.gates_x, in.w, in.b, in.h0, in.c0), 1e-13, 1e-14);
  }
}

TEST_CASE("lstm_recurrence: a hand-computed step") {
  // H = 1, zero weights: gates = gates_x + b. i = f = o = sigmoid(0) = 1/2, g = tanh(0) = 0.
  Tensor out = lstm_recurrence(zeros({1, 1, 4}, {.dtype = DType::F64}), zeros({4, 1}, {.dtype = DType::F64}),
                               zeros({4}, {.dtype = DType::F64}), zeros({1, 1}, {.dtype = DType::F64}),
                               full({1, 1}, 3.0, {.dtype = DType::F64}));
  // c = f c0 + i g = 1.5; h = o tanh(c) = tanh(1.5) / 2.
  check_values(out, {0.5 * std::tanh(1.5), 1.5});
}

TEST_CASE("lstm_recurrence: gradients of every input by central differences") {
  for (auto [T, B, H] : {std::array<std::int64_t, 3>{1, 2, 2}, {4, 3, 2}}) {
    INFO("T " << T << " B " << B << " H " << H);
    const Inputs in = random_inputs(T, B, H, 100 + static_cast<std::uint64_t>(T));
    check_gradients("lstm_recurrence",
                    [](const std::vector<Tensor>& x) { return lstm_recurrence(x[0], x[1], x[2], x[3], x[4]); },
                    {in.gates_x, in.w, in.b, in.h0, in.c0});
  }
}

TEST_CASE("lstm_recurrence: f16 GEMM operands with f32 gates and state") {
  NoGradGuard no_grad;
  const std::int64_t T = 6, B = 3, H = 8;
  const Inputs in = random_inputs(T, B, H, 7, false);
  // The f16 inputs, and the same values exactly in f64 for the reference.
  Tensor gates16 = cast(in.gates_x, DType::F16), w16 = cast(in.w, DType::F16);
  Tensor b32 = cast(in.b, DType::F32), h32 = cast(in.h0, DType::F32), c32 = cast(in.c0, DType::F32);
  Tensor got = lstm_recurrence(gates16, w16, b32, h32, c32);
  CHECK(got.dtype() == DType::F32);
  Tensor expected = reference(cast(gates16, DType::F64), cast(w16, DType::F64), cast(b32, DType::F64),
                              cast(h32, DType::F64), cast(c32, DType::F64), /*round_h=*/true);
  // Only f32 arithmetic separates the two (sums of H products, exp, tanh), compounded over T steps;
  // an f16 rounding anywhere else would show as ~2^-11 = 4.9e-4.
  check_close(got, expected, 1e-5, 1e-5);
}

TEST_CASE("lstm_recurrence: the f16 gradients match the f64 ones within the f16 bound") {
  const std::int64_t T = 5, B = 4, H = 6;
  const Inputs in = random_inputs(T, B, H, 21);
  Tensor loss64 = sum(lstm_recurrence(in.gates_x, in.w, in.b, in.h0, in.c0));
  backward(loss64);
  Tensor gx16 = cast(in.gates_x.detach(), DType::F16).set_requires_grad(true);
  Tensor w16 = cast(in.w.detach(), DType::F16).set_requires_grad(true);
  Tensor b32 = cast(in.b.detach(), DType::F32).set_requires_grad(true);
  Tensor h32 = cast(in.h0.detach(), DType::F32).set_requires_grad(true);
  Tensor c32 = cast(in.c0.detach(), DType::F32).set_requires_grad(true);
  backward(sum(lstm_recurrence(gx16, w16, b32, h32, c32)));
  CHECK(gx16.grad().dtype() == DType::F16);
  CHECK(w16.grad().dtype() == DType::F16);
  CHECK(h32.grad().dtype() == DType::F32);
  // Inputs rounded to f16 (2^-11 relative) and gradients stored in f16: a few f16 eps, scaled by the
  // size of the gradients (up to ~T for dW summed over the steps).
  const double atol = tolerance(DType::F16, 16.0) * static_cast<double>(T);
  check_close(gx16.grad(), in.gates_x.grad(), 0.0, atol);
  check_close(w16.grad(), in.w.grad(), 0.0, atol);
  check_close(b32.grad(), in.b.grad(), 0.0, atol);
  check_close(h32.grad(), in.h0.grad(), 0.0, atol);
  check_close(c32.grad(), in.c0.grad(), 0.0, atol);
}

TEST_CASE("lstm_recurrence: under autocast the GEMM runs in f16 and the state stays f32") {
  NoGradGuard no_grad;
  const Inputs in = random_inputs(3, 2, 4, 33, false);
  Tensor gx = cast(in.gates_x, DType::F32), w = cast(in.w, DType::F32), b = cast(in.b, DType::F32);
  Tensor h = cast(in.h0, DType::F32), c = cast(in.c0, DType::F32);
  Tensor plain = lstm_recurrence(cast(gx, DType::F16), cast(w, DType::F16), b, h, c);
  Autocast region(DType::F16);
  Tensor autocast = lstm_recurrence(gx, w, b, h, c);
  CHECK(autocast.dtype() == DType::F32);
  check_close(autocast, plain, 0.0, 0.0);  // the same casts, the same arithmetic: bit-identical
}

TEST_CASE("lstm_recurrence: bad input is refused with a clear error") {
  const Tensor gx = zeros({2, 3, 8}), w = zeros({8, 2}), b = zeros({8}), h = zeros({3, 2}), c = zeros({3, 2});
  check_error([&] { lstm_recurrence(gx, zeros({8, 3}), b, h, c); }, "weight_hh must be [4H, H]");
  check_error([&] { lstm_recurrence(zeros({2, 3, 6}), w, b, h, c); }, "gates_x must be [T, B, 4H]");
  check_error([&] { lstm_recurrence(zeros({0, 3, 8}), w, b, h, c); }, "T > 0");
  check_error([&] { lstm_recurrence(gx, w, zeros({4}), h, c); }, "bias_hh must be [4H]");
  check_error([&] { lstm_recurrence(gx, w, b, zeros({2, 2}), c); }, "h0 and c0 must be [B, H]");
  check_error([&] { lstm_recurrence(gx, cast(w, DType::F16), b, h, c); }, "mg::lstm_recurrence");
  check_error([&] { lstm_recurrence(gx, w, b, cast(h, DType::F16), cast(c, DType::F16)); },
              "the state (h0, c0) must have the gates' dtype");
  check_error([&] { lstm_recurrence(gx, w, cast(b, DType::F64), h, c); }, "bias_hh must have the gates' dtype (f32)");
}

TEST_CASE("nn::LSTM records a fixed number of tape nodes, whatever the sequence length") {
  clear_tape();
  nn::LSTM lstm(3, 4, 2);
  std::vector<std::size_t> nodes;
  for (std::int64_t T : {2, 50}) {
    clear_tape();
    Tensor y = lstm(zeros({2, T, 3}));
    nodes.push_back(tape_size());
  }
  CHECK(nodes[0] == nodes[1]);
  CHECK(nodes[0] <= 2 * 15);  // a handful per layer (before: ~15 per layer and time step)
  clear_tape();
}

// The phenomena of Micikevicius et al. (2018), reproduced exactly on the CPU because mixgrad rounds
// like the GPU: f16 overflow and underflow, updates lost to a 10-bit mantissa, and why products
// are accumulated (and reductions done) in f32. Also the conventions at special values that keep
// such problems visible or harmless: NaN passes through relu, pow's gradients at a zero base are 0.
#include <cmath>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("numerics: f16 overflows above 65504, bf16 does not") {
  Tensor big = full({2}, 60000.0, {.dtype = DType::F16});
  CHECK(std::isinf(add(big, big).to_vector<double>()[0]));
  CHECK(std::isinf(exp(full({1}, 12.0, {.dtype = DType::F16})).item()));  // e^12 = 162755
  // bf16 keeps 8 significant bits: 60000 is stored as 59904 (a multiple of 256), but nothing overflows.
  Tensor big_bf16 = full({2}, 60000.0, {.dtype = DType::BF16});
  CHECK(big_bf16.to_vector<double>()[0] == 59904.0);
  CHECK(add(big_bf16, big_bf16).to_vector<double>()[0] == 119808.0);
}

TEST_CASE("numerics: small gradients underflow in f16, survive with loss scaling and in bf16") {
  // A gradient of 2^-26 is below f16's smallest subnormal (2^-24): it flushes to zero ...
  Tensor g = full({4}, std::ldexp(1.0, -26));
  check_values(g.to(DType::F16), {0, 0, 0, 0});
  // ... multiplied by a loss scale of 2^16 it is an ordinary f16 number, and unscaling in f32 restores it.
  Tensor scaled = mul(g, 65536.0).to(DType::F16);
  check_values(mul(scaled.to(DType::F32), 1.0 / 65536.0), std::vector<double>(4, std::ldexp(1.0, -26)));
  // bf16 has f32's exponent range: no underflow, only fewer digits.
  check_values(g.to(DType::BF16), std::vector<double>(4, std::ldexp(1.0, -26)));
  // Half of the smallest subnormal, computed in f16: the product rounds to 0 (a tie, to even).
  Tensor tiny = full({1}, std::ldexp(1.0, -24), {.dtype = DType::F16});
  CHECK(mul(tiny, 0.5).item() == 0.0);
}

TEST_CASE("numerics: an update 2048 times smaller than the weight is lost in f16") {
  // With 10 mantissa bits the spacing of f16 numbers at 1 is 2^-10; an update below half of it
  // vanishes. This is why the paper keeps an f32 master copy of the weights.
  Tensor weight16 = ones({1}, {.dtype = DType::F16});
  Tensor update16 = full({1}, std::ldexp(1.0, -12), {.dtype = DType::F16});  // representable by itself
  CHECK(add(weight16, update16).item() == 1.0);  // but lost in the sum
  Tensor weight32 = ones({1});
  CHECK(add(weight32, update16.to(DType::F32)).item() == 1.0 + std::ldexp(1.0, -12));
  // The same update applied 4096 times: f16 weights never move, f32 master weights gain 1.
  Tensor w16 = ones({1}, {.dtype = DType::F16});
  Tensor w32 = ones({1});
  for (int i = 0; i < 4096; ++i) {
    w16 = add(w16, update16);
    w32 = add(w32, update16.to(DType::F32));
  }
  CHECK(w16.item() == 1.0);
  CHECK(w32.item() == 2.0);
}

TEST_CASE("numerics: f16 matmul accumulates in f32, like Tensor Cores") {
  // A dot product of 4096 ones: an f16 accumulator would stick at 2048 (2048 + 1 rounds to 2048).
  const std::int64_t k = 4096;
  Tensor a = ones({1, k}, {.dtype = DType::F16});
  Tensor b = ones({k, 1}, {.dtype = DType::F16});
  CHECK(matmul(a, b).item() == 4096.0);
  // Products are exact and summed in f32; only the stored result rounds: 1 + 2^-11 per term,
  // 512 terms = 512.25, which f16 (spacing 0.5 at 512) stores as 512.0 ...
  Tensor c = full({1, 512}, 1.0 + std::ldexp(1.0, -10), {.dtype = DType::F16});
  Tensor d = full({512, 1}, 1.0 - std::ldexp(1.0, -11), {.dtype = DType::F16});
  const double exact = 512.0 * (1.0 + std::ldexp(1.0, -10)) * (1.0 - std::ldexp(1.0, -11));
  const double result = matmul(c, d).item();
  CHECK(std::fabs(result - exact) <= 0.5 * 512.0 * dtype_eps(DType::F16));  // half an f16 ulp at 512
  // ... and sums of f16 tensors accumulate in f32 too.
  CHECK(sum(ones({k}, {.dtype = DType::F16})).item() == 4096.0);
  CHECK(mean(full({k}, 3.0, {.dtype = DType::BF16})).item() == 3.0);
}

TEST_CASE("numerics: softmax and cross-entropy of f16 logits are computed in f32") {
  // exp(20) = 4.9e8 overflows f16, but softmax subtracts the max and computes in f32: no inf, no NaN.
  Tensor logits = from_vector({20, 20, 0, 12}, {1, 4}, {.dtype = DType::F16});
  std::vector<double> p = softmax(logits, -1).to_vector<double>();
  const double rest = 2.0 + std::exp(-20.0) + std::exp(-8.0);
  CHECK(std::fabs(p[0] - 1.0 / rest) <= tolerance(DType::F16, 0.5));
  CHECK(p[2] == 0.0);  // e^-20 / 2 = 1.0e-9 is below f16's smallest subnormal (6e-8): 0 on store
  CHECK(std::fabs(p[3] - std::exp(-8.0) / rest) <= std::exp(-8.0) / rest * tolerance(DType::F16, 0.5));
  Tensor loss = cross_entropy(logits, from_vector({2}, {1}, {.dtype = DType::I32}));
  CHECK(std::isfinite(loss.item()));
  CHECK(std::fabs(loss.item() - (20.0 + std::log(2.0 + std::exp(-20.0)))) <= 20.7 * tolerance(DType::F16, 0.5));
}

TEST_CASE("numerics: f16 backward of div and pow rounds once, so a loss scale does not overflow it") {
  // d(a/b)/db = -g a / b^2. With a = 300, b = 3 and g = 1024 (a scaled loss) the true value is
  // -34133.3, which fits in f16; rounding g * (a/b) = 102400 to f16 first would give inf.
  Tensor a = tensor({300}, {.dtype = DType::F16, .requires_grad = true});
  Tensor b = tensor({3}, {.dtype = DType::F16, .requires_grad = true});
  backward(div(a, b), full({1}, 1024.0, {.dtype = DType::F16}));
  const double db = b.grad().item();
  CHECK(std::isfinite(db));
  CHECK(std::fabs(db - (-1024.0 * 300.0 / 9.0)) <= 34133.4 * tolerance(DType::F16, 0.5));
  CHECK(std::fabs(a.grad().item() - 1024.0 / 3.0) <= 341.4 * tolerance(DType::F16, 0.5));
  // rdiv: d(s/x)/dx = -g s / x^2, same formula.
  Tensor x = tensor({3}, {.dtype = DType::F16, .requires_grad = true});
  backward(rdiv(300.0, x), full({1}, 1024.0, {.dtype = DType::F16}));
  CHECK(std::isfinite(x.grad().item()));
  // pow: d(b^e)/db = e b^(e-1): with b = 40, e = 3, g = 16: 16 * 3 * 1600 = 76800 overflows f16
  // anyway, but g = 8 gives 38400, whose intermediates (b^e = 64000 * 8) would overflow.
  Tensor base = tensor({40}, {.dtype = DType::F16, .requires_grad = true});
  Tensor exponent = tensor({3}, {.dtype = DType::F16, .requires_grad = true});
  backward(pow(base, exponent), full({1}, 8.0, {.dtype = DType::F16}));
  CHECK(std::fabs(base.grad().item() - 38400.0) <= 38400.0 * tolerance(DType::F16, 0.5));
  CHECK(std::isinf(exponent.grad().item()));  // 8 * 64000 * log(40) = 1.9e6: honestly beyond f16
}

TEST_CASE("numerics: mse_loss of f16 inputs is computed in f32") {
  // (300^2 + 0^2) / 2 = 45000 fits in f16, but 300^2 = 90000 does not: in f16 math this would be inf.
  Tensor prediction = tensor({300, 0}, {.dtype = DType::F16, .requires_grad = true});
  Tensor target = zeros({2}, {.dtype = DType::F16});
  Tensor loss = mse_loss(prediction, target);
  CHECK(loss.dtype() == DType::F16);
  CHECK(std::fabs(loss.item() - 45000.0) <= 45000.0 * tolerance(DType::F16, 0.5));
  backward(loss);
  CHECK(prediction.grad().dtype() == DType::F16);
  check_values(prediction.grad(), {300, 0});  // 2 (p - t) / n
}

TEST_CASE("numerics: relu passes NaN through instead of hiding it") {
  Tensor x = tensor({NAN, -1, 2}, {.requires_grad = true});
  std::vector<double> y = relu(x).to_vector<double>();
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == 0.0);
  CHECK(y[2] == 2.0);
  backward(sum(relu(x)));
  check_values(x.grad(), {1, 0, 1});
  clear_tape();
}

TEST_CASE("pow: gradients at a zero base follow PyTorch (0, not NaN)") {
  // d(x^0)/dx = 0 everywhere, also at x = 0 where 0 * 0^-1 would be NaN.
  Tensor x = tensor({0.0, 2.0}, {.dtype = DType::F64, .requires_grad = true});
  backward(sum(pow(x, 0.0)));
  check_values(x.grad(), {0, 0});
  // Tensor exponent: d(b^e)/de = b^e log b, taken as 0 at b = 0, e >= 0; d/db = 0 where e = 0.
  Tensor base = tensor({0.0, 0.0, 2.0}, {.dtype = DType::F64, .requires_grad = true});
  Tensor exponent = tensor({2.0, 0.0, 3.0}, {.dtype = DType::F64, .requires_grad = true});
  backward(sum(pow(base, exponent)));
  check_values(exponent.grad(), {0, 0, 8 * std::log(2.0)});
  check_values(base.grad(), {0, 0, 12});
}

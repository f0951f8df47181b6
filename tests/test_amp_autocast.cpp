// Autocast: the dtype every op computes in inside a region, nesting, casts recorded on the tape,
// the weight-cast cache and its invalidation rules. The policy table and user overrides are tested
// in test_amp_policy.cpp; the binary cross entropies (banned and safe forms) in test_ops_loss.cpp.
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

Tensor i32(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

// Records the names of the ops run (forward) while alive.
struct OpLog : OpObserver {
  std::vector<std::string> ops;
  OpLog() { add_observer(this); }
  ~OpLog() override { remove_observer(this); }
  void forward(const char* op, const std::string&, const std::vector<Tensor>&, const Tensor&) override {
    ops.emplace_back(op);
  }
  void backward(const char*, const std::string&, const Tensor&, const Grads&) override {}
};

// Every tensor of `outs` has dtype `want` (INFO names its position in the list on failure).
void expect_dtype(DType want, const std::vector<Tensor>& outs) {
  for (std::size_t i = 0; i < outs.size(); ++i) {
    INFO("output " << i << " of the list, expected " << dtype_name(want) << ", got " << dtype_name(outs[i].dtype()));
    CHECK(outs[i].dtype() == want);
  }
}

// Every op of autograd/ops.h inside an Autocast(low) region.
void check_op_dtypes(DType low) {
  INFO("region dtype " << dtype_name(low));
  const Tensor a32 = uniform_in({2, 3}, DType::F32, 1), b32 = uniform_in({2, 3}, DType::F32, 2);
  const Tensor a = a32.to(low), b = b32.to(low);  // already low precision
  const Tensor m32 = uniform_in({3, 4}, DType::F32, 3), batch32 = uniform_in({2, 2, 3}, DType::F32, 4);
  const Tensor batch_b32 = uniform_in({2, 3, 4}, DType::F32, 5);
  const Tensor labels = i32({0, 2}, {2}), mask = i32({1, 0, 1, 0, 1, 0}, {2, 3}), indices = i32({1, 0, 1}, {3});
  const Tensor d = f64({1, 2, 3, 4, 5, 6}, {2, 3}, false), d_m = f64({1, 2, 3, 4, 5, 6}, {3, 2}, false);
  Autocast autocast(low);
  REQUIRE(autocast_enabled());
  REQUIRE(autocast_dtype() == low);

  // LowerPrecision: the GEMMs, from f32 (and low-precision) inputs, in all three layouts.
  Tensor shared = matmul(batch32, m32);  // [batch, m, k] x [k, n]
  CHECK(shared.shape() == Shape{2, 2, 4});
  expect_dtype(low, {matmul(a32, m32), matmul(a, m32), matmul(a32, m32.to(low)), matmul(batch32, batch_b32), shared,
                     matmul(a32, b32, {.transpose_b = true})});

  for (const Tensor& x : {a32, a}) {
    INFO("input " << dtype_name(x.dtype()));
    // Float32: range, long sums, losses; f32 even when every input is low precision.
    expect_dtype(DType::F32, {exp(x), log(x), pow(x, 2.0), pow(x, x), softmax(x, 1), log_softmax(x, -1),
                              cross_entropy(x, labels), mse_loss(x, x), sum(x), sum(x, 0), mean(x), mean(x, 1, true),
                              binary_cross_entropy_with_logits(x, x)});
    // InputDtype: every unlisted op runs in its input's dtype, low or f32.
    expect_dtype(x.dtype(), {neg(x), relu(x), tanh(x), sigmoid(x), gelu(x), sqrt(x), abs(x), clamp(x, 0.6, 1.2), max(x),
                             max(x, 0), reshape(x, {3, 2}), transpose(x, 0, 1), permute(x, {1, 0}), slice(x, 1, 0, 2),
                             clone(x), broadcast_to(x, {4, 2, 3}), sum_to(x, {1, 3}), embedding(x, indices)});
    CHECK(argmax(x, 1).dtype() == DType::I32);
  }

  // Promote: the widest input wins (either order); two low-precision inputs stay low.
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  for (Binary binary : std::initializer_list<Binary>{mg::add, mg::sub, mg::mul, mg::div}) {
    expect_dtype(DType::F32, {binary(a32, b), binary(a, b32)});
    expect_dtype(low, {binary(a, b)});
  }
  expect_dtype(DType::F32, {where(mask, a32, b), cat({a, b32}, 0), stack({a32, b}, 0), mul(a32, 2.0)});
  expect_dtype(low, {where(mask, a, b), cat({a, b}, 1), stack({a, b}, 0)});
  // A floating mask follows the values: it selects, it does not widen the result.
  expect_dtype(low, {where(a32, a, b)});
  expect_dtype(DType::F32, {where(a, a32, b32)});
  // Scalar forms use the same policies as their tensor forms: one input, so nothing is promoted.
  expect_dtype(low, {add(a, 1.0), sub(a, 1.0), rsub(1.0, a), mul(a, 2.0), div(a, 2.0)});
  // s / x is a reciprocal, on the f32 list (1/x overflows f16 for |x| < 2^-16).
  expect_dtype(DType::F32, {rdiv(2.0, a), rdiv(2.0, a32)});

  // f64 and i32 are never cast, whatever the policy.
  expect_dtype(DType::F64, {matmul(d, d_m), exp(d), add(d, d), sum(d), cross_entropy(d, labels)});
  CHECK(cat({mask, mask}, 0).dtype() == DType::I32);

  // The other low-precision format does not mix with the region's, for any listed op.
  const DType other = low == DType::F16 ? DType::BF16 : DType::F16;
  const Tensor o = a32.to(other);
  check_error([&] { matmul(o, m32); }, "f16 and bf16 do not mix");
  check_error([&] { exp(o); }, "mg::exp under mg::Autocast");
  check_error([&] { add(o, b); }, "f16 and bf16 do not mix");
  check_error([&] { sum(o); }, "f16 and bf16 do not mix");
  CHECK(neg(o).dtype() == other);  // unlisted: runs in its input's dtype, nothing to mix

  // The banned op names its safe replacement.
  check_error([&] { binary_cross_entropy(a32, b32); }, "binary_cross_entropy_with_logits");
  check_error([&] { binary_cross_entropy(a32, b32); }, "mg::binary_cross_entropy is banned under mg::Autocast");
  clear_tape();
}

}  // namespace

TEST_CASE("autocast: the output dtype of every op under f16 and bf16") {
  SUBCASE("f16") { check_op_dtypes(DType::F16); }
  SUBCASE("bf16") { check_op_dtypes(DType::BF16); }
  CHECK_FALSE(autocast_enabled());
  // Outside a region nothing is cast (and the banned op works).
  Tensor a = uniform_in({2, 3}, DType::F32, 1);
  CHECK(matmul(a, uniform_in({3, 2}, DType::F32, 2)).dtype() == DType::F32);
  CHECK(exp(a.to(DType::F16)).dtype() == DType::F16);
  CHECK(binary_cross_entropy(mul(a, 0.5), mul(a, 0.5)).dtype() == DType::F32);
}

TEST_CASE("autocast: regions nest and restore the previous state") {
  Tensor a = uniform_in({2, 3}, DType::F32, 1), b = uniform_in({3, 2}, DType::F32, 2);
  CHECK_FALSE(autocast_enabled());
  CHECK(autocast_dtype() == DType::F16);  // the default outside any region
  {
    Autocast outer(DType::F16);
    CHECK(autocast_enabled());
    {
      Autocast off(DType::F16, false);
      CHECK_FALSE(autocast_enabled());
      CHECK(matmul(a, b).dtype() == DType::F32);
      {
        Autocast bf16(DType::BF16);  // re-enabled inside a disabled region
        CHECK(autocast_dtype() == DType::BF16);
        CHECK(matmul(a, b).dtype() == DType::BF16);
      }
      CHECK_FALSE(autocast_enabled());
    }
    CHECK(autocast_enabled());
    CHECK(matmul(a, b).dtype() == DType::F16);
    {
      Autocast inner(DType::BF16);
      CHECK(autocast_dtype() == DType::BF16);
      CHECK(matmul(a, b).dtype() == DType::BF16);
    }
    CHECK(autocast_dtype() == DType::F16);
    CHECK(matmul(a, b).dtype() == DType::F16);
    // An f32 region is refused and leaves the state as it was.
    check_error([] { Autocast f32(DType::F32); }, "Autocast");
    check_error([] { Autocast f64(DType::F64); }, "must be f16 or bf16");
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == DType::F16);
  }
  CHECK_FALSE(autocast_enabled());
  CHECK(autocast_dtype() == DType::F16);
  CHECK(matmul(a, b).dtype() == DType::F32);
  { Autocast disabled(DType::F32, false); }  // a disabled region may name any dtype
  clear_tape();
}

TEST_CASE("autocast: casts are recorded before the op; an f32 parameter gets an f32 gradient") {
  for (DType low : {DType::F16, DType::BF16}) {
    INFO("region dtype " << dtype_name(low));
    // Positive x and y: no cancellation, so the error stays relative. x and y are each rounded to
    // `low` once (0.5 eps each), and the f32-accumulated dW = x^T y (k = 8) is rounded once more
    // (0.5 eps): 1.5 eps, checked with 2 eps.
    Tensor x = uniform_in({8, 16}, DType::F32, 10), y = uniform_in({8, 4}, DType::F32, 11);
    Tensor w = uniform_in({16, 4}, DType::F32, 12, -1.0, 1.0).set_requires_grad(true);
    Tensor w_ref = w.detach().clone().set_requires_grad(true);
    backward(sum(mul(matmul(x, w_ref), y)));
    OpLog log;
    {
      Autocast autocast(low);
      Tensor out = matmul(x, w);
      CHECK(out.dtype() == low);
      CHECK(log.ops == std::vector<std::string>{"cast", "cast", "matmul"});  // x, then w, then the GEMM
      CHECK(tape_size() == 2);  // x needs no grad: only w's cast and the matmul are nodes
      Tensor loss = sum(mul(out, y));
      CHECK(loss.dtype() == DType::F32);
      backward(loss);  // inside the region: backward turns autocast off for itself
      CHECK(autocast_enabled());
    }
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == DType::F32);
    check_close(w.grad(), w_ref.grad(), tolerance(low, 2));
  }
}

TEST_CASE("autocast: backward runs with autocast off, even when called inside a region") {
  Tensor x = uniform_in({2, 2}, DType::F32, 1).set_requires_grad(true);
  bool enabled_in_backward = true;
  Autocast autocast(DType::F16);
  Tensor y = mul(x.detach(), 1.0);
  record("probe", {x}, y, [&](const Tensor& g, const auto&) {
    enabled_in_backward = autocast_enabled();
    return Grads{g};
  });
  Tensor loss = sum(y);  // f32 list
  backward(loss);
  CHECK_FALSE(enabled_in_backward);
  CHECK(autocast_enabled());
  check_values(x.grad(), {1, 1, 1, 1});
}

TEST_CASE("autocast: saved activations of an MLP take half the bytes under f16") {
  // Saved for backward: x, relu's input and matmul 2's input (f32: 4 bytes each; parameters are
  // not counted); under f16 the same in 2 bytes, plus the f16 copies of both weights.
  const std::size_t activations = 256 * 64 + 2 * 256 * 128, weights = 64 * 128 + 128 * 16;
  Tensor x = uniform_in({256, 64}, DType::F32, 1);
  Tensor w1 = uniform_in({64, 128}, DType::F32, 2, -0.1, 0.1).set_requires_grad(true);
  Tensor w2 = uniform_in({128, 16}, DType::F32, 3, -0.1, 0.1).set_requires_grad(true);
  auto forward = [&] { return mean(matmul(relu(matmul(x, w1)), w2)); };
  clear_tape();
  Tensor loss32 = forward();
  const std::size_t bytes32 = saved_tensor_bytes();
  clear_tape();
  std::size_t bytes16 = 0;
  {
    Autocast autocast(DType::F16);
    Tensor loss16 = forward();
    bytes16 = saved_tensor_bytes();
  }
  clear_tape();
  INFO("f32: " << bytes32 << " bytes, f16: " << bytes16 << " bytes");
  CHECK(bytes32 == 4 * activations);
  CHECK(bytes16 == 2 * activations + 2 * weights);
  CHECK(static_cast<double>(bytes16) < 0.6 * static_cast<double>(bytes32));
}

TEST_CASE("autocast: a parameter used in 64 matmuls is cast once; its gradient sums every use") {
  // x values are multiples of 1/8 in [1/8, 1]: every product, partial sum (<= 64) and total is
  // exact in f16, so the gradient is compared exactly.
  Tensor w = from_vector({0.5, -1, 2, 0.25, 1, -0.5}, {2, 3}, {.requires_grad = true});
  std::vector<Tensor> xs;
  std::vector<double> expected(6, 0.0);
  for (int i = 0; i < 64; ++i) {
    const double u = (i % 8 + 1) / 8.0, v = ((i * 3) % 8 + 1) / 8.0;
    xs.push_back(from_vector({u, v}, {1, 2}));
    for (int c = 0; c < 3; ++c) expected[c] += u, expected[3 + c] += v;
  }
  const CastCacheStats before = cast_cache_stats();
  {
    Autocast autocast(DType::F16);
    std::vector<Tensor> outs;
    for (const Tensor& x : xs) outs.push_back(matmul(x, w));
    const CastCacheStats after = cast_cache_stats();
    CHECK(after.misses - before.misses == 1);
    CHECK(after.hits - before.hits == 63);
    CHECK(after.entries == 1);  // the xs do not require grad: cast every time, never cached
    backward(sum(cat(outs, 0)));
  }
  CHECK(cast_cache_stats().entries == 0);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::F32);
  check_values(w.grad(), expected, 0.0, 0.0);
}

TEST_CASE("autocast: the cast cache lives as long as the outermost region") {
  Tensor x = uniform_in({2, 3}, DType::F32, 1);
  Tensor w = uniform_in({3, 2}, DType::F32, 2).set_requires_grad(true);
  {
    Autocast outer(DType::F16);
    matmul(x, w);
    CHECK(cast_cache_stats().entries == 1);
    {
      Autocast inner(DType::F16);
      const CastCacheStats before = cast_cache_stats();
      matmul(x, w);
      CHECK(cast_cache_stats().hits == before.hits + 1);
    }
    { Autocast off(DType::F16, false); }
    CHECK(cast_cache_stats().entries == 1);  // inner guards leave it alone
    {
      Autocast bf16(DType::BF16);
      CHECK(matmul(x, w).dtype() == DType::BF16);  // its own entry: the key includes the dtype
    }
    CHECK(cast_cache_stats().entries == 2);
  }
  CHECK(cast_cache_stats().entries == 0);
  {
    Autocast again(DType::F16);  // a new region starts empty: no hit from the last one
    const CastCacheStats before = cast_cache_stats();
    matmul(x, w);
    CHECK(cast_cache_stats().misses == before.misses + 1);
    CHECK(cast_cache_stats().hits == before.hits);
  }
  clear_tape();
}

TEST_CASE("autocast: a cast made under NoGradGuard never serves a grad-enabled use") {
  Tensor x = from_vector({1, 2}, {1, 2});
  Tensor w = from_vector({1, 2, 3, 4}, {2, 2}, {.requires_grad = true});
  Autocast autocast(DType::F16);
  const CastCacheStats before = cast_cache_stats();
  {
    NoGradGuard no_grad;
    Tensor eval = matmul(x, w);  // e.g. an evaluation pass inside the training region
    CHECK_FALSE(eval.requires_grad());
    matmul(x, w);  // a second no-grad use may reuse the no-grad cast
  }
  Tensor train = matmul(x, w);
  CHECK(train.requires_grad());
  const CastCacheStats after = cast_cache_stats();
  CHECK(after.misses - before.misses == 2);
  CHECK(after.hits - before.hits == 1);
  backward(sum(train));
  REQUIRE(w.grad().defined());
  check_values(w.grad(), {1, 1, 2, 2});  // dW = x^T ones
}

TEST_CASE("autocast: an in-place write to the weight invalidates its cached cast") {
  Tensor x = from_vector({1, 2}, {1, 2});
  Tensor w = from_vector({1, 2, 3, 4}, {2, 2}, {.requires_grad = true});
  Autocast autocast(DType::F16);
  Tensor first = matmul(x, w);
  check_values(first, {7, 10});
  {
    NoGradGuard no_grad;  // an optimizer step
    w.copy_(from_vector({-1, 0, 0.5, 2}, {2, 2}));
  }
  const CastCacheStats before = cast_cache_stats();
  Tensor second = matmul(x, w);
  CHECK(cast_cache_stats().misses == before.misses + 1);
  check_values(second, {0, 4});  // the new values, not the stale cast
  // A write through an alias of the same storage counts too.
  w.detach().copy_(from_vector({1, 1, 1, 1}, {2, 2}));
  check_values(matmul(x, w), {3, 3});
  backward(sum(second));
  check_values(w.grad(), {1, 1, 2, 2});
}

TEST_CASE("autocast: a backward between two forwards in one region does not reuse the cast") {
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor w = from_vector({1, -1, 0.5, 2}, {2, 2}, {.requires_grad = true});
  Autocast autocast(DType::F16);
  const CastCacheStats before = cast_cache_stats();
  backward(sum(matmul(x, w)));
  check_values(w.grad(), {4, 4, 6, 6});
  // The first cast's node went with the tape: reusing it would cut w off from the second graph.
  backward(sum(matmul(x, w)));
  check_values(w.grad(), {8, 8, 12, 12});
  const CastCacheStats after = cast_cache_stats();
  CHECK(after.misses - before.misses == 2);
  CHECK(after.hits == before.hits);
}

TEST_CASE("autocast: non-leaf tensors and tensors without grad are not cached") {
  Tensor x = uniform_in({2, 3}, DType::F32, 1);
  Tensor w = uniform_in({3, 2}, DType::F32, 2).set_requires_grad(true);
  Tensor frozen = uniform_in({3, 2}, DType::F32, 3);  // requires_grad = false
  Autocast autocast(DType::F16);
  Tensor scaled = mul(w, 2.0);  // f32, requires grad, not a leaf
  const CastCacheStats before = cast_cache_stats();
  for (int i = 0; i < 3; ++i) {
    CHECK(matmul(x, scaled).dtype() == DType::F16);
    CHECK(matmul(x, frozen).dtype() == DType::F16);
  }
  const CastCacheStats after = cast_cache_stats();
  CHECK(after.entries == 0);
  CHECK(after.hits == before.hits);
  CHECK(after.misses == before.misses);
  clear_tape();
}

// The tape: what is recorded and when, how backward walks it, how gradients accumulate and in which
// dtype, and that saved tensors are released as the walk goes.
#include <memory>
#include <thread>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// A custom op y = 2x whose backward holds `witness` (a stand-in for a saved tensor) and calls
// `on_backward` when it runs.
Tensor doubled(const Tensor& x, std::shared_ptr<int> witness, std::function<void()> on_backward = {}) {
  Tensor y = mul(x.detach(), 2.0);
  record("doubled", {x}, y, [witness, on_backward](const Tensor& g, const auto&) {
    if (on_backward) on_backward();
    return Grads{mul(g, 2.0)};
  });
  return y;
}

}  // namespace

TEST_CASE("tape: backward seeds 1 and fills .grad of leaves") {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor loss = sum(mul(x, x));  // d/dx = 2x
  CHECK(tape_size() == 2);
  backward(loss);
  check_values(x.grad(), {2, 4, 6});
  CHECK(tape_size() == 0);  // cleared
  CHECK(x.grad().dtype() == DType::F64);
}

TEST_CASE("tape: gradients accumulate over two backwards and over reuse") {
  Tensor x = f64({1, 2}, {2});
  backward(sum(mul(x, 3.0)));
  backward(sum(mul(x, 3.0)));
  check_values(x.grad(), {6, 6});
  x.zero_grad();
  // x used twice in one graph (a diamond): the two paths add.
  Tensor y = add(mul(x, 2.0), exp(x));
  backward(sum(y));
  check_values(x.grad(), {2 + std::exp(1.0), 2 + std::exp(2.0)});
  // keep_tape: the same graph twice.
  x.zero_grad();
  Tensor z = sum(mul(x, x));
  backward(z, {.keep_tape = true});
  backward(z);
  check_values(x.grad(), {4, 8});
}

TEST_CASE("tape: a second backward over a cleared tape is a clear error") {
  Tensor x = f64({1}, {1});
  Tensor y = sum(exp(x));
  backward(y);
  check_error([&] { backward(y); }, "no longer on the tape");
}

TEST_CASE("tape: NoGradGuard and inputs without grad record nothing") {
  Tensor x = f64({1, 2}, {2});
  {
    NoGradGuard no_grad;
    CHECK_FALSE(grad_enabled());
    Tensor y = exp(x);
    CHECK_FALSE(y.requires_grad());
    CHECK(tape_size() == 0);
    { NoGradGuard nested; }
    CHECK_FALSE(grad_enabled());  // restored to the outer guard's state
  }
  CHECK(grad_enabled());
  Tensor constant = f64({1, 2}, {2}, false);
  Tensor y = exp(mul(constant, 2.0));
  CHECK_FALSE(y.requires_grad());
  CHECK(tape_size() == 0);
  check_error([&] { backward(sum(y)); }, "does not require grad");
}

TEST_CASE("tape: each node's saved tensors are released as the walk reaches it") {
  auto first_saved = std::make_shared<int>(1);
  auto second_saved = std::make_shared<int>(2);
  std::weak_ptr<int> first_watch = first_saved, second_watch = second_saved;
  bool second_released_before_first_ran = false;
  Tensor x = f64({1, 2}, {2});
  // first runs last in backward; by then second's node (run first) must have let go of its tensor.
  Tensor a = doubled(x, std::move(first_saved), [&] { second_released_before_first_ran = second_watch.expired(); });
  Tensor b = doubled(a, std::move(second_saved));
  Tensor loss = sum(b);
  CHECK_FALSE(first_watch.expired());
  backward(loss);
  CHECK(second_released_before_first_ran);
  CHECK(first_watch.expired());
  check_values(x.grad(), {4, 4});
}

TEST_CASE("tape: a cast carries the gradient back in the source dtype") {
  Tensor w = from_vector({0.5, -1.0, 2.0}, {3}, {.requires_grad = true});  // f32 master
  Tensor w16 = cast(w, DType::F16);
  CHECK(w16.dtype() == DType::F16);
  Tensor loss = sum(mul(w16, w16));  // in f16
  CHECK(loss.dtype() == DType::F16);
  backward(loss);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::F32);
  check_values(w.grad(), {1.0, -2.0, 4.0});
  CHECK(cast(w, DType::F32).id() == w.id());  // a cast to the same dtype is the tensor itself
  clear_tape();
}

TEST_CASE("tape: f16 gradients meeting at one tensor are summed in f32 and rounded once") {
  // 256 uses of one f16 weight: each use sends x_i (exact in f16); the true sum is ~256, where an
  // f16 ulp is 0.25. Added in f16, 255 roundings drift by more than half an ulp; added in f32, the
  // sum is exact and rounded once, so it is within 0.5 ulp of the f64 sum.
  Generator generator(3);
  Tensor xs = uniform({256}, 0.5, 1.5, generator, {.dtype = DType::F16});
  std::vector<double> values = xs.to_vector<double>();
  double exact = 0.0;
  for (double v : values) exact += v;
  const double half_ulp = 0.5 * dtype_eps(DType::F16) * 256.0;  // ulp of f16 in [256, 512) is 2^-10 * 256
  Tensor w = ones({1}, {.dtype = DType::F16, .requires_grad = true});  // a leaf: the leaves' path
  Tensor w32 = ones({1}, {.requires_grad = true});
  Tensor loss = zeros({1}, {.dtype = DType::F16}), loss32 = zeros({1}, {.dtype = DType::F16});
  Tensor w16 = cast(w32, DType::F16);  // not a leaf: the pending path, then the cast back to f32
  for (std::int64_t i = 0; i < 256; ++i) {
    loss = add(loss, mul(w, slice(xs, 0, i, i + 1)));
    loss32 = add(loss32, mul(w16, slice(xs, 0, i, i + 1)));
  }
  backward(sum(add(loss, loss32)));
  CHECK(w.grad().dtype() == DType::F16);
  CHECK(std::fabs(w.grad().item() - exact) <= half_ulp);
  CHECK(std::fabs(w32.grad().item() - exact) <= half_ulp);
}

TEST_CASE("tape: a cast's backward receives the f32 sum of its uses, never an f16 overflow") {
  // 64 uses of one f16 cast of an f32 weight, each sending 2000: the sum, 128000, is past f16's
  // 65504 but fine in f32, and the cast converts it back to f32 anyway.
  Tensor w32 = ones({1}, {.requires_grad = true});
  Tensor w16 = cast(w32, DType::F16);
  Tensor x = full({1}, 2000.0, {.dtype = DType::F16});
  Tensor loss = zeros({1}, {.dtype = DType::F32});
  for (int i = 0; i < 64; ++i) loss = add(loss, cast(mul(w16, x), DType::F32));
  backward(sum(loss));
  CHECK(w32.grad().item() == 128000.0);
}

TEST_CASE("tape: leaf gradients own their memory") {
  Tensor a = f64({1, 2}, {2});
  Tensor b = f64({3, 4}, {2});
  backward(sum(add(a, b)));  // add's backward hands the same gradient to both
  CHECK_FALSE(a.grad().shares_storage_with(b.grad()));
  Tensor seed = f64({1, 1}, {2}, false);
  Tensor leaf = f64({0, 0}, {2});
  backward(leaf, seed);  // backward from a leaf: the seed is copied, not adopted
  CHECK_FALSE(leaf.grad().shares_storage_with(seed));
  check_values(leaf.grad(), {1, 1});
}

TEST_CASE("tape: backward with a seed gradient for a non-scalar output") {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y = mul(x, x);
  check_error([&] { backward(y); }, "pass a seed gradient");
  CHECK(tape_size() == 1);  // the failed call changed nothing
  backward(y, f64({1, 0, -1}, {3}, false));
  check_values(x.grad(), {2, 0, -6});
  check_error([&] { backward(mul(x, 1.0), f64({1}, {1}, false)); }, "must match the output");
  clear_tape();
}

TEST_CASE("tape: a backward that throws leaves every .grad as it was") {
  Tensor x = f64({1, 2}, {2});
  x.set_grad(f64({10, 20}, {2}, false));
  Tensor y = mul(x, 3.0);
  Tensor z = doubled(y, nullptr, [] { throw Error("custom op failed on purpose"); });
  check_error([&] { backward(sum(z)); }, "on purpose");
  check_values(x.grad(), {10, 20});
  CHECK(tape_size() == 0);
}

TEST_CASE("tape: a backward function returning a wrong shape is reported") {
  Tensor x = f64({1, 2}, {2});
  Tensor y = mul(x.detach(), 1.0);
  record("broken", {x}, y, [](const Tensor&, const auto&) { return Grads{f64({1}, {1}, false)}; });
  check_error([&] { backward(sum(y)); }, "backward of broken");
}

TEST_CASE("tape: each thread has its own tape") {
  Tensor x = f64({1}, {1});
  Tensor y = exp(x);
  std::size_t other_thread_tape = 99;
  std::thread worker([&] {
    Tensor z = exp(f64({1}, {1}));
    other_thread_tape = tape_size();
    clear_tape();
  });
  worker.join();
  CHECK(other_thread_tape == 1);
  CHECK(tape_size() == 1);
  clear_tape();
}

TEST_CASE("tape: gradcheck reports a wrong backward") {
  // A deliberately wrong op: forward x^2, backward claims 3x.
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor y = mul(in[0].detach(), in[0].detach());
    Tensor x = in[0];
    record("wrong_square", {x}, y, [x](const Tensor& g, const auto&) { return Grads{mul(g, mul(x, 3.0))}; });
    return y;
  };
  GradcheckResult result = gradcheck("wrong_square", wrong, {f64({0.5, 1.5}, {2})});
  CHECK_FALSE(result.passed);
  CHECK(result.report.find("gradcheck wrong_square: input 0") != std::string::npos);
  CHECK(result.report.find("above tolerance") != std::string::npos);
  CHECK(result.max_error > 0.1);
}

TEST_CASE("tape: a gradient that reaches a tensor whose op is gone is an error, not a silent zero") {
  Tensor w = f64({1, 2}, {2});
  Tensor h = mul(w, 3.0);
  backward(sum(h));  // clears the tape: h's node is gone
  check_values(w.grad(), {3, 3});
  // Without the check, w would silently receive nothing from this second graph.
  check_error([&] { backward(sum(mul(h, h))); }, "no longer on the tape");
  check_values(w.grad(), {3, 3});  // untouched
  CHECK(tape_size() == 0);
  // detach() is the way to use h as a constant.
  Tensor z = mul(h.detach(), w);
  backward(sum(z));
  check_values(w.grad(), {3 + 3, 3 + 6});
}

TEST_CASE("tape: a tensor saved for backward and then modified in place is refused") {
  Tensor w = f64({1, 2}, {2});
  Tensor x = f64({10, 20}, {2}, false);
  Tensor y = sum(mul(w, x));  // mul saves x for w's gradient
  {
    NoGradGuard no_grad;
    x.copy_(f64({-1, -1}, {2}, false));  // e.g. a data loader reusing its batch tensor
  }
  check_error([&] { backward(y); }, "backward of mul: a tensor it saved for backward ([2] f64) was modified in place");
  CHECK_FALSE(w.grad().defined());
  // Writing into a tensor that no recorded op saved is fine.
  Tensor a = f64({1, 2}, {2});
  Tensor unused = f64({5, 5}, {2}, false);
  Tensor loss = sum(mul(a, 2.0));
  {
    NoGradGuard no_grad;
    unused.copy_(f64({0, 0}, {2}, false));
  }
  backward(loss);
  check_values(a.grad(), {2, 2});
}

TEST_CASE("tape: gradcheck needs leaves and a defined output") {
  Tensor leaf = f64({1, 2}, {2});
  Tensor made = mul(leaf, 2.0);
  check_error([&] { gradcheck("x", [](const std::vector<Tensor>& in) { return exp(in[0]); }, {made}); },
              "gradcheck x: input 0 requires grad, so it must be an f64 CPU leaf");
  check_error([&] { gradcheck("y", [](const std::vector<Tensor>&) { return Tensor(); }, {leaf}); },
              "returned an undefined tensor");
  clear_tape();
}

namespace {

// Records each leaf it is shown, with its .grad at that moment and how many nodes were still to run.
struct ReadyLog : GradReadyHook {
  struct Entry {
    std::uint64_t id;
    std::vector<double> grad;
  };
  std::vector<Entry> seen;
  void ready(const Tensor& leaf) override { seen.push_back({leaf.id(), leaf.grad().to_vector<double>()}); }
};

}  // namespace

TEST_CASE("tape: a gradient-ready hook sees each leaf once, when its gradient is complete, last layer first") {
  // loss = sum((w2 * tanh(w1 * x)) + w1): w1 is used twice, by the first node and by the last add.
  Tensor x = f64({0.5, -1}, {2}, false);
  Tensor w1 = f64({2, 3}, {2});
  Tensor w2 = f64({-1, 4}, {2});
  Tensor unused = f64({7, 7}, {2});
  Tensor hidden = tanh(mul(w1, x));
  Tensor loss = sum(add(mul(w2, hidden), w1));
  ReadyLog log;
  add_grad_ready_hook(&log);
  backward(loss);
  remove_grad_ready_hook(&log);
  // w2's last use comes after w1's first: it is complete first. w1 is reported once, with both of its
  // contributions summed; a leaf that got no gradient is not reported.
  REQUIRE(log.seen.size() == 2);
  CHECK(log.seen[0].id == w2.id());
  CHECK(log.seen[1].id == w1.id());
  const std::vector<double> t{std::tanh(1.0), std::tanh(-3.0)};
  CHECK(log.seen[0].grad == std::vector<double>{t[0], t[1]});
  const std::vector<double> w1_grad{-1 * (1 - t[0] * t[0]) * 0.5 + 1, 4 * (1 - t[1] * t[1]) * -1 + 1};
  check_values(w1.grad(), w1_grad);
  CHECK(log.seen[1].grad == w1.grad().to_vector<double>());  // complete when reported
  CHECK_FALSE(unused.grad().defined());
  // Removed: the next backward reports nothing.
  backward(sum(mul(w2, 2.0)));
  CHECK(log.seen.size() == 2);
}

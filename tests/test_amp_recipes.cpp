// amp::Recipe (parse, cast_parameters, make_optimizer, make_scaler), amp::MasterWeights and
// amp::memory_report, and the paper's numerical claims: f32 master weights keep updates that f16
// weights lose, one float16_master step equals an fp32 step up to f16 rounding, and loss scaling
// rescues gradients below f16's smallest subnormal.
#include <cmath>
#include <memory>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

amp::MasterWeights::MakeOptimizer make_sgd(optim::SgdOptions options) {
  return [options](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), options); };
}

double to_f16(double x) { return from_vector({x}, {1}, {.dtype = DType::F16}).item(); }

}  // namespace

TEST_CASE("recipes: parse knows the six recipes and their fields") {
  using enum amp::LossScaling;
  struct Expected {
    const char* name;
    DType parameters;
    std::optional<DType> autocast;
    bool master;
    amp::LossScaling scaling;
  };
  const std::vector<Expected> table{
      {"fp32", DType::F32, std::nullopt, false, None},
      {"mixed_float16", DType::F32, DType::F16, false, Dynamic},
      {"mixed_bfloat16", DType::F32, DType::BF16, false, None},
      {"float16_master", DType::F16, DType::F16, true, Dynamic},
      {"float16_pure", DType::F16, DType::F16, false, None},
      {"bfloat16_pure", DType::BF16, DType::BF16, false, None},
  };
  REQUIRE(amp::Recipe::names().size() == table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Expected& e = table[i];
    INFO(e.name);
    CHECK(amp::Recipe::names()[i] == e.name);
    const amp::Recipe r = amp::Recipe::parse(e.name);
    CHECK(r.name == e.name);
    CHECK(r.parameter_dtype == e.parameters);
    CHECK(r.autocast_dtype == e.autocast);
    CHECK(r.master_weights == e.master);
    CHECK(r.loss_scaling == e.scaling);
    CHECK(r.describe().find(e.name) != std::string::npos);
    amp::Autocast region = r.autocast();
    CHECK(amp::autocast_enabled() == e.autocast.has_value());
    if (e.autocast) CHECK(amp::autocast_dtype() == *e.autocast);
  }
  CHECK_FALSE(amp::autocast_enabled());
  try {
    amp::Recipe::parse("fp16");
    FAIL("parse accepted an unknown name");
  } catch (const Error& error) {
    const std::string message = error.what();
    CHECK(message.find("unknown precision recipe 'fp16'") != std::string::npos);
    for (const std::string& name : amp::Recipe::names()) CHECK(message.find(name) != std::string::npos);
  }
}

TEST_CASE("recipes: cast_parameters converts storage in place; make_optimizer checks the dtype") {
  Tensor p = from_vector({0.1, 1.0 / 3.0, 2.0}, {3}, {.requires_grad = true});
  p.set_grad(ones({3}));
  Tensor alias = p;  // another holder of the same parameter
  const std::uint64_t id = p.id();
  const amp::Recipe master = amp::Recipe::parse("float16_master");
  check_error([&] { master.make_optimizer({p}, make_sgd({})); }, "call recipe.cast_parameters(parameters) first");
  master.cast_parameters({p});
  CHECK(alias.dtype() == DType::F16);
  CHECK(alias.id() == id);
  CHECK(alias.requires_grad());
  CHECK_FALSE(alias.grad().defined());  // the f32 grad no longer fits
  check_values(alias, {to_f16(0.1), to_f16(1.0 / 3.0), 2.0}, 0.0, 0.0);
  auto opt = master.make_optimizer({p}, make_sgd({.lr = 0.1}));
  CHECK(dynamic_cast<amp::MasterWeights*>(opt.get()) != nullptr);
  // Already in the right dtype: nothing happens.
  Tensor before = p.detach();
  amp::Recipe::parse("float16_pure").cast_parameters({p});
  CHECK(p.shares_storage_with(before));
  auto pure = amp::Recipe::parse("float16_pure").make_optimizer({p}, make_sgd({}));
  CHECK(dynamic_cast<optim::SGD*>(pure.get()) != nullptr);  // no master copy
  check_error([&] { amp::Recipe::parse("mixed_float16").make_optimizer({p}, make_sgd({})); }, "mixed_float16");
  check_error([&] { master.make_optimizer({p}, {}); }, "make_optimizer is empty");
  amp::Recipe::parse("bfloat16_pure").cast_parameters({p});
  CHECK(alias.dtype() == DType::BF16);
  check_values(alias, {0.10009765625, 0.333984375, 2.0}, 0.0, 0.0);  // f16 values rounded to 8 bits
  Tensor leaf = from_vector({1.0}, {1}, {.requires_grad = true});
  check_error([&] { master.cast_parameters({mul(leaf, 2.0)}); }, "every parameter must be a floating leaf");
  clear_tape();
  Tensor f32 = from_vector({1.0}, {1}, {.requires_grad = true});
  auto plain = amp::Recipe::parse("fp32").make_optimizer({f32}, make_sgd({}));
  CHECK(dynamic_cast<optim::SGD*>(plain.get()) != nullptr);
  // A graph that saved a parameter before its storage was replaced refuses backward.
  Tensor w = from_vector({2.0}, {1}, {.requires_grad = true});
  Tensor loss = sum(mul(w, w));
  master.cast_parameters({w});
  check_error([&] { backward(loss); }, "storage replaced");
}

TEST_CASE("recipes: make_scaler is dynamic, static or disabled per recipe") {
  for (const std::string& name : amp::Recipe::names()) {
    INFO(name);
    const amp::Recipe r = amp::Recipe::parse(name);
    amp::GradScaler scaler = r.make_scaler({.growth_interval = 7});
    const bool scaled = name == "mixed_float16" || name == "float16_master";
    CHECK(scaler.is_enabled() == scaled);
    if (scaled) CHECK(scaler.options().dynamic);
    CHECK(scaler.options().growth_interval == 7);
    CHECK(scaler.get_scale() == 65536.0);
  }
  amp::Recipe fixed = amp::Recipe::parse("float16_master");
  fixed.loss_scaling = amp::LossScaling::Static;
  fixed.static_scale = 512;
  amp::GradScaler scaler = fixed.make_scaler();
  CHECK(scaler.is_enabled());
  CHECK_FALSE(scaler.options().dynamic);
  CHECK(scaler.get_scale() == 512.0);
}

TEST_CASE("recipes: float16_master keeps updates of 2^-12 that float16_pure loses") {
  const double update = std::ldexp(1.0, -12);  // below half of f16's spacing at 1.0 (2^-11)
  // float16_master: f16 parameter, f32 master, dynamic loss scale (gradients arrive scaled by S).
  const amp::Recipe master = amp::Recipe::parse("float16_master");
  Tensor w = ones({4}, {.requires_grad = true});
  master.cast_parameters({w});
  auto opt = master.make_optimizer({w}, make_sgd({.lr = 1.0}));
  auto& mw = dynamic_cast<amp::MasterWeights&>(*opt);
  amp::GradScaler scaler = master.make_scaler();
  for (int k = 1; k <= 16; ++k) {
    INFO("step " << k);
    opt->zero_grad();
    w.set_grad(full({4}, update * scaler.get_scale(), {.dtype = DType::F16}));  // 16: exact in f16
    REQUIRE(scaler.step(*opt));
    scaler.update();
    const double m = 1.0 - k * update;  // exact in f32
    check_values(mw.master_parameters()[0], std::vector<double>(4, m), 0.0, 0.0);
    check_values(w, std::vector<double>(4, to_f16(m)), 0.0, 0.0);  // the f16 copy: round(master)
    CHECK(amp::lost_update_fraction(*opt) == 0.0);                  // counted in the masters
  }
  check_values(w, std::vector<double>(4, 1.0 - std::ldexp(1.0, -8)), 0.0, 0.0);  // the copy moved too

  // float16_pure: the same updates, rounded straight into f16, all vanish.
  const amp::Recipe pure = amp::Recipe::parse("float16_pure");
  Tensor v = ones({4}, {.requires_grad = true});
  pure.cast_parameters({v});
  auto sgd = pure.make_optimizer({v}, make_sgd({.lr = 1.0}));
  amp::GradScaler off = pure.make_scaler();
  for (int k = 1; k <= 16; ++k) {
    v.set_grad(full({4}, update, {.dtype = DType::F16}));
    CHECK(off.step(*sgd));
    off.update();
    CHECK(amp::lost_update_fraction(*sgd) == 1.0);
  }
  check_values(v, {1, 1, 1, 1}, 0.0, 0.0);
}

TEST_CASE("recipes: one float16_master step equals one fp32 step up to f16 rounding of the forward") {
  const std::int64_t n = 8, in = 4, out = 3;
  const double lr = 0.1;
  Generator gen(3);
  Tensor x = uniform({n, in}, -1, 1, gen), target = uniform({n, out}, -1, 1, gen);
  const std::vector<double> init = uniform({in, out}, -0.5, 0.5, gen, {.dtype = DType::F16}).to_vector<double>();
  // fp32
  Tensor w32 = from_vector(init, {in, out}, {.requires_grad = true});
  optim::SGD sgd({w32}, {.lr = lr});
  backward(mse_loss(matmul(x, w32), target));
  sgd.step();
  // float16_master: same (f16-representable) init, forward under f16 autocast, scaled backward.
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Tensor w16 = from_vector(init, {in, out}, {.requires_grad = true});
  recipe.cast_parameters({w16});
  check_values(w16, init, 0.0, 0.0);
  auto opt = recipe.make_optimizer({w16}, make_sgd({.lr = lr}));
  amp::GradScaler scaler = recipe.make_scaler({.init_scale = 1024});  // x^T dy * S stays below 65504
  Tensor loss;
  {
    amp::Autocast region = recipe.autocast();
    loss = mse_loss(matmul(x, w16), target);
  }
  CHECK(loss.dtype() == DType::F32);
  backward(scaler.scale(loss));
  REQUIRE(scaler.step(*opt));
  scaler.update();
  const Tensor master = dynamic_cast<amp::MasterWeights&>(*opt).master_parameters()[0];
  // Bound on the gradient error, in f64: with r = y - t and dW = 2/(n*out) x^T r, the f16 path
  // rounds x, y = xW, dL/dy and dW once each (0.5 eps16 each); propagated through the sums that is
  // <= 1.5 eps16 * (2/(n*out)) * sum_n |x| (|r| + |y| + |x||W|); factor 2 covers second-order terms.
  const std::vector<double> xv = x.to_vector<double>(), tv = target.to_vector<double>();
  const std::vector<double> got = master.to_vector<double>(), want = w32.to_vector<double>();
  for (std::int64_t i = 0; i < in; ++i) {
    for (std::int64_t j = 0; j < out; ++j) {
      double bound = 0.0;
      for (std::int64_t r = 0; r < n; ++r) {
        double y = 0.0, xw = 0.0;
        for (std::int64_t k = 0; k < in; ++k) {
          y += xv[r * in + k] * init[k * out + j];
          xw += std::fabs(xv[r * in + k] * init[k * out + j]);
        }
        bound += std::fabs(xv[r * in + i]) * (std::fabs(y - tv[r * out + j]) + std::fabs(y) + xw);
      }
      bound *= lr * tolerance(DType::F16, 2.0) * 2.0 / static_cast<double>(n * out);
      const std::size_t e = static_cast<std::size_t>(i * out + j);
      INFO("element " << e << ": master " << got[e] << ", fp32 " << want[e] << ", bound " << bound);
      CHECK(std::fabs(got[e] - want[e]) <= bound + 4 * dtype_eps(DType::F32));
      CHECK(std::fabs(want[e] - init[e]) > 10 * bound);  // the step is far larger than the tolerance
    }
  }
  check_close(w16, master.to(DType::F16), 0.0);  // the f16 copy is round(master)
}

TEST_CASE("recipes: a gradient below 2^-25 vanishes in f16 and survives a static loss scale of 2^10") {
  // loss = w * a * b in f16 with w = 1: dloss/dw = a * b ~ 0.78 * 2^-25, below half of f16's smallest
  // subnormal (2^-24), so it rounds to zero. Scaled by 2^10 it is ~0.78 * 2^-15, a subnormal with spacing 2^-24.
  Tensor a = full({1}, 0.6 * std::ldexp(1.0, -11), {.dtype = DType::F16});
  Tensor b = full({1}, 1.3 * std::ldexp(1.0, -14), {.dtype = DType::F16});
  const double truth = a.item() * b.item();  // f64 product of the f16 constants
  REQUIRE(truth < std::ldexp(1.0, -25));
  REQUIRE(truth > std::ldexp(1.0, -26));
  Tensor w = ones({1}, {.dtype = DType::F16, .requires_grad = true});
  backward(sum(mul(mul(w, a), b)));
  CHECK(w.grad().item() == 0.0);  // exactly zero: the update is gone

  amp::Recipe recipe = amp::Recipe::parse("float16_master");
  recipe.loss_scaling = amp::LossScaling::Static;  // the paper's constant S
  recipe.static_scale = 1024;
  Tensor w2 = ones({1}, {.requires_grad = true});
  recipe.cast_parameters({w2});
  auto opt = recipe.make_optimizer({w2}, make_sgd({.lr = 1.0}));
  amp::GradScaler scaler = recipe.make_scaler();
  backward(scaler.scale(sum(mul(mul(w2, a), b))));
  CHECK(w2.grad().item() != 0.0);
  scaler.unscale_(*opt);
  const Tensor master_grad = dynamic_cast<amp::MasterWeights&>(*opt).master_parameters()[0].grad();
  REQUIRE(master_grad.defined());
  CHECK(master_grad.dtype() == DType::F32);
  // S*b is exact (a power-of-two shift of a normal number); S*a*b rounds once into the subnormal
  // range: error <= 2^-25 / (0.78 * 2^-15) = 1.28 eps16 relative; unscaling in f32 is exact.
  check_values(master_grad, {truth}, tolerance(DType::F16, 1.5), 0.0);
  CHECK(scaler.step(*opt));
  scaler.update();
}

TEST_CASE("recipes: MasterWeights updates f32 leaves and refreshes the f16 copy as round(master)") {
  Generator gen(11);
  std::vector<Tensor> params{uniform({64}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true),
                             uniform({3, 5}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true),
                             uniform({2}, -1, 1, gen, {.dtype = DType::F16}).set_requires_grad(true)};
  const optim::SgdOptions options{.lr = 0.37, .momentum = 0.9, .weight_decay = 0.01};
  amp::MasterWeights mw(params, make_sgd(options));
  // The same SGD on f32 copies must give the masters bit for bit.
  std::vector<Tensor> twins;
  for (const Tensor& p : params) twins.push_back(p.to(DType::F32).detach().set_requires_grad(true));
  optim::SGD twin(twins, options);
  REQUIRE(mw.master_parameters().size() == 3);
  CHECK(mw.master_bytes() == (64 + 15 + 2) * 4);
  for (std::size_t i = 0; i < 3; ++i) {
    const Tensor& m = mw.master_parameters()[i];
    CHECK(m.dtype() == DType::F32);
    CHECK(m.is_leaf());
    CHECK(m.requires_grad());
    CHECK_FALSE(m.shares_storage_with(params[i]));
    check_close(m, params[i], 0.0);
  }
  const std::vector<double> untouched = params[2].to_vector<double>();
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < 2; ++i) {  // parameter 2 never gets a gradient
      Tensor g = uniform(params[i].shape(), -1, 1, gen, {.dtype = DType::F16});
      params[i].set_grad(g);
      twins[i].set_grad(g.to(DType::F32));
    }
    const std::vector<double> old = params[0].to_vector<double>();
    mw.step();
    twin.step();
    CHECK(mw.step_count() == step + 1);
    for (std::size_t i = 0; i < 3; ++i) {
      check_close(mw.master_parameters()[i], twins[i], 0.0);
      check_close(params[i], mw.master_parameters()[i].to(DType::F16), 0.0);
    }
    CHECK(params[0].to_vector<double>() != old);
    CHECK(params[2].to_vector<double>() == untouched);
    CHECK_FALSE(mw.master_parameters()[2].grad().defined());
  }
  CHECK(mw.state().size() == 2);  // momentum buffers of the two updated masters, in f32
  CHECK(mw.state()[0].dtype() == DType::F32);
  mw.zero_grad();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK_FALSE(params[i].grad().defined());
    CHECK_FALSE(mw.master_parameters()[i].grad().defined());
  }
  // The refresh is an in-place write: a graph that saved the f16 parameter refuses backward.
  Tensor y = sum(mul(params[0], params[0]));
  params[0].set_grad(zeros({64}, {.dtype = DType::F16}));
  mw.step();
  check_error([&] { backward(y); }, "modified in place");
  check_error([] { amp::MasterWeights({ones({2}, {.requires_grad = true})}, make_sgd({})); },
              "master weights are for models stored in f16 or bf16");
}

TEST_CASE("recipes: an overflow under float16_master is skipped; masters, f16 copies and state unchanged") {
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Tensor w1 = from_vector({0.5, -0.25, 1.0}, {3}, {.requires_grad = true});
  Tensor w2 = from_vector({2.0, -1.0}, {2}, {.requires_grad = true});
  recipe.cast_parameters({w1, w2});
  auto opt = recipe.make_optimizer({w1, w2}, make_sgd({.lr = 0.5, .momentum = 0.9}));
  auto& mw = dynamic_cast<amp::MasterWeights&>(*opt);
  amp::GradScaler scaler = recipe.make_scaler();
  auto grads = [&](double second) {
    opt->zero_grad();
    w1.set_grad(full({3}, 0.25 * scaler.get_scale(), {.dtype = DType::F16}));  // 16384: finite in f16
    w2.set_grad(from_vector({0.5 * scaler.get_scale(), second}, {2}, {.dtype = DType::F16}));
  };
  grads(1.0);
  REQUIRE(scaler.step(*opt));
  scaler.update();
  auto values = [&] {
    std::vector<std::vector<double>> all;
    for (const Tensor& t : {w1, w2, mw.master_parameters()[0], mw.master_parameters()[1]})
      all.push_back(t.to_vector<double>());
    for (const Tensor& t : opt->state()) all.push_back(t.to_vector<double>());
    return all;
  };
  const auto before = values();
  REQUIRE(before.size() == 6);  // 2 f16 params, 2 masters, 2 momentum buffers
  for (double bad : {INFINITY, NAN}) {
    grads(bad);
    CHECK_FALSE(scaler.step(*opt));
    scaler.update();
    CHECK(scaler.nonfinite_parameters() == std::vector<std::size_t>{1});
    CHECK(values() == before);
    CHECK(opt->step_count() == 1);
  }
  CHECK(scaler.get_scale() == 65536.0 / 4);
  grads(1.0);
  CHECK(scaler.step(*opt));
  scaler.update();
  check_values(mw.master_parameters()[0], {0.5 - 0.5 * 0.25 * 2.9, -0.25 - 0.5 * 0.25 * 2.9, 1.0 - 0.5 * 0.25 * 2.9},
               4 * dtype_eps(DType::F32));  // two momentum steps of g = 0.25: lr * (0.25 + (0.9 * 0.25 + 0.25))
}

TEST_CASE("recipes: after a skipped step, MasterWeights::step converts the new gradients, not the stale ones") {
  // Regression: the scaler's unscale_ filled the master gradients (with inf) and the skipped step
  // never consumed them; a later direct step() reused them and wrote -inf into the weights.
  Tensor w = ones({1}, {.dtype = DType::F16, .requires_grad = true});
  amp::MasterWeights mw({w}, make_sgd({.lr = 1.0}));
  amp::GradScaler scaler;
  w.set_grad(full({1}, INFINITY, {.dtype = DType::F16}));
  CHECK_FALSE(scaler.step(mw));
  scaler.update();
  w.set_grad(full({1}, 0.5, {.dtype = DType::F16}));  // new gradients, no scaler this time
  mw.step();
  CHECK(mw.master_parameters()[0].item() == 0.5);
  CHECK(w.item() == 0.5);
  // The ordinary path still uses what unscale_ produced (and what a user clipped in the masters).
  w.set_grad(full({1}, 0.25 * scaler.get_scale(), {.dtype = DType::F16}));
  scaler.unscale_(mw);
  mw.master_parameters()[0].grad().copy_(full({1}, 0.125));
  CHECK(scaler.step(mw));
  scaler.update();
  CHECK(mw.master_parameters()[0].item() == 0.375);
}

TEST_CASE("recipes: memory_report counts bytes exactly and autocast halves saved activations") {
  // float16_master with Adam over two weights (128 + 64 = 192 elements).
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Generator gen(5);
  Tensor w1 = uniform({8, 16}, -0.3, 0.3, gen).set_requires_grad(true);
  Tensor w2 = uniform({16, 4}, -0.3, 0.3, gen).set_requires_grad(true);
  recipe.cast_parameters({w1, w2});
  auto opt = recipe.make_optimizer({w1, w2}, [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-3});
  });
  amp::MemoryReport before = amp::memory_report(*opt);
  CHECK(before.parameters == 192 * 2);
  CHECK(before.master_weights == 192 * 4);
  CHECK(before.gradients == 0);
  CHECK(before.optimizer_state == 0);
  Tensor x = uniform({32, 8}, -1, 1, gen), t = uniform({32, 4}, -1, 1, gen);
  amp::GradScaler scaler = recipe.make_scaler({.init_scale = 256});
  Tensor loss;
  {
    amp::Autocast region = recipe.autocast();
    loss = mse_loss(matmul(relu(matmul(x, w1)), w2), t);
  }
  CHECK(amp::memory_report(*opt).saved_activations > 0);
  backward(scaler.scale(loss));
  REQUIRE(scaler.step(*opt));
  scaler.update();
  amp::MemoryReport after = amp::memory_report(*opt);
  CHECK(after.parameters == 192 * 2);
  CHECK(after.master_weights == 192 * 4);
  CHECK(after.gradients == 192 * 2 + 192 * 4);  // f16 model gradients + f32 master gradients
  CHECK(after.optimizer_state == 2 * 192 * 4);   // Adam's two f32 moments per master
  CHECK(after.saved_activations == 0);           // backward released the tape
  CHECK(after.total() == 384 + 768 + 1152 + 1536);

  // The same forward in fp32 and under mixed_float16: f16 activations take less memory.
  Tensor v1 = uniform({8, 16}, -0.3, 0.3, gen).set_requires_grad(true);
  Tensor v2 = uniform({16, 4}, -0.3, 0.3, gen).set_requires_grad(true);
  optim::SGD sgd({v1, v2});
  auto saved = [&](const char* name) {
    const amp::Recipe r = amp::Recipe::parse(name);
    amp::Autocast region = r.autocast();
    Tensor l = mse_loss(matmul(relu(matmul(x, v1)), v2), t);
    const amp::MemoryReport report = amp::memory_report(sgd);
    CHECK(report.parameters == 192 * 4);
    CHECK(report.master_weights == 0);
    clear_tape();
    return report.saved_activations;
  };
  const std::size_t fp32 = saved("fp32"), mixed = saved("mixed_float16");
  INFO("fp32 saves " << fp32 << " bytes, mixed_float16 " << mixed);
  CHECK(mixed > 0);
  CHECK(mixed < fp32);
}

// amp::Recipe (parse, cast_parameters, master_weights, make_scaler) and amp::memory_report.
// The numerics of the recipes (master weights, loss scaling) are in test_optim_master.cpp.
#include <cmath>
#include <memory>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("recipes: parse knows every recipe and its fields") {
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
      {"fp8_delayed", DType::F32, DType::BF16, false, None},
      {"fp8_current", DType::F32, DType::BF16, false, None},
      {"fp8_block", DType::F32, DType::BF16, false, None},
      {"mxfp8", DType::F32, DType::BF16, false, None},
      {"nvfp4", DType::F32, DType::BF16, false, None},
      {"mxfp4", DType::F32, DType::BF16, false, None},
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
    Autocast region = r.autocast();
    CHECK(autocast_enabled() == e.autocast.has_value());
    if (e.autocast) CHECK(autocast_dtype() == *e.autocast);
    // The FP8 and FP4 recipes open an FP8 region beside autocast (autograd/fp8.h), with their scaling.
    const std::string name = e.name;
    CHECK((fp8_autocast_options() != nullptr) ==
          (name.find("fp8") != std::string::npos || name.find("fp4") != std::string::npos));
    CHECK(r.fp8.has_value() == (fp8_autocast_options() != nullptr));
  }
  CHECK(fp8_autocast_options() == nullptr);
  CHECK(amp::Recipe::parse("fp8_delayed").fp8->scaling == Fp8Scaling::Delayed);
  CHECK(amp::Recipe::parse("fp8_delayed").fp8->backward_format == DType::E5M2);  // the hybrid
  CHECK(amp::Recipe::parse("fp8_block").fp8->backward_format == DType::E4M3);  // DeepSeek-V3
  CHECK(amp::Recipe::parse("mxfp8").fp8->scaling == Fp8Scaling::Mx);
  CHECK(amp::Recipe::parse("nvfp4").fp8->scaling == Fp8Scaling::Nvfp4);
  CHECK(amp::Recipe::parse("mxfp4").fp8->scaling == Fp8Scaling::Mxfp4);
  CHECK_FALSE(autocast_enabled());
  try {
    amp::Recipe::parse("fp16");
    FAIL("parse accepted an unknown name");
  } catch (const Error& error) {
    const std::string message = error.what();
    CHECK(message.find("unknown precision recipe 'fp16'") != std::string::npos);
    for (const std::string& name : amp::Recipe::names()) CHECK(message.find(name) != std::string::npos);
  }
}

TEST_CASE("recipes: cast_parameters converts storage in place; master_weights gives f16 parameters f32 masters") {
  Tensor p = from_vector({0.1, 1.0 / 3.0, 2.0}, {3}, {.requires_grad = true});
  p.set_grad(ones({3}));
  Tensor alias = p;  // another holder of the same parameter
  const std::uint64_t id = p.id();
  const amp::Recipe master = amp::Recipe::parse("float16_master");
  CHECK(master.master_weights);
  master.cast_parameters({p});
  CHECK(alias.dtype() == DType::F16);
  CHECK(alias.id() == id);
  CHECK(alias.requires_grad());
  CHECK_FALSE(alias.grad().defined());  // the f32 grad no longer fits
  check_values(alias, {to_f16(0.1), to_f16(1.0 / 3.0), 2.0}, 0.0, 0.0);
  optim::SGD opt({p}, {.lr = 0.1, .master_weights = master.master_weights});
  CHECK(opt.master(0).dtype() == DType::F32);
  // Already in the right dtype: nothing happens.
  Tensor before = p.detach();
  amp::Recipe::parse("float16_pure").cast_parameters({p});
  CHECK(p.shares_storage_with(before));
  const amp::Recipe pure_recipe = amp::Recipe::parse("float16_pure");
  optim::SGD pure({p}, {.master_weights = pure_recipe.master_weights});
  CHECK_FALSE(pure.master(0).defined());  // no master copy
  amp::Recipe::parse("bfloat16_pure").cast_parameters({p});
  CHECK(alias.dtype() == DType::BF16);
  check_values(alias, {0.10009765625, 0.333984375, 2.0}, 0.0, 0.0);  // f16 values rounded to 8 bits
  Tensor leaf = from_vector({1.0}, {1}, {.requires_grad = true});
  check_error([&] { master.cast_parameters({mul(leaf, 2.0)}); }, "every parameter must be a floating leaf");
  clear_tape();
  Tensor f32 = from_vector({1.0}, {1}, {.requires_grad = true});
  for (const char* name : {"fp32", "mixed_float16", "mixed_bfloat16", "float16_pure", "bfloat16_pure"})
    CHECK_FALSE(amp::Recipe::parse(name).master_weights);  // f32 parameters are their own masters
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
    amp::GradScaler scaler = r.make_scaler({.rule = {.growth_interval = 7}});
    const bool scaled = name == "mixed_float16" || name == "float16_master";
    CHECK(scaler.is_enabled() == scaled);
    if (scaled) CHECK(scaler.options().dynamic);
    CHECK(scaler.options().rule.growth_interval == 7);
    CHECK(scaler.get_scale() == (scaled ? 65536.0 : 1.0));  // 1 when disabled, as PyTorch
  }
  amp::Recipe fixed = amp::Recipe::parse("float16_master");
  fixed.loss_scaling = amp::LossScaling::Static;
  fixed.static_scale = 512;
  amp::GradScaler scaler = fixed.make_scaler();
  CHECK(scaler.is_enabled());
  CHECK_FALSE(scaler.options().dynamic);
  CHECK(scaler.get_scale() == 512.0);
}

TEST_CASE("recipes: memory_report counts bytes exactly and autocast halves saved activations") {
  // float16_master with Adam over two weights (128 + 64 = 192 elements).
  const amp::Recipe recipe = amp::Recipe::parse("float16_master");
  Generator gen(5);
  Tensor w1 = uniform({8, 16}, -0.3, 0.3, gen).set_requires_grad(true);
  Tensor w2 = uniform({16, 4}, -0.3, 0.3, gen).set_requires_grad(true);
  recipe.cast_parameters({w1, w2});
  auto opt = std::make_unique<optim::Adam>(std::vector<Tensor>{w1, w2},
                                           optim::AdamOptions{.lr = 1e-3, .master_weights = recipe.master_weights});
  amp::MemoryReport before = amp::memory_report(*opt);
  CHECK(before.parameters == 192 * 2);
  CHECK(before.master_weights == 192 * 4);
  CHECK(before.gradients == 0);
  CHECK(before.optimizer_state == 0);
  Tensor x = uniform({32, 8}, -1, 1, gen), t = uniform({32, 4}, -1, 1, gen);
  amp::GradScaler scaler = recipe.make_scaler({.init_scale = 256});
  Tensor loss;
  {
    Autocast region = recipe.autocast();
    loss = mse_loss(matmul(relu(matmul(x, w1)), w2), t);
  }
  CHECK(amp::memory_report(*opt).saved_activations > 0);
  backward(scaler.scale(loss));
  REQUIRE(scaler.step(*opt));
  scaler.update();
  amp::MemoryReport after = amp::memory_report(*opt);
  CHECK(after.parameters == 192 * 2);
  CHECK(after.master_weights == 192 * 4);
  // The f16 model gradients only: the fused step reads them times 1/S, and no f32 master gradient
  // exists (unscale_, for clipping, would make them: 192 * 4 bytes more).
  CHECK(after.gradients == 192 * 2);
  CHECK(after.optimizer_state == 2 * 192 * 4);  // Adam's two f32 moments per master
  CHECK(after.saved_activations == 0);  // backward released the tape
  CHECK(after.total() == 384 + 768 + 384 + 1536);
  scaler.unscale_(*opt);
  CHECK(amp::memory_report(*opt).gradients == 192 * 2 + 192 * 4);  // f16 model gradients + f32 master gradients
  scaler.update();

  // The same forward in fp32 and under mixed_float16: f16 activations take less memory.
  Tensor v1 = uniform({8, 16}, -0.3, 0.3, gen).set_requires_grad(true);
  Tensor v2 = uniform({16, 4}, -0.3, 0.3, gen).set_requires_grad(true);
  optim::SGD sgd({v1, v2});
  auto saved = [&](const char* name) {
    const amp::Recipe r = amp::Recipe::parse(name);
    Autocast region = r.autocast();
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

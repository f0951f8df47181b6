// A 2-layer MLP trained on a synthetic problem: the smallest complete mixed-precision training loop.
//
//   build/examples/mlp_synthetic                    fp32
//   build/examples/mlp_synthetic mixed_float16      autocast f16, f32 parameters, dynamic GradScaler
//   build/examples/mlp_synthetic float16_master     f16 parameters, f32 master copy, GradScaler
//   build/examples/mlp_synthetic <recipe>           any name of amp::Recipe::names()
//
// The data: points x in R^16 drawn from N(0, 1), labelled by which of 4 fixed random directions
// they point along most (argmax of x teacher). A 16-64-4 MLP learns it to well above the 25% of
// guessing; the loss printed every 50 steps falls from ln(4) = 1.39.
#include "mixgrad.h"

using namespace mg;

// The whole body is a try block (a function-try-block): any mg::Error, a misspelt recipe name say,
// ends the program with its message and status 1 instead of an abort.
int main(int argc, char** argv) try {
  const amp::Recipe recipe = amp::Recipe::parse(argc > 1 ? argv[1] : "fp32");
  const std::int64_t features = 16, hidden = 64, classes = 4, batch = 128, steps = 400;

  Generator generator(0);
  const Tensor teacher = randn({features, classes}, generator);

  // Parameters: f32 leaves in PyTorch's [out, in] layout; Kaiming-style scale for the ReLU layer.
  Tensor w1 = mul(randn({hidden, features}, generator), std::sqrt(2.0 / features)).detach().set_requires_grad(true);
  Tensor b1 = zeros({hidden}, {.requires_grad = true});
  Tensor w2 = mul(randn({classes, hidden}, generator), std::sqrt(1.0 / hidden)).detach().set_requires_grad(true);
  Tensor b2 = zeros({classes}, {.requires_grad = true});
  std::vector<Tensor> parameters{w1, b1, w2, b2};

  // The recipe decides the parameters' storage dtype, whether the optimizer keeps an f32 master copy
  // of them (float16_master), and the GradScaler (disabled where it is not needed).
  recipe.cast_parameters(parameters);
  optim::SGD optimizer(parameters, {.lr = 0.2, .master_weights = recipe.master_weights});
  amp::GradScaler scaler = recipe.make_scaler();

  // Under an FP8 recipe the layers' GEMMs run in FP8 (autograd/fp8.h), and delayed scaling keeps an
  // amax history per layer (nn::Linear holds its own; here, two by hand).
  Fp8History h1 = Fp8History::fresh(16), h2 = Fp8History::fresh(16);
  auto layer = [&](const Tensor& x, const Tensor& w, const Tensor& b, Fp8History& history) {
    const Fp8Options* fp8 = fp8_autocast_options();
    return fp8 ? fp8_linear(x, w, b, *fp8, &history) : linear(x, w, b);
  };
  // Runs inside the caller's autocast region: linear (GEMM + bias) in f16/bf16, relu in its input's dtype.
  auto model = [&](const Tensor& x) {
    Tensor h = relu(layer(x, w1, b1, h1));  // (B, hidden)
    return layer(h, w2, b2, h2);  // (B, classes)
  };
  auto make_batch = [&](std::int64_t size) {
    Tensor x = randn({size, features}, generator);
    return std::pair{x, argmax(matmul(x, teacher), 1)};
  };

  fmt::print("training a {}-{}-{} MLP on a synthetic {}-class problem\nrecipe {}\n", features, hidden, classes, classes,
             recipe.describe());
  // The skipped steps are counted where the flags are, on the device: reading a flag every step
  // would make a GPU wait every step. The count is read only when printed.
  Tensor skipped = zeros({});
  for (std::int64_t step = 1; step <= steps; ++step) {
    auto [x, labels] = make_batch(batch);
    optimizer.zero_grad();
    Tensor loss;
    {
      Autocast region = recipe.autocast();  // a disabled region for fp32
      loss = cross_entropy(model(x), labels);  // on the f32 list: an f32 loss under every recipe
    }
    backward(scaler.scale(loss));  // loss * S (S = 1 without a scaler), outside the region
    scaler.step(optimizer);  // the update reads g / S; skipped, on the device, on inf/NaN
    scaler.update();  // back off or grow S
    if (scaler.is_enabled()) skipped = add(skipped, scaler.last_found_inf());
    if (step == 1 || step % 50 == 0) {
      fmt::print("step {:>4}  loss {:.4f}", step, loss.item());
      if (scaler.is_enabled()) fmt::print("  scale {:g}  skipped {:g}", scaler.get_scale(), skipped.item());
      fmt::print("\n");
    }
  }

  NoGradGuard no_grad;
  auto [x, labels] = make_batch(4096);  // labels from the f32 teacher, outside the region
  Autocast region = recipe.autocast();
  Tensor predicted = argmax(model(x), 1);
  std::vector<std::int32_t> p = predicted.to_vector<std::int32_t>(), y = labels.to_vector<std::int32_t>();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
  fmt::print("held-out accuracy {:.1f}% on {} fresh points (guessing: {:.0f}%)\n",
             100.0 * static_cast<double>(correct) / static_cast<double>(p.size()), p.size(), 100.0 / classes);
  return 0;
} catch (const Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

// A program outside the mixgrad tree: it fits a linear model y = x w to a known w in mixed precision
// (autocast f16, f32 weights, dynamic loss scaling) and exits 1 unless the loss fell by 100x.
// It includes mixgrad only as a user would, through the mixgrad::mixgrad target (CMakeLists.txt);
// scripts/check-consumer builds it against an installed mixgrad and against the checkout.
#include "mixgrad.h"

using namespace mg;

int main() try {
  const std::int64_t batch = 64, features = 8, steps = 50;
  Generator generator(0);
  const Tensor true_weights = randn({features, 1}, generator);
  Tensor weights = zeros({features, 1}, {.requires_grad = true});  // f32: the master copy

  optim::SGD sgd({weights}, {.lr = 0.1});
  amp::GradScaler scaler;  // loss scale 2^16, backs off on inf/NaN
  double first_loss = 0, last_loss = 0;
  std::int64_t skipped = 0;
  for (std::int64_t step = 0; step < steps; ++step) {
    Tensor x = randn({batch, features}, generator);  // (B, features)
    Tensor y = matmul(x, true_weights);  // (B, 1), f32 targets
    sgd.zero_grad();
    Tensor loss;
    {
      Autocast autocast(DType::F16);  // matmul in f16, f32 accumulate
      loss = mse_loss(matmul(x, weights), y);  // on the f32 list: an f32 loss
    }
    backward(scaler.scale(loss));
    skipped += !scaler.step(sgd);  // the update reads g / S; skipped if a gradient is inf or NaN
    scaler.update();
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  fmt::print("mse loss {:.3g} -> {:.3g} after {} steps (loss scale {:g}, {} skipped)\n", first_loss, last_loss, steps,
             scaler.get_scale(), skipped);
  if (!(last_loss < first_loss / 100)) {
    fmt::print(stderr, "error: the loss did not fall by 100x: mixgrad as linked here does not train\n");
    return 1;
  }
  return 0;
} catch (const Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

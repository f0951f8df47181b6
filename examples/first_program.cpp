// The README's first program, verbatim (scripts/check-docs holds the README to this file): one
// mixed-precision step of a linear classifier on random data: autocast to f16, loss scaling, the
// unscale and inf check in the scaler's step, the scale's update.
//
//   build/examples/first_program      prints the f32 loss and the loss scale (65536)
#include "mixgrad.h"
using namespace mg;

int main() {
  Generator gen(0);
  Tensor x = randn({64, 784}, gen);  // f32 on the CPU
  Tensor labels = randint(0, 10, {64}, gen);  // i32 in [0, 10)
  Tensor w = mul(randn({784, 10}, gen), 0.03).detach().set_requires_grad(true);

  amp::GradScaler scaler;  // loss scale 2^16, dynamic
  Tensor loss;
  {
    Autocast autocast(DType::F16);  // matmul casts x and w to f16 (casts are on the tape)
    Tensor logits = matmul(x, w);  // f16 x f16, f32 accumulate, f16 result
    loss = cross_entropy(logits, labels);  // on the f32 list: computed and returned in f32
  }
  backward(scaler.scale(loss));  // gradients x 2^16
  optim::SGD sgd({w}, {.lr = 0.1});
  scaler.step(sgd);  // unscale in one pass; skip the step on inf/NaN
  scaler.update();
  fmt::print("loss {}\nscale {}\n", loss, scaler.get_scale());
}

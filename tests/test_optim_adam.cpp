// optim::Adam and AdamW against numbers computed by PyTorch itself (torch.optim.Adam / AdamW 1.13,
// foreach=False, on the CPU), bit for bit in f32, on every device of the build.
//
// PyTorch's single-tensor Adam rounds its constants once, from Python doubles, into f32: 1 - beta1,
// 1 - beta2, lr / (1 - beta1^t), sqrt(1 - beta2^t) and AdamW's 1 - lr * weight_decay. Computing
// 1 - beta2 in f32 instead (1 - 0.999f = 0.00100001693) scales every exp_avg_sq by 1.0000169 and
// moves the parameters by an ulp or more within a few steps: these cases catch that, and any other
// reordering of the update's roundings (kernels/optim_functors.h says which are fused).
// The f64 formula itself, over many configurations, is tests/test_optim.cpp.
#include <memory>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using Vec = std::vector<double>;

// The starting parameter and the five gradients fed to both optimizers (rounded to f32 from these
// doubles, as torch.tensor(..., dtype=torch.float32) does).
const Vec kParam{0.5, -1.25, 2.0, 0.3};
const std::vector<Vec> kGradients{{0.1, -0.2, 0.3, -0.4},
                                  {0.25, 0.5, -0.75, 1.0},
                                  {-0.6, 0.7, 0.05, -0.01},
                                  {0.9, -0.03, 0.2, 0.4},
                                  {-0.15, 0.35, -0.45, 0.8}};

struct AfterFiveSteps {
  Vec param, exp_avg, exp_avg_sq;
};

// Runs five steps of `make`'s optimizer on a parameter on `device` and checks parameter and moments
// bit for bit (every value printed by PyTorch with 9 significant digits, which identifies an f32).
template <class Make>
void check_five_steps(Device device, const Make& make, const AfterFiveSteps& expected) {
  INFO("on " << fmt::format("{}", device));
  Tensor param = from_vector(kParam, {4}, {.device = device}).set_requires_grad(true);
  std::unique_ptr<optim::Optimizer> optimizer = make(std::vector<Tensor>{param});
  for (const Vec& gradient : kGradients) {
    param.set_grad(from_vector(gradient, {4}, {.device = device}));
    optimizer->step();
  }
  const std::vector<Tensor> state = optimizer->state();  // exp_avg, exp_avg_sq
  REQUIRE(state.size() == 2);
  // The expected values are f32s: rounding them to f32 is exact, and the comparison then bitwise.
  auto f32 = [](const Vec& v) { return from_vector(v, {4}).to_vector<double>(); };
  check_values(param, f32(expected.param), 0.0, 0.0);
  check_values(state[0], f32(expected.exp_avg), 0.0, 0.0);
  check_values(state[1], f32(expected.exp_avg_sq), 0.0, 0.0);
}

std::vector<Device> devices() {
  std::vector<Device> all{Device::cpu()};
  if (cuda_device_count() > 0) all.push_back(Device::cuda());
  return all;
}

}  // namespace

TEST_CASE("Adam with L2 weight decay: five f32 steps equal torch.optim.Adam's bit for bit") {
  // torch.optim.Adam([p], lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False),
  // p = torch.tensor(kParam), p.grad = torch.tensor(kGradients[t]) before each opt.step(); then
  // p, opt.state[p]['exp_avg'], opt.state[p]['exp_avg_sq'] printed with '%.9g'.
  const AfterFiveSteps torch{{0.376032501, -1.27118027, 1.92496598, 0.249046445},
                             {0.0595935062, 0.0619967207, 0.0220901817, 0.174594164},
                             {0.00131890189, 0.000658261881, 0.00083803141, 0.0020761448}};
  for (Device device : devices()) {
    check_five_steps(
        device,
        [](std::vector<Tensor> p) {
          return std::make_unique<optim::Adam>(
              std::move(p),
              optim::AdamOptions{.lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
        },
        torch);
  }
}

TEST_CASE("AdamW: five f32 steps equal torch.optim.AdamW's bit for bit") {
  // torch.optim.AdamW([p], lr=0.01, betas=(0.8, 0.999), eps=1e-6, weight_decay=0.05, foreach=False),
  // run and printed as above.
  const AfterFiveSteps torch{{0.4768489, -1.26201642, 1.99746168, 0.288941443},
                             {0.0709920004, 0.18961601, -0.103824005, 0.292352021},
                             {0.00126324326, 0.000901510648, 0.000895409845, 0.00195630384}};
  for (Device device : devices()) {
    check_five_steps(
        device,
        [](std::vector<Tensor> p) {
          return std::make_unique<optim::AdamW>(
              std::move(p),
              optim::AdamWOptions{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.05});
        },
        torch);
  }
}

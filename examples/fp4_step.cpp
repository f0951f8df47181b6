// One NVFP4 layer of a real training step, number by number: what docs/TOUR.md's FP4 chapter follows.
//
//   build/examples/fp4_step            nvfp4 (E4M3 scales per 16 and an f32 scale per tensor)
//   build/examples/fp4_step mxfp4      or any FP4 recipe
//
// It trains a 16-64-64-4 MLP (three nn::Linear layers; the FP4 recipes keep the last in bf16) for 20
// steps, then takes step 21's first layer apart: the forward GEMM y = x W^T + b (the two levels of
// scales, the codes, one element of y against f32), and the weight gradient dW = dy^T x (the batch's
// rows padded and Hadamard-transformed, one value of dy rounded stochastically, one element of dW).
#include <cmath>

#include "autograd/fp4.h"
#include "mixgrad.h"

using namespace mg;

namespace {

float at(const Tensor& t, std::int64_t i) { return static_cast<float>(t.to(DType::F32).data<float>()[i]); }
double norm(const Tensor& t) { return std::sqrt(sum(mul(t, t)).item()); }
std::uint8_t code_at(const kernels::Fp4Tensor& q, std::int64_t i) {
  return fp8::load_code(static_cast<const std::uint8_t*>(q.codes.data_ptr()), i, DType::E2M1);
}
std::uint8_t scale_at(const kernels::Fp4Tensor& q, std::int64_t b) {
  return static_cast<const std::uint8_t*>(q.scales.data_ptr())[b];
}

// The first `count` values of row 0 of x, quantised as q: value -> value * factor -> code -> decoded.
void show(const char* name, const Tensor& x, const kernels::Fp4Tensor& q, std::int64_t count) {
  const kernels::Fp4Rule rule{.format = q.format};
  const float amax = static_cast<float>(max(abs(x.to(DType::F32))).item());
  const float factor = kernels::fp4_encode_factor(scale_at(q, 0), amax, rule);
  fmt::print("  {} block 0: scale code 0x{:02X} = {:g}; values are multiplied by {:.4f} before rounding to E2M1\n",
             name, scale_at(q, 0), kernels::fp4_scale_value(scale_at(q, 0), q.format), factor);
  for (std::int64_t k = 0; k < count; ++k)
    fmt::print("    {:>+10.6f} -> {:>+8.4f} -> 0x{:X} -> {:>+4.1f}\n", at(x, k), at(x, k) * factor, code_at(q, k),
               fp8::decode(code_at(q, k), DType::E2M1));
}

}  // namespace

int main(int argc, char** argv) try {
  amp::Recipe recipe = amp::Recipe::parse(argc > 1 ? argv[1] : "nvfp4");
  MG_CHECK(recipe.fp8 && is_fp4(recipe.fp8->scaling), "'{}' is not an FP4 recipe; name nvfp4 or mxfp4", recipe.name);
  recipe.fp8->seed = 7;
  const std::int64_t features = 16, hidden = 64, classes = 4, batch = 40, warmup = 20;  // 40 rows: padded to 48
  Generator generator(0);
  const Tensor teacher = randn({features, classes}, generator);
  auto make_batch = [&] {
    Tensor x = randn({batch, features}, generator);
    return std::pair{x, argmax(matmul(x, teacher), 1)};
  };
  std::shared_ptr<nn::Sequential> model = nn::mlp({features, hidden, hidden, classes}, generator);
  train::Trainer trainer(model, {.recipe = recipe, .optimizer = {.name = "sgd", .lr = 0.2}});
  for (std::int64_t step = 0; step < warmup; ++step) {
    auto [x, labels] = make_batch();
    trainer.step(x, labels);
  }
  fmt::print("{}\n{} steps of a 16-64-64-4 MLP, batch {}; step {}'s first layer\n\n", recipe.describe(), warmup, batch,
             warmup + 1);
  auto& layer = dynamic_cast<nn::Linear&>(*model->children()[1].second);  // Flatten, Linear, ReLU, ...
  auto [x, labels] = make_batch();
  const Fp8Options& options = *recipe.fp8;
  const Fp4Stream stream{.seed = options.seed,
                         .step = static_cast<std::uint32_t>(layer.fp4_state.step.item<int>()),
                         .layer = layer.fp4_state.layer};

  // 1. The forward's operands: x along its rows in blocks of 16, W in 16 x 16 blocks.
  const kernels::Fp4Tensor xq = fp4_quantize_operand(x, Fp8Role::Input, false, options, stream);
  const kernels::Fp4Tensor wq = fp4_quantize_operand(layer.weight.detach(), Fp8Role::Weight, false, options, stream);
  const double x_amax = max(abs(x)).item(), w_amax = max(abs(layer.weight)).item();
  fmt::print("1. Two levels of scales. The tensor's: S_enc = 448 * 6 / amax, x: 2688 / {:.4f} = {:.2f}; W: 2688 / "
             "{:.4f} = {:.2f}\n",
             x_amax, 1.0 / at(xq.tensor_factor, 0), w_amax, 1.0 / at(wq.tensor_factor, 0));
  show("x", x, xq, 4);
  show("W", layer.weight.detach(), wq, 4);

  // 2. y[0][0]: exact products of decoded values (each an exact bf16), summed, times both tensor factors.
  const Tensor xd = kernels::fp4_decode(xq, DType::F32), wd = kernels::fp4_decode(wq, DType::F32);
  double sum = 0, exact = 0, magnitude = 0;
  for (std::int64_t k = 0; k < features; ++k) {
    sum += static_cast<double>(at(xd, k)) * at(wd, k);
    exact += static_cast<double>(at(x, k)) * at(layer.weight, k);
    magnitude += std::fabs(static_cast<double>(at(x, k)) * at(layer.weight, k));
  }
  const double factors = static_cast<double>(at(xq.tensor_factor, 0)) * at(wq.tensor_factor, 0);
  const Tensor y = fp4_matmul(xq, wq, DType::BF16, layer.bias.detach());
  fmt::print("2. y[0][0]: {} products of decoded values, each exact; their sum {:.4f}\n", features, sum);
  fmt::print("   times the tensors' factors {:.6g}: {:.6f}; plus the bias {:+.6f}, rounded into bf16: {:.6f}\n",
             factors, sum * factors, at(layer.bias, 0), at(y, 0));
  fmt::print("   in f32 from the f32 values: {:.6f}; FP4's error {:+.6f}, {:.1f}% of the sum of |x_k w_k| ({:.4f})\n\n",
             exact + at(layer.bias, 0), at(y, 0) - (exact + at(layer.bias, 0)),
             100.0 * std::fabs(at(y, 0) - (exact + at(layer.bias, 0))) / magnitude, magnitude);

  // 3. The weight gradient: a real dy (the rest of the model's backward), then x^T and dy^T padded to 48
  //    rows and transformed.
  Tensor h, dy;
  {
    Autocast region = recipe.autocast();
    h = layer(x).detach().requires_grad_(true);
    Tensor out = h;
    for (std::size_t i = 2; i < model->children().size(); ++i) out = (*model->children()[i].second)(out);
    backward(cross_entropy(out, labels));
    dy = h.grad();
  }
  const std::int64_t padded = fp4_padded_rows(batch, options);
  const Tensor x_column = slice(transpose(x, 0, 1), 0, 0, 1);  // x^T's row 0: feature 0 over the batch
  const Tensor with_zeros = cat({x_column, zeros({1, padded - batch})}, 1);
  const Tensor mixed = hadamard(with_zeros,
                                {.random_signs = options.hadamard == HadamardMode::Random, .seed = options.seed});
  fmt::print("3. dW = dy^T x sums over the batch: x^T and dy^T are quantised along their rows, {} rows padded with "
             "zeros to {}\n",
             batch, padded);
  fmt::print("   and multiplied by one 16 x 16 Hadamard matrix (entries +-1/4, signs from the seed). Feature 0's first "
             "block of 16 rows:\n   before: amax {:.4f}, norm {:.4f}; after: amax {:.4f}, norm {:.4f}\n",
             max(abs(slice(with_zeros, 1, 0, 16))).item(), norm(slice(with_zeros, 1, 0, 16)),
             max(abs(slice(mixed, 1, 0, 16))).item(), norm(slice(mixed, 1, 0, 16)));

  // 4. One value of dy^T rounded stochastically: its two neighbours and the chance of the upper one.
  const kernels::Fp4Tensor dq = fp4_quantize_operand(dy, Fp8Role::GradOutput, true, options, stream);
  const Tensor dy_t = hadamard(cat({transpose(dy.to(DType::F32), 0, 1), zeros({hidden, padded - batch})}, 1),
                               {.random_signs = options.hadamard == HadamardMode::Random, .seed = options.seed});
  const float d_amax = static_cast<float>(max(abs(dy_t)).item());
  const kernels::Fp4Rule sr{.format = dq.format, .stochastic = true};
  const float scaled = at(dy_t, 0) * kernels::fp4_encode_factor(scale_at(dq, 0), d_amax, sr);
  // E2M1's two magnitudes around |scaled|, and the chance of the upper one: (|s| - lower) / (upper - lower).
  const float grid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::size_t i = 0;
  while (i + 2 < std::size(grid) && grid[i + 1] <= std::fabs(scaled)) ++i;
  const float lower = grid[i], upper = grid[i + 1];
  fmt::print("4. dy^T[0][0] after the transform: {:+.6g}, times its block's factor: {:+.4f}, between {:g} and {:g} in "
             "magnitude:\n   up with probability {:.3f}; rounded stochastically: {:+.1f} (code 0x{:X}; the word from "
             "seed {}, step {}, tensor {})\n",
             at(dy_t, 0), scaled, lower, upper, (std::fabs(scaled) - lower) / (upper - lower),
             fp8::decode(code_at(dq, 0), DType::E2M1), code_at(dq, 0), stream.seed, stream.step, 4 * stream.layer + 1);

  // 5. dW[0][0] from the FP4 operands against f32.
  const kernels::Fp4Tensor xtq = fp4_quantize_operand(x, Fp8Role::Input, true, options, stream);
  const Tensor dw = fp4_matmul(dq, xtq, DType::F32);
  double dw_exact = 0;
  for (std::int64_t r = 0; r < batch; ++r) dw_exact += static_cast<double>(at(dy, r * hidden)) * at(x, r * features);
  fmt::print("5. dW[0][0] from the FP4 operands: {:+.6f}; in f32: {:+.6f}\n", at(dw, 0), dw_exact);
  return 0;
} catch (const Error& error) {
  fmt::print(stderr, "fp4_step: {}\n", error.what());
  return 1;
}

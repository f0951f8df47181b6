// One FP8 GEMM of a real training step, number by number: what docs/TOUR.md's FP8 chapter follows.
//
//   build/examples/fp8_step                 fp8_delayed (E4M3 forward, E5M2 gradients, amax history)
//   build/examples/fp8_step fp8_block       any FP8 recipe of amp::Recipe::names()
//
// It trains mlp_synthetic's 16-64-4 MLP (nn::Linear layers, so the FP8 path is the library's own) for
// 20 steps under the recipe, then takes step 21's first GEMM, y = x W^T + b of the first layer, apart:
// the f32 master weight, its amax and scale, its E4M3 codes; the same for the input; one element of y
// as the exact products of codes, the chunk sums, the scales and the bias, rounded into bf16; that
// element against f32 arithmetic; and the same sum in the model of Hopper's 14-bit accumulator.
#include <cmath>

#include "mixgrad.h"

using namespace mg;

namespace {

constexpr const char* kFormatNames[] = {"E4M3", "E5M2"};

// Row `row`'s first `count` values of an FP8 operand: the value, its code, the code decoded, and
// decoded * scale_inv (what the GEMM's sum stands for).
void show_row(const char* name, const Tensor& values, const kernels::Fp8Tensor& q, std::int64_t row,
              std::int64_t count) {
  const DType format = q.codes.dtype();
  const std::int64_t cols = values.size(1);
  const float* v = values.data<float>();
  const auto* codes = static_cast<const std::uint8_t*>(q.codes.data_ptr());
  fmt::print("  {} row {}, first {} of {}: value -> value * scale -> code -> decoded\n", name, row, count, cols);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::uint8_t code = codes[row * cols + k];
    fmt::print("    {:>+10.6f} -> {:>+10.4f} -> 0x{:02X} -> {:>+8.4f}\n", v[row * cols + k],
               v[row * cols + k] / q.scale_inv.data<float>()[0], code, fp8::decode(code, format));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const amp::Recipe recipe = amp::Recipe::parse(argc > 1 ? argv[1] : "fp8_delayed");
  MG_CHECK(recipe.fp8.has_value(),
           "'{}' is not an FP8 recipe; name one of fp8_delayed, fp8_current, "
           "fp8_block, mxfp8",
           recipe.name);
  const std::int64_t features = 16, classes = 4, batch = 128, warmup = 20;
  Generator generator(0);
  const Tensor teacher = randn({features, classes}, generator);
  auto make_batch = [&] {
    Tensor x = randn({batch, features}, generator);
    return std::pair{x, argmax(matmul(x, teacher), 1)};
  };
  std::shared_ptr<nn::Sequential> model = nn::mlp({features, 64, classes}, generator);
  train::Trainer trainer(model, {.recipe = recipe, .optimizer = {.name = "sgd", .lr = 0.2}});
  for (std::int64_t step = 0; step < warmup; ++step) {
    auto [x, labels] = make_batch();
    trainer.step(x, labels);
  }
  fmt::print("{}\n{} steps of mlp_synthetic's 16-64-4 MLP; step {}'s first GEMM, y = x W^T + b\n\n", recipe.describe(),
             warmup, warmup + 1);

  // The first Linear (children: Flatten, Linear, ReLU, Linear) and the step's input.
  auto& layer = dynamic_cast<nn::Linear&>(*model->children()[1].second);
  auto [x, labels] = make_batch();
  const Fp8Options& options = *recipe.fp8;
  // What fp8_linear is about to do, done here on copies (the layer's own history stays untouched).
  Fp8History history;
  if (layer.fp8_history.scale.defined())
    history = {.amax_history = layer.fp8_history.amax_history.clone(), .scale = layer.fp8_history.scale.clone()};
  Fp8History* state = history.scale.defined() ? &history : nullptr;
  if (state) {
    const float* weight_history = state->amax_history.data<float>() + state->amax_history.size(1);  // row 1
    fmt::print("1. Delayed scaling: the scales this step uses come from earlier steps' amax\n"
               "   weight amax history (newest first): {:.4f} {:.4f} {:.4f} ...  -> scale 448 / {:.4f} = {:.2f}\n",
               weight_history[0], weight_history[1], weight_history[2], 448.0f / state->scale.data<float>()[1],
               state->scale.data<float>()[1]);
  }
  const kernels::Fp8Tensor xq = fp8_quantize_operand(x, Fp8Role::Input, false, options, state);
  const kernels::Fp8Tensor wq = fp8_quantize_operand(layer.weight, Fp8Role::Weight, false, options, state);
  auto blocks = [](const kernels::Fp8Tensor& q) {
    return q.blocks == kernels::Fp8Blocks{0, 0}
               ? std::string("one scale per tensor")
               : fmt::format("a scale per block of {} x {}", q.blocks.rows, q.blocks.cols);
  };
  fmt::print("2. The operands in {}: x with {}, scale_inv {:.6g}; w with {}, scale_inv {:.6g}\n",
             kFormatNames[static_cast<int>(options.forward_format)], blocks(xq), xq.scale_inv.data<float>()[0],
             blocks(wq), wq.scale_inv.data<float>()[0]);
  fmt::print("   this step's amax: x {:.4f}, w {:.4f}\n", max(abs(x)).item(), max(abs(layer.weight)).item());
  show_row("w", layer.weight, wq, 0, 4);
  show_row("x", x, xq, 0, 4);

  // y[0][0] by hand: exact products of decoded codes, summed in f64 (exact here), times both scales.
  const DType format = xq.codes.dtype();
  const auto* xc = static_cast<const std::uint8_t*>(xq.codes.data_ptr());
  const auto* wc = static_cast<const std::uint8_t*>(wq.codes.data_ptr());
  double codes_sum = 0.0, exact = 0.0, magnitude = 0.0;
  for (std::int64_t k = 0; k < features; ++k) {
    codes_sum += static_cast<double>(fp8::decode(xc[k], format)) * fp8::decode(wc[k], format);
    exact += static_cast<double>(x.data<float>()[k]) * layer.weight.data<float>()[k];
    magnitude += std::fabs(static_cast<double>(x.data<float>()[k]) * layer.weight.data<float>()[k]);
  }
  const double scale_product = static_cast<double>(xq.scale_inv.data<float>()[0]) * wq.scale_inv.data<float>()[0];
  const double bias = layer.bias.data<float>()[0];
  fmt::print("3. y[0][0]: {} products of codes, each exact in f32; their sum {:.4f}\n", features, codes_sum);
  fmt::print("   times scale_inv_x * scale_inv_w = {:.6g}: {:.6f}; plus the bias {:+.6f}: {:.6f}\n", scale_product,
             codes_sum * scale_product, bias, codes_sum * scale_product + bias);
  Tensor y = Tensor::empty({batch, 64}, {.dtype = DType::BF16});
  kernels::fp8_gemm(xq, wq, y, {.m = batch, .n = 64, .k = features, .transpose_b = true}, options.accumulator,
                    {.bias = layer.bias});
  const double y00 = y.to(DType::F32).data<float>()[0];
  fmt::print("   the GEMM's result, rounded once into bf16: {:.6f}\n", y00);
  fmt::print("   in f32 from the f32 values: {:.6f}; FP8's error {:+.6f}, {:.2f}% of the sum of |x_k w_k| ({:.4f})\n\n",
             exact + bias, y00 - (exact + bias), 100.0 * std::fabs(y00 - (exact + bias)) / magnitude, magnitude);

  // The same sum in the Hopper accumulator model: 14 significant bits, truncated (kernels/fp8.h).
  const kernels::Fp8Accumulator hopper{.limited = true, .promote_every = 0};
  Tensor y_hopper = Tensor::empty({batch, 64}, {.dtype = DType::F32});
  kernels::fp8_gemm(xq, wq, y_hopper, {.m = batch, .n = 64, .k = features, .transpose_b = true}, hopper,
                    {.bias = layer.bias});
  fmt::print("4. The Hopper model (13 mantissa bits, truncation, no promotion): y[0][0] = {:.6f}\n"
             "   (with k = {} one group of 32 products: no rounding of the running sum yet; E10 of `mixgrad repro`\n"
             "   shows what k = 4096 does)\n",
             y_hopper.data<float>()[0], features);
  return 0;
} catch (const Error& error) {
  fmt::print(stderr, "fp8_step: {}\n", error.what());
  return 1;
}

// FP4 training (autograd/fp4.h; the nvfp4 and mxfp4 recipes): mg::fp8_linear's forward and three gradients
// under FP4 scaling against f64 products of the very operands each GEMM should read (padded, transformed
// and stochastically rounded as the recipe says); each ingredient's switch; the stream of a Linear; the
// last Linear kept in bf16; the example models trained a few steps; a checkpoint resumed bit for bit; and
// the errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/fp4.h"
#include "nn/models.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// What an FP4 operand stands for, f64 [rows, k]: decode(code) * decode(scale) * the tensor's factor.
Tensor dequantized(const kernels::Fp4Tensor& q) {
  return mul(kernels::fp4_decode(q, DType::F32), q.tensor_factor).to(DType::F64);
}

// a [m, k] . b [n, k]^T in f64.
std::vector<double> product_nt(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        c[static_cast<std::size_t>(i * n + j)] += av[static_cast<std::size_t>(i * k + p)] *
                                                  bv[static_cast<std::size_t>(j * k + p)];
  return c;
}

// f32 sums of k exact products and one rounding into `dtype`, relative to the largest magnitude (as
// test_fp8_training's), plus the f32 rounding of the two tensor factors' product.
void check_gemm(const Tensor& got, const std::vector<double>& exact, std::int64_t k, DType dtype) {
  double largest = 0.0;
  for (double v : exact) largest = std::max(largest, std::fabs(v));
  const double tolerance = (0.5 * dtype_eps(dtype) + static_cast<double>(k + 4) * 0x1p-24) * largest * 4.0;
  const std::vector<double> values = got.to(DType::F64).to_vector<double>();
  REQUIRE(values.size() == exact.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(values[i] - exact[i]));
  CHECK_MESSAGE(worst <= tolerance, "largest error " << worst << " > " << tolerance);
}

}  // namespace

TEST_CASE("fp8_linear under FP4: forward and gradients are the GEMMs of the operands each recipe prescribes") {
  for (const Fp8Scaling scaling : {Fp8Scaling::Nvfp4, Fp8Scaling::Mxfp4}) {
    for (const bool stochastic : {false, true}) {
      const Fp8Options options{.scaling = scaling, .stochastic_gradients = stochastic, .seed = 17};
      INFO(options.describe());
      Generator generator(3);
      const std::int64_t rows = 20, in = 71, out = 24;  // rows pad to 32; in, odd, to 72
      const Tensor x = randn({rows, in}, generator).requires_grad_(true);
      const Tensor w = randn({out, in}, generator).requires_grad_(true);
      const Tensor b = randn({out}, generator).requires_grad_(true);
      nn::Linear holder(in, out);  // only for its step buffer: the stream of layer 5
      holder.enable_fp4(5);
      const Tensor y = fp8_linear(x, w, b, options, nullptr, &holder.fp4_state);
      CHECK(y.dtype() == DType::BF16);
      CHECK(holder.fp4_state.step.item<int>() == 1);  // one recorded forward
      const Fp4Stream stream{.seed = 17, .step = 0, .layer = 5};
      const auto deq = [&](const Tensor& t, Fp8Role role, bool reduce_rows) {
        return dequantized(fp4_quantize_operand(t.detach(), role, reduce_rows, options, stream));
      };
      std::vector<double> expected = product_nt(deq(x, Fp8Role::Input, false), deq(w, Fp8Role::Weight, false));
      const std::vector<double> bias = b.to_vector<double>();
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += bias[i % out];
      check_gemm(y, expected, in + 1, DType::BF16);
      const Tensor g = randn({rows, out}, generator).to(DType::BF16);
      backward(y, g);
      // dx = dy W: dy along out (stochastic when asked), W^T's codes along out.
      check_gemm(x.grad(), product_nt(deq(g, Fp8Role::GradOutput, false), deq(w, Fp8Role::Weight, true)), out,
                 DType::F32);
      // dW = dy^T x: both along the rows, padded to 32 and transformed.
      const Tensor dy_t = deq(g, Fp8Role::GradOutput, true), x_t = deq(x, Fp8Role::Input, true);
      CHECK(dy_t.shape() == Shape{out, 32});
      CHECK(x_t.shape() == Shape{in, 32});
      CHECK(deq(x, Fp8Role::Input, false).shape() == Shape{rows, in + 1});
      check_gemm(w.grad(), product_nt(dy_t, x_t), 32, DType::F32);
      // And near the exact product: 4 bits cost tens of percent of the product's norm here, not more (a
      // wrong scale or a transform applied to one operand only would cost all of it).
      const std::vector<double> exact = product_nt(transpose(g, 0, 1).to(DType::F64),
                                                   transpose(x.detach(), 0, 1).to(DType::F64));
      const std::vector<double> got = w.grad().to_vector<double>();
      double error = 0.0, norm = 0.0;
      for (std::size_t i = 0; i < exact.size(); ++i) {
        error += (got[i] - exact[i]) * (got[i] - exact[i]);
        norm += exact[i] * exact[i];
      }
      CHECK(std::sqrt(error / norm) < 0.4);
    }
  }
}

TEST_CASE("fp4 ingredients: each switch changes what it should and nothing else") {
  Generator generator(8);
  const Tensor x = randn({24, 48}, generator), w = randn({32, 48}, generator), g = randn({24, 32}, generator);
  const auto run = [&](const Fp8Options& options, std::uint32_t step) {
    const Tensor xi = x.detach().requires_grad_(true), wi = w.detach().requires_grad_(true);
    nn::Linear holder(48, 32);
    holder.enable_fp4(0);
    holder.fp4_state.step.copy_(full({1}, static_cast<double>(step), {.dtype = DType::I32}));
    const Tensor y = fp8_linear(xi, wi, {}, options, nullptr, &holder.fp4_state);
    backward(y, g.to(DType::BF16));
    return std::vector<Tensor>{y, xi.grad(), wi.grad()};
  };
  const auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); };
  const Fp8Options base{.scaling = Fp8Scaling::Nvfp4, .seed = 1};
  const std::vector<Tensor> reference = run(base, 0);
  // The same step and seed: the same bits. Another step: other stochastic roundings of dy.
  const std::vector<Tensor> again = run(base, 0), next = run(base, 1);
  for (int i = 0; i < 3; ++i) CHECK(same(again[i], reference[i]));
  CHECK(same(next[0], reference[0]));
  CHECK(!same(next[1], reference[1]));
  // Without stochastic rounding the step does not matter.
  Fp8Options nearest = base;
  nearest.stochastic_gradients = false;
  CHECK(same(run(nearest, 0)[2], run(nearest, 3)[2]));
  // The transform touches dW only; random and deterministic signs differ; another seed other signs.
  for (const HadamardMode mode : {HadamardMode::Off, HadamardMode::Deterministic}) {
    Fp8Options other = base;
    other.hadamard = mode;
    const std::vector<Tensor> r = run(other, 0);
    CHECK(same(r[0], reference[0]));
    CHECK(same(r[1], reference[1]));
    CHECK(!same(r[2], reference[2]));
  }
  Fp8Options reseeded = base;
  reseeded.seed = 2;
  CHECK(!same(run(reseeded, 0)[2], reference[2]));
  // 1x16 weight blocks instead of 16x16: the forward and dx change (W's codes), dW does not.
  Fp8Options rows_only = base;
  rows_only.weight_blocks_2d = false;
  const std::vector<Tensor> r = run(rows_only, 0);
  CHECK(!same(r[0], reference[0]));
  CHECK(same(r[2], reference[2]));
}

TEST_CASE("fp4 recipes: the last Linear stays bf16, the step counts recorded forwards, the char LSTM is refused") {
  Generator init(2);
  const std::shared_ptr<nn::Module> model = nn::mlp({16, 12, 8, 4}, init);
  for (const std::string name : {"nvfp4", "mxfp4"}) {
    const amp::Recipe recipe = amp::Recipe::parse(name);
    CHECK(recipe.fp8->bf16_last_layers == 1);
    CHECK(recipe.describe().find("the last 1 Linear layer(s) in bf16") != std::string::npos);
    recipe.prepare(*model);
  }
  std::vector<nn::Linear*> linears;
  for (const auto& [name, child] : model->children())
    if (auto* linear = dynamic_cast<nn::Linear*>(child.get())) linears.push_back(linear);
  REQUIRE(linears.size() == 3);
  CHECK(!linears[0]->keep_bf16);
  CHECK(!linears[1]->keep_bf16);
  CHECK(linears[2]->keep_bf16);
  CHECK(linears[1]->fp4_state.layer == 1);
  // The kept layer computes what mixed_bfloat16's linear does; the others do not.
  Generator data(3);
  const Tensor h = randn({5, 8}, data);
  {
    Autocast region = amp::Recipe::parse("nvfp4").autocast();
    const Tensor kept = (*linears[2])(h);
    Autocast bf16(DType::BF16);
    CHECK(kept.to_vector<double>() == linear(h, linears[2]->weight, linears[2]->bias).to_vector<double>());
  }
  {
    Autocast region = amp::Recipe::parse("nvfp4").autocast();
    (void)(*linears[0])(randn({5, 16}, data));  // parameters require grad: a recorded forward
    {
      NoGradGuard no_grad;
      (void)(*linears[0])(randn({5, 16}, data));  // evaluation: not counted
    }
  }
  CHECK(linears[0]->fp4_state.step.item<int>() == 1);
  // A model whose only Linear is its head has nothing to run in FP4.
  nn::CharLSTM lstm(12, 8, 16, 1, init);
  check_error([&] { amp::Recipe::parse("nvfp4").prepare(lstm); }, "char LSTM");
}

TEST_CASE("fp4 recipes: the Trainer trains the MLP, the CNN and the tiny GPT a few steps, and the loss falls") {
  struct Model {
    std::string name;
    std::function<std::shared_ptr<nn::Module>(Generator&)> build;
    Tensor inputs, labels;
  };
  Generator data(11);
  const Tensor images = randn({20, 1, 12, 12}, data), classes = randint(0, 4, {20}, data);  // 20: padded to 32
  const Tensor tokens = randint(0, 12, {4, 9}, data);
  const std::vector<Model> models{
      {"mlp",
       [](Generator& g) {
         return nn::mlp({144, 32, 4}, g);
       },
       images, classes},
      {"cnn",
       [](Generator& g) {
         return nn::cnn({.image_size = 12, .channels1 = 4, .channels2 = 8, .hidden = 16, .classes = 4}, g);
       },
       images, classes},
      {"tiny_gpt",
       [](Generator& g) {
         return std::make_shared<nn::TinyGPT>(
             nn::GptOptions{.vocab = 12, .block_size = 8, .embed_dim = 16, .heads = 2, .layers = 1}, g);
       },
       slice(tokens, 1, 0, 8), slice(tokens, 1, 1, 9)},
  };
  for (const std::string name : {"nvfp4", "mxfp4"}) {
    for (const Model& m : models) {
      INFO(name << " " << m.name);
      Generator init(1);
      train::Trainer trainer(m.build(init), {.recipe = amp::Recipe::parse(name),
                                             .optimizer = {.name = "adam", .lr = 0.01},
                                             .read_every = 1});
      const double first = trainer.step(m.inputs, m.labels).loss.item();
      double last = first;
      for (int step = 0; step < 15; ++step) last = trainer.step(m.inputs, m.labels).loss.item();
      CHECK(std::isfinite(last));
      CHECK(last < 0.9 * first);
    }
  }
}

TEST_CASE("fp4 recipes: a checkpoint resumes the stochastic rounding's stream bit for bit") {
  TempDir tmp;
  Generator data(2);
  const Tensor x = randn({24, 20}, data), labels = randint(0, 3, {24}, data);
  const train::TrainerOptions options{.recipe = amp::Recipe::parse("nvfp4"),
                                      .optimizer = {.name = "sgd", .lr = 0.1, .momentum = 0.9}};
  auto build = [] {
    Generator init(9);
    return nn::mlp({20, 16, 16, 3}, init);
  };
  train::Trainer first(build(), options);
  for (int step = 0; step < 3; ++step) first.step(x, labels);
  const std::string path = tmp / "fp4.safetensors";
  train::save_checkpoint(path, first.checkpoint_objects());
  std::vector<double> continued;
  for (int step = 0; step < 3; ++step) continued.push_back(first.step(x, labels).loss.item());
  train::Trainer second(build(), options);
  train::load_checkpoint(path, second.checkpoint_objects());
  for (int step = 0; step < 3; ++step) CHECK(second.step(x, labels).loss.item() == continued[step]);
  // Two Linears ran 6 recorded forwards each; the head, kept in bf16, none.
  std::vector<int> steps;
  for (const auto& [name, tensor] : second.model().state_dict())
    if (name.find("fp4_step") != std::string::npos) steps.push_back(tensor.item<int>());
  std::sort(steps.begin(), steps.end());
  CHECK(steps == std::vector<int>{0, 6, 6});
}

TEST_CASE("fp4: bad input is refused with a clear error") {
  const Fp8Options nv{.scaling = Fp8Scaling::Nvfp4};
  check_error(
      [&] {
        (void)fp8_quantize_operand(ones({2, 16}), Fp8Role::Input, false, nv, nullptr);
      },
      "fp4_quantize_operand");
  check_error([&] { (void)fp4_quantize_operand(ones({2, 16}), Fp8Role::Input, false, {}, {}); }, "Nvfp4 or Mxfp4");
  check_error([&] { (void)fp8_linear(ones({2, 16}), ones({3, 8}), {}, nv); }, "mg::fp8_linear");
  const kernels::Fp4Tensor a = fp4_quantize_operand(ones({2, 16}), Fp8Role::Input, false, nv, {});
  const kernels::Fp4Tensor b = fp4_quantize_operand(ones({3, 32}), Fp8Role::Weight, false, nv, {});
  check_error([&] { (void)fp4_matmul(a, b, DType::F32); }, "mg::fp4_matmul");
}

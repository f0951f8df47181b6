// FP8 training (autograd/fp8.h, amp/recipe.h's FP8 recipes): mg::fp8_linear's forward and its three
// gradients against f64 products of the very codes and scales each GEMM should use; the delayed-scaling
// state of a Linear, in its state dict and across a checkpoint (bit for bit); every example model
// trained a few steps by the Trainer under each FP8 recipe; and the errors.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "nn/models.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

const std::vector<std::string> kFp8Recipes{"fp8_delayed", "fp8_current", "fp8_block", "mxfp8"};

// op(A) op(B) in f64 from dequantised operands: a [m, k] (or [k, m]), b [k, n] (or [n, k]).
std::vector<double> product(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::int64_t m = transpose_a ? a.size(1) : a.size(0), k = transpose_a ? a.size(0) : a.size(1);
  const std::int64_t n = transpose_b ? b.size(0) : b.size(1);
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        c[i * n + j] += av[transpose_a ? p * m + i : i * k + p] * bv[transpose_b ? j * k + p : p * n + j];
  return c;
}

// The tolerance of an FP8 GEMM whose exact f64 answer is `exact`: f32 sums of k exact products (k * 2^-24
// of the largest partial sum, bounded by the sum of |products| <= k * max|a| * max|b|) and one
// rounding into `dtype`, relative to the largest magnitude.
double gemm_tolerance(const std::vector<double>& exact, std::int64_t k, DType dtype) {
  double largest = 0.0;
  for (double v : exact) largest = std::max(largest, std::fabs(v));
  return (0.5 * dtype_eps(dtype) + static_cast<double>(k) * 0x1p-24) * largest * 4.0;
}

void check_near(const Tensor& got, const std::vector<double>& exact, double tolerance) {
  const std::vector<double> values = got.to(DType::F64).to_vector<double>();
  REQUIRE(values.size() == exact.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(values[i] - exact[i]));
  CHECK_MESSAGE(worst <= tolerance, "largest error " << worst << " > " << tolerance);
}

}  // namespace

TEST_CASE("fp8_linear: forward and gradients are the GEMMs of the codes and scales each recipe prescribes") {
  for (const Fp8Scaling scaling : {Fp8Scaling::Current, Fp8Scaling::Block, Fp8Scaling::Mx}) {
    const Fp8Options options{.scaling = scaling,
                             .backward_format = scaling == Fp8Scaling::Current ? DType::E5M2 : DType::E4M3};
    INFO(options.describe());
    Generator generator(3);
    const std::int64_t rows = 40, in = 300, out = 24;  // ragged against 32 and 128
    const Tensor x = randn({rows, in}, generator).requires_grad_(true);
    const Tensor w = randn({out, in}, generator).requires_grad_(true);
    const Tensor b = randn({out}, generator).requires_grad_(true);
    const Tensor y = fp8_linear(x, w, b, options);
    CHECK(y.dtype() == DType::BF16);
    // Forward: the codes of x and W along their columns, in f64, plus the bias.
    const auto deq = [&](const Tensor& t, Fp8Role role, bool rows_) {
      return kernels::fp8_dequantize(fp8_quantize_operand(t.detach(), role, rows_, options, nullptr));
    };
    std::vector<double> expected = product(deq(x, Fp8Role::Input, false), deq(w, Fp8Role::Weight, false), false, true);
    const std::vector<double> bias = b.to_vector<double>();
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += bias[i % out];
    check_near(y, expected, gemm_tolerance(expected, in, DType::BF16));
    // Backward with an upstream gradient of our choosing: dy quantised along its columns for dx and
    // along its rows for dW; W along its rows, x along its rows.
    const Tensor g = randn({rows, out}, generator).to(DType::BF16);
    backward(y, g);
    const std::vector<double> dx = product(deq(g, Fp8Role::GradOutput, false), deq(w, Fp8Role::Weight, true), false,
                                           false);
    check_near(x.grad(), dx, gemm_tolerance(dx, out, DType::F32));
    const std::vector<double> dw = product(deq(g, Fp8Role::GradOutput, true), deq(x, Fp8Role::Input, true), true,
                                           false);
    check_near(w.grad(), dw, gemm_tolerance(dw, rows, DType::F32));
    CHECK(w.grad().dtype() == DType::F32);
    // db: dy's bf16 values summed in f32, no FP8 at all.
    const std::vector<double> gv = g.to_vector<double>();
    std::vector<double> db(static_cast<std::size_t>(out), 0.0);
    for (std::size_t i = 0; i < gv.size(); ++i) db[i % out] += gv[i];
    check_near(b.grad(), db, rows * 0x1p-24 * 64.0);
    // And all of it near the exact f32 linear: FP8 costs a few percent here, not more.
    const std::vector<double> exact = product(x.detach(), w.detach(), false, true);
    std::vector<double> with_bias = exact;
    for (std::size_t i = 0; i < with_bias.size(); ++i) with_bias[i] += bias[i % out];
    check_near(y, with_bias, 0.1 * std::sqrt(static_cast<double>(in)) * 4.0);
  }
}

TEST_CASE("fp8_linear: a Linear's delayed-scaling state records x, W and dy, and lives in its state dict") {
  Generator generator(5);
  nn::Linear layer(8, 4, true, generator);
  const amp::Recipe recipe = amp::Recipe::parse("fp8_delayed");
  recipe.prepare(layer);
  const StateDict state = layer.state_dict();
  REQUIRE(state.count("fp8_amax_history") == 1);
  CHECK(state.at("fp8_amax_history").shape() == Shape{3, recipe.fp8->amax_history_len});
  CHECK(state.at("fp8_scale").dtype() == DType::F32);
  const Tensor x = randn({6, 8}, generator);
  Tensor y;
  {
    Autocast region = recipe.autocast();
    CHECK(fp8_autocast_options() != nullptr);
    y = layer(x);
  }
  CHECK(fp8_autocast_options() == nullptr);
  const Tensor g = full({6, 4}, 0.5, {.dtype = DType::BF16});
  backward(y, g);
  const float* history = layer.fp8_history.amax_history.data<float>();
  const std::int64_t len = recipe.fp8->amax_history_len;
  CHECK(history[0] == static_cast<float>(max(abs(x)).item()));
  CHECK(history[len] == static_cast<float>(max(abs(layer.weight)).item()));
  CHECK(history[2 * len] == 0.5f);
  // Next step's scales: E4M3's 448 (and E5M2's 57344 for dy) over those amaxes.
  CHECK(layer.fp8_history.scale.data<float>()[2] == 57344.0f / 0.5f);
  // enable_fp8 again with the same length is a no-op, with another an error.
  layer.enable_fp8(static_cast<int>(len));
  check_error([&] { layer.enable_fp8(3); }, "already enabled");
}

TEST_CASE("fp8 recipes: the Trainer trains every example model a few steps, and the loss falls") {
  struct Model {
    std::string name;
    std::function<std::shared_ptr<nn::Module>(Generator&)> build;
    Tensor inputs, labels;
  };
  Generator data(11);
  const Tensor images = randn({16, 1, 12, 12}, data), classes = randint(0, 4, {16}, data);
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
      {"char_lstm", [](Generator& g) { return std::make_shared<nn::CharLSTM>(12, 8, 16, 1, g); },
       slice(tokens, 1, 0, 8), slice(tokens, 1, 1, 9)},
      {"tiny_gpt",
       [](Generator& g) {
         return std::make_shared<nn::TinyGPT>(
             nn::GptOptions{.vocab = 12, .block_size = 8, .embed_dim = 16, .heads = 2, .layers = 1}, g);
       },
       slice(tokens, 1, 0, 8), slice(tokens, 1, 1, 9)},
  };
  for (const std::string& name : kFp8Recipes) {
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

TEST_CASE("fp8 recipes: a checkpoint resumes delayed scaling bit for bit") {
  TempDir tmp;
  Generator data(2);
  const Tensor x = randn({32, 20}, data), labels = randint(0, 3, {32}, data);
  const train::TrainerOptions options{.recipe = amp::Recipe::parse("fp8_delayed"),
                                      .optimizer = {.name = "sgd", .lr = 0.1, .momentum = 0.9}};
  auto build = [] {
    Generator init(9);
    return nn::mlp({20, 16, 3}, init);
  };
  train::Trainer first(build(), options);
  for (int step = 0; step < 3; ++step) first.step(x, labels);
  const std::string path = tmp / "fp8.safetensors";
  train::save_checkpoint(path, first.checkpoint_objects());
  std::vector<double> continued;
  for (int step = 0; step < 3; ++step) continued.push_back(first.step(x, labels).loss.item());

  train::Trainer second(build(), options);
  train::load_checkpoint(path, second.checkpoint_objects());
  for (int step = 0; step < 3; ++step) CHECK(second.step(x, labels).loss.item() == continued[step]);
  const StateDict a = first.model().state_dict(), b = second.model().state_dict();
  int histories = 0;
  for (const auto& [name, tensor] : a)
    if (name.find("fp8_") != std::string::npos) {
      ++histories;
      CHECK(tensor.to_vector<double>() == b.at(name).to_vector<double>());
    }
  CHECK(histories == 4);  // two Linear layers, each an amax history and a scale
}

TEST_CASE("fp8_linear: bad input is refused with the op's name") {
  const Tensor x = ones({2, 4}), w = ones({3, 4});
  const Fp8Options current{.scaling = Fp8Scaling::Current};
  check_error([&] { (void)fp8_linear(x, ones({3, 5}), {}, current); }, "mg::fp8_linear");
  check_error([&] { (void)fp8_linear(x, w, ones({4}), current); }, "the bias must be [out]");
  check_error([&] { (void)fp8_linear(x.to(DType::E4M3), w, {}, current); }, "FP8 codes are made inside");
  check_error([&] { (void)fp8_linear(x, w, {}, {.scaling = Fp8Scaling::Delayed}); }, "enable_fp8");
  if (cuda_device_count() > 0)
    check_error([&] { (void)fp8_linear(x.to(Device::cuda()), w, {}, current); }, "must be on one device");
}

TEST_CASE("fp8_linear: the memory report counts the saved FP8 codes, one byte an element") {
  // A lone Linear, input not requiring grad: under mixed_bfloat16 the tape keeps x and W in bf16
  // (2 bytes each: W's cached cast is not a parameter); under fp8_current it keeps their codes and
  // one f32 scale_inv each.
  const std::int64_t rows = 32, in = 24, out = 8;
  Generator generator(7);
  const Tensor x = randn({rows, in}, generator);
  for (const std::string name : {"mixed_bfloat16", "fp8_current"}) {
    INFO(name);
    nn::Linear layer(in, out, true, generator);
    const amp::Recipe recipe = amp::Recipe::parse(name);
    recipe.prepare(layer);
    optim::SGD sgd(layer.parameters(), {.lr = 0.1});
    Autocast region = recipe.autocast();
    const Tensor y = layer(x);
    const amp::MemoryReport report = amp::memory_report(sgd);
    const std::size_t elements = static_cast<std::size_t>(rows * in + out * in);
    CHECK(report.saved_activations == (recipe.fp8 ? elements + 2 * sizeof(float) : 2 * elements));
    backward(sum(cast(y, DType::F32)));  // releases what the tape saved before the next recipe
  }
}

TEST_CASE("fp8 recipes: a model trained under fp8_delayed loads into an f32 copy for scoring") {
  // train::load_fp32_ (what mixgrad repro scores with): the copy runs no FP8, so the layers' amax
  // histories stay behind, and the weights arrive as they are.
  Generator data(4);
  const Tensor x = randn({16, 10}, data), labels = randint(0, 3, {16}, data);
  auto build = [] {
    Generator init(3);
    return nn::mlp({10, 8, 3}, init);
  };
  train::Trainer trainer(build(), {.recipe = amp::Recipe::parse("fp8_delayed"), .optimizer = {.name = "sgd"}});
  trainer.step(x, labels);
  std::shared_ptr<nn::Sequential> copy = build();
  train::load_fp32_(*copy, trainer.model(), trainer.optimizer());
  CHECK(copy->state_dict().count("1.fp8_scale") == 0);
  const StateDict trained = trainer.model().state_dict();
  CHECK(copy->state_dict().at("1.weight").to_vector<double>() == trained.at("1.weight").to_vector<double>());
}

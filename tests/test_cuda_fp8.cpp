// The FP8 kernels on a GPU (kernels/cuda/fp8.cu) against the CPU's (kernels/cpu/fp8.cpp), mg::fp8_linear
// on a GPU against the CPU (every scaling; delayed with its history on either device), an nn::Linear
// trained there under the fp8_delayed recipe, every example model a few steps under every FP8 recipe,
// the argument checks, and the refusal of a GPU older than sm_89. The FP8 GEMM's cases (rungs 1 and 3,
// the accumulator): tests/test_cuda_fp8_gemm.cpp.
//
// Quantisation: block amax, codes, scale_inv and dequantised values are the CPU's bit for bit (any NaN
// matching any NaN), for f32/f16/bf16 inputs, every block shape of kernels/fp8.h, both formats, with
// saturation, inf, NaN, -0 and subnormal codes in the data.
#include "tests/testing.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/fp8.h"
#include "nn/models.h"
#include "tests/fp8_gemm_cases.h"

using namespace mg;
using namespace mg::testing;
using kernels::Fp8Accumulator;
using kernels::Fp8Blocks;
using kernels::Fp8Tensor;

using namespace mg::testing::fp8_cases;

TEST_CASE("cuda fp8: amax, quantisation and dequantisation are the CPU's bit for bit") {
  if (!have_gpu()) return;
  const std::vector<Fp8Blocks> block_shapes{{0, 0}, {1, 128}, {128, 128}, {1, 32}, {32, 1}, {128, 1}};
  int cases = 0;
  for (const Shape& shape : {Shape{37, 150}, Shape{150, 37}})
    for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      // Values across the formats' ranges, with the cases of the codec's table: overflow (the 4x scales
      // below saturate), inf, NaN, -0, and values far below the scales (subnormal codes and 0).
      std::vector<double> v = spread_randn(shape[0], shape[1], 7).to_vector<double>();
      v[3] = std::numeric_limits<double>::infinity();
      v[40] = std::nan("");
      v[41] = -0.0;
      v[42] = 1e-5;
      v[v.size() - 1] = -3e-7;
      const Tensor x = from_vector(v, shape).to(dtype), gx = x.to(Device::cuda());
      for (const Fp8Blocks blocks : block_shapes)
        for (const DType format : {DType::E4M3, DType::E5M2}) {
          INFO(fmt::format("{} {} blocks {}x{} {}", shape, dtype, blocks.rows, blocks.cols, dtype_name(format)));
          const Tensor amax = kernels::fp8_block_amax(x, blocks), gpu_amax = kernels::fp8_block_amax(gx, blocks);
          CHECK(gpu_amax.device() == Device::cuda());
          check_same_bits("amax", gpu_amax, amax);
          // Every third block's scale 4x too large: as delayed scaling meets a grown amax.
          std::vector<double> scale = scales_for(amax, format, false).to_vector<double>();
          for (std::size_t i = 0; i < scale.size(); i += 3) scale[i] *= 4.0;
          const Tensor s = from_vector(scale, amax.shape());
          const Fp8Tensor q = kernels::fp8_quantize(x, s, blocks, format);
          const Fp8Tensor gq = kernels::fp8_quantize(gx, s.to(Device::cuda()), blocks, format);
          CHECK(gq.codes.device() == Device::cuda());
          check_same_bits("codes", gq.codes, q.codes);
          check_same_bits("scale_inv", gq.scale_inv, q.scale_inv);
          check_same_bits("dequantized", kernels::fp8_dequantize(gq), kernels::fp8_dequantize(q));
          ++cases;
        }
    }
  CHECK(cases == 72);
}

// The recipes' quantisation on the device (kernels::fp8_quantize_fitted, fp8_quantize_delayed): the
// scales computed beside the amax (kernels/fp8_scale.h compiled for the device), the row-wise codes and
// the column-wise copy through the transposing tiles; the CPU's bits, and the history's.
TEST_CASE("cuda fp8: scales made on the device, row-wise codes and the column-wise copy are the CPU's bit for bit") {
  if (!have_gpu()) return;
  using kernels::Fp8Copies;
  using kernels::Fp8ScaleRule;
  using Kind = Fp8ScaleRule::Kind;
  std::vector<double> v = spread_randn(70, 45, 9).to_vector<double>();  // tiles cut at 32: edges on both sides
  v[5] = 1e-30;
  const Tensor x = from_vector(v, {70, 45}).to(DType::BF16), gx = x.to(Device::cuda());
  const std::vector<std::pair<Fp8Blocks, Fp8ScaleRule>> cases{
      {{0, 0}, {.kind = Kind::PerTensor, .margin = 1}},
      {{0, 0}, {.kind = Kind::PerTensor, .format = DType::E5M2, .power_of_two = true}},
      {{1, 32}, {.kind = Kind::Block}},
      {{32, 32}, {.kind = Kind::Block, .power_of_two = true}},
      {{32, 1}, {.kind = Kind::Mx}},
      {{1, 32}, {.kind = Kind::Mx, .format = DType::E5M2, .mx_floor = false}}};
  for (const auto& [blocks, rule] : cases)
    for (const Fp8Copies copies : {Fp8Copies::RowWise, Fp8Copies::ColumnWise, Fp8Copies::Both}) {
      INFO(fmt::format("blocks {}x{}, rule {}, copies {}", blocks.rows, blocks.cols, static_cast<int>(rule.kind),
                       static_cast<int>(copies)));
      const kernels::Fp8Quantized q = kernels::fp8_quantize_fitted(x, blocks, rule, copies);
      const kernels::Fp8Quantized gq = kernels::fp8_quantize_fitted(gx, blocks, rule, copies);
      check_same_bits("amax", gq.amax, q.amax);
      for (const auto& [gpu, cpu] : {std::pair{gq.rowwise, q.rowwise}, std::pair{gq.columnwise, q.columnwise}}) {
        REQUIRE(gpu.codes.defined() == cpu.codes.defined());
        if (!cpu.codes.defined()) continue;
        CHECK(gpu.blocks == cpu.blocks);
        check_same_bits("codes", gpu.codes, cpu.codes);
        check_same_bits("scale_inv", gpu.scale_inv, cpu.scale_inv);
      }
    }
  // Delayed: three steps of a history on the device, against the same on the CPU.
  Tensor history = zeros({3, 4}), scale = ones({3});
  Tensor g_history = history.to(Device::cuda()), g_scale = scale.to(Device::cuda());
  for (int step = 0; step < 3; ++step) {
    INFO("delayed, step " << step);
    const Tensor xs = (x.to(DType::F32) * full({}, std::exp2(step * 3))).to(DType::BF16);  // the amax grows
    const Fp8ScaleRule rule{.margin = step};
    const kernels::Fp8Quantized q = kernels::fp8_quantize_delayed(xs, history, scale, 1, rule, false, Fp8Copies::Both);
    const kernels::Fp8Quantized gq = kernels::fp8_quantize_delayed(xs.to(Device::cuda()), g_history, g_scale, 1, rule,
                                                                   false, Fp8Copies::Both);
    check_same_bits("codes", gq.rowwise.codes, q.rowwise.codes);
    check_same_bits("column-wise codes", gq.columnwise.codes, q.columnwise.codes);
    check_same_bits("scale_inv", gq.columnwise.scale_inv, q.columnwise.scale_inv);
    check_same_bits("amax history", g_history, history);
    check_same_bits("scale", g_scale, scale);
  }
  CHECK(history.data<float>()[4 + 2] > 0.0f);  // role 1's row holds three steps
  check_error([&] { (void)kernels::fp8_quantize_delayed(gx, history, scale, 1, {}, false, Fp8Copies::Both); },
              "kernels::fp8_quantize_delayed: the amax history is on cpu");
}

TEST_CASE("cuda fp8: fp8_linear forward and backward on the GPU are the CPU's") {
  if (!have_gpu()) return;
  const Fp8Accumulator promoted_every_32 = device_accumulator(32);  // the GPU's F32 mode, on the CPU
  // Delayed twice: its history on the CPU, and on the GPU (a Linear's buffers, moved with it).
  const std::vector<std::pair<Fp8Scaling, bool>> runs{{Fp8Scaling::Current, false},
                                                      {Fp8Scaling::Delayed, false},
                                                      {Fp8Scaling::Delayed, true},
                                                      {Fp8Scaling::Block, false},
                                                      {Fp8Scaling::Mx, false}};
  // Two sizes: 6 x 40 -> 24 on rung 1 (k = 40, 24 and 6), and 32 x 64 -> 48, whose k (64, 48 and 32) put
  // every recipe's three GEMMs on rung 3 (K-major operands from the column-wise copies).
  for (const auto& [rows, in, out] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{6, 40, 24}, {32, 64, 48}})
    for (const auto& [scaling, history_on_gpu] : runs) {
      const Fp8Options options{.scaling = scaling, .accumulator = promoted_every_32};
      INFO(options.describe() << (history_on_gpu ? std::string(", history on the GPU") : std::string()) << ", " << rows
                              << " x " << in << " -> " << out);
      Generator generator(5);
      const Tensor x = randn({rows, in}, generator).requires_grad_(true);
      const Tensor w = randn({out, in}, generator).requires_grad_(true);
      const Tensor b = randn({out}, generator).requires_grad_(true);
      const Tensor g = randn({rows, out}, generator).to(DType::BF16);
      const Tensor gx = x.detach().to(Device::cuda()).requires_grad_(true);
      const Tensor gw = w.detach().to(Device::cuda()).requires_grad_(true);
      const Tensor gb = b.detach().to(Device::cuda()).requires_grad_(true);
      Fp8History history = Fp8History::fresh(4), gpu_history = Fp8History::fresh(4);
      if (history_on_gpu)
        gpu_history = {gpu_history.amax_history.to(Device::cuda()), gpu_history.scale.to(Device::cuda())};
      for (int step = 0; step < 2; ++step) {  // delayed scaling: the second step uses the recorded amax
        INFO("step " << step);
        const Tensor y = fp8_linear(x, w, b, options, &history);
        const Tensor gy = fp8_linear(gx, gw, gb, options, &gpu_history);
        CHECK(gy.device() == Device::cuda());
        backward(y, g, {.keep_tape = true});  // the GPU graph is on the tape too
        backward(gy, g.to(Device::cuda()));
        const auto compare = [](const std::string& what, const Tensor& gpu, const Tensor& cpu) {
          if (cuda_emulated())
            check_same_bits(what, gpu, cpu);
          else  // the hardware's accumulator is not the model's for sure: the bound, with G = 1
            check_close(gpu.to(Device::cpu()).to(DType::F64), cpu.to(DType::F64), 0.02, 0.02);
        };
        compare("y", gy, y);
        compare("dx", gx.grad(), x.grad());
        compare("dW", gw.grad(), w.grad());
        check_close(gb.grad().to(Device::cpu()).to(DType::F64), b.grad().to(DType::F64), 1e-6, 1e-6);  // f32 sums
        CHECK(gpu_history.scale.device() == (history_on_gpu ? Device::cuda() : Device::cpu()));
        check_same_bits("amax history", gpu_history.amax_history, history.amax_history);
        check_same_bits("scales", gpu_history.scale, history.scale);
        for (Tensor t : {x, w, b, gx, gw, gb}) t.zero_grad();
      }
    }
  // Operands on two devices are refused with the op's name.
  check_error([&] { (void)fp8_linear(ones({2, 4}).to(Device::cuda()), ones({3, 4}), {}, {}); }, "mg::fp8_linear");
}

TEST_CASE("cuda fp8: an nn::Linear under the fp8_delayed recipe trains on the GPU, its history with it") {
  if (!have_gpu()) return;
  const amp::Recipe recipe = amp::Recipe::parse("fp8_delayed");
  Generator generator(11);
  auto layer = std::make_shared<nn::Linear>(40, 24, true, generator);
  recipe.prepare(*layer);  // the delayed-scaling buffers
  layer->to(Device::cuda());
  REQUIRE(layer->fp8_history.amax_history.device() == Device::cuda());
  const Tensor x = randn({6, 40}, generator);
  const double amax = kernels::fp8_block_amax(x, {}).item();
  for (int step = 0; step < 2; ++step) {
    Tensor loss;
    {
      Autocast region = recipe.autocast();
      loss = sum(cast((*layer)(x.to(Device::cuda())), DType::F32));
    }
    backward(loss);
    const Tensor grad = layer->weight.grad();
    REQUIRE(grad.defined());
    CHECK(grad.device() == Device::cuda());
    for (double g : grad.to(Device::cpu()).to_vector<double>()) REQUIRE(std::isfinite(g));
    layer->weight.zero_grad();
    layer->bias.zero_grad();
  }
  // The input's row of the history: this step's amax, then the last one's (written back to the GPU).
  const std::vector<double> history = layer->fp8_history.amax_history.to(Device::cpu()).to_vector<double>();
  CHECK(history[0] == amax);
  CHECK(history[1] == amax);
}

TEST_CASE("cuda fp8: every example model trains a few steps under every FP8 recipe on the GPU") {
  if (!have_gpu()) return;
  // Tiny shapes (the emulator runs a kernel ~1000x slower than the CPU's loop): the first step's loss
  // is the CPU's within the bound of an FP8 GEMM, and 4 steps of Adam on one batch lower it.
  // Under the sanitizers (MG_TEST_REDUCED) the MLP and the GPT under two recipes only.
  Generator data(11);
  const Tensor images = randn({8, 1, 8, 8}, data), classes = randint(0, 3, {8}, data);
  const Tensor tokens = randint(0, 7, {2, 7}, data);
  const Tensor context = slice(tokens, 1, 0, 6), next = slice(tokens, 1, 1, 7);
  struct Model {
    std::string name;
    std::function<std::shared_ptr<nn::Module>(Generator&)> build;
    Tensor inputs, labels;
  };
  std::vector<Model> models{
      {"mlp",
       [](Generator& g) {
         return nn::mlp({64, 16, 3}, g);
       },
       images, classes},
      {"tiny_gpt",
       [](Generator& g) {
         return std::make_shared<nn::TinyGPT>(
             nn::GptOptions{.vocab = 7, .block_size = 6, .embed_dim = 8, .heads = 2, .layers = 1}, g);
       },
       context, next},
  };
  std::vector<std::string> recipes{"fp8_delayed", "mxfp8"};
  if (!reduced_sizes()) {
    models.push_back({"cnn",
                      [](Generator& g) {
                        return nn::cnn({.image_size = 8, .channels1 = 2, .channels2 = 4, .hidden = 8, .classes = 3}, g);
                      },
                      images, classes});
    models.push_back(
        {"char_lstm", [](Generator& g) { return std::make_shared<nn::CharLSTM>(7, 4, 8, 1, g); }, context, next});
    recipes = {"fp8_delayed", "fp8_current", "fp8_block", "mxfp8"};
  }
  for (const std::string& name : recipes) {
    for (const Model& m : models) {
      INFO(name << " " << m.name);
      auto run = [&](Device device) {
        Generator init(1);
        train::Trainer trainer(m.build(init), {.recipe = amp::Recipe::parse(name),
                                               .optimizer = {.name = "adam", .lr = 0.02},
                                               .device = device});
        std::vector<double> losses;
        for (int step = 0; step < 4; ++step)
          losses.push_back(trainer.step(m.inputs.to(device), m.labels.to(device)).loss.item());
        return losses;
      };
      const std::vector<double> gpu = run(Device::cuda()), cpu = run(Device::cpu());
      CHECK(std::fabs(gpu[0] - cpu[0]) <= 0.02 * std::fabs(cpu[0]));
      CHECK(std::isfinite(gpu.back()));
      CHECK(gpu.back() < gpu.front());
    }
  }
}

TEST_CASE("cuda fp8: argument checks") {
  if (!have_gpu()) return;
  const Tensor x = ones({4, 64});
  const Fp8Tensor q = kernels::fp8_quantize(x, ones({1, 1}), {}, DType::E4M3), gq = on(q, Device::cuda());
  Tensor c = Tensor::empty({4, 4}, {.device = Device::cuda()});
  const kernels::GemmShape shape{.m = 4, .n = 4, .k = 64, .transpose_b = true};
  // Operands on two devices.
  check_error([&] { kernels::fp8_gemm(gq, q, c, shape); }, "must be on one device");
  check_error([&] { kernels::fp8_gemm({gq.codes, q.scale_inv, {}}, gq, c, shape); }, "the codes' device");
  check_error([&] { (void)kernels::fp8_quantize(x.to(Device::cuda()), ones({1, 1}), {}, DType::E4M3); }, "scale");
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {}, {.bias = ones({4})}); }, "C's device");
  // A GPU's Limited accumulator is the device's own (kernels/fp8.h), whatever else is asked for.
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {.limited = true, .mantissa_bits = 10}); },
              "Tensor Core's own");
  check_error([&] { kernels::fp8_gemm(gq, gq, c, shape, {.limited = true, .group = 8, .promote_every = 32}); },
              "only promote_every");
  // Rung 1's grid holds n up to 65535 x 16; past it a GEMM rung 3 cannot take (B [k, n]) is refused.
  const std::int64_t wide = 65536 * 16 + 1;
  const auto codes = [](const Shape& shape) {
    return Fp8Tensor{Tensor::empty(shape, {.dtype = DType::E4M3, .device = Device::cuda()}),
                     ones({1, 1}).to(Device::cuda()),
                     {}};
  };
  Tensor wide_c = Tensor::empty({1, wide}, {.device = Device::cuda()});
  check_error(
      [&] {
        kernels::fp8_gemm(codes({1, 16}), codes({16, wide}), wide_c, {.m = 1, .n = wide, .k = 16});
      },
      "beyond rung 1");
  // A scale that is not finite and positive is found on the GPU too (read back).
  check_error(
      [&] {
        (void)kernels::fp8_quantize(x.to(Device::cuda()), zeros({1, 1}).to(Device::cuda()), {}, DType::E4M3);
      },
      "finite positive");
}

// Registered as its own ctest entry (test_cuda_fp8_before_sm89) with MG_EMULATOR_COMPUTE_CAPABILITY=80:
// the emulator then reports an A100's compute capability, and the GEMM must refuse it by name.
TEST_CASE("cuda fp8: a GPU older than sm_89 is refused, naming the device and its capability") {
  if (!have_gpu()) return;
  const char* capability = std::getenv("MG_EMULATOR_COMPUTE_CAPABILITY");
  if (!cuda_emulated() || capability == nullptr || std::atoi(capability) >= 89) {
    MESSAGE(
        "skipped: runs on the emulator with MG_EMULATOR_COMPUTE_CAPABILITY below 89 (ctest test_cuda_fp8_before_sm89)");
    return;
  }
  const Fp8Tensor q = on(kernels::fp8_quantize(ones({16, 32}), ones({1, 1}), {}, DType::E4M3), Device::cuda());
  Tensor c = Tensor::empty({16, 16}, {.device = Device::cuda()});
  const std::string expected = fmt::format("has compute capability {}.{}", std::atoi(capability) / 10,
                                           std::atoi(capability) % 10);
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, expected);
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, "sm_89");
  check_error([&] { kernels::fp8_gemm(q, q, c, {.m = 16, .n = 16, .k = 32, .transpose_b = true}); }, "cuda:0");
  // Quantisation needs no Tensor Cores: it runs there.
  CHECK(kernels::fp8_dequantize(q).to(Device::cpu()).to_vector<double>() == std::vector<double>(16 * 32, 1.0));
}

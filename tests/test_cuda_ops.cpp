// Every op, layer and recipe on a GPU against the same computation on the CPU (the backend is a
// parameter of the test, not a copy of it). The GPU cases skip with a message when no device is
// visible: CI compiles the CUDA backend but has no GPU.
//
// How a case runs (run_case):
//   1. inputs are drawn on the CPU from a seed, in the case's dtype, and copied to the GPU;
//   2. the op runs on both devices; the loss sum(cast(out, f32) * w), with fixed random weights w,
//      is backpropagated on both, so every input's gradient is exercised with non-uniform values;
//   3. forward values and every gradient are compared by normalised max error,
//      max |gpu - cpu| / max(1, max |cpu|), against factor * eps(dtype) (f16 2^-10, bf16 2^-7,
//      f32 2^-23 times 2^7: device exp/tanh/erf may differ from glibc's by a few f32 ulps, and
//      sums are added in another order). `factor` counts the roundings in series that may land on
//      different sides of a tie (1 per op, more for GEMMs and reductions, whose f32 sums run in
//      another order and can flip the final rounding by one ulp).
// Add a case: one line in op_cases() with a name, the input shapes, the op as a lambda and its factor.
// The CPU side of every op is itself gradchecked in f64 by the test_ops_* suites.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "nn/models.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const Inputs&)> op;
  double factor = 2.0;
  double low = -2.0, high = 2.0;  // the inputs' range (positive for log, sqrt, pow)
  bool differentiable = true;
};

double normalised_error(const Tensor& got, const Tensor& expected) {
  const std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
  REQUIRE(g.size() == e.size());
  double scale = 1.0, worst = 0.0;
  for (double v : e) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(g[i])) {
      CHECK_MESSAGE(std::isnan(e[i]) == std::isnan(g[i]), "element " << i << ": NaN on one device only");
      continue;
    }
    if (std::isinf(e[i]) || std::isinf(g[i])) {
      CHECK_MESSAGE(e[i] == g[i], "element " << i << ": " << g[i] << " vs " << e[i]);
      continue;
    }
    worst = std::max(worst, std::fabs(g[i] - e[i]) / scale);
  }
  return worst;
}

double allowed(DType dtype, double factor) {
  const double eps = dtype == DType::F32 ? 0x1p-16 : dtype_eps(dtype);  // f32: 2^-23 * 2^7
  return factor * eps;
}

void compare(const std::string& what, const Tensor& gpu, const Tensor& cpu, DType dtype, double factor) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu.dtype());
  CHECK(gpu.shape() == cpu.shape());
  const double error = normalised_error(gpu.to(Device::cpu()), cpu);
  CHECK_MESSAGE(error <= allowed(dtype, factor),
                what << ": normalised error " << error << " > " << allowed(dtype, factor));
}

// Runs one case in one dtype on both devices and compares values and gradients.
void run_case(const OpCase& c, DType dtype) {
  INFO(c.name << " in " << dtype_name(dtype));
  Generator generator(1234);
  Inputs cpu_inputs, gpu_inputs;
  for (const Shape& shape : c.shapes) {
    Tensor x = uniform(shape, c.low, c.high, generator).to(dtype).detach();
    Tensor y = x.to(Device::cuda()).detach();
    if (c.differentiable) {
      x.set_requires_grad(true);
      y.set_requires_grad(true);
    }
    cpu_inputs.push_back(x);
    gpu_inputs.push_back(y);
  }
  const Tensor cpu_out = c.op(cpu_inputs);
  const Tensor gpu_out = c.op(gpu_inputs);
  compare("forward", gpu_out, cpu_out, dtype, c.factor);
  if (!c.differentiable) return;
  const Tensor weights = uniform(cpu_out.shape(), -1.0, 1.0, generator);
  // Both graphs are on this thread's tape, and a backward clears the whole tape: the first keeps it.
  backward(sum(mul(cast(cpu_out, DType::F32), weights)), {.keep_tape = true});
  backward(sum(mul(cast(gpu_out, DType::F32), weights.to(Device::cuda()))));
  for (std::size_t i = 0; i < cpu_inputs.size(); ++i) {
    REQUIRE(gpu_inputs[i].grad().defined() == cpu_inputs[i].grad().defined());
    if (cpu_inputs[i].grad().defined())
      compare("gradient of input " + std::to_string(i), gpu_inputs[i].grad(), cpu_inputs[i].grad(), dtype,
              c.factor * 2);
  }
}

std::vector<OpCase> op_cases() {
  const Shape m{7, 33};
  return {
      // elementwise: one rounding each (GELU, exp, tanh: device math within a few f32 ulps)
      {"neg", {m}, [](const Inputs& x) { return neg(x[0]); }, 1},
      {"exp", {m}, [](const Inputs& x) { return exp(x[0]); }, 2},
      {"log", {m}, [](const Inputs& x) { return log(x[0]); }, 2, 0.1, 4.0},
      {"sqrt", {m}, [](const Inputs& x) { return sqrt(x[0]); }, 1, 0.1, 4.0},
      {"abs", {m}, [](const Inputs& x) { return abs(x[0]); }, 1},
      {"tanh", {m}, [](const Inputs& x) { return tanh(x[0]); }, 2},
      {"sigmoid", {m}, [](const Inputs& x) { return sigmoid(x[0]); }, 2},
      {"relu", {m}, [](const Inputs& x) { return relu(x[0]); }, 1},
      {"gelu", {m}, [](const Inputs& x) { return gelu(x[0]); }, 2},
      {"silu", {m}, [](const Inputs& x) { return silu(x[0]); }, 2},
      {"leaky_relu", {m}, [](const Inputs& x) { return leaky_relu(x[0], 0.2); }, 1},
      {"clamp", {m}, [](const Inputs& x) { return clamp(x[0], -0.5, 0.75); }, 1},
      {"scalar ops", {m}, [](const Inputs& x) { return rdiv(3.0, add(mul(x[0], 1.5), 5.0)); }, 3},
      {"pow scalar", {m}, [](const Inputs& x) { return pow(x[0], 2.5); }, 2, 0.1, 3.0},
      // broadcasting: a bias add, a column, a scalar, and a rank-4 pattern that merges no dims
      {"add bias", {{5, 9}, {9}}, [](const Inputs& x) { return add(x[0], x[1]); }, 1},
      {"sub column", {{5, 9}, {5, 1}}, [](const Inputs& x) { return sub(x[0], x[1]); }, 1},
      {"mul scalar tensor", {{5, 9}, {}}, [](const Inputs& x) { return mul(x[0], x[1]); }, 1},
      {"div rank 4", {{2, 1, 3, 4}, {5, 1, 4}}, [](const Inputs& x) { return div(x[0], x[1]); }, 2, 0.5, 2.0},
      {"pow", {{4, 6}, {4, 6}}, [](const Inputs& x) { return pow(x[0], x[1]); }, 3, 0.5, 2.0},
      {"maximum", {{5, 9}, {9}}, [](const Inputs& x) { return maximum(x[0], x[1]); }, 1},
      {"minimum column", {{5, 9}, {5, 1}}, [](const Inputs& x) { return minimum(x[0], x[1]); }, 1},
      {"maximum ties", {{5, 9}}, [](const Inputs& x) { return maximum(x[0], relu(x[0])); }, 1},
      {"where", {{6, 5}, {6, 5}}, [](const Inputs& x) { return where(relu(x[0]), x[0], x[1]); }, 1},
      // an i32 mask (0 or 1: relu of [-2, 2) truncated), broadcast along the rows: read as its own type
      {"where i32 mask",
       {{6, 1}, {6, 5}, {6, 5}},
       [](const Inputs& x) { return where(cast(relu(x[0]), DType::I32), x[1], x[2]); },
       1},
      // GEMMs: K-long f32 sums in another order, then one rounding
      {"matmul", {{17, 40}, {40, 9}}, [](const Inputs& x) { return matmul(x[0], x[1]); }, 8},
      {"matmul NT", {{17, 40}, {9, 40}}, [](const Inputs& x) { return matmul(x[0], x[1], {.transpose_b = true}); }, 8},
      {"matmul TN", {{40, 17}, {40, 9}}, [](const Inputs& x) { return matmul(x[0], x[1], {.transpose_a = true}); }, 8},
      {"batched matmul", {{3, 5, 16}, {3, 16, 7}}, [](const Inputs& x) { return matmul(x[0], x[1]); }, 8},
      {"matmul broadcast batch", {{1, 5, 16}, {3, 16, 7}}, [](const Inputs& x) { return matmul(x[0], x[1]); }, 8},
      {"matmul vector", {{5, 16}, {16}}, [](const Inputs& x) { return matmul(x[0], x[1]); }, 8},
      {"linear 784 to 10",
       {{8, 784}, {10, 784}, {10}},
       [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
       16,
       -0.1,
       0.1},
      // reductions
      {"sum all", {m}, [](const Inputs& x) { return sum(x[0]); }, 16},
      {"sum dim 0", {m}, [](const Inputs& x) { return sum(x[0], 0); }, 8},
      {"mean dim 1", {m}, [](const Inputs& x) { return mean(x[0], 1, true); }, 8},
      {"max dim 1", {m}, [](const Inputs& x) { return max(x[0], 1); }, 1},
      {"max dim 1 of 3 (inner > 1)", {{5, 3, 4}}, [](const Inputs& x) { return max(x[0], 1); }, 1},
      {"min dim 0", {m}, [](const Inputs& x) { return min(x[0], 0); }, 1},
      {"sum dims 0 and 2",
       {{5, 3, 4}},
       [](const Inputs& x) {
         return sum(x[0], {0, 2});
       },
       8},
      {"logsumexp dim 1", {m}, [](const Inputs& x) { return logsumexp(x[0], {1}); }, 8},
      {"var dims 0 and 2",
       {{5, 3, 4}},
       [](const Inputs& x) {
         return var(x[0], {0, 2});
       },
       8},
      {"std dim 1", {m}, [](const Inputs& x) { return mg::std(x[0], {1}, {.keepdim = true}); }, 8},
      // softmax and losses (f32 math inside)
      {"softmax", {{6, 11}}, [](const Inputs& x) { return softmax(x[0], -1); }, 4},
      {"log_softmax dim 0", {{6, 11}}, [](const Inputs& x) { return log_softmax(x[0], 0); }, 4},
      {"mse", {{6, 5}, {6, 5}}, [](const Inputs& x) { return mse_loss(x[0], x[1]); }, 8},
      // norms: f32 statistics
      {"layer_norm", {{6, 32}, {32}, {32}}, [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }, 8},
      {"batch_norm",
       {{8, 3, 4, 4}, {3}, {3}},
       [](const Inputs& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2]); },
       8},
      // convolution and pooling
      {"conv2d",
       {{2, 3, 9, 9}, {4, 3, 3, 3}, {4}},
       [](const Inputs& x) { return conv2d(x[0], x[1], x[2], {.stride = 2, .padding = 1}); },
       8},
      {"max_pool2d overlapping",
       {{2, 3, 7, 7}},
       [](const Inputs& x) { return max_pool2d(x[0], {.kernel = 3, .stride = 2, .padding = 1}); },
       1},
      {"avg_pool2d", {{2, 3, 8, 8}}, [](const Inputs& x) { return avg_pool2d(x[0], {.kernel = 2}); }, 2},
      // data movement: exact
      {"transpose", {{4, 5, 6}}, [](const Inputs& x) { return transpose(x[0], 0, 2); }, 0},
      {"cat and slice",
       {{3, 4}, {3, 2}},
       [](const Inputs& x) {
         return slice(cat({x[0], x[1]}, 1), 1, 1, 5);
       },
       0},
      // along dim 0 each block is one contiguous run: one plain copy instead of a 2-D one
      {"cat dim 0",
       {{2, 5}, {3, 5}},
       [](const Inputs& x) {
         return cat({x[0], x[1]}, 0);
       },
       0},
  };
}

}  // namespace

TEST_CASE("every op on a GPU matches the CPU, forward and backward, in f32, f16 and bf16") {
  if (!have_gpu()) return;
  for (const OpCase& c : op_cases())
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) run_case(c, dtype);
}

TEST_CASE("casts on a GPU are the CPU's bit for bit, subnormals, overflow, NaN and i32 included") {
  if (!have_gpu()) return;
  // NaN and -inf as well: to i32 they must give the CPU's 0 and saturation, not the hardware's choice.
  const Tensor values = from_vector({0.0, -0.0, 1.0, 65504.0, 65520.0, 0x1p-24, 0x1p-25, 1e-30, -3.75, 16777217.0, 3e9,
                                     -3e9, 1.0 / 3.0, std::numeric_limits<double>::quiet_NaN(),
                                     -std::numeric_limits<double>::infinity()},
                                    {15});
  for (DType from : {DType::F32, DType::F16, DType::BF16, DType::I32})
    for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor source = from == DType::I32 ? from_vector({0, -7, 2049, 16777217, 2147483647}, {5}, {.dtype = DType::I32})
                                         : values.to(from);
      check_close(cast(source.to(Device::cuda()), to).to(Device::cpu()), cast(source, to), 0.0, 0.0);
    }
}

TEST_CASE("cross entropy on a GPU matches the CPU, ignore_index and every reduction included") {
  if (!have_gpu()) return;
  Generator generator(5);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dtype));
    Tensor logits = uniform({9, 13}, -3.0, 3.0, generator).to(dtype).detach().set_requires_grad(true);
    Tensor labels = from_vector({0, 12, 3, -100, 5, 5, 7, 1, 2}, {9}, {.dtype = DType::I32});
    Tensor gpu_logits = logits.to(Device::cuda()).detach().set_requires_grad(true);
    for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
      Tensor cpu_loss = cross_entropy(logits, labels, {.reduction = reduction});
      Tensor gpu_loss = cross_entropy(gpu_logits, labels.to(Device::cuda()), {.reduction = reduction});
      compare("loss", gpu_loss, cpu_loss, dtype, 8);
      backward(cpu_loss, {.keep_tape = true});  // the GPU graph is on the tape too
      backward(gpu_loss);
      compare("gradient", gpu_logits.grad(), logits.grad(), dtype, 8);
      logits.zero_grad();
      gpu_logits.zero_grad();
    }
  }
}

TEST_CASE("embedding, dropout and the LSTM recurrence on a GPU match the CPU") {
  if (!have_gpu()) return;
  Generator generator(8);
  // Dropout draws the same Philox words on either device: the same mask, exactly.
  Tensor x = uniform({33, 17}, -1.0, 1.0, generator);
  Generator cpu_gen(3), gpu_gen(3);
  check_close(dropout(x.to(Device::cuda()), 0.3, true, gpu_gen).to(Device::cpu()), dropout(x, 0.3, true, cpu_gen), 0.0,
              0.0);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dtype));
    Tensor table = uniform({11, 6}, -1.0, 1.0, generator).to(dtype).detach().set_requires_grad(true);
    Tensor gpu_table = table.to(Device::cuda()).detach().set_requires_grad(true);
    Tensor tokens = from_vector({3, 3, 10, 0, 3, 7, 7}, {7}, {.dtype = DType::I32});  // repeats accumulate
    Tensor cpu_rows = embedding(table, tokens), gpu_rows = embedding(gpu_table, tokens.to(Device::cuda()));
    compare("embedding", gpu_rows, cpu_rows, dtype, 0);
    backward(sum(cast(cpu_rows, DType::F32)), {.keep_tape = true});  // the GPU graph is on the tape too
    backward(sum(cast(gpu_rows, DType::F32)));
    compare("embedding gradient", gpu_table.grad(), table.grad(), dtype, 1);
    // With padding_idx 3 (used three times): its gradient row is 0 on both devices.
    table.zero_grad();
    gpu_table.zero_grad();
    Tensor cpu_padded = embedding(table, tokens, 3), gpu_padded = embedding(gpu_table, tokens.to(Device::cuda()), 3);
    backward(sum(cast(cpu_padded, DType::F32)), {.keep_tape = true});
    backward(sum(cast(gpu_padded, DType::F32)));
    compare("embedding gradient with padding_idx", gpu_table.grad(), table.grad(), dtype, 1);
    CHECK(gpu_table.grad().to(Device::cpu()).to_vector<double>()[3 * 6] == 0.0);

    const std::int64_t T = 5, B = 3, H = 8;
    Inputs cpu_in{uniform({T, B, 4 * H}, -1.0, 1.0, generator).to(dtype),
                  uniform({4 * H, H}, -0.5, 0.5, generator).to(dtype), uniform({4 * H}, -0.5, 0.5, generator).to(dtype),
                  uniform({B, H}, -0.5, 0.5, generator).to(dtype), uniform({B, H}, -0.5, 0.5, generator).to(dtype)};
    Inputs gpu_in;
    for (Tensor& t : cpu_in) {
      t = t.detach().set_requires_grad(true);
      gpu_in.push_back(t.to(Device::cuda()).detach().set_requires_grad(true));
    }
    Tensor cpu_hc = lstm_recurrence(cpu_in[0], cpu_in[1], cpu_in[2], cpu_in[3], cpu_in[4]);
    Tensor gpu_hc = lstm_recurrence(gpu_in[0], gpu_in[1], gpu_in[2], gpu_in[3], gpu_in[4]);
    compare("lstm", gpu_hc, cpu_hc, dtype, 4 * T);
    backward(sum(cast(cpu_hc, DType::F32)), {.keep_tape = true});
    backward(sum(cast(gpu_hc, DType::F32)));
    for (std::size_t i = 0; i < cpu_in.size(); ++i)
      compare("lstm gradient " + std::to_string(i), gpu_in[i].grad(), cpu_in[i].grad(), dtype, 8 * T);
  }
}

TEST_CASE("the example models train on a GPU under every recipe as they do on the CPU") {
  if (!have_gpu()) return;
  for (const char* model_name : {"mlp", "cnn"})
    for (const char* name : {"fp32", "mixed_float16", "mixed_bfloat16", "float16_master"}) {
      INFO(model_name << " under " << name);
      const amp::Recipe recipe = amp::Recipe::parse(name);
      std::vector<double> losses[2];
      for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
        const Device device = on_gpu ? Device::cuda() : Device::cpu();
        Generator generator(21);
        std::shared_ptr<nn::Sequential> model = std::string(model_name) == "mlp"
                                                    ? nn::mlp({784, 64, 10}, generator)
                                                    : nn::cnn({.channels1 = 4, .channels2 = 8, .hidden = 16},
                                                              generator);
        model->to(recipe.parameter_dtype);
        model->to(device);
        auto optimizer = std::make_unique<optim::SGD>(model->parameters(),
                                                      optim::SgdOptions{.lr = 0.05,
                                                                        .momentum = 0.9,
                                                                        .master_weights = recipe.master_weights});
        amp::GradScaler scaler = recipe.make_scaler();
        // One batch, five steps on it: random labels on random images carry nothing to learn across
        // batches (the loss of fresh batches wanders around ln 10), but one batch is fitted step by step.
        Generator data(4);
        const Tensor images = uniform({16, 1, 28, 28}, 0.0, 1.0, data).to(device);
        const Tensor labels = randint(0, 10, {16}, data).to(device);
        for (int step = 0; step < 5; ++step) {
          optimizer->zero_grad();
          Tensor loss;
          {
            Autocast region = recipe.autocast();
            loss = cross_entropy((*model)(images), labels);
          }
          backward(scaler.scale(loss));
          scaler.step(*optimizer);
          scaler.update();
          losses[on_gpu].push_back(loss.item());
        }
      }
      // The two runs differ only in the order of f32 sums and the last ulp of transcendental
      // functions: after 5 steps the losses agree to a few ulps of the compute dtype.
      const DType compute = recipe.autocast_dtype.value_or(DType::F32);
      for (std::size_t s = 0; s < losses[0].size(); ++s)
        CHECK(losses[1][s] == doctest::Approx(losses[0][s]).epsilon(allowed(compute, 8)));
      CHECK(losses[1].back() < losses[1].front());
    }
}

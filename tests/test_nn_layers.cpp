// nn/ layers in f64: every layer is gradchecked (central differences) over its input, when floating,
// and over every parameter, after Module::to(F64). Forward values are checked against hand-computed
// numbers or f64 loops written here: Linear, Conv2d, LSTM (the gate formula of nn/lstm.h), attention
// (causality, bit-exactly, and T = 1 where the one softmax weight is 1), GELU, BatchNorm's running
// statistics and evaluation mode, Dropout's mask and evaluation identity, and the init statistics.
// Sizes are small: gradcheck runs two forward passes per element of every input.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "nn/conv.h"
#include "nn/init.h"
#include "nn/models.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// Overwrites a parameter (any dtype) with `values`, outside the tape, as an initialization does.
void set_values(const Tensor& p, const std::vector<double>& values) {
  NoGradGuard no_grad;
  Tensor(p).copy_(from_vector(values, p.shape(), {.dtype = DType::F64}));
}

// Gives each parameter random values in [-1, 1) (so ones/zeros inits do not hide a missing term).
void randomize(const nn::Module& module, std::uint64_t seed) {
  for (const Tensor& p : module.parameters())
    set_values(p, random_f64(p.shape(), -1.0, 1.0, seed++, false).to_vector<double>());
}

// The module's parameters, then the input: gradcheck's inputs; the lambda calls the layer on back().
std::vector<Tensor> with_input(const nn::Module& module, const Tensor& input) {
  std::vector<Tensor> inputs = module.parameters();
  inputs.push_back(input);
  return inputs;
}

void check_layer_gradients(const std::string& name, nn::Module& layer, const Tensor& x) {
  check_gradients(
      name, [&](const std::vector<Tensor>& in) { return layer(in.back()); }, with_input(layer, x));
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// rows x [n, in] (row-major) -> x W[first:first+out]^T + b[first:first+out], in f64 loops.
std::vector<double> affine(const std::vector<double>& x, std::int64_t in, const Tensor& weight, const Tensor& bias,
                           std::int64_t first, std::int64_t out) {
  const std::vector<double> w = weight.to_vector<double>(), b = bias.to_vector<double>();
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / in;
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b[first + o];
      for (std::int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w[(first + o) * in + k];
      y[r * out + o] = acc;
    }
  return y;
}

// Every step's h of the last layer of `lstm` on x [B, T, in], zero initial state, with the gate
// formula of nn/lstm.h written out in f64 loops (gate order i, f, g, o).
std::vector<double> reference_lstm(const nn::LSTM& lstm, const Tensor& x) {
  std::map<std::string, std::vector<double>> p;
  for (const auto& [name, t] : lstm.named_parameters()) p[name] = t.to_vector<double>();
  const std::int64_t B = x.size(0), T = x.size(1), H = lstm.hidden_size();
  std::int64_t in = x.size(2);
  std::vector<double> sequence = x.to_vector<double>();
  for (std::int64_t l = 0; l < lstm.num_layers(); ++l) {
    const std::string s = std::to_string(l);
    const auto &w_ih = p["weight_ih_l" + s], &w_hh = p["weight_hh_l" + s], &b_ih = p["bias_ih_l" + s],
               &b_hh = p["bias_hh_l" + s];
    std::vector<double> out(static_cast<std::size_t>(B * T * H));
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<double> h(H, 0.0), c(H, 0.0), z(4 * H);
      for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t g = 0; g < 4 * H; ++g) {
          z[g] = b_ih[g] + b_hh[g];
          for (std::int64_t k = 0; k < in; ++k) z[g] += w_ih[g * in + k] * sequence[(b * T + t) * in + k];
          for (std::int64_t k = 0; k < H; ++k) z[g] += w_hh[g * H + k] * h[k];
        }
        for (std::int64_t j = 0; j < H; ++j) {
          c[j] = sigmoid(z[H + j]) * c[j] + sigmoid(z[j]) * std::tanh(z[2 * H + j]);
          h[j] = sigmoid(z[3 * H + j]) * std::tanh(c[j]);
          out[(b * T + t) * H + j] = h[j];
        }
      }
    }
    sequence = out;
    in = H;
  }
  return sequence;
}

}  // namespace

TEST_CASE("nn layers: Linear matches a hand computation, is gradchecked, and starts within +-1/sqrt(in)") {
  nn::Linear layer(3, 2);
  layer.to(DType::F64);
  set_values(layer.weight, {1, 2, 3, -1, 0.5, 2});
  set_values(layer.bias, {0.5, -1});
  // [1, 0, -1] . [1, 2, 3] + 0.5 = -1.5;  [1, 0, -1] . [-1, 0.5, 2] - 1 = -4;
  // [2, 1, 0.5] . [1, 2, 3] + 0.5 = 6;    [2, 1, 0.5] . [-1, 0.5, 2] - 1 = -1.5
  check_values(layer(f64({1, 0, -1, 2, 1, 0.5}, {2, 3}, false)), {-1.5, -4, 6, -1.5});
  check_layer_gradients("Linear [rows, in]", layer, random_f64({4, 3}, -1, 1, 1));
  check_layer_gradients("Linear [batch, rows, in]", layer, random_f64({2, 3, 3}, -1, 1, 2));
  nn::Linear no_bias(3, 2, false);
  no_bias.to(DType::F64);
  CHECK(no_bias.parameters().size() == 1);
  check_layer_gradients("Linear without bias", no_bias, random_f64({4, 3}, -1, 1, 3));

  // PyTorch's init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; 2048 draws reach past 0.9 bound
  // unless the bound is wrong (chance 0.9^2048 otherwise).
  Generator generator(5);
  nn::Linear wide(64, 32, true, generator);
  const double bound = 1.0 / 8.0;
  for (const Tensor& p : wide.parameters()) {
    double largest = 0.0;
    for (double v : p.to_vector<double>()) largest = std::max(largest, std::fabs(v));
    CHECK(largest <= bound);
    if (p.numel() > 1000) CHECK(largest > 0.9 * bound);
  }
}

TEST_CASE("nn layers: Conv2d (stride 2, padding 1) matches f64 loops; conv and pools are gradchecked") {
  nn::Conv2d conv(2, 3, 3, {.stride = 2, .padding = 1});
  conv.to(DType::F64);
  Tensor x = random_f64({2, 2, 5, 5}, -1, 1, 10);
  Tensor y = conv(x);
  REQUIRE(y.shape() == Shape{2, 3, 3, 3});
  const std::vector<double> xv = x.to_vector<double>(), w = conv.weight.to_vector<double>(),
                            b = conv.bias.to_vector<double>();
  std::vector<double> expected;
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 3; ++o)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double acc = b[o];
          for (int c = 0; c < 2; ++c)
            for (int u = 0; u < 3; ++u)
              for (int v = 0; v < 3; ++v) {
                const int row = 2 * i - 1 + u, col = 2 * j - 1 + v;  // stride 2, padding 1
                if (row >= 0 && row < 5 && col >= 0 && col < 5)
                  acc += w[((o * 2 + c) * 3 + u) * 3 + v] * xv[((n * 2 + c) * 5 + row) * 5 + col];
              }
          expected.push_back(acc);
        }
  check_values(y, expected);
  check_layer_gradients("Conv2d", conv, x);

  nn::MaxPool2d max_pool({.kernel = 2});
  nn::AvgPool2d avg_pool({.kernel = 3, .stride = 2, .padding = 1});
  CHECK(max_pool.parameters().empty());
  check_layer_gradients("MaxPool2d", max_pool, random_f64({2, 2, 4, 4}, -1, 1, 11));
  check_layer_gradients("AvgPool2d", avg_pool, random_f64({2, 2, 5, 5}, -1, 1, 12));
}

TEST_CASE("nn layers: activations and Flatten") {
  Tensor x = f64({-2.0, -0.5, 0.25, 1.5}, {2, 2});
  check_values(nn::ReLU()(x), {0, 0, 0.25, 1.5});
  check_values(nn::Tanh()(x), {std::tanh(-2.0), std::tanh(-0.5), std::tanh(0.25), std::tanh(1.5)});
  std::vector<double> gelu;  // the exact form x Phi(x)
  for (double v : x.to_vector<double>()) gelu.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  check_values(nn::GELU()(x), gelu);
  nn::ReLU relu;
  nn::GELU gelu_layer;
  nn::Tanh tanh_layer;
  nn::Flatten flatten;
  check_layer_gradients("ReLU", relu, random_f64({3, 4}, -1, 1, 20));
  check_layer_gradients("GELU", gelu_layer, random_f64({3, 4}, -3, 3, 21));
  check_layer_gradients("Tanh", tanh_layer, random_f64({3, 4}, -3, 3, 22));
  Tensor image = random_f64({2, 3, 2, 2}, -1, 1, 23);
  Tensor flat = flatten(image);
  CHECK(flat.shape() == Shape{2, 12});
  check_values(flat, image.to_vector<double>(), 0.0, 0.0);
  check_layer_gradients("Flatten", flatten, image);
}

TEST_CASE("nn layers: LayerNorm and BatchNorm1d/2d are gradchecked in training and evaluation mode") {
  nn::LayerNorm layer_norm(4);
  layer_norm.to(DType::F64);
  randomize(layer_norm, 30);
  check_layer_gradients("LayerNorm", layer_norm, random_f64({2, 3, 4}, -2, 2, 31));

  nn::BatchNorm1d bn1(3);
  bn1.to(DType::F64);
  randomize(bn1, 32);
  check_layer_gradients("BatchNorm1d train", bn1, random_f64({5, 3}, -2, 2, 33));
  nn::BatchNorm2d bn2(3);
  bn2.to(DType::F64);
  CHECK(bn2.running_mean.dtype() == DType::F32);  // to(F64) leaves the running statistics in f32
  CHECK(bn2.running_var.dtype() == DType::F32);
  randomize(bn2, 34);
  check_layer_gradients("BatchNorm2d train", bn2, random_f64({2, 3, 2, 2}, -2, 2, 35));
  bn2.eval();
  check_layer_gradients("BatchNorm2d eval", bn2, random_f64({2, 3, 2, 2}, -2, 2, 36));
}

TEST_CASE("nn layers: BatchNorm running statistics after one step, and evaluation mode uses them") {
  nn::BatchNorm1d bn(3);
  bn.to(DType::F64);
  set_values(bn.weight, {2.0, 0.5, -1.0});
  set_values(bn.bias, {0.25, -0.5, 1.0});
  // Columns: {1, 2, 3, 4} mean 2.5, unbiased var 5/3; {0, 0, 0, 4} mean 1, var 4; {-2, 2, -2, 2} mean 0, var 16/3.
  Tensor x = f64({1, 0, -2, 2, 0, 2, 3, 0, -2, 4, 4, 2}, {4, 3}, false);
  bn(x);
  // running = 0.9 running + 0.1 batch, from mean 0 and var 1. They are f32: each value is rounded
  // once on store (0.5 ulp) after an f64 update: 2^-24 relative.
  check_values(bn.running_mean, {0.25, 0.1, 0.0}, 0x1p-24, 0.0);
  check_values(bn.running_var, {0.9 + 0.1 * 5.0 / 3.0, 0.9 + 0.1 * 4.0, 0.9 + 0.1 * 16.0 / 3.0}, 0x1p-24, 0.0);

  bn.eval();
  const std::vector<double> mean = bn.running_mean.to_vector<double>(), var = bn.running_var.to_vector<double>();
  const std::vector<double> w{2.0, 0.5, -1.0}, b{0.25, -0.5, 1.0}, xv = x.to_vector<double>();
  std::vector<double> expected;
  for (int n = 0; n < 4; ++n)
    for (int c = 0; c < 3; ++c) expected.push_back((xv[n * 3 + c] - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c]);
  check_values(bn(x), expected);
  check_values(bn.running_mean, mean, 0.0, 0.0);  // evaluation leaves the statistics alone
  check_values(bn.running_var, var, 0.0, 0.0);
}

TEST_CASE("nn layers: Dropout drops with a fixed generator (gradchecked) and is the identity in eval mode") {
  Generator generator(7);
  nn::Dropout dropout(0.5, generator);
  Tensor x = random_f64({4, 8}, 0.5, 1.5, 40);  // no zeros, so a zero output is a dropped element
  Tensor y = dropout(x);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  int dropped = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    INFO("element " << i);
    CHECK((yv[i] == 0.0 || yv[i] == 2.0 * xv[i]));  // survivors scaled by 1 / (1 - p) exactly
    dropped += yv[i] == 0.0;
  }
  CHECK(dropped > 0);  // 32 elements at p = 0.5: all kept or all dropped has chance 2^-31
  CHECK(dropped < 32);
  // The mask must be the same in every evaluation gradcheck makes: reseed before each.
  check_gradients("Dropout train",
                  [&](const std::vector<Tensor>& in) {
                    generator.manual_seed(7);
                    return dropout(in[0]);
                  },
                  {x});
  dropout.eval();
  check_values(dropout(x), xv, 0.0, 0.0);
  check_layer_gradients("Dropout eval", dropout, x);
}

TEST_CASE("nn layers: Embedding looks rows up and its gradient sums repeated rows") {
  nn::Embedding embedding(5, 3);
  embedding.to(DType::F64);
  Tensor indices = from_vector({0, 2, 2, 4, 0, 2}, {2, 3}, {.dtype = DType::I32});
  Tensor y = embedding(indices);
  REQUIRE(y.shape() == Shape{2, 3, 3});
  const std::vector<double> w = embedding.weight.to_vector<double>();
  std::vector<double> expected;
  for (int row : {0, 2, 2, 4, 0, 2})
    for (int d = 0; d < 3; ++d) expected.push_back(w[row * 3 + d]);
  check_values(y, expected, 0.0, 0.0);
  check_gradients(
      "Embedding", [&](const std::vector<Tensor>&) { return embedding(indices); }, embedding.parameters());
}

TEST_CASE("nn layers: LSTM (2 layers, T = 3) matches the gate formula and is gradchecked, state included") {
  nn::LSTM lstm(3, 2, 2);
  lstm.to(DType::F64);
  Tensor x = random_f64({2, 3, 3}, -1, 1, 50);
  Tensor y = lstm(x);
  REQUIRE(y.shape() == Shape{2, 3, 2});
  check_values(y, reference_lstm(lstm, x));
  check_layer_gradients("LSTM", lstm, x);

  Tensor h0 = random_f64({2, 2, 2}, -1, 1, 51), c0 = random_f64({2, 2, 2}, -1, 1, 52);
  std::vector<Tensor> inputs = lstm.parameters();
  inputs.insert(inputs.end(), {x, h0, c0});
  check_gradients(
      "LSTM with initial and final state",
      [&](const std::vector<Tensor>& in) {
        auto [out, state] = lstm.forward_with_state(in[in.size() - 3], {in[in.size() - 2], in.back()});
        return cat({reshape(out, {-1}), reshape(state.h, {-1}), reshape(state.c, {-1})}, 0);
      },
      inputs);
}

TEST_CASE("nn layers: CausalSelfAttention is causal (bit-exactly), exact at T = 1, and gradchecked") {
  nn::CausalSelfAttention attention(4, 2);
  attention.to(DType::F64);
  Tensor x = random_f64({2, 4, 4}, -1, 1, 60);
  const std::vector<double> y = attention(x).to_vector<double>();
  for (std::int64_t t = 0; t < 4; ++t) {
    std::vector<double> changed = x.to_vector<double>();
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t c = 0; c < 4; ++c) changed[(b * 4 + t) * 4 + c] += 0.5;
    const std::vector<double> y2 = attention(f64(changed, {2, 4, 4}, false)).to_vector<double>();
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t s = 0; s < 4; ++s) {
        bool same = true;
        for (std::int64_t c = 0; c < 4; ++c) same &= y[(b * 4 + s) * 4 + c] == y2[(b * 4 + s) * 4 + c];
        INFO("changed step " << t << ", batch " << b << ", output step " << s);
        CHECK(same == (s < t));  // earlier steps bit-identical, this step and later ones change
      }
  }
  check_layer_gradients("CausalSelfAttention", attention, x);

  // One step: the softmax over one key is 1, so y = proj(v) with v = x W_v^T + b_v (rows 2C..3C of qkv).
  Tensor single = random_f64({3, 1, 4}, -1, 1, 61, false);
  const std::vector<double> v = affine(single.to_vector<double>(), 4, attention.qkv->weight, attention.qkv->bias, 8, 4);
  check_values(attention(single), affine(v, 4, attention.proj->weight, attention.proj->bias, 0, 4));
}

TEST_CASE("nn layers: TransformerBlock is gradchecked") {
  nn::TransformerBlock block(4, 2);
  block.to(DType::F64);
  randomize(*block.ln1, 70);  // away from ones/zeros, so a wrongly wired LayerNorm shows
  randomize(*block.ln2, 72);
  check_layer_gradients("TransformerBlock", block, random_f64({2, 3, 4}, -1, 1, 74));
}

TEST_CASE("nn layers: init statistics") {
  Generator generator(3);
  auto statistics = [](const Tensor& t) {
    const std::vector<double> v = t.to_vector<double>();
    double mean = 0.0, square = 0.0, largest = 0.0;
    for (double e : v) mean += e, square += e * e, largest = std::max(largest, std::fabs(e));
    mean /= static_cast<double>(v.size());
    return std::array<double, 3>{mean, std::sqrt(square / static_cast<double>(v.size()) - mean * mean), largest};
  };
  // 262144 draws: the sample std is within about 0.14% (1 / sqrt(2n)) of the true one, the mean
  // within 0.002 std (1 / sqrt(n)); 5% and 0.01 std are far outside chance.
  Tensor w = zeros({256, 1024});
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::FanIn, generator);
  auto [mean, std, largest] = statistics(w);
  CHECK(std::fabs(std / std::sqrt(2.0 / 1024.0) - 1.0) < 0.05);
  CHECK(std::fabs(mean) < 0.01 * std);
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::FanOut, generator);
  CHECK(std::fabs(statistics(w)[1] / std::sqrt(2.0 / 256.0) - 1.0) < 0.05);

  // xavier_uniform_: U(-b, b), b = sqrt(6 / (fan_in + fan_out)); std b / sqrt(3).
  nn::init::xavier_uniform_(w, 1.0, generator);
  const double bound = std::sqrt(6.0 / (1024.0 + 256.0));
  auto [u_mean, u_std, u_largest] = statistics(w);
  CHECK(u_largest <= bound);
  CHECK(u_largest > 0.999 * bound);
  CHECK(std::fabs(u_std / (bound / std::sqrt(3.0)) - 1.0) < 0.05);

  // Fans of a conv weight [out, in, k, k]: in * k^2 and out * k^2.
  nn::init::Fans fans = nn::init::fans(zeros({8, 4, 3, 3}));
  CHECK(fans.in == 36);
  CHECK(fans.out == 72);
}

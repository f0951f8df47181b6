// nn::Module: names, traversal, the name scopes its calls open (the overflow detector names the layer),
// modes, dtype conversion and state dicts. Checkpoints are tested in test_train_checkpoint.cpp.
#include <set>
#include <string>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/models.h"
#include "nn/norm.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// A small custom module, written the way a user would.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
  std::shared_ptr<nn::BatchNorm1d> bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(3));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2, false));
  Tensor scale = register_parameter("scale", ones({2}));
  Tensor forward(const Tensor& x) override { return mul((*fc2)(relu((*bn)((*fc1)(x)))), scale); }
  std::string type_name() const override { return "Net"; }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE("named parameters and buffers are dotted paths in registration order") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight"});
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"bn.running_mean", "bn.running_var"});
  CHECK(net.parameter_count() == 2 + 4 * 3 + 3 + 3 + 3 + 3 * 2);
  for (const Tensor& p : net.parameters()) CHECK((p.requires_grad() && p.is_leaf()));
  // The handles are the members themselves: an update through one is seen through the other.
  CHECK(net.parameters()[1].shares_storage_with(net.fc1->weight));
}

TEST_CASE("Sequential names its children 0, 1, ... and runs them in order") {
  auto model = nn::mlp({6, 5, 3});
  CHECK(model->size() == 4);  // Flatten, Linear, ReLU, Linear
  CHECK(names_of(model->named_parameters()) == std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"});
  Tensor x = randn({2, 6});
  auto& first = dynamic_cast<nn::Linear&>((*model)[1]);
  auto& second = dynamic_cast<nn::Linear&>((*model)[3]);
  check_close((*model)(x), second(relu(first(x))), 0.0);
  check_error([&] { (*model)[4]; }, "nn::Sequential");
  CHECK(model->to_string().find("(1): Linear(6, 5)  [35 parameters]") != std::string::npos);
}

TEST_CASE("Sequential from a list of modules in one expression, as torch::nn::Sequential") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(5, 3));
  CHECK(model->size() == 3);
  CHECK(names_of(model->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor x = randn({2, 6});
  auto& first = dynamic_cast<nn::Linear&>((*model)[0]);
  auto& second = dynamic_cast<nn::Linear&>((*model)[2]);
  check_close((*model)(x), second(relu(first(x))), 0.0);
  check_error([] { nn::Sequential(std::make_shared<nn::ReLU>(), std::shared_ptr<nn::Linear>()); }, "child '1' is null");
}

TEST_CASE("train and eval reach every child") {
  Net net;
  CHECK(net.bn->is_training());
  net.eval();
  CHECK((!net.is_training() && !net.bn->is_training() && !net.fc1->is_training()));
  net.train();
  CHECK(net.bn->is_training());
}

TEST_CASE("to(dtype) converts parameters in place and keeps BatchNorm's statistics in f32") {
  Net net;
  Tensor weight = net.fc1->weight;  // a handle held elsewhere, as an optimizer would
  const std::vector<float> before = weight.to_vector<float>();
  net.fc1->weight.set_grad(zeros({3, 4}));
  net.to(DType::F16);
  CHECK(weight.dtype() == DType::F16);  // the same tensor, now f16
  CHECK(!weight.grad().defined());  // a gradient of the old dtype is dropped
  const std::vector<float> after = weight.to_vector<float>();
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(static_cast<double>(after[i]) == to_f16(before[i]));
  CHECK(net.bn->weight.dtype() == DType::F16);
  CHECK(net.bn->running_mean.dtype() == DType::F32);
  CHECK(net.bn->running_var.dtype() == DType::F32);
  check_error([&] { net.to(DType::I32); }, "nn::Module::to");
}

TEST_CASE("state_dict round trip copies values into another model") {
  Net a, b;
  a.bn->running_mean.copy_(tensor({1, 2, 3}));
  b.load_state_dict(a.state_dict());
  for (const auto& [name, value] : a.state_dict()) check_close(b.state_dict().at(name), value, 0.0);
  // b keeps its own storage: the load copied values, it did not alias a's tensors.
  CHECK(!b.fc1->weight.shares_storage_with(a.fc1->weight));
}

TEST_CASE("load_state_dict checks everything before writing anything") {
  Net a, b;
  const std::vector<float> original = b.fc1->weight.to_vector<float>();
  StateDict state = a.state_dict();

  StateDict wrong_shape = state;
  wrong_shape["fc2.weight"] = zeros({3, 3});
  check_error([&] { b.load_state_dict(wrong_shape); }, "'fc2.weight' is [3, 3]");
  CHECK(b.fc1->weight.to_vector<float>() == original);  // fc1 comes first in the map yet was not written

  StateDict wrong_dtype = state;
  wrong_dtype["scale"] = ones({2}, {.dtype = DType::F16});
  check_error([&] { b.load_state_dict(wrong_dtype); }, "'scale'");

  StateDict extra = state;
  extra["fc3.weight"] = zeros({1});
  check_error([&] { b.load_state_dict(extra); }, "does not");

  StateDict missing = state;
  missing.erase("bn.running_var");
  check_error([&] { b.load_state_dict(missing); }, "lacks 'bn.running_var'");
  b.load_state_dict(missing, /*strict=*/false);  // a partial load is allowed when asked for
  CHECK(b.fc1->weight.to_vector<float>() == a.fc1->weight.to_vector<float>());
}

TEST_CASE("registration errors name the module and the problem") {
  struct Twice : nn::Module {
    Twice() {
      register_parameter("w", ones({1}));
      register_parameter("w", ones({1}));
    }
    Tensor forward(const Tensor& x) override { return x; }
    std::string type_name() const override { return "Twice"; }
  };
  check_error([] { Twice twice; }, "'w' is registered twice");
  struct Dotted : nn::Module {
    Dotted() { register_parameter("a.b", ones({1})); }
    Tensor forward(const Tensor& x) override { return x; }
    std::string type_name() const override { return "Dotted"; }
  };
  check_error([] { Dotted dotted; }, "no '.'");
  check_error([] { nn::Linear layer(0, 3); }, "nn::Linear");
  nn::Linear layer(4, 3);
  check_error([&] { layer(zeros({2, 5})); }, "expects input [..., 4]");
}

TEST_CASE("a model trains: parameters() feeds an optimizer, zero_grad clears every gradient") {
  Net net;
  Tensor x = randn({8, 4});
  backward(sum(net(x)));
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("a module's ops are named by its path, so the overflow detector names the poisoned layer") {
  // mlp({4, 3, 2}) is Flatten "0", Linear "1", ReLU "2", Linear "3"; inside a parent it is "body".
  struct Classifier : nn::Module {
    std::shared_ptr<nn::Sequential> body = register_module("body", nn::mlp({4, 3, 2}));
    Tensor forward(const Tensor& x) override { return (*body)(x); }
    std::string type_name() const override { return "Classifier"; }
  };
  Classifier model;
  auto& first = dynamic_cast<nn::Linear&>((*model.body)[1]);
  auto& second = dynamic_cast<nn::Linear&>((*model.body)[3]);
  nn::init::constant_(first.weight, 0.5);  // x of ones: every hidden value is 4 * 0.5 = 2
  nn::init::constant_(first.bias, 0.0);
  nn::init::constant_(second.bias, 0.0);
  const Tensor x = ones({1, 4});

  SUBCASE("in forward: an f16 output past 65504") {
    nn::init::constant_(second.weight, 30000.0);  // 3 * 2 * 30000 = 180000
    amp::OverflowDetector detector;
    Tensor loss;
    {
      Autocast autocast(DType::F16);
      loss = sum(model(x));
    }
    backward(loss);
    REQUIRE(detector.first().has_value());
    CHECK_FALSE(detector.first()->backward);
    CHECK(detector.first()->inputs_finite);  // this layer made the inf; nothing before it did
    CHECK(detector.first()->scope == "body.3");
    CHECK(detector.first()->describe().find("'body.3'") != std::string::npos);
  }
  SUBCASE("in backward: a loss scale too large for this layer's input gradient") {
    nn::init::constant_(second.weight, 1000.0);  // forward 3 * 2 * 1000 = 6000: finite
    amp::OverflowDetector detector;
    Tensor loss;
    {
      Autocast autocast(DType::F16);
      loss = sum(model(x));
    }
    backward(mul(loss, 1024.0));  // the input's gradient: 1024 * 2 * 1000 > 65504
    REQUIRE(detector.first().has_value());
    CHECK(detector.first()->backward);
    CHECK(detector.first()->scope == "body.3");
  }
}

namespace {

// Every module's dotted path below `module` ("blocks", "blocks.0", "blocks.0.ln1", ...).
void collect_paths(const nn::Module& module, const std::string& prefix, std::set<std::string>& paths) {
  for (const auto& [name, child] : module.children()) {
    paths.insert(prefix + name);
    collect_paths(*child, prefix + name + ".", paths);
  }
}

// Runs forward and backward and checks the scopes the tape recorded: each is a module's path (or
// "" for the model's own ops), and every module with parameters ran its ops under its path.
void check_scopes(nn::Module& model, const Tensor& input) {
  std::set<std::string> paths{""};
  collect_paths(model, "", paths);
  amp::GradientRecorder recorder;
  backward(sum(model(input)));
  std::set<std::string> scopes;
  for (const auto& entry : recorder.entries()) scopes.insert(entry.scope);
  for (const std::string& scope : scopes) CHECK_MESSAGE(paths.count(scope), "'" << scope << "' names no module");
  for (const auto& [name, p] : model.named_parameters()) {
    const std::size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    CHECK_MESSAGE(scopes.count(owner), "no op of '" << owner << "' was recorded under its name");
  }
}

}  // namespace

TEST_CASE("every layer and model of nn/ records its ops under its path") {
  Generator generator(3);
  nn::TinyGPT gpt({.vocab = 11, .block_size = 8, .embed_dim = 8, .heads = 2, .layers = 2}, generator);
  check_scopes(gpt, randint(0, 11, {2, 5}, generator));
  nn::CharLSTM lstm(7, 4, 5, 2, generator);
  check_scopes(lstm, randint(0, 7, {2, 3}, generator));
  auto cnn = nn::cnn({.image_size = 8, .channels1 = 2, .channels2 = 3, .hidden = 4}, generator);
  check_scopes(*cnn, randn({2, 1, 8, 8}, generator));
}

// The op table (autograd/cast_policy.h): every row has a name and a reason; every row names a real op,
// which records under that name and casts its inputs as the row says; a user's own op names its policy.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// What the ops did while alive: each op's name, and the dtypes the casts produced.
struct OpLog : OpObserver {
  std::vector<std::string> ops;
  std::vector<DType> casts_to;
  OpLog() { add_observer(this); }
  ~OpLog() override { remove_observer(this); }
  void forward(const char* op, const std::string&, const std::vector<Tensor>&, const Tensor& output) override {
    ops.emplace_back(op);
    if (std::string(op) == "cast") casts_to.push_back(output.dtype());
  }
  void backward(const char*, const std::string&, const Tensor&, const Grads&) override {}
};

Tensor i32(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

// One call of every op, on inputs chosen so that its policy shows: f32 inputs for the lower-precision
// ops, f16 ones for the f32 list and the ops that keep their input's dtype, one of each for promote.
std::map<Op, std::function<void()>> calls_of_every_op() {
  // Made here, not in the calls: making an f16 tensor is itself a cast the log would see.
  const DType h = DType::F16;
  const Tensor x = uniform_in({2, 3}, DType::F32, 1), xh = uniform_in({2, 3}, h, 2);
  const Tensor m = uniform_in({3, 4}, DType::F32, 4), w = uniform_in({4, 3}, DType::F32, 5);
  const Tensor b = uniform_in({4}, DType::F32, 6);
  const Tensor gates = uniform_in({2, 1, 8}, DType::F32, 7), w_hh = uniform_in({8, 2}, DType::F32, 8);
  const Tensor b_hh = uniform_in({8}, DType::F32, 9), state = uniform_in({1, 2}, DType::F32, 10);
  const Tensor image32 = uniform_in({1, 1, 4, 4}, DType::F32, 12), filter32 = uniform_in({1, 1, 3, 3}, DType::F32, 13);
  const Tensor image = uniform_in({1, 1, 4, 4}, h, 3);
  const Tensor heads = uniform_in({2, 3, 4}, DType::F32, 14);  // attention's q, k and v
  const Tensor labels = i32({0, 2}, {2}), mask = i32({1, 0, 1, 0, 1, 0}, {2, 3}), indices = i32({1, 0}, {2});
  const Tensor running_mean = zeros({3}), running_var = ones({3}), half_x = mul(x, 0.5);
  return {
      {Op::MatMul, [=] { matmul(x, m); }},
      {Op::Linear, [=] { linear(x, w, b); }},
      {Op::LstmRecurrence, [=] { lstm_recurrence(gates, w_hh, b_hh, state, state); }},
      {Op::Conv2d, [=] { conv2d(image32, filter32); }},
      {Op::ScaledDotProductAttention, [=] { scaled_dot_product_attention(heads, heads, heads, {.causal = true}); }},
      {Op::Exp, [=] { exp(xh); }},
      {Op::Log, [=] { log(xh); }},
      {Op::Pow, [=] { pow(xh, 2.0); }},
      {Op::RDiv, [=] { rdiv(1.0, xh); }},
      {Op::Softmax, [=] { softmax(xh, 1); }},
      {Op::LogSoftmax, [=] { log_softmax(xh, 1); }},
      {Op::CrossEntropy, [=] { cross_entropy(xh, labels); }},
      {Op::BinaryCrossEntropyWithLogits, [=] { binary_cross_entropy_with_logits(xh, xh); }},
      {Op::MseLoss, [=] { mse_loss(xh, xh); }},
      {Op::Sum, [=] { sum(xh); }},
      {Op::Mean, [=] { mean(xh); }},
      {Op::LayerNorm, [=] { layer_norm(xh); }},
      {Op::BatchNorm, [=] { batch_norm(xh, running_mean, running_var, Tensor(), Tensor()); }},
      {Op::LogSumExp, [=] { logsumexp(xh, {1}); }},
      {Op::Var, [=] { var(xh, {1}); }},
      {Op::Std, [=] { mg::std(xh, {1}); }},
      {Op::Add, [=] { add(xh, x); }},
      {Op::Sub, [=] { sub(xh, x); }},
      {Op::Mul, [=] { mul(xh, x); }},
      {Op::Div, [=] { div(xh, x); }},
      {Op::Where, [=] { where(mask, xh, x); }},
      {Op::Cat,
       [=] {
         cat({xh, x}, 0);
       }},
      {Op::Stack,
       [=] {
         stack({xh, x}, 0);
       }},
      {Op::Maximum, [=] { maximum(xh, x); }},
      {Op::Minimum, [=] { minimum(xh, x); }},
      {Op::BinaryCrossEntropy, [=] { binary_cross_entropy(half_x, x); }},
      {Op::Neg, [=] { neg(xh); }},
      {Op::Sqrt, [=] { sqrt(xh); }},
      {Op::Abs, [=] { abs(xh); }},
      {Op::Clamp, [=] { clamp(xh, 0.6, 1.2); }},
      {Op::Tanh, [=] { tanh(xh); }},
      {Op::Sigmoid, [=] { sigmoid(xh); }},
      {Op::Relu, [=] { relu(xh); }},
      {Op::Gelu, [=] { gelu(xh); }},
      {Op::Silu, [=] { silu(xh); }},
      {Op::LeakyRelu, [=] { leaky_relu(xh); }},
      {Op::Max, [=] { max(xh); }},
      {Op::Argmax, [=] { argmax(xh); }},
      {Op::Min, [=] { min(xh, 1); }},
      {Op::Argmin, [=] { argmin(xh); }},
      {Op::Embedding, [=] { embedding(xh, indices); }},
      {Op::MaxPool2d, [=] { max_pool2d(image); }},
      {Op::AvgPool2d, [=] { avg_pool2d(image); }},
      {Op::Dropout, [=] { dropout(xh, 0.5, true); }},
      {Op::Cast, [=] { cast(xh, DType::BF16); }},
      {Op::ToDevice, [=] { to_device(xh, Device::cpu()); }},
      {Op::BroadcastTo,
       [=] {
         broadcast_to(xh, {2, 2, 3});
       }},
      {Op::SumTo,
       [=] {
         sum_to(xh, {1, 3});
       }},
      {Op::Reshape,
       [=] {
         reshape(xh, {3, 2});
       }},
      {Op::Permute,
       [=] {
         permute(xh, {1, 0});
       }},
      {Op::Transpose, [=] { transpose(xh, 0, 1); }},
      {Op::Slice, [=] { slice(xh, 1, 0, 2); }},
      {Op::Clone, [=] { clone(xh); }},
  };
}

// Ops that record no node of their own name: they are made of recorded ops (their backward comes
// from their parts'), or compute no gradient (argmax), or do nothing here (to_device to its own device).
const std::set<Op> kComposite{Op::MseLoss, Op::BatchNorm, Op::Argmax, Op::Dropout, Op::ToDevice, Op::Transpose,
                              Op::Stack,   Op::LogSumExp, Op::Var,    Op::Min,     Op::Argmin};
// f32-list ops that read an f16/bf16 input as it is and widen it inside their kernel (on the CPU): no
// cast is recorded, and the output is f32 all the same (tests/test_ops_layer_norm.cpp).
const std::set<Op> kWidenInside{Op::LayerNorm};

}  // namespace

TEST_CASE("policy: one row per op, each with a name and a reason") {
  std::set<std::string> names;
  std::vector<bool> seen(5, false);
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    const OpRow& row = kOps[i];
    INFO("row " << i << " (" << std::string(row.name) << ")");
    CHECK(static_cast<std::size_t>(row.op) == i);
    CHECK(std::string(row.name).size() > 0);
    CHECK_FALSE(row.reason.empty());
    CHECK(names.insert(row.name).second);  // names are unique: the tape and the observers go by them
    CHECK(qualified_name(row.op) == "mg::" + std::string(row.name));
    seen[static_cast<std::size_t>(row.policy)] = true;
  }
  for (bool policy_used : seen) CHECK(policy_used);
  CHECK(cast_policy(Op::MatMul) == CastPolicy::LowerPrecision);
  CHECK(cast_policy(Op::Softmax) == CastPolicy::Float32);
  CHECK(cast_policy(Op::Add) == CastPolicy::Promote);
  CHECK(cast_policy(Op::BinaryCrossEntropy) == CastPolicy::Banned);
  CHECK(cast_policy(Op::BinaryCrossEntropyWithLogits) == CastPolicy::Float32);
  CHECK(cast_policy(Op::Tanh) == CastPolicy::InputDtype);
  CHECK(policy_name(CastPolicy::LowerPrecision) == "lower_precision");
  CHECK(policy_name(CastPolicy::InputDtype) == "input_dtype");
  CHECK(fmt::format("{}", Op::LogSoftmax) == "mg::log_softmax");
}

// Every row is a real op: called under autocast, it records under its row's name and casts its inputs
// exactly as its row says (a row for an op that never asks autocast, like the "norm" row this table
// once had, fails here).
TEST_CASE("policy: every row names a real op that casts as its row says") {
  const auto calls = calls_of_every_op();
  CHECK(calls.size() == kOps.size());  // a new op needs a call here
  for (const OpRow& row : kOps) {
    INFO("op " << std::string(row.name) << ", policy " << policy_name(row.policy));
    auto call = calls.find(row.op);
    REQUIRE(call != calls.end());
    Autocast autocast(DType::F16);
    if (row.policy == CastPolicy::Banned) {
      check_error(call->second, std::string(qualified_name(row.op)) + " is banned under mg::Autocast");
      continue;
    }
    OpLog log;
    call->second();
    if (!kComposite.contains(row.op)) {
      CHECK(std::find(log.ops.begin(), log.ops.end(), row.name) != log.ops.end());
    }
    const std::set<DType> casts(log.casts_to.begin(), log.casts_to.end());
    switch (row.policy) {
      case CastPolicy::LowerPrecision:
        CHECK(casts == std::set<DType>{DType::F16});
        break;  // f32 inputs down
      case CastPolicy::Float32:  // f16 inputs up
      case CastPolicy::Promote:
        if (kWidenInside.contains(row.op))
          CHECK(casts.empty());
        else
          CHECK(casts.contains(DType::F32));
        break;  // the f16 side up
      case CastPolicy::InputDtype:  // nothing cast (the cast op itself is the one cast)
        CHECK(casts == (row.op == Op::Cast ? std::set<DType>{DType::BF16} : std::set<DType>{}));
        break;
      case CastPolicy::Banned:
        break;
    }
  }
}

TEST_CASE("policy: a user's own op names its policy") {
  Tensor a = uniform_in({2, 3}, DType::F32, 2), b = uniform_in({2, 3}, DType::F32, 3);
  std::vector<Tensor> inputs{a, b};
  autocast_inputs(CastPolicy::LowerPrecision, "my_op", inputs);  // outside a region: unchanged
  CHECK(inputs[0].id() == a.id());
  Autocast autocast(DType::F16);
  autocast_inputs(CastPolicy::LowerPrecision, "my_op", inputs);
  CHECK(inputs[0].dtype() == DType::F16);
  CHECK(inputs[1].dtype() == DType::F16);
  std::vector<Tensor> kept{a};
  autocast_inputs(CastPolicy::InputDtype, "my_op", kept);
  CHECK(kept[0].id() == a.id());
  check_error([&] { autocast_inputs(CastPolicy::Banned, "my_op", inputs); }, "my_op is banned under mg::Autocast");
}

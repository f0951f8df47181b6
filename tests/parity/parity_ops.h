// The ops of the parity suite by the names scripts/make-parity-fixtures gives them: each takes the
// fixture's inputs by name and its "args" (the op's options as JSON) and calls the public mg:: op
// exactly as a user would. To cover a new op: add its cases to the script, an entry here, and rerun
// the script (tests/parity/README.md).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <map>
#include <string>

#include "mixgrad.h"

namespace mg::parity {

using Inputs = std::map<std::string, Tensor>;
using Op = std::function<Tensor(const Inputs&, const nlohmann::json& args)>;

inline DType dtype_named(const std::string& name) {
  static const std::map<std::string, DType> dtypes = {{"f32", DType::F32},
                                                      {"f16", DType::F16},
                                                      {"bf16", DType::BF16},
                                                      {"f64", DType::F64}};
  return dtypes.at(name);
}

inline std::vector<std::int64_t> dims_of(const nlohmann::json& args) {
  return args.at("dims").get<std::vector<std::int64_t>>();
}

inline const std::map<std::string, Op>& ops() {
  using json = nlohmann::json;
  auto unary = [](Tensor (*fn)(const Tensor&)) {
    return Op([fn](const Inputs& in, const json&) { return fn(in.at("x")); });
  };
  auto binary = [](Tensor (*fn)(const Tensor&, const Tensor&)) {
    return Op([fn](const Inputs& in, const json&) { return fn(in.at("a"), in.at("b")); });
  };
  // sum / mean / max: of everything, or along args.dim (with args.keepdim).
  auto reduction = [](Tensor (*all)(const Tensor&), Tensor (*along)(const Tensor&, std::int64_t, bool)) {
    return Op([all, along](const Inputs& in, const json& args) {
      if (!args.contains("dim")) return all(in.at("x"));
      return along(in.at("x"), args.at("dim").get<std::int64_t>(), args.value("keepdim", false));
    });
  };
  static const std::map<std::string, Op> table = {
      {"neg", unary(neg)},
      {"exp", unary(exp)},
      {"log", unary(log)},
      {"sqrt", unary(sqrt)},
      {"abs", unary(abs)},
      {"tanh", unary(tanh)},
      {"sigmoid", unary(sigmoid)},
      {"relu", unary(relu)},
      {"gelu", unary(gelu)},
      {"clamp", [](const Inputs& in, const json& a) { return clamp(in.at("x"), a.at("min"), a.at("max")); }},
      {"add", binary(add)},
      {"sub", binary(sub)},
      {"mul", binary(mul)},
      {"div", binary(div)},
      {"matmul",
       [](const Inputs& in, const json& a) {
         return matmul(in.at("a"), in.at("b"),
                       {.transpose_a = a.value("transpose_a", false), .transpose_b = a.value("transpose_b", false)});
       }},
      {"linear", [](const Inputs& in, const json&) { return linear(in.at("x"), in.at("weight"), in.at("bias")); }},
      {"conv2d",
       [](const Inputs& in, const json& a) {
         return conv2d(in.at("x"), in.at("weight"), in.at("bias"),
                       {.stride = a.at("stride"), .padding = a.at("padding")});
       }},
      {"max_pool2d",
       [](const Inputs& in, const json& a) { return max_pool2d(in.at("x"), {.kernel = a.at("kernel")}); }},
      {"avg_pool2d",
       [](const Inputs& in, const json& a) { return avg_pool2d(in.at("x"), {.kernel = a.at("kernel")}); }},
      {"layer_norm", [](const Inputs& in,
                        const json& a) { return layer_norm(in.at("x"), in.at("weight"), in.at("bias"), a.at("eps")); }},
      {"batch_norm",
       [](const Inputs& in, const json& a) {
         return batch_norm(in.at("x"), Tensor(), Tensor(), in.at("weight"), in.at("bias"),
                           {.training = true, .eps = a.at("eps")});
       }},
      {"sum", reduction(sum, sum)},
      {"mean", reduction(mean, mean)},
      {"max", reduction(max, max)},
      {"softmax", [](const Inputs& in, const json& a) { return softmax(in.at("x"), a.at("dim")); }},
      {"log_softmax", [](const Inputs& in, const json& a) { return log_softmax(in.at("x"), a.at("dim")); }},
      {"cross_entropy",
       [](const Inputs& in, const json& a) {
         return cross_entropy(in.at("logits"), in.at("labels"), {.label_smoothing = a.value("label_smoothing", 0.0)});
       }},
      {"mse_loss", [](const Inputs& in, const json&) { return mse_loss(in.at("prediction"), in.at("target")); }},
      {"binary_cross_entropy_with_logits",
       [](const Inputs& in, const json&) {
         return binary_cross_entropy_with_logits(in.at("logits"), in.at("targets"));
       }},
      {"embedding",
       [](const Inputs& in, const json& a) {
         std::optional<std::int64_t> padding_idx;
         if (a.contains("padding_idx")) padding_idx = a.at("padding_idx").get<std::int64_t>();
         return embedding(in.at("weight"), in.at("indices"), padding_idx);
       }},
      // The ops of issue 21's "first day" list.
      {"logsumexp", [](const Inputs& in, const json& a) { return logsumexp(in.at("x"), dims_of(a)); }},
      {"var",
       [](const Inputs& in, const json& a) {
         return var(in.at("x"), dims_of(a), {.correction = a.at("correction"), .keepdim = a.value("keepdim", false)});
       }},
      {"std",
       [](const Inputs& in, const json& a) {
         return mg::std(in.at("x"), dims_of(a),
                        {.correction = a.at("correction"), .keepdim = a.value("keepdim", false)});
       }},
      {"sum_dims",
       [](const Inputs& in, const json& a) { return sum(in.at("x"), dims_of(a), a.value("keepdim", false)); }},
      {"mean_dims",
       [](const Inputs& in, const json& a) { return mean(in.at("x"), dims_of(a), a.value("keepdim", false)); }},
      {"max_with_indices",
       [](const Inputs& in, const json& a) { return max_with_indices(in.at("x"), a.at("dim")).values; }},
      {"min", [](const Inputs& in, const json& a) { return min(in.at("x"), a.at("dim").get<std::int64_t>()); }},
      // The rest: scalar forms, where, binary_cross_entropy, and the shape ops.
      {"pow", binary(pow)},
      {"pow_scalar", [](const Inputs& in, const json& a) { return pow(in.at("x"), a.at("scalar").get<double>()); }},
      {"add_scalar", [](const Inputs& in, const json&) { return add(in.at("x"), 0.3); }},
      {"mul_scalar", [](const Inputs& in, const json&) { return mul(in.at("x"), 1.7); }},
      {"div_scalar", [](const Inputs& in, const json&) { return div(in.at("x"), 3.0); }},
      {"rsub_scalar", [](const Inputs& in, const json&) { return rsub(2.0, in.at("x")); }},
      {"rdiv_scalar", [](const Inputs& in, const json&) { return rdiv(3.0, in.at("x")); }},
      {"where", [](const Inputs& in, const json&) { return where(in.at("mask"), in.at("a"), in.at("b")); }},
      {"binary_cross_entropy",
       [](const Inputs& in, const json&) { return binary_cross_entropy(in.at("probabilities"), in.at("targets")); }},
      {"transpose", [](const Inputs& in, const json&) { return transpose(in.at("x"), 0, 2); }},
      {"permute",
       [](const Inputs& in, const json&) {
         return permute(in.at("x"), {1, 2, 0});
       }},
      {"reshape",
       [](const Inputs& in, const json&) {
         return reshape(in.at("x"), {4, -1});
       }},
      {"slice", [](const Inputs& in, const json&) { return slice(in.at("x"), 1, 1, 3); }},
      {"cat",
       [](const Inputs& in, const json&) {
         return cat({in.at("a"), in.at("b")}, 0);
       }},
      {"stack",
       [](const Inputs& in, const json&) {
         return stack({in.at("a"), in.at("b")}, 1);
       }},
      {"broadcast_to",
       [](const Inputs& in, const json&) {
         return broadcast_to(in.at("x"), {3, 5});
       }},
      {"exp_of_transpose", [](const Inputs& in, const json&) { return exp(transpose(in.at("x"), 0, 1)); }},
      {"maximum", binary(maximum)},
      {"minimum", binary(minimum)},
      {"silu", unary(silu)},
      {"leaky_relu", [](const Inputs& in, const json& a) { return leaky_relu(in.at("x"), a.at("negative_slope")); }},
      {"cast", [](const Inputs& in, const json& a) { return cast(in.at("x"), dtype_named(a.at("to"))); }},
  };
  return table;
}

}  // namespace mg::parity

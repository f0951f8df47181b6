// The cast-policy table (amp/cast_policy.h): every entry has a reason, user overrides for
// mixgrad's ops and for a user's own op, and reset_policies().
#include <string>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("policy: user policy overrides") {
  Tensor h = uniform_in({2, 3}, DType::F16, 1);
  Tensor a = uniform_in({2, 3}, DType::F32, 2), b = uniform_in({2, 3}, DType::F32, 3);
  CHECK(amp::policy("tanh").policy == amp::CastPolicy::InputDtype);
  amp::set_policy("tanh", amp::CastPolicy::Float32, "my tanh saturates in f16");
  amp::set_policy("my_op", amp::CastPolicy::LowerPrecision);
  CHECK(amp::policy("tanh").reason == "my tanh saturates in f16");
  CHECK_FALSE(amp::policy("my_op").reason.empty());
  {
    amp::Autocast autocast(DType::F16);
    CHECK(tanh(h).dtype() == DType::F32);
    auto [ca, cb] = amp::autocast_inputs("my_op", a, b);
    CHECK(ca.dtype() == DType::F16);
    CHECK(cb.dtype() == DType::F16);
    CHECK(amp::autocast_input("my_op", a).dtype() == DType::F16);
    CHECK(amp::autocast_input("not_my_op", a).dtype() == DType::F32);
    amp::set_policy("my_op", amp::CastPolicy::Banned, "never in f16");
    check_error([&] { amp::autocast_inputs("my_op", a, b); }, "my_op is banned under amp::Autocast: never in f16");
  }
  auto [outside, unused] = amp::autocast_inputs("my_op", a, b);  // outside a region: unchanged
  CHECK(outside.id() == a.id());
  amp::reset_policies();
  CHECK(amp::policy("tanh").policy == amp::CastPolicy::InputDtype);
  CHECK(amp::policy("my_op").policy == amp::CastPolicy::InputDtype);
  amp::Autocast autocast(DType::F16);
  CHECK(tanh(h).dtype() == DType::F16);
  CHECK(amp::autocast_input("my_op", a).dtype() == DType::F32);
}

TEST_CASE("policy: the policy table") {
  amp::reset_policies();
  const auto table = amp::policy_table();
  REQUIRE_FALSE(table.empty());
  std::vector<bool> seen(5, false);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string& op = table[i].first;
    const amp::PolicyEntry& entry = table[i].second;
    INFO("op " << op);
    CHECK_FALSE(entry.reason.empty());
    CHECK(amp::policy(op).policy == entry.policy);
    if (i > 0) CHECK(table[i - 1].first < op);  // sorted by name
    seen[static_cast<std::size_t>(entry.policy)] = true;
  }
  using enum amp::CastPolicy;
  for (amp::CastPolicy kind : {LowerPrecision, Float32, Promote, Banned}) CHECK(seen[static_cast<std::size_t>(kind)]);
  CHECK(amp::policy("matmul").policy == amp::CastPolicy::LowerPrecision);
  CHECK(amp::policy("softmax").policy == amp::CastPolicy::Float32);
  CHECK(amp::policy("add").policy == amp::CastPolicy::Promote);
  CHECK(amp::policy("binary_cross_entropy").policy == amp::CastPolicy::Banned);
  CHECK(amp::policy("binary_cross_entropy_with_logits").policy == amp::CastPolicy::Float32);
  CHECK(amp::policy("unknown_op").policy == amp::CastPolicy::InputDtype);
  CHECK_FALSE(amp::policy("unknown_op").reason.empty());
  CHECK(amp::policy_name(amp::CastPolicy::LowerPrecision) == "lower_precision");
  CHECK(amp::policy_name(amp::CastPolicy::InputDtype) == "input_dtype");
}

// The old spellings of the cast table, which moved to autograd/cast_policy.h (issue 31): the layer
// that reads it. Kept as aliases for code written against mixgrad before that move; new code uses
// mg::CastPolicy, mg::kOps, mg::op_row and mg::cast_policy. Removed in the next release after 0.1.0
// (README.md says the same).
#pragma once

#include "autograd/cast_policy.h"

namespace mg::amp {

using mg::CastPolicy;
using mg::kOps;
using mg::OpRow;
using mg::policy_name;
using enum mg::CastPolicy;
[[deprecated("use mg::op_row")]] constexpr const OpRow& row(Op op) { return mg::op_row(op); }
[[deprecated("use mg::cast_policy")]] constexpr CastPolicy policy_of(Op op) { return mg::cast_policy(op); }

}  // namespace mg::amp

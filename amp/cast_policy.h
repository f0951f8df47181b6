// The cast lists of mixed-precision training, as data: one table maps each op to the dtype it
// computes in under amp::Autocast, each line with the reason (amp/cast_policy.cpp).
//
// Policies (Micikevicius et al. 2018, section 3; PyTorch's autocast op lists):
//   LowerPrecision  f32 inputs are cast to the region's dtype (f16 or bf16): the GEMMs, whose
//                   products are exact in f32 and accumulate in f32, and where Tensor Cores pay off.
//   Float32         f16/bf16 inputs are cast to f32: ops whose results leave f16's range (exp), that
//                   sum many values (reductions, losses, norms), or that subtract nearly equal ones.
//   Promote         every input is cast to the widest input dtype: ops that combine an f32 tensor
//                   with an f16 one (a residual add), so nothing is rounded down silently.
//   Banned          refused with the reason: ops unsafe in f16 that have a safe form.
//   InputDtype      no cast; the op runs in its inputs' dtype. Every op not in the table.
// Tensors of dtype f64 or i32 are never cast, whatever the policy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mg::amp {

enum class CastPolicy : std::uint8_t { LowerPrecision, Float32, Promote, Banned, InputDtype };

std::string_view policy_name(CastPolicy policy);  // "lower_precision", "float32", ...

struct PolicyEntry {
  CastPolicy policy = CastPolicy::InputDtype;
  std::string reason;
};

// The entry of an op, by the name it records on the tape ("matmul", "softmax", ...); an op that is
// not in the table gets InputDtype.
PolicyEntry policy(std::string_view op);
CastPolicy policy_of(std::string_view op);  // the policy alone: what every op asks under autocast
// Changes (or adds) an op's entry for the whole process, from the next op call on; for mixgrad's
// ops and for a user's own ops that call amp::autocast_inputs. Thread-safe.
void set_policy(const std::string& op, CastPolicy policy, std::string reason = "set with amp::set_policy");
// Restores the built-in table.
void reset_policies();
// Every entry, sorted by op name (for printing the table).
std::vector<std::pair<std::string, PolicyEntry>> policy_table();

}  // namespace mg::amp

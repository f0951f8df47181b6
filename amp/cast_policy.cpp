#include "amp/cast_policy.h"

#include <string>

namespace mg {

namespace amp {

std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case LowerPrecision: return "lower_precision";
    case Float32: return "float32";
    case Promote: return "promote";
    case Banned: return "banned";
    case InputDtype: return "input_dtype";
  }
  return "unknown";
}

}  // namespace amp

const char* qualified_name(Op op) {
  // Built once, then read by every error: "mg::" + the row's name.
  static const auto names = [] {
    std::array<std::string, amp::kOps.size()> built;
    for (const amp::OpRow& row : amp::kOps) built[static_cast<std::size_t>(row.op)] = std::string("mg::") + row.name;
    return built;
  }();
  return names[static_cast<std::size_t>(op)].c_str();
}

}  // namespace mg

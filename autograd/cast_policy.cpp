#include "autograd/cast_policy.h"

#include <string>

namespace mg {

std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::LowerPrecision:
      return "lower_precision";
    case CastPolicy::Float32:
      return "float32";
    case CastPolicy::Promote:
      return "promote";
    case CastPolicy::Banned:
      return "banned";
    case CastPolicy::InputDtype:
      return "input_dtype";
  }
  return "unknown";
}

const char* qualified_name(Op op) {
  // Built once, then read by every error: "mg::" + the row's name.
  static const auto names = [] {
    std::array<std::string, kOps.size()> built;
    for (const OpRow& row : kOps) built[static_cast<std::size_t>(row.op)] = std::string("mg::") + row.name;
    return built;
  }();
  return names[static_cast<std::size_t>(op)].c_str();
}

}  // namespace mg

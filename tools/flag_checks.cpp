#include "tools/flag_checks.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace mg::tools {

CLI::Validator whole_number_in(std::int64_t least, std::int64_t most) {
  return CLI::Validator(
      [least, most](std::string& text) -> std::string {
        std::int64_t value = 0;
        if (CLI::detail::lexical_cast(text, value) && value >= least && value <= most) return "";
        if (most == std::numeric_limits<std::int64_t>::max())
          return fmt::format("{} is not allowed: give a whole number >= {}", text, least);
        return fmt::format("{} is not allowed: give a whole number from {} to {}", text, least, most);
      },
      "INT");
}

CLI::Validator finite_number_in(double low, double high, const std::string& allowed) {
  return CLI::Validator(
      [low, high, allowed](std::string& text) -> std::string {
        double value = 0;
        if (CLI::detail::lexical_cast(text, value) && std::isfinite(value) && value >= low && value <= high) return "";
        return fmt::format("{} is not allowed: give {}", text, allowed);
      },
      "FLOAT");
}

CLI::Validator seed_value() {
  // Parsed unchecked, "-1" would wrap to 2^64 - 1 and run with a seed nobody typed.
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t value = 0;
        if (!text.empty() && text.front() != '-' && CLI::detail::lexical_cast(text, value)) return "";
        return fmt::format("{} is not allowed: give a whole number from 0 to {}", text,
                           std::numeric_limits<std::uint64_t>::max());
      },
      "UINT");
}

}  // namespace mg::tools

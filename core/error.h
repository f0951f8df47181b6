// mg::Error and MG_CHECK: how every precondition in mixgrad fails.
//
// A message names the op, the values that were wrong (shapes, dtypes, devices) and what to do,
// for example
//   mg::add: shapes [2, 3] and [4] cannot be broadcast (dim -1: 3 vs 4)
// Checks run before any kernel, so a failed check leaves every tensor as it was.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace mg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mg

// MG_CHECK(condition, format, args...) throws mg::Error when the condition is false.
// The message is only formatted on failure, so checks cost one branch on the happy path.
#define MG_CHECK(condition, ...) \
  do { \
    if (!(condition)) [[unlikely]] \
      throw ::mg::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

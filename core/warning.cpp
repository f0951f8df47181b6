#include "core/warning.h"

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <utility>

namespace mg {

namespace {
std::mutex handler_mutex;
WarningHandler handler;
}  // namespace

void warn(const std::string& message) {
  WarningHandler current;
  {
    std::lock_guard lock(handler_mutex);
    current = handler;  // called outside the lock: a handler may warn or install another handler
  }
  if (current)
    current(message);
  else
    fmt::print(stderr, "mixgrad warning: {}\n", message);
}

WarningHandler set_warning_handler(WarningHandler new_handler) {
  std::lock_guard lock(handler_mutex);
  return std::exchange(handler, std::move(new_handler));
}

}  // namespace mg

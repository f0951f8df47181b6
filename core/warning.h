// Warnings: things a user should know that are not errors (a GradScaler used with bf16, a loss
// scale that keeps hitting its floor). Printed to stderr as "mixgrad warning: ..." unless a
// handler is installed; tests install one to see them.
#pragma once

#include <functional>
#include <string>

namespace mg {

using WarningHandler = std::function<void(const std::string& message)>;

void warn(const std::string& message);
// Installs a handler for every thread and returns the previous one; an empty handler restores stderr.
WarningHandler set_warning_handler(WarningHandler handler);

}  // namespace mg

#include "amp/memory_report.h"

#include <fmt/format.h>

#include "autograd/tape.h"

namespace mg::amp {

namespace {
std::size_t grad_bytes(const std::vector<Tensor>& tensors) {
  std::size_t bytes = 0;
  for (const Tensor& t : tensors)
    if (t.grad().defined()) bytes += t.grad().nbytes();
  return bytes;
}
}  // namespace

double MemoryReport::bytes_per_parameter() const {
  const std::size_t held = parameters + master_weights + gradients + optimizer_state;
  return parameter_count > 0 ? static_cast<double>(held) / static_cast<double>(parameter_count) : 0.0;
}

std::string MemoryReport::describe() const {
  auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  return fmt::format(
      "parameters {:.2f} MiB, master weights {:.2f} MiB, gradients {:.2f} MiB, optimizer state "
      "{:.2f} MiB, saved activations {:.2f} MiB; total {:.2f} MiB; {:.4g} bytes a parameter without activations",
      mib(parameters), mib(master_weights), mib(gradients), mib(optimizer_state), mib(saved_activations), mib(total()),
      bytes_per_parameter());
}

MemoryReport memory_report(const optim::Optimizer& optimizer) {
  MemoryReport report;
  for (const Tensor& p : optimizer.parameters()) {
    report.parameters += p.nbytes();
    report.parameter_count += p.numel();
  }
  report.gradients = grad_bytes(optimizer.parameters());
  report.master_weights = optimizer.master_bytes();
  for (std::size_t i = 0; i < optimizer.parameters().size(); ++i)
    if (optimizer.master(i).defined()) report.gradients += grad_bytes({optimizer.master(i)});
  report.optimizer_state = optimizer.state_bytes();
  report.saved_activations = saved_tensor_bytes();
  return report;
}

}  // namespace mg::amp

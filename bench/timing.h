// Small helpers shared by the benchmarks: the median of a sample and the process's page faults.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// Minor page faults of this process so far: each is a first touch of a fresh page (~10 us here),
// so a step that allocates without reusing memory shows up as faults per step.
inline std::int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace bench

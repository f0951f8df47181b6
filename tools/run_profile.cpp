#include "tools/run_profile.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace mg::tools {

void finish_profile(const train::OpProfile& profile, const TrainOptions& options) {
  if (profile.counted_steps() == 0) {
    fmt::print("mixgrad train: --profile: no step profiled (the first is warm-up); run 2 steps or more\n");
    return;
  }
  fmt::print("{}", profile.table());
  try {
    profile.write_chrome_trace(options.profile);
    fmt::print("mixgrad train: profile trace of {} step(s) in {} (open it in ui.perfetto.dev or chrome://tracing)\n",
               std::min<std::int64_t>(profile.counted_steps(), train::OpProfileOptions{}.trace_steps), options.profile);
  } catch (const Error& error) {
    fmt::print(stderr, "mixgrad train: --profile: {}\n", error.what());
  }
}

}  // namespace mg::tools

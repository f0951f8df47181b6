// The CUDA emulator's settings: which schedules the race check runs, its seed, the cap on the
// blocks of grid-stride loops, the compute capability the device reports and its memory. Read from
// the environment once (emulator.h names the variables).
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "emulator/emulator.h"

namespace mg::emu {

namespace {

const char* name_of(Order order) {
  switch (order) {
    case Order::Forward:
      return "forward";
    case Order::Reverse:
      return "reverse";
    case Order::Random:
      return "random";
  }
  return "?";
}

const char* name_of(Landing landing) { return landing == Landing::AtIssue ? "issue" : "wait"; }

std::int64_t integer_from_environment(const char* variable, std::int64_t fallback, std::int64_t minimum) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  MG_CHECK(*end == '\0' && value >= minimum, "CUDA emulator: {}={} is not a whole number of at least {}", variable,
           text, minimum);
  return value;
}

}  // namespace

std::string describe(const Schedule& schedule) {
  return fmt::format("{}:{}", name_of(schedule.order), name_of(schedule.landing));
}

std::vector<Schedule> parse_schedules(const std::string& text) {
  std::vector<Schedule> schedules;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::size_t colon = item.find(':');
    const std::string order = item.substr(0, colon), landing = colon == std::string::npos ? "" : item.substr(colon + 1);
    Schedule s{};
    if (order == "forward")
      s.order = Order::Forward;
    else if (order == "reverse")
      s.order = Order::Reverse;
    else if (order == "random")
      s.order = Order::Random;
    else
      throw Error(fmt::format("CUDA emulator: schedule '{}' in MG_EMULATOR_SCHEDULES={}: the order must be forward, "
                              "reverse or random",
                              item, text));
    if (landing == "issue")
      s.landing = Landing::AtIssue;
    else if (landing == "wait")
      s.landing = Landing::AtWait;
    else
      throw Error(fmt::format("CUDA emulator: schedule '{}' in MG_EMULATOR_SCHEDULES={}: write order:issue or "
                              "order:wait (when cp.async copies land)",
                              item, text));
    schedules.push_back(s);
  }
  MG_CHECK(!schedules.empty(), "CUDA emulator: MG_EMULATOR_SCHEDULES is empty; e.g. forward:issue,reverse:wait");
  return schedules;
}

std::size_t parse_memory_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  const int shift = suffix.empty() ? 0 : suffix == "KiB" ? 10 : suffix == "MiB" ? 20 : suffix == "GiB" ? 30 : -1;
  MG_CHECK(digits > 0 && digits <= 18 && shift >= 0,
           "CUDA emulator: MG_EMULATOR_MEMORY_LIMIT={} is not a size; write whole bytes, or a whole number with "
           "KiB, MiB or GiB after it (e.g. 512MiB)",
           text);
  const std::size_t count = std::stoull(text.substr(0, digits));
  MG_CHECK(count <= (std::numeric_limits<std::size_t>::max() >> shift),
           "CUDA emulator: MG_EMULATOR_MEMORY_LIMIT={} does not fit in 64 bits", text);
  return count << shift;
}

Settings& settings() {
  static Settings instance = [] {
    Settings s;
    const char* schedules = std::getenv("MG_EMULATOR_SCHEDULES");
    s.schedules = parse_schedules(schedules && *schedules ? schedules : "forward:issue,reverse:wait,random:wait");
    s.seed = static_cast<std::uint64_t>(integer_from_environment("MG_EMULATOR_SEED", 1, 0));
    s.max_grid_stride_blocks = integer_from_environment("MG_EMULATOR_MAX_BLOCKS", s.max_grid_stride_blocks, 1);
    s.compute_capability = static_cast<int>(
        integer_from_environment("MG_EMULATOR_COMPUTE_CAPABILITY", s.compute_capability, 10));
    s.multiprocessors = static_cast<int>(integer_from_environment("MG_EMULATOR_MULTIPROCESSORS", s.multiprocessors, 1));
    const char* memory = std::getenv("MG_EMULATOR_MEMORY_LIMIT");
    if (memory && *memory) s.memory_limit_bytes = parse_memory_size(memory);
    return s;
  }();
  return instance;
}

}  // namespace mg::emu

#include "tools/repro/stopping.h"

#include <fmt/format.h>

#include <utility>

#include "core/error.h"
#include "core/test_pause.h"

namespace mg::tools::repro {

namespace {

const ExperimentScope* g_scope = nullptr;  // the scope open now, if any

}  // namespace

ExperimentScope::ExperimentScope(std::string experiment, std::function<bool()> stop_requested)
    : experiment(std::move(experiment)), stop_requested(std::move(stop_requested)) {
  MG_CHECK(g_scope == nullptr, "repro::ExperimentScope: {}'s is open already; open one at a time", g_scope->experiment);
  g_scope = this;
}

ExperimentScope::~ExperimentScope() { g_scope = nullptr; }

void stop_if_requested() {
  if (g_scope && g_scope->stop_requested && g_scope->stop_requested()) throw Stopped{};
}

void pause_point_after_step(std::int64_t step) {
  if (g_scope) test_pause_point("repro-step:" + g_scope->experiment, step);
}

}  // namespace mg::tools::repro

#include "core/test_pause.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace mg {

namespace {

struct PauseRequest {
  std::string point;
  std::string rank;  // empty: every rank
};

// MG_TEST_PAUSE's points, "POINT[@RANK],...".
std::vector<PauseRequest> requested_pauses() {
  std::vector<PauseRequest> requests;
  const char* value = std::getenv("MG_TEST_PAUSE");
  std::string text = value != nullptr ? value : "";
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    PauseRequest request{text.substr(begin, comma - begin), ""};
    if (const std::size_t at = request.point.find('@'); at != std::string::npos) {
      request.rank = request.point.substr(at + 1);
      request.point.resize(at);
    }
    requests.push_back(request);
    begin = comma + 1;
  }
  return requests;
}

bool on_requested_rank(const std::string& rank) {
  if (rank.empty()) return true;
  const char* mine = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank == (mine != nullptr ? mine : "0");
}

// Set by the handlers a pause puts in front of the process's own while it waits.
std::atomic<int> g_signal_during_pause{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

constexpr int kWakingSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};
struct sigaction g_replaced[std::size(kWakingSignals)];

// Notes the signal, then does what the process would have done without the pause: its own handler,
// or the default action (which ends it).
void on_signal_during_pause(int signal) {
  g_signal_during_pause = signal;
  for (std::size_t i = 0; i < std::size(kWakingSignals); ++i) {
    if (kWakingSignals[i] != signal) continue;
    const auto handler = g_replaced[i].sa_handler;
    if (handler == SIG_IGN) return;
    if (handler == SIG_DFL) {
      std::signal(signal, SIG_DFL);
      std::raise(signal);
      return;
    }
    handler(signal);
  }
}

const std::vector<PauseRequest>& pause_requests() {
  static const std::vector<PauseRequest> requests = requested_pauses();
  return requests;
}

}  // namespace

void test_pause_point(std::string_view name, std::int64_t number) {
  if (pause_requests().empty()) return;
  test_pause_point(std::string(name) + ":" + std::to_string(number));
}

void test_pause_point(std::string_view point) {
  const std::vector<PauseRequest>& requests = pause_requests();
  const bool asked = std::any_of(requests.begin(), requests.end(), [&](const PauseRequest& request) {
    return point == request.point && on_requested_rank(request.rank);
  });
  if (!asked) return;
  // A process-directed signal may be handled on any thread (the CPU kernels' pool has several), so
  // the wait cannot be a sigsuspend of this one: handlers of its own note the signal, chain to the
  // process's, and this thread polls for the note. They are in place before the line is printed, so
  // a signal sent as soon as the line is read is never missed.
  g_signal_during_pause = 0;
  struct sigaction noting {};
  noting.sa_handler = on_signal_during_pause;
  sigemptyset(&noting.sa_mask);
  noting.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < std::size(kWakingSignals); ++i) sigaction(kWakingSignals[i], &noting, &g_replaced[i]);
  std::fprintf(stderr, "mixgrad test pause: at %.*s (pid %d); waiting for a signal\n", static_cast<int>(point.size()),
               point.data(), static_cast<int>(::getpid()));
  std::fflush(stderr);
  // A test that never sends the signal (a failed check before it; an mpirun that does not forward
  // it) must fail, not hang: after kPauseLimit the process ends itself, saying so. Under mpirun a
  // paused rank would otherwise outlive the test and keep ctest waiting on its output.
  constexpr int kPauseLimitSeconds = 120;
  for (int waited_ms = 0; g_signal_during_pause == 0; ++waited_ms) {
    if (waited_ms == kPauseLimitSeconds * 1000) {
      std::fprintf(stderr, "mixgrad test pause: no signal came within %d s at %.*s; ending the process\n",
                   kPauseLimitSeconds, static_cast<int>(point.size()), point.data());
      std::_Exit(124);
    }
    ::usleep(1000);
  }
  for (std::size_t i = 0; i < std::size(kWakingSignals); ++i) sigaction(kWakingSignals[i], &g_replaced[i], nullptr);
}

}  // namespace mg

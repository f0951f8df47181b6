#include "train/stop_signals.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace mg::train {

namespace {

// The signal the stop was asked for by, and how many signals the handler has seen: a stop asked for
// by request() (another rank's signal) is not a first signal of this process. The handler may run on
// any thread (a signal sent to the process goes to one that does not block it) and touches lock-free
// atomics and nothing else.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_signals_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
bool g_installed = false;

void on_stop_signal(int signal) {
  if (g_signals_received.fetch_add(1) == 0) {
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, signal);
    return;
  }
  // The second: end now. Only async-signal-safe calls here (write, signal, raise).
  constexpr char kLine[] = "mixgrad: a second signal: stopping at once; the last complete checkpoint is kept\n";
  [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, kLine, sizeof kLine - 1);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

struct NamedSignal {
  const char* name;
  int number;
};
constexpr NamedSignal kSignals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"TERM", SIGTERM},
                                    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU}};

}  // namespace

std::vector<int> default_stop_signals() { return {SIGINT, SIGTERM, SIGUSR1}; }

std::string signal_name(int signal) {
  for (const NamedSignal& s : kSignals)
    if (s.number == signal) return std::string("SIG") + s.name;
  return fmt::format("signal {}", signal);
}

std::vector<int> parse_signals(const std::string& text) {
  std::vector<int> signals;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    std::string name = text.substr(begin, comma - begin);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (name.starts_with("SIG")) name.erase(0, 3);
    MG_CHECK(name != "KILL" && name != "STOP",
             "stop signals '{}': SIG{} cannot be caught, so no program can save before it ends; choose among INT, "
             "TERM, USR1, USR2, HUP, QUIT, ALRM, XCPU",
             text, name);
    const auto* found = std::find_if(std::begin(kSignals), std::end(kSignals),
                                     [&](const NamedSignal& s) { return name == s.name; });
    MG_CHECK(found != std::end(kSignals),
             "stop signals '{}': unknown signal '{}'; write names such as INT,TERM,USR1 (also USR2, HUP, QUIT, ALRM, "
             "XCPU), separated by commas",
             text, name);
    if (std::find(signals.begin(), signals.end(), found->number) == signals.end()) signals.push_back(found->number);
    begin = comma + 1;
  }
  return signals;
}

StopSignals::StopSignals(const std::vector<int>& signals) : signals_(signals) {
  MG_CHECK(!g_installed, "train::StopSignals: another StopSignals is alive; a process has one at a time");
  g_installed = true;
  g_stop_signal = 0;
  g_signals_received = 0;
  // SA_RESTART: a read or write the signal interrupts goes on rather than failing with EINTR.
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  previous_.resize(signals_.size());
  for (std::size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (std::size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
  g_installed = false;
}

bool StopSignals::requested() const { return g_stop_signal != 0; }

int StopSignals::signal() const { return g_stop_signal; }

void StopSignals::request(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

void StopSignals::end_process() const {
  MG_CHECK(requested(), "train::StopSignals::end_process: no signal has arrived");
  const int signal = g_stop_signal;
  std::fflush(stdout);
  std::fflush(stderr);
  std::signal(signal, SIG_DFL);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal);
  sigprocmask(SIG_UNBLOCK, &just_this, nullptr);
  std::raise(signal);
  std::_Exit(128 + signal);  // a signal whose default action does not end the process
}

}  // namespace mg::train

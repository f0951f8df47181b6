// Pause points: places where a test can stop a real process and then signal or kill it, at a moment
// it chose rather than one it timed.
//
//   MG_TEST_PAUSE=step:5 mixgrad train ...        # stops after step 5
//   MG_TEST_PAUSE=safetensors-write:3@1 mpirun ... # stops in the middle of rank 1's third file write
//   MG_TEST_PAUSE=step:4,safetensors-write:2 ...   # both (a list, separated by commas)
//
// When the process reaches a point named by MG_TEST_PAUSE (and, after '@', its rank is that of
// OMPI_COMM_WORLD_RANK), it prints one line to stderr,
//   mixgrad test pause: at step:5 (pid 1234); waiting for a signal
// and sleeps until a signal arrives. A signal with a handler (train/stop_signals.h) then lets it go on;
// SIGKILL, or a signal with its default action, ends it where it stands. No signal within 120 s
// ends the process with status 124 and a line saying so: a test that never signals fails, not hangs. Without MG_TEST_PAUSE a
// pause point costs one comparison. The points are named where they are called: "step:S" after step
// S of mixgrad train (tools/train.cpp), "safetensors-write:N" halfway through the N-th file that
// data::save_safetensors writes in the process.
#pragma once

#include <cstdint>
#include <string_view>

namespace mg {

// Pauses here if MG_TEST_PAUSE names `point` (read once, at the first call); otherwise returns at once.
void test_pause_point(std::string_view point);
// The point "NAME:NUMBER" ("step:5"), its name made only when MG_TEST_PAUSE names some point, so that
// a loop may call it every step for the price of one comparison.
void test_pause_point(std::string_view name, std::int64_t number);

}  // namespace mg

// Fibers for the CUDA emulator: one per emulated GPU thread of the block being run, switched
// cooperatively on the one host thread that runs the launch.
//
// A fiber runs until it reaches a barrier, a warp collective or the end of the kernel, and then
// switches back to the scheduler (scheduler.cpp), which picks the next thread in its order. A
// switch saves and restores only what the calling convention says survives a call: on x86-64 six
// registers, the stack pointer and the floating-point control words (about 20 instructions;
// glibc's swapcontext also makes a system call each time to save the signal mask, 100 times slower,
// and a block of the pipelined GEMM switches some 7,000 times a k step). Elsewhere the ucontext
// calls do the same, slower.
//
// Stacks are mmap'd with an unmapped guard page below them (an overflow is a segfault at once, not
// a corrupted neighbour), kept in a pool and reused by every later block and launch.
// Under AddressSanitizer every switch is announced to it (__sanitizer_start/finish_switch_fiber), so
// it knows which stack is live and its reports name the emulated thread's frames.
#pragma once

#include <cstddef>
#include <vector>

// The hand-written switch on x86-64; the ucontext calls elsewhere, or with -DMG_EMU_UCONTEXT.
#if defined(__x86_64__) && !defined(MG_EMU_UCONTEXT)
#define MG_EMU_SWITCH_X86_64 1
#else
#include <ucontext.h>
#endif

namespace mg::emu {

class Fiber {
 public:
  using Entry = void (*)(void* argument);

  // The host thread's own context (the scheduler's): no stack of its own is allocated.
  Fiber() = default;
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Prepares the fiber to run entry(argument) on its stack at the next switch to it. entry must
  // never return: it ends by switching away for good (switch_to with `finished`).
  void prepare(Entry entry, void* argument);

  // Saves the running context into `from` and runs `to`, until something switches back to `from`.
  // `finished`: `from` will never run again (AddressSanitizer drops its fake stack).
  static void switch_to(Fiber& from, Fiber& to, bool finished = false);

 private:
  void allocate_stack();
  static void start(Fiber* self);  // the first code a fiber runs: tells AddressSanitizer, calls entry_

  Entry entry_ = nullptr;
  void* argument_ = nullptr;

  void* stack_ = nullptr;  // the mapping, guard page included
  std::size_t mapped_ = 0;
  void* stack_bottom_ = nullptr;  // the usable part, for AddressSanitizer
  std::size_t stack_size_ = 0;
#ifdef MG_EMU_SWITCH_X86_64
  void* saved_sp_ = nullptr;
#else
  ucontext_t context_{};
#endif
  void* asan_fake_stack_ = nullptr;

  friend void fiber_trampoline_target(Fiber* self);
};

}  // namespace mg::emu

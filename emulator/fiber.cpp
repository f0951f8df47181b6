#include "emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "emulator/sanitizer.h"

namespace mg::emu {

namespace {

// 256 KiB: kernels keep their tiles in registers (the SIMT GEMM's 8x8 sums, WMMA fragments), which
// here are stack bytes, and AddressSanitizer surrounds every local with redzones.
constexpr std::size_t kStackBytes = std::size_t{256} << 10;

// The fiber that switched to the one now starting: its stack bounds (unknown for the host thread
// until a fiber learns them from AddressSanitizer) are filled in by the fiber it started.
Fiber* switching_from = nullptr;

}  // namespace

void fiber_trampoline_target(Fiber* self) { Fiber::start(self); }

}  // namespace mg::emu

#ifdef MG_EMU_SWITCH_X86_64
// mg_emu_switch(void** save_sp, void* next_sp): pushes the callee-saved registers and the SSE and
// x87 control words, stores the stack pointer into *save_sp, loads next_sp and pops the other
// context's. A fresh stack (Fiber::prepare) holds such a frame whose return address is
// mg_emu_fiber_entry, with the Fiber* in r12.
asm(R"(
    .text
    .p2align 4
    .globl mg_emu_switch
    .type mg_emu_switch, @function
mg_emu_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr 8(%rsp)
    fldcw (%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size mg_emu_switch, .-mg_emu_switch

    .p2align 4
    .globl mg_emu_fiber_entry
    .type mg_emu_fiber_entry, @function
mg_emu_fiber_entry:
    movq %r12, %rdi
    callq mg_emu_fiber_start
    ud2
    .size mg_emu_fiber_entry, .-mg_emu_fiber_entry
)");

extern "C" void mg_emu_switch(void** save_sp, void* next_sp);
extern "C" void mg_emu_fiber_entry();
extern "C" void mg_emu_fiber_start(mg::emu::Fiber* self) { mg::emu::fiber_trampoline_target(self); }
#else
namespace {
void ucontext_entry(unsigned high, unsigned low) {
  const auto address = (static_cast<std::uintptr_t>(high) << 32) | low;
  mg::emu::fiber_trampoline_target(reinterpret_cast<mg::emu::Fiber*>(address));
}
}  // namespace
#endif

namespace mg::emu {

Fiber::~Fiber() {
  if (stack_ != nullptr) munmap(stack_, mapped_);
}

void Fiber::allocate_stack() {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  mapped_ = kStackBytes + page;
  stack_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack_ == MAP_FAILED) {
    stack_ = nullptr;
    throw std::bad_alloc();
  }
  mprotect(stack_, page, PROT_NONE);  // the guard page: stacks grow down into it
  stack_bottom_ = static_cast<char*>(stack_) + page;
  stack_size_ = kStackBytes;
}

void Fiber::prepare(Entry entry, void* argument) {
  if (stack_ == nullptr) allocate_stack();
#ifdef MG_EMU_ASAN
  // The stack's last user may have been left mid-kernel (a block that failed) or left for good
  // without returning: its frames' redzones are still marked in AddressSanitizer's shadow.
  ASAN_UNPOISON_MEMORY_REGION(stack_bottom_, stack_size_);
#endif
  entry_ = entry;
  argument_ = argument;
#ifdef MG_EMU_SWITCH_X86_64
  // The frame mg_emu_switch pops: control words, r15, r14, r13, r12 (= this), rbx, rbp, then the
  // return address. After the `ret` the stack pointer must be 16-byte aligned, as at a call.
  auto* top = reinterpret_cast<std::uint64_t*>(static_cast<char*>(stack_bottom_) + stack_size_);
  auto* frame = top - 11;  // 88 bytes below a 16-byte aligned top
  std::uint32_t mxcsr = 0;
  std::uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  std::memset(frame, 0, 11 * sizeof(std::uint64_t));
  std::memcpy(reinterpret_cast<char*>(frame), &fpu_control, sizeof fpu_control);
  std::memcpy(reinterpret_cast<char*>(frame) + 8, &mxcsr, sizeof mxcsr);
  frame[5] = reinterpret_cast<std::uint64_t>(this);  // r12
  frame[8] = reinterpret_cast<std::uint64_t>(&mg_emu_fiber_entry);  // return address
  saved_sp_ = frame;
#else
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack_bottom_;
  context_.uc_stack.ss_size = stack_size_;
  context_.uc_link = nullptr;
  const auto address = reinterpret_cast<std::uintptr_t>(this);
  makecontext(&context_, reinterpret_cast<void (*)()>(&ucontext_entry), 2, static_cast<unsigned>(address >> 32),
              static_cast<unsigned>(address & 0xffffffffu));
#endif
}

void Fiber::start(Fiber* self) {
#ifdef MG_EMU_ASAN
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (switching_from != nullptr && switching_from->stack_ == nullptr) {
    switching_from->stack_bottom_ = const_cast<void*>(bottom);
    switching_from->stack_size_ = size;
  }
#endif
  self->entry_(self->argument_);
  std::abort();  // an entry returns by switching away for good
}

void Fiber::switch_to(Fiber& from, Fiber& to, bool finished) {
  switching_from = &from;
#ifdef MG_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &from.asan_fake_stack_, to.stack_bottom_, to.stack_size_);
#else
  (void)finished;
#endif
#ifdef MG_EMU_SWITCH_X86_64
  mg_emu_switch(&from.saved_sp_, to.saved_sp_);
#else
  swapcontext(&from.context_, &to.context_);
#endif
#ifdef MG_EMU_ASAN
  // Running `from` again: something switched back to it.
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(from.asan_fake_stack_, &bottom, &size);
  if (switching_from != nullptr && switching_from->stack_ == nullptr && switching_from->stack_size_ == 0) {
    switching_from->stack_bottom_ = const_cast<void*>(bottom);
    switching_from->stack_size_ = size;
  }
#endif
}

}  // namespace mg::emu

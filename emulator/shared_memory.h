// Shared memory of the emulated block being run: the __shared__ variables (MG_SHARED) and the
// launch's dynamic shared memory (MG_DYNAMIC_SHARED). Internal to the emulator (machine.h).
//
// A GPU leaves shared memory as the last block wrote it; here every block starts with it full of
// 0xFF bytes (NaN in f32, f16 and bf16), so a read of a value no thread wrote shows as NaN. The
// variables are carved from one arena in the order the block first reaches their declarations,
// with 32 poisoned bytes after each under AddressSanitizer, which therefore reports an overrun;
// the dynamic memory is a heap block of exactly the launch's bytes, which it reports as well.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace mg::emu {

class SharedMemory {
 public:
  static constexpr std::size_t kStaticLimit = 48 << 10;  // a block's __shared__ variables, on every GPU

  // For a launch with `dynamic_bytes` of dynamic shared memory.
  void start_launch(std::size_t dynamic_bytes);
  // Fresh memory for the next block: no variables, everything NaN.
  void start_block();

  // The block's variable for `key`, created at the first call of the block; null when the block's
  // variables would need more than kStaticLimit bytes.
  void* variable(const void* key, std::size_t bytes, std::size_t alignment);
  void* dynamic() const { return dynamic_.get(); }
  std::size_t dynamic_bytes() const { return dynamic_bytes_; }
  unsigned char* arena() const { return arena_.get(); }
  // Whether [address, address + bytes) is shared memory of the block.
  bool contains(const void* address, std::size_t bytes) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  struct Variable {
    const void* key;
    void* address;
  };
  std::unique_ptr<unsigned char, Free> arena_;  // kStaticLimit plus room for the redzones
  std::size_t arena_used_ = 0;
  std::vector<Variable> variables_;
  std::unique_ptr<unsigned char, Free> dynamic_;
  std::size_t dynamic_bytes_ = 0;
};

}  // namespace mg::emu

// TMA's tensor maps as the emulator encodes them. On a GPU, cuTensorMapEncodeTiled (a driver function
// the kernels' host code fetches with cudaGetDriverEntryPointByVersion, so that nothing links
// libcuda) packs a tensor's address, sizes, strides, the box one copy moves and its swizzle into 128
// opaque bytes; here the emulated entry point (cudart.cpp) checks the arguments as the driver
// documents them and writes this struct into those bytes, and the TMA model (hopper_calls.cpp)
// reads it back. Internal to the emulator.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace mg::emu {

struct TensorMap {
  static constexpr std::uint64_t kMagic = 0x3130'5041'4d54'474dull;  // "MGTMAP01"
  static constexpr int kMaxRank = 3;
  std::uint64_t magic;
  std::uint64_t address;
  std::uint32_t rank, element_bytes;
  std::uint32_t swizzle_bytes;  // 0 (none), 32, 64 or 128
  std::uint32_t box[kMaxRank];  // elements along each dimension, innermost first
  std::uint64_t dims[kMaxRank];
  std::uint64_t strides[kMaxRank];  // bytes; strides[0] is the element's size

  std::size_t box_bytes() const;
  // The box's byte `offset` (dense, innermost dimension first) as the swizzle places it in shared
  // memory at window address `base`: the 16-byte chunk's address bits 4.. XOR bits 7.. (CuTe's
  // Swizzle<b, 4, 3>, b = 1, 2, 3 for 32, 64, 128 bytes).
  std::uint32_t shared_address(std::uint32_t base, std::size_t offset) const;
  // The global address of the box element at `offset` of a box at `coordinates`; null outside the tensor.
  const unsigned char* global_address(const int* coordinates, std::size_t offset) const;
};
static_assert(sizeof(TensorMap) <= 128, "a tensor map is 128 bytes");

// The map in `bytes` (a CUtensorMap), or an mg::Error naming `what` when no emulated
// cuTensorMapEncodeTiled wrote it.
const TensorMap& tensor_map_in(const void* bytes, const char* what);

// The emulated cuTensorMapEncodeTiled (cudart.cpp's cudaGetDriverEntryPointByVersion returns it).
CUresult encode_tensor_map_tiled(CUtensorMap* out, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                 const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                 const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill);

}  // namespace mg::emu

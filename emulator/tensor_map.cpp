#include "emulator/tensor_map.h"

#include <cstring>

#include "core/error.h"

namespace mg::emu {

std::size_t TensorMap::box_bytes() const {
  std::size_t bytes = element_bytes;
  for (std::uint32_t d = 0; d < rank; ++d) bytes *= box[d];
  return bytes;
}

std::uint32_t TensorMap::shared_address(std::uint32_t base, std::size_t offset) const {
  const std::uint32_t address = base + static_cast<std::uint32_t>(offset);
  const std::uint32_t bits = swizzle_bytes == 128 ? 3 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 1 : 0;
  return address ^ (((address >> 7) & ((1u << bits) - 1)) << 4);
}

const unsigned char* TensorMap::global_address(const int* coordinates, std::size_t offset) const {
  std::size_t element = offset / element_bytes;
  std::uint64_t at = offset % element_bytes;
  for (std::uint32_t d = 0; d < rank; ++d) {
    const std::int64_t c = static_cast<std::int64_t>(coordinates[d]) + static_cast<std::int64_t>(element % box[d]);
    element /= box[d];
    if (c < 0 || static_cast<std::uint64_t>(c) >= dims[d]) return nullptr;
    at += static_cast<std::uint64_t>(c) * strides[d];
  }
  return reinterpret_cast<const unsigned char*>(address) + at;
}

const TensorMap& tensor_map_in(const void* bytes, const char* what) {
  const auto* map = static_cast<const TensorMap*>(bytes);
  if (map->magic != TensorMap::kMagic)
    throw Error(fmt::format("CUDA emulator: {}: the tensor map at {} was not made by cuTensorMapEncodeTiled "
                            "(fetch it with cudaGetDriverEntryPointByVersion)",
                            what, bytes));
  return *map;
}

namespace {

std::uint32_t element_bytes_of(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
      return 4;
    default:
      return 0;
  }
}

std::uint32_t swizzle_bytes_of(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_NONE:
      return 0;
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return 128;
    default:
      return ~0u;
  }
}

}  // namespace

// The driver's cuTensorMapEncodeTiled, as the emulator's cudaGetDriverEntryPointByVersion hands it out:
// the checks its documentation lists for the arguments mixgrad passes (no interleave, element strides
// of 1, zeros outside the tensor; rank at most 3 here), then the map.
CUresult encode_tensor_map_tiled(CUtensorMap* out, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                 const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                 const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill fill) {
  TensorMap map{};
  map.magic = TensorMap::kMagic;
  map.address = reinterpret_cast<std::uint64_t>(address);
  map.rank = rank;
  map.element_bytes = element_bytes_of(type);
  map.swizzle_bytes = swizzle_bytes_of(swizzle);
  if (out == nullptr || rank < 1 || rank > TensorMap::kMaxRank || map.element_bytes == 0 || map.swizzle_bytes == ~0u ||
      interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE || map.address % 16 != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32) || box[d] == 0 || box[d] > 256 || element_strides[d] != 1)
      return CUDA_ERROR_INVALID_VALUE;
    map.dims[d] = dims[d];
    map.box[d] = box[d];
    map.strides[d] = d == 0 ? map.element_bytes : strides[d - 1];
    if (d > 0 && (map.strides[d] % 16 != 0 || map.strides[d] >= (1ull << 40))) return CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t inner_bytes = std::uint64_t{box[0]} * map.element_bytes;
  if (inner_bytes % 16 != 0 || (map.swizzle_bytes != 0 && inner_bytes > map.swizzle_bytes))
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, &map, sizeof map);
  return CUDA_SUCCESS;
}

}  // namespace mg::emu

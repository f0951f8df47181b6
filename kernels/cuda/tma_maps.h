// TMA's tensor maps (hopper.cuh's tma_load and tma_store read them): made on the host by the driver's
// cuTensorMapEncodeTiled, fetched through the runtime (cudaGetDriverEntryPointByVersion), so that
// nothing links libcuda: a test binary linked against it would not start where the driver is only a
// stub (CI). Used by rung 4 of both GEMMs (gemm_wgmma.cu, gemm_fp8_wgmma.cu), built for sm_90a.
#pragma once

#include <cudaTypedefs.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace mg::kernels::cuda::tma {

// A map of `count` row-major, contiguous matrices of rows x columns elements of `type` (`element_bytes`
// each), read and written in boxes of box_rows x box_columns with the 128-byte swizzle (box_columns
// x element_bytes must be 128). `what` names the caller in the message of a refused map.
CUtensorMap matrix_map(CUtensorMapDataType type, int element_bytes, const void* data, int count, std::int64_t rows,
                       std::int64_t columns, int box_rows, int box_columns, const char* what);

template <class T>
constexpr CUtensorMapDataType data_type() {
  if constexpr (std::is_same_v<T, float>)
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  else if constexpr (std::is_same_v<T, __half>)
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else if constexpr (std::is_same_v<T, bf16>)
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else {
    static_assert(std::is_same_v<T, std::uint8_t>, "TMA maps of f32, f16, bf16 or FP8 codes");
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
}

template <class T>
CUtensorMap matrix_map(const T* data, int count, std::int64_t rows, std::int64_t columns, int box_rows, int box_columns,
                       const char* what) {
  return matrix_map(data_type<T>(), static_cast<int>(sizeof(T)), data, count, rows, columns, box_rows, box_columns,
                    what);
}

}  // namespace mg::kernels::cuda::tma

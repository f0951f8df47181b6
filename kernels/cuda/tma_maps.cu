// TMA's tensor maps: tma_maps.h says why through the runtime.
#include "kernels/cuda/tma_maps.h"

#include <fmt/format.h>

namespace mg::kernels::cuda::tma {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    MG_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found));
#else  // the versioned query is 12.5's
    MG_CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &entry, cudaEnableDefault, &found));
#endif
    MG_CHECK(found == cudaDriverEntryPointSuccess && entry != nullptr,
             "CUDA kernels (rung 4): the driver has no cuTensorMapEncodeTiled (it needs CUDA 12.0 or later)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return function;
}

}  // namespace

CUtensorMap matrix_map(CUtensorMapDataType type, int element_bytes, const void* data, int count, std::int64_t rows,
                       std::int64_t columns, int box_rows, int box_columns, const char* what) {
  CUtensorMap map{};
  const auto bytes = static_cast<cuuint64_t>(element_bytes);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(count)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(columns) * bytes,
                                 static_cast<cuuint64_t>(rows * columns) * bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_columns), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = encode_function()(&map, type, 3, const_cast<void*>(data), dims, strides, box, element_strides,
                                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MG_CHECK(result == CUDA_SUCCESS, "{}: cuTensorMapEncodeTiled refused a map of {} x {} x {} (box {} x {}): error {}",
           what, count, rows, columns, box_rows, box_columns, static_cast<int>(result));
  return map;
}

}  // namespace mg::kernels::cuda::tma

// Data movement: dtype casts, dim permutations, and block copies along one dim (cat, slice).
// None of these do arithmetic, so CPU and GPU results are bit-identical.
//
// cast:            out = x converted to out's dtype (same shape); round to nearest even, subnormals kept
// permute:         out[i_perm[0], ..., i_perm[r-1]] = x[i_0, ..., i_{r-1}], out.shape[d] = x.shape[perm[d]]
// copy_along_dim:  with src and dst equal in every dim but `dim` (and of one dtype), copies
//                  src[..., src_start : src_start+length, ...] into dst[..., dst_start : dst_start+length, ...]
// copy_between_devices: dst = src byte for byte (same dtype and element count), wherever each
//                  lives: CPU, or a CUDA device (core/device_ops.h: kernels/cuda/transfer.cpp, through pinned buffers)
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/backends.h"

namespace mg::kernels {

MG_KERNELS(void cast(const Tensor& x, Tensor& out);
           void permute(const Tensor& x, const std::vector<int>& perm, Tensor& out);
           void copy_along_dim(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, int dim,
                               std::int64_t length);)
void copy_between_devices(const Tensor& src, Tensor& dst);

// The CUDA backend alone (kernels/cuda/, in builds with MG_WITH_CUDA).
namespace cuda {
// The byte-level operations core's factories and item() use (core/device_ops.h), handed to core by
// register_cuda_backend (kernels/dispatch.cpp): copy_bytes (kernels/cuda/transfer.cpp) and fill
// (kernels/cuda/copy.cu).
void copy_bytes(const void* src, Device src_device, void* dst, Device dst_device, std::size_t nbytes);
void fill(void* dst, Device device, DType dtype, std::uint32_t pattern, std::int64_t count);
}  // namespace cuda

}  // namespace mg::kernels

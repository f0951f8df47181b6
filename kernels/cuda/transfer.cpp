// Transfers between the CPU and CUDA devices: cuda::copy_bytes (kernels/copy.h), which core/device_ops.h
// calls for kernels::copy_between_devices, factories on a GPU, item() and to_vector().
//
// Host memory from the caching CPU allocator is pageable, and the driver can only DMA from pinned
// (page-locked) memory: cudaMemcpy from pageable memory stages through a driver buffer and blocks.
// So transfers go through a pinned staging buffer of our own, in chunks:
//   CPU -> GPU  memcpy a chunk into the staging buffer, queue cudaMemcpyAsync on the device's
//               stream, record an event; the next chunk waits for that event before reusing the
//               buffer. The host returns once the last chunk is queued.
//   GPU -> CPU  queue cudaMemcpyAsync into the staging buffer, wait for the stream (the value is
//               reaching the host: the one place the host must wait), memcpy out.
//   GPU -> GPU  cudaMemcpyPeerAsync on the destination's stream, after the source's stream; the
//               source's stream then waits for the copy, so that the source's block, freed and
//               handed out again by the caching allocator, is not overwritten while it is read.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "kernels/copy.h"
#include "kernels/cuda/runtime.h"

namespace mg::kernels::cuda {

namespace {

constexpr std::size_t kStagingBytes = std::size_t{8} << 20;

// One pinned buffer for the process, with the event of the last upload that read it.
struct Staging {
  std::mutex mutex;
  void* buffer = nullptr;
  cudaEvent_t last_upload = nullptr;
  int event_device = -1;

  void* get() {
    if (buffer == nullptr) MG_CUDA_CHECK(cudaMallocHost(&buffer, kStagingBytes));
    return buffer;
  }
  // Blocks until the upload that last read the buffer has finished.
  void wait_for_upload() {
    if (last_upload != nullptr) mg::cuda::wait_for_event(last_upload);
  }
  void record_upload(int device_index) {
    if (event_device != device_index) {
      if (last_upload != nullptr) MG_CUDA_CHECK(cudaEventDestroy(last_upload));
      mg::cuda::DeviceGuard guard(device_index);
      MG_CUDA_CHECK(cudaEventCreateWithFlags(&last_upload, cudaEventDisableTiming));
      event_device = device_index;
    }
    MG_CUDA_CHECK(cudaEventRecord(last_upload, mg::cuda::stream(device_index)));
  }
};

Staging& staging() {
  static auto* instance = new Staging();  // never destroyed: the driver may be gone at exit
  return *instance;
}

}  // namespace

void copy_bytes(const void* src, Device s, void* dst, Device d, std::size_t nbytes) {
  if (nbytes == 0) return;
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  if (s.is_cuda() && d.is_cuda()) {
    if (s.index == d.index) {  // one stream: ordered after the producers and before the next user
      mg::cuda::DeviceGuard guard(d.index);
      MG_CUDA_CHECK(cudaMemcpyPeerAsync(to, d.index, from, s.index, nbytes, mg::cuda::stream(d.index)));
      return;
    }
    // The destination's stream must not start before the source's queued work has produced it.
    mg::cuda::synchronize(s.index);
    cudaEvent_t copied = nullptr;
    {
      mg::cuda::DeviceGuard guard(d.index);
      MG_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
      MG_CUDA_CHECK(cudaMemcpyPeerAsync(to, d.index, from, s.index, nbytes, mg::cuda::stream(d.index)));
      MG_CUDA_CHECK(cudaEventRecord(copied, mg::cuda::stream(d.index)));
    }
    // The source's block goes back to its device's pool as soon as the caller drops it, and the next
    // kernel on the source's stream may write it: that stream waits for the copy (no host wait).
    mg::cuda::DeviceGuard guard(s.index);
    MG_CUDA_CHECK(cudaStreamWaitEvent(mg::cuda::stream(s.index), copied, 0));
    MG_CUDA_CHECK(cudaEventDestroy(copied));  // released by the driver once the copy has completed
    return;
  }
  Staging& stage = staging();
  std::lock_guard<std::mutex> lock(stage.mutex);
  char* pinned = static_cast<char*>(stage.get());
  for (std::size_t done = 0; done < nbytes; done += kStagingBytes) {
    const std::size_t chunk = std::min(kStagingBytes, nbytes - done);
    if (d.is_cuda()) {  // CPU -> GPU
      stage.wait_for_upload();
      std::memcpy(pinned, from + done, chunk);
      mg::cuda::DeviceGuard guard(d.index);
      MG_CUDA_CHECK(cudaMemcpyAsync(to + done, pinned, chunk, cudaMemcpyHostToDevice, mg::cuda::stream(d.index)));
      stage.record_upload(d.index);
    } else {  // GPU -> CPU
      // An upload to another device may still be reading the buffer (one to this device is ahead of
      // this copy on the same stream, and done when the copy is).
      if (stage.event_device != s.index) stage.wait_for_upload();
      mg::cuda::DeviceGuard guard(s.index);
      MG_CUDA_CHECK(cudaMemcpyAsync(pinned, from + done, chunk, cudaMemcpyDeviceToHost, mg::cuda::stream(s.index)));
      mg::cuda::synchronize(s.index);
      std::memcpy(to + done, pinned, chunk);
    }
  }
}

}  // namespace mg::kernels::cuda

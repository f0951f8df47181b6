// Transfers between the CPU and CUDA devices: cuda::copy_bytes (kernels/copy.h), which core/device_ops.h
// calls for kernels::copy_between_devices, factories on a GPU, item() and to_vector().
//
// Host memory from the caching CPU allocator is pageable, and the driver can only DMA from pinned
// (page-locked) memory: cudaMemcpy from pageable memory stages through a driver buffer and blocks.
// So transfers go through pinned buffers of our own, in chunks of at most 8 MiB:
//   CPU -> GPU  a ring of 64 MiB: each chunk is memcpy'd into the next free region of the ring,
//               cudaMemcpyAsync is queued on the device's stream and an event recorded for the
//               region. The host returns once the last chunk is queued, and waits only when the ring
//               wraps onto a region whose upload the device has not done yet (the host has run more
//               than 64 MiB of uploads ahead of the device): a training step's batch (a few hundred
//               KiB) is never waited for in steady state, so uploading it costs the step no wait.
//   GPU -> CPU  queue cudaMemcpyAsync into a pinned buffer of its own, wait for the stream (the value
//               is reaching the host: the one place the host must wait), memcpy out.
//   GPU -> GPU  cudaMemcpyPeerAsync on the destination's stream, after the source's stream; the
//               source's stream then waits for the copy, so that the source's block, freed and
//               handed out again by the caching allocator, is not overwritten while it is read.
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/copy.h"
#include "kernels/cuda/runtime.h"

namespace mg::kernels::cuda {

namespace {

constexpr std::size_t kChunkBytes = std::size_t{8} << 20;
constexpr std::size_t kRingBytes = std::size_t{64} << 20;

// The pinned ring of the uploads, for the process, with an event per region still being read.
class UploadRing {
 public:
  // A region of `bytes` (at most kChunkBytes) the host may fill now. Uploads the device has not done
  // yet that still read it are waited for (counted by host_waits); done ones cost nothing.
  char* take(std::size_t bytes) {
    if (buffer_ == nullptr) MG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&buffer_), kRingBytes));
    if (head_ + bytes > kRingBytes) {  // wrap: the regions left at the end are the oldest; let them go first
      while (!in_flight_.empty() && in_flight_.front().begin >= head_) retire_front();
      head_ = 0;
    }
    while (!in_flight_.empty() && in_flight_.front().begin < head_ + bytes && in_flight_.front().end > head_)
      retire_front();
    char* region = buffer_ + head_;
    head_ += bytes;
    return region;
  }
  // The upload of the region just taken is queued on `device_index`'s stream.
  void queued(const char* region, std::size_t bytes, int device_index) {
    cudaEvent_t done = spare_event(device_index);
    MG_CUDA_CHECK(cudaEventRecord(done, mg::cuda::stream(device_index)));
    const auto begin = static_cast<std::size_t>(region - buffer_);
    in_flight_.push_back({begin, begin + bytes, device_index, done});
  }
  std::mutex mutex;

 private:
  struct InFlight {
    std::size_t begin, end;  // bytes of the ring
    int device_index;
    cudaEvent_t done;
  };
  void retire_front() {
    const InFlight& oldest = in_flight_.front();
    if (cudaEventQuery(oldest.done) != cudaSuccess) mg::cuda::wait_for_event(oldest.done);
    spare_events_.push_back({oldest.device_index, oldest.done});
    in_flight_.pop_front();
  }
  cudaEvent_t spare_event(int device_index) {
    for (auto it = spare_events_.begin(); it != spare_events_.end(); ++it)
      if (it->first == device_index) {
        const cudaEvent_t event = it->second;
        spare_events_.erase(it);
        return event;
      }
    mg::cuda::DeviceGuard guard(device_index);
    cudaEvent_t event = nullptr;
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  char* buffer_ = nullptr;
  std::size_t head_ = 0;
  std::deque<InFlight> in_flight_;  // oldest first, in the ring's order
  std::vector<std::pair<int, cudaEvent_t>> spare_events_;  // recorded and done, by device
};

// Never destroyed: the driver may be gone at exit.
UploadRing& upload_ring() {
  static auto* instance = new UploadRing();
  return *instance;
}

// The pinned buffer of the downloads, which wait for their copy before they return.
struct DownloadBuffer {
  std::mutex mutex;
  char* buffer = nullptr;
  char* get() {
    if (buffer == nullptr) MG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&buffer), kChunkBytes));
    return buffer;
  }
};

DownloadBuffer& download_buffer() {
  static auto* instance = new DownloadBuffer();
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
  if (d.is_cuda()) {  // CPU -> GPU
    UploadRing& ring = upload_ring();
    std::lock_guard<std::mutex> lock(ring.mutex);
    for (std::size_t done = 0; done < nbytes; done += kChunkBytes) {
      const std::size_t chunk = std::min(kChunkBytes, nbytes - done);
      char* pinned = ring.take(chunk);
      std::memcpy(pinned, from + done, chunk);
      mg::cuda::DeviceGuard guard(d.index);
      MG_CUDA_CHECK(cudaMemcpyAsync(to + done, pinned, chunk, cudaMemcpyHostToDevice, mg::cuda::stream(d.index)));
      ring.queued(pinned, chunk, d.index);
    }
    return;
  }
  DownloadBuffer& download = download_buffer();  // GPU -> CPU
  std::lock_guard<std::mutex> lock(download.mutex);
  char* pinned = download.get();
  for (std::size_t done = 0; done < nbytes; done += kChunkBytes) {
    const std::size_t chunk = std::min(kChunkBytes, nbytes - done);
    mg::cuda::DeviceGuard guard(s.index);
    MG_CUDA_CHECK(cudaMemcpyAsync(pinned, from + done, chunk, cudaMemcpyDeviceToHost, mg::cuda::stream(s.index)));
    mg::cuda::synchronize(s.index);
    std::memcpy(to + done, pinned, chunk);
  }
}

}  // namespace mg::kernels::cuda

// Device: where a tensor's memory lives. The CPU is always there; CUDA devices carry an index.
// A CUDA tensor needs the CUDA backend, which core sets up on a CUDA device's first use
// (core/device_ops.h); every op checks that its inputs share one device before it dispatches to a
// kernel.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

namespace mg {

enum class DeviceType : std::uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  friend constexpr bool operator==(Device, Device) = default;
};

// Number of CUDA devices visible to this process: 0 when built without CUDA, without a driver
// or without a GPU. Tests that need a GPU skip with a message when this is 0.
int cuda_device_count();
inline bool cuda_is_available() { return cuda_device_count() > 0; }
// True when this build contains the CUDA backend (MG_CUDA=AUTO found nvcc, MG_CUDA=ON, or EMULATE).
bool built_with_cuda();
// True when that backend is the CUDA emulator (MG_CUDA=EMULATE): one device, whose kernels run on
// the CPU to be checked, far slower than the CPU backend.
bool cuda_emulated();
// An mg::Error unless `device` is the CPU or a CUDA device this build and process can use. The
// message starts with `context` ("CUDA allocator", "mg::to_device: cannot move [2] f32 to cuda:0")
// and says what is missing: the backend, any GPU, or a device of that index.
void check_device_available(Device device, std::string_view context);

}  // namespace mg

template <>
struct fmt::formatter<mg::Device> : fmt::formatter<std::string_view> {
  auto format(mg::Device device, fmt::format_context& ctx) const {
    if (device.is_cpu()) return fmt::format_to(ctx.out(), "cpu");
    return fmt::format_to(ctx.out(), "cuda:{}", device.index);
  }
};

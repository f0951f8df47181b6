// The table of microkernels (kernels/cpu/microkernel.h): which exist, what each needs, and which this
// CPU runs. The kernels themselves are in microkernel_model.cpp and microkernel_x86.cpp.
#include "kernels/cpu/microkernel.h"

#include <array>

#include "kernels/cpu/microkernel_models.h"

namespace mg::kernels::cpu {

namespace {

#if defined(__x86_64__)
constexpr auto kAvx2Fma = &x86::avx2_fma_6x16;
constexpr auto kAvx512Fma = &x86::avx512_fma_12x32;
constexpr auto kAvx512Bf16Dot = &x86::avx512_bf16_dot_12x32;
constexpr auto kAvx2FmaGathered = &x86::avx2_fma_6x16_gathered;
constexpr auto kAvx512FmaGathered = &x86::avx512_fma_12x32_gathered;
constexpr auto kAvx512Bf16DotGathered = &x86::avx512_bf16_dot_12x32_gathered;
#else
constexpr void (*kAvx2Fma)(std::int64_t, const void*, const void*, float*, std::int64_t, bool) = nullptr;
constexpr auto kAvx512Fma = kAvx2Fma;
constexpr auto kAvx512Bf16Dot = kAvx2Fma;
constexpr void (*kAvx2FmaGathered)(std::int64_t, const float* const*, const std::int64_t*, const float*, std::int64_t,
                                   float*, std::int64_t, bool) = nullptr;
constexpr auto kAvx512FmaGathered = kAvx2FmaGathered;
constexpr auto kAvx512Bf16DotGathered = kAvx2FmaGathered;
#endif

constexpr std::array<MicroKernel, 6> kKernels{{
    {MicroKernelId::ModelFma, "model-fma", MicroArith::Fma, 12, 32, &models::fma_tile<12, 32>,
     &models::fma_tile_gathered<12, 32>},
    {MicroKernelId::ModelBf16Dot, "model-bf16-dot", MicroArith::Bf16Dot, 12, 32, &models::bf16_dot_tile<12, 32>,
     &models::bf16_dot_tile_gathered<12, 32>},
    {MicroKernelId::ModelFma6x16, "model-fma-6x16", MicroArith::Fma, 6, 16, &models::fma_tile<6, 16>,
     &models::fma_tile_gathered<6, 16>},
    {MicroKernelId::Avx2Fma, "avx2-fma", MicroArith::Fma, 6, 16, kAvx2Fma, kAvx2FmaGathered},
    {MicroKernelId::Avx512Fma, "avx512-fma", MicroArith::Fma, 12, 32, kAvx512Fma, kAvx512FmaGathered},
    {MicroKernelId::Avx512Bf16Dot, "avx512-bf16-dot", MicroArith::Bf16Dot, 12, 32, kAvx512Bf16Dot,
     kAvx512Bf16DotGathered},
}};

}  // namespace

bool cpu_runs(const MicroCpu& cpu, MicroKernelId id) {
  switch (id) {
    case MicroKernelId::ModelFma:
    case MicroKernelId::ModelBf16Dot:
    case MicroKernelId::ModelFma6x16:
      return true;
    case MicroKernelId::Avx2Fma:
      return cpu.avx2_fma;
    case MicroKernelId::Avx512Fma:
      return cpu.avx512f;
    case MicroKernelId::Avx512Bf16Dot:
      return cpu.avx512_bf16;
  }
  return false;
}

const MicroCpu& micro_cpu() {
  static const MicroCpu cpu = [] {
    MicroCpu features;
#if defined(__x86_64__)
    __builtin_cpu_init();
    features.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    features.avx512f = __builtin_cpu_supports("avx512f");
    features.avx512_bf16 = features.avx512f && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    features.bf16_dot_pays = features.avx512_bf16 && !__builtin_cpu_is("intel");
#endif
    return features;
  }();
  return cpu;
}

const MicroKernel* microkernel(MicroKernelId id) {
  for (const MicroKernel& kernel : kKernels)
    if (kernel.id == id) return cpu_runs(micro_cpu(), id) && kernel.run ? &kernel : nullptr;
  return nullptr;
}

std::string_view microkernel_name(MicroKernelId id) {
  for (const MicroKernel& kernel : kKernels)
    if (kernel.id == id) return kernel.name;
  return "?";
}

std::vector<const MicroKernel*> runnable_microkernels() {
  std::vector<const MicroKernel*> kernels;
  for (const MicroKernel& kernel : kKernels)
    if (const MicroKernel* runnable = microkernel(kernel.id)) kernels.push_back(runnable);
  return kernels;
}

MicroKernelId model_of(MicroKernelId id) {
  switch (id) {
    case MicroKernelId::Avx2Fma:
      return MicroKernelId::ModelFma6x16;
    case MicroKernelId::Avx512Fma:
      return MicroKernelId::ModelFma;
    case MicroKernelId::Avx512Bf16Dot:
      return MicroKernelId::ModelBf16Dot;
    default:
      return id;
  }
}

}  // namespace mg::kernels::cpu

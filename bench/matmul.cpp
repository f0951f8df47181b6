// bench/matmul: GFLOP/s of mixgrad's CPU GEMMs at f32, f16 and bf16, beside libtorch's in one run.
//
//   build/bench/matmul                    sizes 256 512 1024 2048 (square m = n = k)
//   build/bench/matmul 512 1024           chosen sizes
//   build/bench/matmul_vs_torch           with libtorch's f32 and bf16 matmul (built when CMake finds Torch)
//   MG_NUM_THREADS=1 build/bench/matmul   one core: the figures to read against the instruction peak
//
// Variants per size, interleaved in every repetition so that a noisy machine slows them alike:
//   f32 library    mg::matmul on f32 tensors: OpenBLAS or Eigen, as kernels/cpu/blas_choice.h picked
//   f32 own        the same product on mixgrad's FMA microkernel (kernels/cpu/gemm_packed.h)
//   f16, bf16      mg::matmul on f16/bf16 tensors: the microkernels the choice names (header line)
//   torch f32, torch bf16   torch::matmul (oneDNN's bf16 kernels), in matmul_vs_torch only
// Each runs twice to warm up, then enough repetitions for ~0.5 s; the median time is reported. The
// header also measures the peak of one core's instructions (bench/instruction_peak.h), and each
// microkernel GEMM is given as a share of the peak of its instruction (on one thread).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/instruction_peak.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "kernels/cpu/blas_choice.h"
#include "kernels/cpu/gemm_packed.h"
#include "mixgrad.h"
#ifdef MG_BENCH_TORCH
#include "bench/torch_step.h"
#endif

namespace {

using bench::Clock;
using namespace mg::kernels::cpu;

double seconds(const std::function<void()>& fn) {
  auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Variant {
  std::string name;
  std::function<void()> run;
  double peak = 0.0;  // GFLOP/s of the instruction it runs on (one core), 0 when not a microkernel
  std::vector<double> times;
};

// The peak of the instruction a microkernel runs on, scaled to the thread count.
double peak_of(const std::optional<MicroKernelId>& id, const bench::InstructionPeak& peak) {
  if (!id) return 0.0;
  const double threads = mg::num_threads();
  if (*id == MicroKernelId::Avx512Bf16Dot) return peak.bf16_dot * threads;
  if (*id == MicroKernelId::Avx512Fma) return peak.fma * threads;
  return 0.0;  // AVX2 and the models: no measured peak
}

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM) ends the run with its message and status 1.
int main(int argc, char** argv) try {
#ifdef MG_BENCH_TORCH
  // As bench/train_step: libtorch's OpenMP threads spin after each of its products and would steal the
  // cores of mixgrad's next one (measured: mixgrad's bf16 GEMM at 512 on 2 threads ran at 185 GFLOP/s
  // beside spinning threads, 359 alone), so the benchmark starts itself again with idle threads asleep.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
#endif
  std::vector<std::int64_t> sizes{256, 512, 1024, 2048};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) {
      // A size is a whole number from 1 on: "--help", "abc" or "-5" print how to call the benchmark.
      const std::string arg = argv[i];
      const bool number = !arg.empty() && arg.size() <= 6 &&
                          std::all_of(arg.begin(), arg.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!number || std::stoll(arg) < 1) {
        fmt::print(stderr, "usage: {} [N ...]   square sizes m = n = k, each 1 to 999999 (default 256 512 1024 2048)\n",
                   argv[0]);
        return arg == "--help" || arg == "-h" ? 0 : 2;
      }
      sizes.push_back(std::stoll(arg));
    }
  }
  mg::NoGradGuard no_grad;
  fmt::print("{}\n", bench::machine_lines());
  const bench::InstructionPeak peak = bench::measure_instruction_peak();
  fmt::print("instruction peak, one core: f32 FMA (zmm) {:.1f} GFLOP/s, bf16 vdpbf16ps (zmm) {:.1f} GFLOP/s{}\n",
             peak.fma, peak.bf16_dot, peak.bf16_dot > 0 ? fmt::format(" ({:.2f}x)", peak.bf16_dot / peak.fma) : "");
  fmt::print("threads: {} (MG_NUM_THREADS)\n", mg::num_threads());
#ifdef MG_BENCH_TORCH
  fmt::print("peer: {}\n", bench::configure_torch(mg::num_threads()));
#endif
  const GemmChoice& choice = gemm_choice();
  const MicroKernel* own_f32 = microkernel(micro_cpu().avx512f ? MicroKernelId::Avx512Fma : MicroKernelId::Avx2Fma);

  for (std::int64_t n : sizes) {
    mg::Generator generator(0);
    const mg::Tensor a = mg::randn({n, n}, generator), b = mg::randn({n, n}, generator);
    const mg::Tensor a16 = a.to(mg::DType::F16), b16 = b.to(mg::DType::F16);
    const mg::Tensor abf = a.to(mg::DType::BF16), bbf = b.to(mg::DType::BF16);
    mg::Tensor own_c = mg::Tensor::empty({n, n});
    std::vector<Variant> variants{
        {"f32 library", [&] { mg::matmul(a, b); }, 0.0, {}},
        {"f16", [&] { mg::matmul(a16, b16); }, peak_of(choice.f16, peak), {}},
        {"bf16", [&] { mg::matmul(abf, bbf); }, peak_of(choice.bf16, peak), {}},
    };
    if (own_f32)
      variants.insert(variants.begin() + 1, {"f32 own",
                                             [&] { gemm_packed(*own_f32, a, b, own_c, {.m = n, .n = n, .k = n}); },
                                             peak_of(own_f32->id, peak),
                                             {}});
#ifdef MG_BENCH_TORCH
    variants.push_back({"torch f32", bench::make_torch_matmul("f32", n), 0.0, {}});
    variants.push_back({"torch bf16", bench::make_torch_matmul("bf16", n), 0.0, {}});
#endif
    for (Variant& variant : variants) variant.run(), variant.run();  // warm-up: caches, allocator, page faults
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    const int reps = std::clamp(static_cast<int>(0.5 / (flops / 100e9)), 5, 200);
    for (int r = 0; r < reps; ++r)
      for (Variant& variant : variants) variant.times.push_back(seconds(variant.run));

    fmt::print("\nn = {} ({} repetitions, median)\n", n, reps);
    double f32_library = 0.0, bf16 = 0.0;
    for (const Variant& variant : variants) {
      const double gflops = flops / bench::median(variant.times) / 1e9;
      if (variant.name == "f32 library") f32_library = gflops;
      if (variant.name == "bf16") bf16 = gflops;
      fmt::print("  {:<12} {:>8.1f} GFLOP/s {:>7.2f}x f32 library{}\n", variant.name, gflops,
                 f32_library > 0 ? gflops / f32_library : 0.0,
                 variant.peak > 0 ? fmt::format("   {:.0f}% of its instruction's peak", 100.0 * gflops / variant.peak)
                                  : "");
      if (variant.name == "torch bf16") fmt::print("  bf16 / torch bf16: {:.2f}x\n", bf16 / gflops);
    }
  }
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

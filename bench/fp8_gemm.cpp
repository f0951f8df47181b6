// bench/fp8_gemm: GFLOP/s of the CPU FP8 and FP4 GEMMs (kernels::fp8_gemm, kernels::fp4_gemm) beside
// the bf16 GEMM, in one run.
//
//   build/bench/fp8_gemm                    square 256 512 1024, and a Linear's 64 x 784 x 256 (m x k x n)
//   build/bench/fp8_gemm 2048               chosen square sizes
//   MG_NUM_THREADS=1 build/bench/fp8_gemm   one core
//
// Every product is a Linear's forward, C = X W^T: A = X [m, k], B = W [n, k] (transpose_b), E4M3 codes
// of N(0, 1) values, C in bf16. Variants per size, interleaved in every repetition so that a noisy
// machine slows them alike:
//   bf16              kernels::gemm on bf16 operands (the microkernel the header's CPU GEMM line names)
//   fp8 tensor        kernels::fp8_gemm, one scale per operand, F32 accumulator (one chunk: all of k)
//   fp8 1x128/128x128 the same with DeepSeek-V3's blocks: 1 x 128 on X, 128 x 128 on W (chunks of 128)
//   nvfp4             kernels::fp4_gemm: NVFP4 codes, 1 x 16 blocks on X, 16 x 16 on W (decoded in packing)
//   mxfp4             the same in MXFP4, 1 x 32 blocks on both
//   nvfp4 decode+bf16 both NVFP4 operands decoded into bf16 tensors, then the bf16 GEMM into f32 and a
//                     rounding pass: the GPU's way (kernels/cuda/fp4.cu), and the CPU's before this GEMM
//   quantize tensor   fp8_block_amax + fp8_quantize of both operands, per-tensor scales
//   quantize blocks   the same with the 1 x 128 / 128 x 128 blocks
//   quantize nvfp4    fp4_quantize of both operands (NVFP4, the blocks above)
// The quantisations are timed apart from the GEMMs (ms, and as a share of their GEMM): a layer that
// keeps its weight's codes pays only X's. Once, at the smallest size: the Limited accumulator, the
// scalar model of Hopper's FP8 accumulator (kernels/fp8.h): an element of C at a time, a reference, not
// a fast path. Each variant runs twice to warm up, then enough repetitions for ~0.5 s; medians.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "kernels/fp4.h"
#include "kernels/fp8.h"
#include "mixgrad.h"

namespace {

using bench::Clock;
using namespace mg::kernels;

double seconds(const std::function<void()>& fn) {
  auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Variant {
  std::string name;
  std::function<void()> run;
  bool gemm;  // GFLOP/s; else a quantisation, in ms
  std::vector<double> times;
};

// x in E4M3 with scale = 448 / amax of each block, as a recipe's current scaling would make it.
Fp8Tensor quantize(const mg::Tensor& x, Fp8Blocks blocks) {
  const mg::Tensor amax = fp8_block_amax(x, blocks);
  std::vector<double> scale = amax.to_vector<double>();
  for (double& s : scale) s = 448.0 / s;
  return fp8_quantize(x, mg::from_vector(scale, amax.shape()), blocks, mg::DType::E4M3);
}

struct Size {
  std::int64_t m, k, n;
};

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM) ends the run with its message and status 1.
int main(int argc, char** argv) try {
  std::vector<Size> sizes{{256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {64, 784, 256}};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) {
      const std::int64_t n = std::atoll(argv[i]);
      sizes.push_back({n, n, n});
    }
  }
  mg::NoGradGuard no_grad;
  fmt::print("{}\n", bench::machine_lines());
  fmt::print("FP8 GEMM microkernel (F32 accumulator): {}\n", cpu::fp8_gemm_kernel_name());
  fmt::print("threads: {} (MG_NUM_THREADS)\n", mg::num_threads());
  const Fp8Blocks tensor{0, 0}, rows_1x128{1, 128}, blocks_128{128, 128};
  const Fp4Rule nvfp4{.format = Fp4Format::Nv}, mxfp4{.format = Fp4Format::Mx};

  struct Row {
    Size size;
    std::map<std::string, double> gflops, ms;  // a GEMM's GFLOP/s, a quantisation's ms, by variant
  };
  std::vector<Row> summary;
  for (const Size& size : sizes) {
    const auto [m, k, n] = size;
    mg::Generator generator(0);
    const mg::Tensor x = mg::randn({m, k}, generator), w = mg::randn({n, k}, generator);
    const mg::Tensor xb = x.to(mg::DType::BF16), wb = w.to(mg::DType::BF16);
    const Fp8Tensor xt = quantize(x, tensor), wt = quantize(w, tensor);
    const Fp8Tensor xq = quantize(x, rows_1x128), wq = quantize(w, blocks_128);
    const Fp4Tensor xn = fp4_quantize(x, {1, 16}, nvfp4), wn = fp4_quantize(w, {16, 16}, nvfp4);
    const Fp4Tensor xm = fp4_quantize(x, {1, 32}, mxfp4), wm = fp4_quantize(w, {1, 32}, mxfp4);
    mg::Tensor c = mg::Tensor::empty({m, n}, {.dtype = mg::DType::BF16});
    const GemmShape shape{.m = m, .n = n, .k = k, .transpose_b = true};
    std::vector<Variant> variants{
        {"bf16", [&] { gemm(xb, wb, c, shape); }, true, {}},
        {"fp8 tensor", [&] { fp8_gemm(xt, wt, c, shape); }, true, {}},
        {"fp8 1x128/128x128", [&] { fp8_gemm(xq, wq, c, shape); }, true, {}},
        {"nvfp4", [&] { fp4_gemm(xn, wn, c); }, true, {}},
        {"mxfp4", [&] { fp4_gemm(xm, wm, c); }, true, {}},
        {"nvfp4 decode+bf16",  // what a GPU runs (kernels/cuda/fp4.cu), and the CPU did before it decoded in packing
         [&] {
           mg::Tensor sum = mg::Tensor::empty({m, n}, {.dtype = mg::DType::F32});
           gemm(fp4_decode(xn), fp4_decode(wn), sum, shape);
           (void)sum.to(mg::DType::BF16);
         },
         true,
         {}},
        {"quantize tensor",
         [&] {
           quantize(x, tensor);
           quantize(w, tensor);
         },
         false,
         {}},
        {"quantize blocks",
         [&] {
           quantize(x, rows_1x128);
           quantize(w, blocks_128);
         },
         false,
         {}},
        {"quantize nvfp4",
         [&] {
           fp4_quantize(x, {1, 16}, nvfp4);
           fp4_quantize(w, {16, 16}, nvfp4);
         },
         false,
         {}},
    };
    for (Variant& variant : variants) variant.run(), variant.run();  // warm-up: caches, allocator, page faults
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const int reps = std::clamp(static_cast<int>(0.5 / (flops / 50e9)), 5, 200);
    for (int r = 0; r < reps; ++r)
      for (Variant& variant : variants) variant.times.push_back(seconds(variant.run));

    fmt::print("\nm x k x n = {} x {} x {} ({} repetitions, median)\n", m, k, n, reps);
    Row row{size, {}, {}};
    for (const Variant& variant : variants) {
      const double t = bench::median(variant.times);
      if (variant.gemm) {
        const double gflops = flops / t / 1e9;
        row.gflops[variant.name] = gflops;
        fmt::print("  {:<18} {:>8.3f} ms {:>8.1f} GFLOP/s {:>6.2f}x bf16\n", variant.name, t * 1e3, gflops,
                   gflops / row.gflops["bf16"]);
      } else {
        const std::string gemm_name = variant.name == "quantize tensor"   ? "fp8 tensor"
                                      : variant.name == "quantize blocks" ? "fp8 1x128/128x128"
                                                                          : "nvfp4";
        const double gemm_ms = flops / row.gflops[gemm_name] / 1e6;
        row.ms[variant.name] = t * 1e3;
        fmt::print("  {:<18} {:>8.3f} ms  (x and w; {:.0f}% of its GEMM)\n", variant.name, t * 1e3,
                   100.0 * t * 1e3 / gemm_ms);
      }
    }
    summary.push_back(row);
  }

  fmt::print("\n| m x k x n | bf16 GFLOP/s | fp8 tensor (x bf16) | fp8 1x128/128x128 | nvfp4 | mxfp4 | "
             "nvfp4 decode+bf16 | quantize tensor / blocks / nvfp4, ms |\n|---|---|---|---|---|---|---|---|\n");
  for (Row& r : summary) {
    const double bf16 = r.gflops["bf16"];
    const auto cell = [&](const char* name) {
      return fmt::format("{:.1f} ({:.2f}x)", r.gflops[name], r.gflops[name] / bf16);
    };
    fmt::print("| {} x {} x {} | {:.1f} | {} | {} | {} | {} | {} | {:.3f} / {:.3f} / {:.3f} |\n", r.size.m, r.size.k,
               r.size.n, bf16, cell("fp8 tensor"), cell("fp8 1x128/128x128"), cell("nvfp4"), cell("mxfp4"),
               cell("nvfp4 decode+bf16"), r.ms["quantize tensor"], r.ms["quantize blocks"], r.ms["quantize nvfp4"]);
  }

  // The Limited accumulator at the smallest size, against the F32 one on the same codes.
  const Size small = *std::min_element(sizes.begin(), sizes.end(),
                                       [](const Size& a, const Size& b) { return a.m * a.n * a.k < b.m * b.n * b.k; });
  mg::Generator generator(1);
  const Fp8Tensor xq = quantize(mg::randn({small.m, small.k}, generator), rows_1x128);
  const Fp8Tensor wq = quantize(mg::randn({small.n, small.k}, generator), blocks_128);
  mg::Tensor c = mg::Tensor::empty({small.m, small.n}, {.dtype = mg::DType::BF16});
  const GemmShape shape{.m = small.m, .n = small.n, .k = small.k, .transpose_b = true};
  const Fp8Accumulator limited{.limited = true};  // 13 mantissa bits, truncation, groups of 32, promoted every 128
  std::vector<double> limited_times, f32_times;
  fp8_gemm(xq, wq, c, shape, limited);
  for (int r = 0; r < 5; ++r) {
    limited_times.push_back(seconds([&] { fp8_gemm(xq, wq, c, shape, limited); }));
    f32_times.push_back(seconds([&] { fp8_gemm(xq, wq, c, shape); }));
  }
  const double flops = 2.0 * static_cast<double>(small.m) * static_cast<double>(small.n) * static_cast<double>(small.k);
  const double limited_gflops = flops / bench::median(limited_times) / 1e9;
  fmt::print("\nLimited accumulator (the scalar model, one element of C at a time), {} x {} x {}, 1x128/128x128, "
             "5 repetitions: {:.3f} ms, {:.2f} GFLOP/s, {:.0f}x slower than the F32 accumulator\n",
             small.m, small.k, small.n, bench::median(limited_times) * 1e3, limited_gflops,
             flops / bench::median(f32_times) / 1e9 / limited_gflops);
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

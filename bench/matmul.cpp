// bench/matmul: GFLOP/s of mixgrad's matmul beside a raw Eigen product of the same size, in one run.
//
//   build/bench/matmul                    sizes 256 512 1024 2048 (square m = n = k)
//   build/bench/matmul 512 1024           chosen sizes
//
// Three variants per size, interleaved in every repetition so that a noisy machine slows them alike:
//   eigen f32      C.noalias() = A * B on preallocated row-major Eigen matrices (the peer)
//   mixgrad f32    mg::matmul on f32 tensors (checks, output from the caching allocator, and the GEMM
//                  kernels/cpu/blas_choice.h picked: OpenBLAS or Eigen, named in the header)
//   mixgrad f16    mg::matmul on f16 tensors (operands converted to f32 with F16C, f32 GEMM,
//                  result rounded to f16: the Tensor Core contract)
// Each runs twice to warm up, then enough repetitions for ~0.5 s; the median time is reported.
// Threads: mixgrad's pool at its default (every core; the raw Eigen product runs on one);
// MG_NUM_THREADS=1 gives per-core figures.
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/machine.h"
#include "bench/timing.h"
#include "mixgrad.h"

namespace {

using bench::Clock;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds(const std::function<void()>& fn) {
  auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// The whole body is a try block: an mg::Error (a bad MG_GEMM) ends the run with its message and status 1.
int main(int argc, char** argv) try {
  std::vector<std::int64_t> sizes{256, 512, 1024, 2048};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  }
  mg::NoGradGuard no_grad;
  fmt::print("{}\n", bench::machine_lines());
  fmt::print("{:>6} {:>13} {:>13} {:>8} {:>13} {:>8}   (GFLOP/s, median of n runs)\n", "n", "eigen f32",
             "mixgrad f32", "vs eigen", "mixgrad f16", "vs f32");
  for (std::int64_t n : sizes) {
    mg::Generator generator(0);
    mg::Tensor a = mg::randn({n, n}, generator), b = mg::randn({n, n}, generator);
    mg::Tensor a16 = a.to(mg::DType::F16), b16 = b.to(mg::DType::F16);
    RowMajor ea = Eigen::Map<const RowMajor>(a.data<float>(), n, n);
    RowMajor eb = Eigen::Map<const RowMajor>(b.data<float>(), n, n);
    RowMajor ec(n, n);

    std::vector<std::function<void()>> variants{
        [&] { ec.noalias() = ea * eb; },
        [&] { mg::matmul(a, b); },
        [&] { mg::matmul(a16, b16); },
    };
    std::vector<std::vector<double>> times(variants.size());
    for (auto& variant : variants) variant(), variant();  // warm-up: caches, allocator, page faults
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    const int reps = std::clamp(static_cast<int>(0.5 / (flops / 100e9)), 5, 200);
    for (int r = 0; r < reps; ++r)
      for (std::size_t v = 0; v < variants.size(); ++v) times[v].push_back(seconds(variants[v]));

    double eigen = flops / bench::median(times[0]) / 1e9;
    double f32 = flops / bench::median(times[1]) / 1e9;
    double f16 = flops / bench::median(times[2]) / 1e9;
    fmt::print("{:>6} {:>13.1f} {:>13.1f} {:>7.1f}% {:>13.1f} {:>7.1f}%   n = {}\n", n, eigen, f32,
               100.0 * f32 / eigen, f16, 100.0 * f16 / f32, reps);
  }
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

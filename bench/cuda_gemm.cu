// bench/cuda_gemm: TFLOP/s of mixgrad's CUDA GEMMs (kernels/cuda/gemm.cu) beside cuBLAS, same
// shapes, layouts and dtypes, on GPU 0.
//
//   build/bench/cuda_gemm              every mode and shape below
//   build/bench/cuda_gemm f16 4096     only modes and shapes whose names contain the given words
//   build/bench/cuda_gemm '!wmma'      all but those whose names contain "wmma" (rungs 1 and 2)
//
// Modes: f16 and bf16 operands into an output of the same dtype with f32 accumulation (cuBLAS:
// cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F), on the rung each shape takes (rung 4, wgmma, on an
// H100 or H200 for the large ones; else rung 3, mma.sync); on rung 4 asked for, every shape
// ("f16-wgmma4", "bf16-wgmma4": what the rule in kernels/cuda/gemm.cu is measured from); on rung 3
// asked for ("f16-mma3", "bf16-mma3") and f16 on rungs 2 and 1 ("f16-wmma2", "f16-wmma1":
// kernels::cuda::set_gemm_rung), square shapes only;
// f32 on CUDA cores (cublasSgemmStridedBatched, no TF32); tf32 (kernels::set_allow_tf32(true); cuBLAS:
// CUBLAS_COMPUTE_32F_FAST_TF32); fp8: kernels::fp8_gemm of E4M3 codes with per-tensor scales into bf16
// (the forward GEMM of fp8_linear under fp8_delayed), on the NT shapes only (FP8 operands are K-major),
// beside cuBLAS's *f16* GEMM of the same shape (plain cuBLAS has no FP8), so its ratio says what FP8
// buys over 16 bits, and its error includes FP8's rounding; fp8-lt the same GEMM beside cuBLASLt's FP8
// GEMM of the same codes and scales (bench/cublaslt_fp8.h, TN), the peer of issue 43's FP8 targets;
// fp8-blocks the same with DeepSeek-V3's scales (A by 1 x 128, B by 128 x 128: fp8_blocks) and fp8-mx
// with MX's (1 x 32, powers of two: fp8_mx), which rung 3 runs in chunks of 128 and 32. Those four
// ask for the F32 accumulator, which an H100 runs on rung 3 (mma.sync, f16 HMMA). The "-wg" modes ask
// for wgmma's accumulator promoted every 128 products (DeepSeek-V3's recipe), which an H100 runs on
// rung 4 (QGMMA, kernels/cuda/gemm_fp8_wgmma.cu): fp8-wg-lt per tensor beside cuBLASLt's FP8 GEMM,
// fp8-wg-blocks-lt with DeepSeek-V3's blocks beside cuBLASLt's per-tensor FP8 GEMM of the same values
// (its per-tensor codes: the peer does less work, so the ratio is a floor). The "-lt" modes run the
// shapes whose m, n and k are multiples of 16, as cuBLASLt's FP8 GEMM needs. nvfp4 and mxfp4:
// kernels::fp4_gemm of NVFP4 (1 x 16 blocks on A, 16 x 16 on B) and MXFP4 (1 x 32) codes into bf16, NT
// shapes, beside cuBLAS's f16 GEMM like fp8: Hopper has no FP4 Tensor Core, so rung 3 decodes the codes
// into bf16 in registers on their way into shared memory (kernels/cuda/fp4.cu, gemm_mma.cu);
// nvfp4-decoded runs the same GEMM by a separate decode pass of each operand, the bf16 GEMM and an
// epilogue pass (kernels::cuda::fp4_gemm_decoded), the way the fused copies replace.
// Shapes: square 1024 to 8192 (NN, and 4096 in the other layouts), then the GEMMs of a training step
// of the example models at batch 128: the MLP 784-256-256-10 (forward x W^T is NT; backward dX = dY W
// is NN, dW = dY^T X is TN) and the CNN of nn/models.cpp on 28x28 images (im2col GEMMs of the two
// 3x3 convolutions with 32 and 64 channels, and its two linear layers), with every weight gradient:
// the convolutions' dW (64 x 288 over k = 25088, 32 x 9 over k = 100352) are the shapes split-K is
// for; the MLP's first dW again at batch 8192, where it splits too.
// The kernel column names the kernel each shape takes and, when kernels/cuda/gemm.cu splits k, the
// split: "split-k S x K" is S slices of K (its header says when and how many).
// For each: both results are compared first (max |mixgrad - cuBLAS| / max |cuBLAS|; a wrong kernel is
// off by O(1), flagged MISMATCH), then each runs 3 times to warm up and 25 timed times; every run
// sits between two cudaEvents on mixgrad's stream, all queued before one wait, so the GPU runs them
// back to back and the median is the kernel's time (for the smallest shapes the host's launch
// cost may show through: that is then the real cost of the call). Targets (issue 42, on an H100 or
// H200): rung 3 at 4096^3 >= 65% of cuBLAS in f16 and bf16, bf16 within 5% of f16, TF32 >= 50% of
// cuBLAS's TF32; the example models' shapes >= 60% wherever cuBLAS exceeds 50 TFLOP/s; f32 on CUDA
// cores >= 70% of cublasSgemm.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cublaslt_fp8.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/fp4.h"
#include "kernels/fp8.h"
#include "mixgrad.h"

namespace {

using mg::kernels::GemmShape;

#define CUBLAS_CHECK(call) \
  do { \
    const cublasStatus_t status_ = (call); \
    if (status_ != CUBLAS_STATUS_SUCCESS) \
      throw mg::Error( \
          fmt::format("{} failed: {} ({}:{})", #call, cublasGetStatusString(status_), __FILE__, __LINE__)); \
  } while (0)

struct Case {
  std::string name;
  GemmShape shape;
};

struct Mode {
  std::string name;
  mg::DType dtype;  // of A, B and C
  bool tf32;
  mg::kernels::cuda::GemmRung rung = mg::kernels::cuda::GemmRung::Auto;  // a lower rung: square shapes only; Wgmma: all
};

constexpr int kWarmup = 3, kRuns = 25;

std::vector<Case> cases() {
  const auto nn = [](std::int64_t m, std::int64_t n, std::int64_t k) { return GemmShape{.m = m, .n = n, .k = k}; };
  const auto nt = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return GemmShape{.m = m, .n = n, .k = k, .transpose_b = true};
  };
  const auto tn = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return GemmShape{.m = m, .n = n, .k = k, .transpose_a = true};
  };
  std::vector<Case> all;
  for (std::int64_t size : {1024, 2048, 4096, 8192})
    all.push_back({fmt::format("square {} NN", size), nn(size, size, size)});
  all.push_back({"square 4096 NT", nt(4096, 4096, 4096)});
  all.push_back({"square 4096 TN", tn(4096, 4096, 4096)});
  all.push_back(
      {"square 4096 TT", GemmShape{.m = 4096, .n = 4096, .k = 4096, .transpose_a = true, .transpose_b = true}});
  const std::int64_t batch = 128;
  all.push_back({"mlp fc1 forward", nt(batch, 256, 784)});
  all.push_back({"mlp fc1 dW", tn(256, 784, batch)});
  all.push_back({"mlp fc2 forward", nt(batch, 256, 256)});
  all.push_back({"mlp fc2 dX", nn(batch, 256, 256)});
  all.push_back({"mlp fc2 dW", tn(256, 256, batch)});
  all.push_back({"mlp fc3 forward", nt(batch, 10, 256)});
  all.push_back({"mlp fc3 dX", nn(batch, 256, 10)});
  all.push_back({"mlp fc3 dW", tn(10, 256, batch)});
  all.push_back({"mlp fc1 dW b8192", tn(256, 784, 8192)});
  const std::int64_t rows1 = batch * 28 * 28, rows2 = batch * 14 * 14;  // im2col rows: one per output pixel
  all.push_back({"cnn conv1 forward", nt(rows1, 32, 9)});
  all.push_back({"cnn conv1 dW", tn(32, 9, rows1)});
  all.push_back({"cnn conv2 forward", nt(rows2, 64, 288)});
  all.push_back({"cnn conv2 dcols", nn(rows2, 288, 64)});
  all.push_back({"cnn conv2 dW", tn(64, 288, rows2)});
  all.push_back({"cnn fc1 forward", nt(batch, 128, 64 * 7 * 7)});
  all.push_back({"cnn fc1 dW", tn(128, 64 * 7 * 7, batch)});
  all.push_back({"cnn fc2 forward", nt(batch, 10, 128)});
  all.push_back({"cnn fc2 dW", tn(10, 128, batch)});
  return all;
}

// C = op(A) op(B) by cuBLAS on the same row-major tensors: cuBLAS is column-major, and a row-major
// matrix is its column-major transpose, so it computes C^T = op(B)^T op(A)^T with B first.
void cublas_gemm(cublasHandle_t handle, const Mode& mode, const mg::Tensor& a, const mg::Tensor& b, mg::Tensor& c,
                 const GemmShape& s) {
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = s.transpose_a ? m : k, ldb = s.transpose_b ? k : n;
  const cublasOperation_t op_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const long long stride_a = s.m * s.k, stride_b = s.k * s.n, stride_c = s.m * s.n;
  const int batch = static_cast<int>(s.batch);
  const float alpha = 1.0f, beta = 0.0f;
  if (mode.dtype == mg::DType::F32 && !mode.tf32) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, n, m, k, &alpha, b.data<float>(), ldb, stride_b,
                                           a.data<float>(), lda, stride_a, &beta, c.data<float>(), n, stride_c, batch));
    return;
  }
  const cudaDataType type = mode.dtype == mg::DType::F16 ? CUDA_R_16F
                                                         : (mode.dtype == mg::DType::BF16 ? CUDA_R_16BF : CUDA_R_32F);
  const cublasComputeType_t compute = mode.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, n, m, k, &alpha, b.data_ptr(), type, ldb, stride_b,
                                          a.data_ptr(), type, lda, stride_a, &beta, c.data_ptr(), type, n, stride_c,
                                          batch, compute, CUBLAS_GEMM_DEFAULT));
}

// The median time of one run of fn in milliseconds (see the header for how it is measured).
double median_ms(const std::function<void()>& fn, cudaStream_t stream) {
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<cudaEvent_t> starts(kRuns), stops(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    MG_CUDA_CHECK(cudaEventCreate(&starts[i]));
    MG_CUDA_CHECK(cudaEventCreate(&stops[i]));
  }
  for (int i = 0; i < kRuns; ++i) {
    MG_CUDA_CHECK(cudaEventRecord(starts[i], stream));
    fn();
    MG_CUDA_CHECK(cudaEventRecord(stops[i], stream));
  }
  MG_CUDA_CHECK(cudaEventSynchronize(stops.back()));
  std::vector<double> times;
  for (int i = 0; i < kRuns; ++i) {
    float ms = 0.0f;
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, starts[i], stops[i]));
    times.push_back(ms);
    MG_CUDA_CHECK(cudaEventDestroy(starts[i]));
    MG_CUDA_CHECK(cudaEventDestroy(stops[i]));
  }
  return bench::median(times);
}

// max |got - want| / max |want|, on the host.
double max_relative_error(const mg::Tensor& got, const mg::Tensor& want) {
  const std::vector<double> g = got.to(mg::Device::cpu()).to_vector<double>();
  const std::vector<double> w = want.to(mg::Device::cpu()).to_vector<double>();
  double error = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    error = std::max(error, std::isnan(g[i]) ? INFINITY : std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0.0 ? error / scale : error;
}

void print_header() {
  cudaDeviceProp prop{};
  MG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int sm_khz = 0, memory_khz = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, 0));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, 0));
  int cublas_version = 0;
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasGetVersion(handle, &cublas_version));
  CUBLAS_CHECK(cublasDestroy(handle));
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  fmt::print("bench/cuda_gemm, {}\n{}\n", date, bench::machine_lines());
  fmt::print("device: {} (sm_{}{}, {} SMs), max clocks: SM {} MHz, memory {} MHz (lock them with nvidia-smi -lgc for "
             "steady numbers)\n",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount, sm_khz / 1000, memory_khz / 1000);
  fmt::print("cuBLAS {}; median of {} runs after {} warm-ups; TFLOP/s = 2 m n k / time\n\n", cublas_version, kRuns,
             kWarmup);
  fmt::print("{:<10} {:<18} {:>24} {:<52} {:>10} {:>9} {:>9} {:>7}\n", "mode", "shape", "m x n x k",
             "mixgrad kernel (and split of k)", "max rel err", "mixgrad", "cuBLAS", "ratio");
}

// Every word in the name, and none of the words given as "!word".
bool selected(const std::string& name, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    const bool excluded = word.starts_with('!');
    if ((name.find(excluded ? word.substr(1) : word) != std::string::npos) == excluded) return false;
  }
  return true;
}

}  // namespace

// The whole body is a try block: an mg::Error (no GPU, a bad MG_GEMM) ends the run with its message and
// status 1.
int main(int argc, char** argv) try {
  MG_CHECK(mg::cuda_device_count() > 0, "bench/cuda_gemm: no CUDA device is visible; run it on a machine with a GPU");
  print_header();
  const cudaStream_t stream = mg::cuda::stream(0);
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  mg::Generator generator(1);
  using mg::kernels::cuda::GemmRung;
  const std::vector<Mode> modes = {{"f16", mg::DType::F16, false},
                                   {"bf16", mg::DType::BF16, false},
                                   {"tf32", mg::DType::F32, true},
                                   {"f32", mg::DType::F32, false},
                                   {"f16-wgmma4", mg::DType::F16, false, GemmRung::Wgmma},
                                   {"bf16-wgmma4", mg::DType::BF16, false, GemmRung::Wgmma},
                                   {"f16-mma3", mg::DType::F16, false, GemmRung::MmaPipelined},
                                   {"bf16-mma3", mg::DType::BF16, false, GemmRung::MmaPipelined},
                                   {"f16-wmma2", mg::DType::F16, false, GemmRung::WmmaPipelined},
                                   {"f16-wmma1", mg::DType::F16, false, GemmRung::WmmaSimple},
                                   {"fp8", mg::DType::F16, false},
                                   {"fp8-lt", mg::DType::F16, false},
                                   {"fp8-blocks", mg::DType::F16, false},
                                   {"fp8-mx", mg::DType::F16, false},
                                   {"fp8-wg-lt", mg::DType::F16, false},
                                   {"fp8-wg-blocks-lt", mg::DType::F16, false},
                                   {"nvfp4", mg::DType::F16, false},
                                   {"mxfp4", mg::DType::F16, false},
                                   {"nvfp4-decoded", mg::DType::F16, false}};
  for (const Mode& mode : modes) {
    mg::kernels::set_allow_tf32(mode.tf32);
    const mg::kernels::cuda::GemmRungGuard rung(mode.rung);
    // Worst |error| / max |result| still counted right: accumulation-order differences, an ulp of the
    // output, and for TF32 the two libraries' own roundings of the operands.
    // FP8: E4M3's 3 mantissa bits on both operands.
    const bool fp8 = mode.name.starts_with("fp8");
    // FP4 (kernels::fp4_gemm): NVFP4 with 1 x 16 blocks on A and 16 x 16 on B, MXFP4 with 1 x 32 on both.
    const bool fp4 = mode.name.find("fp4") != std::string::npos, nvfp4 = mode.name.starts_with("nvfp4");
    const bool decoded = mode.name.ends_with("-decoded");
    const mg::kernels::Fp4Rule fp4_rule{.format = nvfp4 ? mg::kernels::Fp4Format::Nv : mg::kernels::Fp4Format::Mx};
    // The scales' blocks and rule of each FP8 mode: per tensor, DeepSeek-V3's, MX's.
    using Rule = mg::kernels::Fp8ScaleRule;
    const bool blocks = mode.name.find("blocks") != std::string::npos, mx = mode.name == "fp8-mx";
    const bool lt_peer = mode.name.ends_with("-lt");
    mg::kernels::Fp8Accumulator accumulator;  // F32; or wgmma's, DeepSeek-V3's promotion every 128
    if (mode.name.starts_with("fp8-wg")) accumulator = {.limited = true, .promote_every = 128};
    const mg::kernels::Fp8Blocks a_blocks = blocks ? mg::kernels::Fp8Blocks{1, 128}
                                            : mx   ? mg::kernels::Fp8Blocks{1, 32}
                                                   : mg::kernels::Fp8Blocks{};
    const mg::kernels::Fp8Blocks b_blocks = blocks ? mg::kernels::Fp8Blocks{128, 128} : a_blocks;
    const Rule rule{.kind = blocks ? Rule::Kind::Block : mx ? Rule::Kind::Mx : Rule::Kind::PerTensor};
    const double allowed = fp4   ? 0x1p-1  // E2M1's one mantissa bit on both operands
                           : fp8 ? 0x1p-3
                           : mode.dtype == mg::DType::BF16
                               ? 0x1p-5
                               : (mode.dtype == mg::DType::F16 || mode.tf32 ? 0x1p-8 : 0x1p-16);
    for (const Case& c : cases()) {
      if (!selected(mode.name + " " + c.name, argc, argv)) continue;
      if (mode.rung != GemmRung::Auto && mode.rung != GemmRung::Wgmma && !c.name.starts_with("square")) continue;
      if ((fp8 || fp4) && (c.shape.transpose_a || !c.shape.transpose_b)) continue;
      // cuBLASLt's FP8 GEMM (and rung 4, which the "-wg" modes are for) wants m, n and k multiples of 16.
      if (lt_peer && (c.shape.m % 16 != 0 || c.shape.n % 16 != 0 || c.shape.k % 16 != 0)) continue;
      const GemmShape& s = c.shape;
      const mg::Shape a_shape = s.transpose_a ? mg::Shape{s.k, s.m} : mg::Shape{s.m, s.k};
      const mg::Shape b_shape = s.transpose_b ? mg::Shape{s.n, s.k} : mg::Shape{s.k, s.n};
      const mg::Tensor a = mg::randn(a_shape, generator).to(mode.dtype).to(mg::Device::cuda());
      const mg::Tensor b = mg::randn(b_shape, generator).to(mode.dtype).to(mg::Device::cuda());
      mg::Tensor ours = mg::Tensor::empty({s.m, s.n}, {.dtype = mode.dtype, .device = mg::Device::cuda()});
      mg::Tensor theirs = mg::Tensor::empty({s.m, s.n}, {.dtype = mode.dtype, .device = mg::Device::cuda()});
      // FP8: the codes of A and B and their scales, made on the device; C in bf16.
      const mg::kernels::Fp8Tensor qa =
          fp8 ? mg::kernels::fp8_quantize_fitted(a, a_blocks, rule, mg::kernels::Fp8Copies::RowWise).rowwise
              : mg::kernels::Fp8Tensor{};
      const mg::kernels::Fp8Tensor qb =
          fp8 ? mg::kernels::fp8_quantize_fitted(b, b_blocks, rule, mg::kernels::Fp8Copies::RowWise).rowwise
              : mg::kernels::Fp8Tensor{};
      const mg::kernels::Fp4Tensor fa = fp4 ? mg::kernels::fp4_quantize(a,
                                                                        nvfp4 ? mg::kernels::Fp8Blocks{1, 16}
                                                                              : mg::kernels::Fp8Blocks{1, 32},
                                                                        fp4_rule)
                                            : mg::kernels::Fp4Tensor{};
      const mg::kernels::Fp4Tensor fb = fp4 ? mg::kernels::fp4_quantize(b,
                                                                        nvfp4 ? mg::kernels::Fp8Blocks{16, 16}
                                                                              : mg::kernels::Fp8Blocks{1, 32},
                                                                        fp4_rule)
                                            : mg::kernels::Fp4Tensor{};
      if (fp8 || fp4) ours = mg::Tensor::empty({s.m, s.n}, {.dtype = mg::DType::BF16, .device = mg::Device::cuda()});
      const auto run_ours = [&] {
        if (fp4 && decoded)
          mg::kernels::cuda::fp4_gemm_decoded(fa, fb, ours);
        else if (fp4)
          mg::kernels::fp4_gemm(fa, fb, ours);
        else if (fp8)
          mg::kernels::fp8_gemm(qa, qb, ours, s, accumulator);
        else
          mg::kernels::cuda::gemm(a, b, ours, s);
      };
      // "-lt": cuBLASLt's FP8 GEMM of the same codes and scales (per tensor: its own codes of the same
      // values where ours have blocks), into bf16 as ours.
      std::optional<mg::bench::CublasLtFp8> fp8_peer;
      const auto per_tensor = [](const mg::Tensor& x) {
        return mg::kernels::fp8_quantize_fitted(x, {}, {}, mg::kernels::Fp8Copies::RowWise).rowwise;
      };
      const mg::kernels::Fp8Tensor peer_a = lt_peer && blocks ? per_tensor(a) : qa;
      const mg::kernels::Fp8Tensor peer_b = lt_peer && blocks ? per_tensor(b) : qb;
      if (lt_peer) {
        theirs = mg::Tensor::empty({s.m, s.n}, {.dtype = mg::DType::BF16, .device = mg::Device::cuda()});
        fp8_peer.emplace(peer_a, peer_b, theirs, stream);
      }
      const auto run_theirs = [&] {
        if (fp8_peer)
          fp8_peer->run();
        else
          cublas_gemm(handle, mode, a, b, theirs, s);
      };
      run_ours();
      run_theirs();
      const double error = max_relative_error(ours, theirs);
      const double ours_ms = median_ms(run_ours, stream), theirs_ms = median_ms(run_theirs, stream);
      const double flop = 2.0 * static_cast<double>(s.batch * s.m) * static_cast<double>(s.n * s.k);
      const double ours_tflops = flop / (ours_ms * 1e9), theirs_tflops = flop / (theirs_ms * 1e9);
      fmt::print("{:<10} {:<18} {:>24} {:<52} {:>10.2e} {:>9.2f} {:>9.2f} {:>6.0f}%  {}\n", mode.name, c.name,
                 fmt::format("{} x {} x {}", s.m, s.n, s.k),
                 decoded ? std::string("decode pass + the bf16 gemm")
                 : fp4   ? mg::kernels::cuda::fp4_gemm_kernel_name(fa, fb)
                 : fp8   ? mg::kernels::cuda::fp8_gemm_kernel_name(qa, qb, s, accumulator, mg::DType::BF16)
                         : mg::kernels::cuda::gemm_kernel_name(a, b, s),
                 error, ours_tflops, theirs_tflops, 100.0 * ours_tflops / theirs_tflops,
                 error <= allowed ? "" : "MISMATCH");
      std::fflush(stdout);
    }
  }
  mg::kernels::set_allow_tf32(false);
  CUBLAS_CHECK(cublasDestroy(handle));
  return 0;
} catch (const mg::Error& error) {
  fmt::print(stderr, "error: {}\n", error.what());
  return 1;
}

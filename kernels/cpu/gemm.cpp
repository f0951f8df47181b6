// CPU GEMM: C[b] = op(A[b]) * op(B[b]) (shapes and layouts in kernels/gemm.h), on Eigen or OpenBLAS.
//
// f32 and f64 map the tensors' memory as row-major matrices and multiply in place: no copies. The
// multiply is Eigen's, or OpenBLAS's sgemm/dgemm when the build found it (MG_BLAS, see the
// top-level CMakeLists.txt) and its kernels suit this CPU: kernels/cpu/blas_choice.h decides once,
// at the first GEMM, and MG_GEMM=eigen|openblas overrides it. With kernels that suit the CPU,
// OpenBLAS is ~1.3x faster than Eigen at the shapes of the example models on this project's AMD
// CPU, and on par on an AVX-512 Xeon; with its generic ones a training step takes ~4x as long
// (docs/results/cpu-bench.md). The cores share a product as tiles of C cut by its shape alone
// (plan_tiles), each tile one single-threaded GEMM, so results never depend on the thread count.
// f16 and bf16 follow the Tensor Core contract on mixgrad's own microkernels (kernels/cpu/
// gemm_packed.h): packing widens f16 with F16C and bf16 by a shift (or interleaves bf16 pairs for
// vdpbf16ps where it pays), the products are accumulated in f32, and the result is rounded once, with the
// epilogue fused into that store. A product of two f16 (or bf16) values is exact in f32, so this is
// the same arithmetic as the hardware's, up to the order of the f32 additions (and, for vdpbf16ps,
// subnormals: kernels/cpu/microkernel.h). Which microkernel runs is kernels/cpu/blas_choice.h's
// choice; on a CPU with none of them (or MG_GEMM=widen) both operands are converted to f32 in one
// vectorised pass and multiplied by the f32 GEMM. The epilogue (bias, activation) is applied to
// the f32 (f64) result before the one rounding, with the functors the CUDA epilogue calls. With
// Accumulation::F16 (kernels/gemm.h) an f16 GEMM keeps its running sums in f16 instead: E7 of
// `mixgrad repro` shows what that costs. Eigen::half matrices are never multiplied
// directly: Eigen's half GEMM emulates every operation and is ~400x slower.
// Run its tests: build/tests/test_ops_matmul and build/tests/test_gemm_choice (both libraries, the
// choice); its benchmark: build/bench/matmul.
#include <Eigen/Core>

#include <algorithm>
#include <cassert>
#include <climits>
#include <type_traits>
#include <vector>
#ifdef MG_WITH_OPENBLAS
#include <cblas.h>
#endif

#include "core/convert.h"
#include "core/error.h"
#include "kernels/cpu/blas_choice.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"
#include "kernels/pointwise.h"
#include "kernels/threads.h"
#include "kernels/gemm.h"

namespace mg::kernels::cpu {

namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One tile of one product of the batch: rows [row0, row1) and columns [col0, col1) of
// C = op(A) op(B).
struct Tile {
  std::int64_t row0, row1, col0, col1;
};

// A tile as an ordinary GEMM on sub-matrices, for a, b and c pointing at the batch item's matrices
// (layouts in kernels/gemm.h): each operand starts at the tile's first element and keeps the leading
// dimension (elements from one row to the next) of its whole matrix, which BLAS takes as
// lda/ldb/ldc and Eigen as an outer stride.
template <class T>
struct TileOperands {
  const T* a;
  const T* b;
  T* c;
  std::int64_t m, n, lda, ldb, ldc;

  TileOperands(const T* a_matrix, const T* b_matrix, T* c_matrix, const GemmShape& s, const Tile& t)
      : a(s.transpose_a ? a_matrix + t.row0 : a_matrix + t.row0 * s.k),
        b(s.transpose_b ? b_matrix + t.col0 * s.k : b_matrix + t.col0),
        c(c_matrix + t.row0 * s.n + t.col0),
        m(t.row1 - t.row0),
        n(t.col1 - t.col0),
        lda(std::max<std::int64_t>(1, s.transpose_a ? s.m : s.k)),
        ldb(std::max<std::int64_t>(1, s.transpose_b ? s.k : s.n)),
        ldc(std::max<std::int64_t>(1, s.n)) {}
};

#ifdef MG_WITH_OPENBLAS
// cblas_?gemm on a tile; false when a size does not fit BLAS's int (Eigen takes those). OpenBLAS is
// pinned to one thread: mixgrad's pool runs the tiles, so that results never depend on a thread count.
template <class T>
bool blas_gemm(const TileOperands<T>& t, const GemmShape& s) {
  if (s.m > INT_MAX || s.n > INT_MAX || s.k > INT_MAX) return false;
  static const bool single_threaded = (openblas_set_num_threads(1), true);
  (void)single_threaded;
  const auto m = static_cast<int>(t.m), n = static_cast<int>(t.n), k = static_cast<int>(s.k);
  const auto lda = static_cast<int>(t.lda), ldb = static_cast<int>(t.ldb), ldc = static_cast<int>(t.ldc);
  const CBLAS_TRANSPOSE ta = s.transpose_a ? CblasTrans : CblasNoTrans, tb = s.transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, t.a, lda, t.b, ldb, 0.0f, t.c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, t.a, lda, t.b, ldb, 0.0, t.c, ldc);
  return true;
}
#endif

// C's tile = op(A) op(B) over those rows and columns, all of element type T (float or double).
template <class T>
void gemm_tile([[maybe_unused]] GemmLibrary library, const TileOperands<T>& t, const GemmShape& s) {
#ifdef MG_WITH_OPENBLAS
  if (library == GemmLibrary::OpenBlas && blas_gemm(t, s)) return;
#endif
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<const RowMajor<T>, 0, Stride> A(t.a, s.transpose_a ? s.k : t.m, s.transpose_a ? t.m : s.k, Stride(t.lda));
  Eigen::Map<const RowMajor<T>, 0, Stride> B(t.b, s.transpose_b ? t.n : s.k, s.transpose_b ? s.k : t.n, Stride(t.ldb));
  Eigen::Map<RowMajor<T>, 0, Stride> C(t.c, t.m, t.n, Stride(t.ldc));
  if (!s.transpose_a && !s.transpose_b)
    C.noalias() = A * B;
  else if (!s.transpose_a)
    C.noalias() = A * B.transpose();
  else if (!s.transpose_b)
    C.noalias() = A.transpose() * B;
  else
    C.noalias() = A.transpose() * B.transpose();
}

// How one product is cut into tiles for the thread pool: along C's longer side, so that the operand
// every tile packs again (all of op(A) when cutting columns, all of op(B) when cutting rows) is the
// smaller one; in multiples of kTileAlign rows or columns, at least kMinTileSide wide and with at
// least kMinTileFlops of work. The cut is a function of the shape alone (parallel.h): the same
// tiles, and so the same bits, on any thread count. What it costs on one thread: the repacking,
// not measurable on the MLP's training step (docs/results/cpu-bench.md).
constexpr std::int64_t kTileAlign = 16;
constexpr std::int64_t kMinTileSide = 64;
constexpr std::int64_t kMinTileFlops = 4'000'000;

struct TilePlan {
  bool cut_rows;  // tiles are row ranges of C (else column ranges)
  std::int64_t side;  // the length of the cut side (m or n)
  Chunks units;  // chunks of kTileAlign-wide units of that side

  std::int64_t count() const { return units.count; }
  Tile tile(const GemmShape& s, std::int64_t i) const {
    const std::int64_t begin = std::min(side, units.begin(i) * kTileAlign),
                       end = std::min(side, units.end(i) * kTileAlign);
    return cut_rows ? Tile{begin, end, 0, s.n} : Tile{0, s.m, begin, end};
  }
};

TilePlan plan_tiles(const GemmShape& s) {
  const bool cut_rows = s.m > s.n;
  const std::int64_t side = cut_rows ? s.m : s.n, other = cut_rows ? s.n : s.m;
  const std::int64_t units = (side + kTileAlign - 1) / kTileAlign;
  const std::int64_t unit_flops = std::max<std::int64_t>(1, 2 * kTileAlign * other * s.k);
  const std::int64_t grain = std::max(kMinTileSide / kTileAlign, (kMinTileFlops + unit_flops - 1) / unit_flops);
  return {cut_rows, side, chunks_of(units, grain)};
}

// Every tile of every product of the batch, in parallel.
template <class T>
void gemm_batched(GemmLibrary library, const T* a, const T* b, T* c, const GemmShape& s) {
  static const bool eigen_ready = (Eigen::initParallel(), true);  // Eigen's cache sizes, read once
  (void)eigen_ready;
  const TilePlan plan = plan_tiles(s);
  parallel_for(s.batch * plan.count(), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t i = item / plan.count();
      gemm_tile(library,
                TileOperands<T>(a + i * s.m * s.k, b + i * s.k * s.n, c + i * s.m * s.n, s,
                                plan.tile(s, item % plan.count())),
                s);
    }
  });
}

// C = op(A) op(B) with the running sum of every element kept in f16 (kernels/gemm.h, Accumulation::F16):
// for each block of kF16AccumulationBlock consecutive k, the block's products are summed in f32 in k
// order from zero, added to the running sum, and the result rounded to f16: the arithmetic of the
// CUDA emulator's f16 accumulator fragment, step for step (every product of two f16 values is exact
// in f32, so a fused multiply-add changes nothing). op(A) and op(B) are first copied row-major; then
// one row of C at a time stays in cache while the blocks of k pass over it, the products of a block
// added along the row (contiguous in op(B): vectorised) and the row rounded in one F16C pass.
void gemm_accumulate_in_f16(const float* a, const float* b, float* c, const GemmShape& s) {
  RowMajor<float> op_a(s.m, s.k), op_b(s.k, s.n);
  for (std::int64_t i = 0; i < s.batch; ++i) {
    Eigen::Map<const RowMajor<float>> A(a + i * s.m * s.k, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k);
    Eigen::Map<const RowMajor<float>> B(b + i * s.k * s.n, s.transpose_b ? s.n : s.k, s.transpose_b ? s.k : s.n);
    if (s.transpose_a)
      op_a = A.transpose();
    else
      op_a = A;
    if (s.transpose_b)
      op_b = B.transpose();
    else
      op_b = B;
    // Rows of C are independent: the pool takes them in chunks.
    parallel_for(s.m, std::max<std::int64_t>(1, kMinTileFlops / std::max<std::int64_t>(1, 2 * s.n * s.k)),
                 [&](std::int64_t row_begin, std::int64_t row_end) {
                   std::vector<float> block_sum(static_cast<std::size_t>(s.n));
                   std::vector<Eigen::half> rounded(static_cast<std::size_t>(s.n));
                   for (std::int64_t row = row_begin; row < row_end; ++row) {
                     float* sum = c + (i * s.m + row) * s.n;
                     std::fill(sum, sum + s.n, 0.0f);
                     for (std::int64_t k0 = 0; k0 < s.k; k0 += kF16AccumulationBlock) {
                       std::fill(block_sum.begin(), block_sum.end(), 0.0f);
                       for (std::int64_t k = k0; k < std::min<std::int64_t>(s.k, k0 + kF16AccumulationBlock); ++k) {
                         const float a_value = op_a(row, k);
                         const float* b_row = op_b.data() + k * s.n;
                         for (std::int64_t j = 0; j < s.n; ++j)
                           block_sum[static_cast<std::size_t>(j)] += a_value * b_row[j];
                       }
                       for (std::int64_t j = 0; j < s.n; ++j) sum[j] += block_sum[static_cast<std::size_t>(j)];
                       convert(sum, DType::F32, rounded.data(), DType::F16, s.n);
                       convert(rounded.data(), DType::F16, sum, DType::F32, s.n);
                     }
                   }
                 });
  }
}

// c = act(c + bias) over every row of the batch, in the compute type C, before c is rounded.
template <class C, class Activation>
void bias_and_activation(C* c, const C* bias, std::int64_t rows, std::int64_t n, Activation activation) {
  parallel_for(rows, std::max<std::int64_t>(1, kConvertGrain / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t row = begin; row < end; ++row) {
                   C* c_row = c + row * n;
                   for (std::int64_t j = 0; j < n; ++j) c_row[j] = activation(bias ? c_row[j] + bias[j] : c_row[j]);
                 }
               });
}

template <class C>
void apply_epilogue(C* c, const GemmShape& s, const GemmEpilogue& epilogue) {
  if (!epilogue.bias.defined() && epilogue.activation == Activation::None) return;
  Tensor bias = epilogue.bias.defined() ? widened<C>(epilogue.bias) : Tensor();  // exact: f16/bf16/f32 fit in C
  const C* bias_values = bias.defined() ? bias.template data<C>() : nullptr;
  const std::int64_t rows = s.batch * s.m;
  switch (epilogue.activation) {
    case Activation::None:
      return bias_and_activation(c, bias_values, rows, s.n, functors::Copy{});
    case Activation::Relu:
      return bias_and_activation(c, bias_values, rows, s.n, functors::Relu{});
    case Activation::Gelu:
      return bias_and_activation(c, bias_values, rows, s.n, functors::Gelu{});
  }
}

// op(A) or op(B) as the packed GEMM reads it (kernels/cpu/gemm_packed.h): the lines of op(A) are its m
// rows, those of op(B) its n columns; each is k long. item: the product of the batch.
GemmOperand operand(const Tensor& t, std::int64_t item, std::int64_t lines, std::int64_t k, bool line_major) {
  const char* matrix = bytes_at(t, item * lines * k);
  return line_major ? GemmOperand{matrix, t.dtype(), k, 1} : GemmOperand{matrix, t.dtype(), 1, lines};
}

// The GEMM on `library` (or on the microkernel blas_choice.h picked for the dtype), with B's f32 values
// taken from b_widened when it is defined (else widened here, like A).
void multiply(GemmLibrary library, const Tensor& a, const Tensor& b, const Tensor& b_widened, Tensor& c,
              const GemmShape& s, const GemmEpilogue& epilogue) {
  // What matmul has checked: one input dtype, and element counts that match the shape; the caller
  // that asks for an epilogue passes a bias of [n] in C's dtype or f32.
  assert(a.dtype() == b.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::F32));
  assert(a.numel() == s.batch * s.m * s.k && b.numel() == s.batch * s.k * s.n && c.numel() == s.batch * s.m * s.n);
  assert(!epilogue.bias.defined() || (epilogue.bias.numel() == s.n && epilogue.bias.device().is_cpu() &&
                                      (epilogue.bias.dtype() == c.dtype() || epilogue.bias.dtype() == DType::F32)));
#ifndef MG_WITH_OPENBLAS
  MG_CHECK(library == GemmLibrary::Eigen,
           "kernels::cpu::gemm_on: this build of mixgrad has no OpenBLAS; use GemmLibrary::Eigen");
#endif
  if (c.numel() == 0) return;
  if (a.dtype() == DType::F64) {
    gemm_batched(library, a.data<double>(), b.data<double>(), c.data<double>(), s);
    apply_epilogue(c.data<double>(), s, epilogue);
    return;
  }
  const bool accumulate_in_f16 = a.dtype() == DType::F16 && gemm_accumulation() == Accumulation::F16;
  if (const MicroKernel* kernel = gemm_microkernel(a.dtype()); kernel && !accumulate_in_f16) {
    gemm_packed(*kernel, a, b, c, s, epilogue);
    return;
  }
  // "widen": f32, f16 and bf16 all multiply in f32 on the library; only the conversions at either end differ.
  Tensor a32 = widened<float>(a), b32 = b_widened.defined() ? b_widened : widened<float>(b);
  Tensor c32 = c.dtype() == DType::F32 ? c : Tensor::empty(c.shape(), {.dtype = DType::F32});
  if (accumulate_in_f16)
    gemm_accumulate_in_f16(a32.data<float>(), b32.data<float>(), c32.data<float>(), s);
  else
    gemm_batched(library, a32.data<float>(), b32.data<float>(), c32.data<float>(), s);
  apply_epilogue(c32.data<float>(), s, epilogue);
  if (c32.dtype() != c.dtype()) convert_parallel(c32.data_ptr(), DType::F32, c.data_ptr(), c.dtype(), c.numel());
}

// How the packed GEMM cuts a product for the thread pool: into as few tiles as keep every thread busy,
// along C's longer side (so that the operand every tile packs again is the smaller one), in whole
// micro-panels. Unlike plan_tiles, the cut may follow the thread count: every element of C is the same
// chain of operations whatever tile holds it (kernels/cpu/microkernel.h), so no cut changes a bit, and
// fewer tiles pack the shared operand fewer times (with plan_tiles' 64-column tiles a 1024^3 product
// packed A 16 times and ran at half the microkernel's speed).
struct PackedPlan {
  bool cut_rows;
  std::int64_t parts;  // tiles per product
  Chunks cut;  // those tiles, in micro-panels of the cut side
  int panel;  // MR or NR

  Tile tile(const GemmShape& s, std::int64_t part) const {
    const std::int64_t side = cut_rows ? s.m : s.n;
    const std::int64_t begin = std::min(side, cut.begin(part) * panel), end = std::min(side, cut.end(part) * panel);
    return cut_rows ? Tile{begin, end, 0, s.n} : Tile{0, s.m, begin, end};
  }
};

PackedPlan plan_packed(const MicroKernel& kernel, const GemmShape& s) {
  const bool cut_rows = s.m > s.n;
  const int panel = cut_rows ? kernel.mr : kernel.nr;
  const std::int64_t panels = std::max<std::int64_t>(1, ((cut_rows ? s.m : s.n) + panel - 1) / panel);
  const std::int64_t flops = 2 * s.m * s.n * std::max<std::int64_t>(1, s.k);
  const std::int64_t wanted = (num_threads() + s.batch - 1) / s.batch;  // tiles per product to fill the pool
  const std::int64_t parts = std::clamp<std::int64_t>(std::min(wanted, flops / kMinTileFlops), 1, panels);
  return {cut_rows, parts, Chunks{panels, parts}, panel};
}

// The microkernel a prepared B is packed for: the dtype's (blas_choice.h), and for an f32 B that the
// library multiplies, AVX-512's FMA kernel where the CPU has it (as a convolution's: the library would
// pack B again on every call); nullptr where none runs, or where an f16 GEMM accumulates in f16.
const MicroKernel* prepared_kernel(DType dtype) {
  if (dtype == DType::F16 && gemm_accumulation() == Accumulation::F16) return nullptr;
  return dtype == DType::F32 ? convolution_microkernel(dtype) : gemm_microkernel(dtype);
}

}  // namespace

// Every tile of every product of the batch, in parallel.
void gemm_packed(const MicroKernel& kernel, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
                 const GemmEpilogue& epilogue, const PackedPanels* b_panels) {
  assert(!b_panels || (s.batch == 1 && b_panels->n == s.n && b_panels->k == s.k));
  assert(kernel.arith == MicroArith::Fma ? a.dtype() != DType::F64 : a.dtype() == DType::BF16);
  assert(a.dtype() == b.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::F32));
  if (c.numel() == 0) return;
  const Tensor bias = epilogue.bias.defined() ? widened<float>(epilogue.bias) : Tensor();  // exact
  const PackedPlan plan = plan_packed(kernel, s);
  parallel_for(s.batch * plan.parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t i = item / plan.parts;
      const PackedGemm gemm{.kernel = &kernel,
                            .a = operand(a, i, s.m, s.k, !s.transpose_a),  // A is [m, k], or [k, m] when transposed
                            .b = operand(b, i, s.n, s.k, s.transpose_b),  // B is [k, n], or [n, k] when transposed
                            .k = s.k,
                            .c = bytes_at(c, i * s.m * s.n),
                            .c_dtype = c.dtype(),
                            .ldc = s.n,
                            .bias = bias.defined() ? bias.data<float>() : nullptr,
                            .activation = epilogue.activation,
                            .b_panels = b_panels};
      const Tile tile = plan.tile(s, item % plan.parts);
      packed_gemm_tile(gemm, tile.row0, tile.row1, tile.col0, tile.col1);
    }
  });
}

void packed_gemm_parallel(const PackedGemm& gemm, std::int64_t m, std::int64_t n) {
  if (m == 0 || n == 0) return;
  const GemmShape shape{.m = m, .n = n, .k = gemm.k};
  const PackedPlan plan = plan_packed(*gemm.kernel, shape);
  parallel_for(plan.parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      const Tile tile = plan.tile(shape, part);
      packed_gemm_tile(gemm, tile.row0, tile.row1, tile.col0, tile.col1);
    }
  });
}

const MicroKernel* gemm_microkernel(DType dtype) {
  const GemmChoice& choice = gemm_choice();
  const std::optional<MicroKernelId> id = dtype == DType::F16    ? choice.f16
                                          : dtype == DType::BF16 ? choice.bf16
                                          : dtype == DType::F32  ? choice.f32
                                                                 : std::nullopt;
  return id ? microkernel(*id) : nullptr;
}

const MicroKernel* convolution_microkernel(DType dtype) {
  if (dtype != DType::F32 || gemm_choice().f32) return gemm_microkernel(dtype);
  // f32: AVX-512's FMA kernel, unless MG_GEMM named one; without AVX-512, im2col and the library
  // (the choice of blas_choice.cpp, for the same measured reason).
  return micro_cpu().avx512f ? microkernel(MicroKernelId::Avx512Fma) : nullptr;
}

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s, const GemmEpilogue& epilogue) {
  gemm_on(gemm_choice().library, a, b, c, s, epilogue);
}

PreparedGemmB prepare_gemm_b(const Tensor& b, const GemmShape& s) {
  assert(s.batch == 1 && b.numel() == s.k * s.n);
  PreparedGemmB prepared{.shape = s};
  if (const MicroKernel* kernel = prepared_kernel(b.dtype()))
    prepared.panels = std::make_shared<const PackedPanels>(
        pack_panels(*kernel, operand(b, 0, s.n, s.k, s.transpose_b), s.n, s.k));
  else if (is_low_precision(b.dtype()))
    prepared.widened = widened<float>(b);
  return prepared;
}

void gemm_prepared_b(const Tensor& a, const Tensor& b, const PreparedGemmB& prepared, Tensor& c, const GemmShape& s) {
  if (const MicroKernel* kernel = prepared_kernel(a.dtype());
      kernel && prepared.panels && prepared.panels->kernel == kernel)
    return gemm_packed(*kernel, a, b, c, s, {}, prepared.panels.get());
  multiply(gemm_choice().library, a, b, prepared.widened, c, s, {});
}

void gemm_on(GemmLibrary library, const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& s,
             const GemmEpilogue& epilogue) {
  multiply(library, a, b, Tensor(), c, s, epilogue);
}

}  // namespace mg::kernels::cpu

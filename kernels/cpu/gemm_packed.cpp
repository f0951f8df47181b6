// mixgrad's own CPU GEMM around a microkernel: the blocking and the epilogue described in
// kernels/cpu/gemm_packed.h (the packing: kernels/cpu/gemm_pack.cpp). Tests: build/tests/test_gemm_packed.
// Benchmark: build/bench/matmul.
#include "kernels/cpu/gemm_packed.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/convert.h"
#include "kernels/cpu/gemm_pack.h"
#include "kernels/pointwise.h"

namespace mg::kernels::cpu {

namespace {

// The steps of a micro-panel over kc values of k: pairs of k on the dot kernel (the last one padded
// with a zero), single k on the FMA kernels. Packing, a prepared B's offsets and the tiles agree on it.
std::int64_t panel_steps(bool pairs, std::int64_t kc) { return pairs ? (kc + 1) / 2 : kc; }

// Cache blocking (the header's KC, MC and NC), for this project's AMD EPYC (Zen 4: 32 KiB L1d, 1 MiB
// L2 per core). KC steps of k of one micro-panel of B (48 KiB in f32, 32 KiB in bf16 pairs) stream
// through L1 for every micro-panel of A; A's block (MC x KC: 180 KiB f32) stays in L2; B's block
// (KC x NC: 1.5 MiB f32, 1 MiB bf16) in L2 and L3. KC is even, so a pair of k never straddles two
// blocks. Any other values give the same bits, only at another speed (measured with bench/matmul:
// these are within noise of the best of the dozen tried; bf16 prefers the longer KC).
constexpr std::int64_t kBlockKFma = 384;
constexpr std::int64_t kBlockKPairs = 512;
constexpr std::int64_t kBlockRows = 120;
constexpr std::int64_t kBlockCols = 1024;
constexpr int kMaxTile = 12 * 32;  // the largest MR x NR of microkernel.h

// This thread's packed blocks and partial sums, reused from one GEMM to the next so that their pages
// are touched once (a fresh page costs ~10 us).
struct Scratch {
  std::vector<float> a, b;  // FMA panels (f32)
  std::vector<std::uint32_t> a_pairs, b_pairs;  // Bf16Dot panels (bf16 pairs)
  std::vector<float> partial;  // C's f32 sums between blocks of k (f16/bf16 output)
  PackBuffers packing;
};
thread_local Scratch scratch;

// n f32 values rounded into C's dtype (to nearest even, NaN kept quiet, subnormals kept: core/convert.h's
// rules), inline for the same reason as widen_run: C is stored one tile row of at most 32 at a time.
void narrow_run(const float* src, DType dtype, std::byte* dst, std::int64_t n) {
  if (dtype == DType::F32) {
    auto* out = reinterpret_cast<float*>(dst);
    for (std::int64_t i = 0; i < n; ++i) out[i] = src[i];
  } else if (dtype == DType::BF16) {
    auto* out = reinterpret_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i) out[i] = mg::detail::f32_to_bf16_bits(src[i]);
  } else {
#if defined(__F16C__)
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst) + i / 8,
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) convert(src + i, DType::F32, dst + 2 * i, dtype, n - i);
#else
    convert(src, DType::F32, dst, dtype, n);
#endif
  }
}

// The rows x cols corner of an f32 tile (row stride `width`) stored into C at (i, j): the epilogue
// applied to the f32 values, then one rounding into C's dtype (a vectorised conversion per row).
template <class Activation>
void store_rows(const float* tile, std::int64_t width, int rows, int cols, const PackedGemm& g, std::int64_t i,
                std::int64_t j, Activation activation) {
  alignas(64) float row[32];
  const std::int64_t c_size = static_cast<std::int64_t>(dtype_size(g.c_dtype));
  const float alpha = g.alpha;
  for (int r = 0; r < rows; ++r) {
    const float* sums = tile + r * width;
    if (g.bias && g.bias_per_row)
      for (int col = 0; col < cols; ++col) row[col] = activation(sums[col] * alpha + g.bias[i + r]);
    else if (g.bias)
      for (int col = 0; col < cols; ++col) row[col] = activation(sums[col] * alpha + g.bias[j + col]);
    else
      for (int col = 0; col < cols; ++col) row[col] = activation(sums[col] * alpha);
    narrow_run(row, g.c_dtype, static_cast<std::byte*>(g.c) + ((i + r) * g.ldc + j) * c_size, cols);
  }
}

void store_result(const float* tile, std::int64_t width, int rows, int cols, const PackedGemm& g, std::int64_t i,
                  std::int64_t j) {
  switch (g.activation) {
    case Activation::None:
      if (!g.bias && g.alpha == 1.0f) {  // nothing to apply: round straight from the tile
        const std::int64_t c_size = static_cast<std::int64_t>(dtype_size(g.c_dtype));
        for (int r = 0; r < rows; ++r)
          narrow_run(tile + r * width, g.c_dtype, static_cast<std::byte*>(g.c) + ((i + r) * g.ldc + j) * c_size, cols);
        return;
      }
      return store_rows(tile, width, rows, cols, g, i, j, functors::Copy{});
    case Activation::Relu:
      return store_rows(tile, width, rows, cols, g, i, j, functors::Relu{});
    case Activation::Gelu:
      return store_rows(tile, width, rows, cols, g, i, j, functors::Gelu{});
  }
}

// Both panel layouts take 4 bytes an entry: an f32 (FMA) or a pair of bf16 (Bf16Dot).
constexpr std::int64_t kPanelEntry = 4;
static_assert(sizeof(float) == kPanelEntry && sizeof(std::uint32_t) == kPanelEntry);

// Lines [line0, line0 + count) of x over k in [k0, k0 + kc), packed (gemm_pack.h) as consecutive
// micro-panels of `width` lines and `panel_size` entries each, into this thread's buffer for the
// kernel's layout; returns the first panel.
const std::byte* pack_block(const GemmOperand& x, bool pairs, std::int64_t line0, std::int64_t count, std::int64_t k0,
                            std::int64_t kc, int width, std::int64_t panel_size, std::vector<float>& f32_buffer,
                            std::vector<std::uint32_t>& pair_buffer, PackBuffers& packing) {
  const std::int64_t panels = (count + width - 1) / width;
  float* f32 = pairs ? nullptr : reserve(f32_buffer, panels * panel_size);
  std::uint32_t* words = pairs ? reserve(pair_buffer, panels * panel_size) : nullptr;
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t lines = std::min<std::int64_t>(width, count - p * width);
    if (pairs)
      pack_bf16_pairs(x, line0 + p * width, lines, k0, kc, width, words + p * panel_size, packing);
    else
      pack_f32(x, line0 + p * width, lines, k0, kc, width, f32 + p * panel_size, packing);
  }
  return pairs ? reinterpret_cast<const std::byte*>(words) : reinterpret_cast<const std::byte*>(f32);
}

// One chunk of FP8 products (PackedGemm::k_chunk), its sum in `chunk`, scaled into the running sum
// `sums` (both rows x cols of row stride `width`): the scales of row i + r and column j + c for the
// chunk starting at k0, added with one fma (to 0 for the first chunk: `first`).
void add_scaled_chunk(const float* chunk, float* sums, int rows, int cols, int width, bool first, const PackedGemm& g,
                      std::int64_t i, std::int64_t j, std::int64_t k0) {
  // The scales of a run of lines, one division for the run: a tile's lines share a block, or a few.
  const auto scales_of = [k0](const BlockGrid& grid, std::int64_t line0, int count, float* out) {
    const auto* data = static_cast<const float*>(grid.data) + k0 / grid.block_k * grid.k_stride;
    std::int64_t block = line0 / grid.block_lines, left = grid.block_lines - line0 % grid.block_lines;
    for (int l = 0; l < count; ++l, --left) {
      if (left == 0) ++block, left = grid.block_lines;
      out[l] = data[block * grid.line_stride];
    }
  };
  alignas(64) float a_scale[32], b_scale[32];
  scales_of(g.a_scales, i, rows, a_scale);
  scales_of(g.b_scales, j, cols, b_scale);
  for (int r = 0; r < rows; ++r) {
    const float* in = chunk + r * width;
    float* out = sums + r * width;
    if (first)
      for (int c = 0; c < cols; ++c) out[c] = in[c] * (a_scale[r] * b_scale[c]);  // fma(x, s, 0), exactly
    else
      for (int c = 0; c < cols; ++c) out[c] = std::fma(in[c], a_scale[r] * b_scale[c], out[c]);
  }
}

}  // namespace

std::int64_t k_block_size(const MicroKernel& kernel, std::int64_t k, std::int64_t k_chunk) {
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  const std::int64_t max_k = pairs ? kBlockKPairs : kBlockKFma,
                     k_blocks = std::max<std::int64_t>(1, (k + max_k - 1) / max_k);
  if (k_chunk == 0) return std::max<std::int64_t>(2, ((k + k_blocks - 1) / k_blocks + 1) / 2 * 2);
  // FP8 chunks of k with their own scales: a block of k holds whole chunks (as many as fit in KC), each
  // summed by its own kernel call; an odd chunk of pairs is a block of its own (padded like a last one).
  const std::int64_t chunks_per_block = !(pairs && k_chunk % 2) ? std::max<std::int64_t>(1, max_k / k_chunk) : 1;
  return k_chunk * chunks_per_block;
}

PackedPanels pack_panels(const MicroKernel& kernel, const GemmOperand& b, std::int64_t n, std::int64_t k) {
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  const int nr = kernel.nr;
  PackedPanels p{.kernel = &kernel, .n = n, .k = k, .block_k = k_block_size(kernel, k, 0)};
  const std::int64_t panels = (n + nr - 1) / nr;
  for (std::int64_t pc = 0; pc == 0 || pc < k; pc += p.block_k) {  // the blocks packed_gemm_tile walks
    const std::int64_t kc = std::min(p.block_k, k - pc), steps = panel_steps(pairs, kc);
    p.block_start.push_back(static_cast<std::int64_t>(p.entries.size()));
    p.entries.resize(p.entries.size() + static_cast<std::size_t>(panels * steps * nr));
    std::uint32_t* block = p.entries.data() + p.block_start.back();
    PackBuffers& packing = scratch.packing;
    for (std::int64_t panel = 0; panel < panels; ++panel) {
      const std::int64_t lines = std::min<std::int64_t>(nr, n - panel * nr);
      std::uint32_t* out = block + panel * steps * nr;
      if (pairs)
        pack_bf16_pairs(b, panel * nr, lines, pc, kc, nr, out, packing);
      else
        pack_f32(b, panel * nr, lines, pc, kc, nr, reinterpret_cast<float*>(out), packing);
    }
  }
  return p;
}

const std::byte* PackedPanels::block(std::int64_t jc, std::int64_t pc) const {
  assert(jc % kernel->nr == 0 && pc % block_k == 0);
  const std::int64_t kc = std::min(block_k, k - pc);
  const std::int64_t steps = panel_steps(kernel->arith == MicroArith::Bf16Dot, kc);
  const std::uint32_t* first = entries.data() + block_start[static_cast<std::size_t>(pc / block_k)];
  return reinterpret_cast<const std::byte*>(first + jc / kernel->nr * steps * kernel->nr);
}

void packed_gemm_tile(const PackedGemm& g, std::int64_t row0, std::int64_t row1, std::int64_t col0, std::int64_t col1) {
  const MicroKernel& kernel = *g.kernel;
  const int mr = kernel.mr, nr = kernel.nr;
  assert(mr * nr <= kMaxTile && nr <= 32);
  const bool pairs = kernel.arith == MicroArith::Bf16Dot;
  const bool chunked = g.k_chunk > 0;
  const std::int64_t block_k = k_block_size(kernel, g.k, g.k_chunk);
  assert(!g.b_panels || (!chunked && g.b_panels->kernel == &kernel && g.b_panels->block_k == block_k));
  // Rows in whole micro-panels: 128 rows are 72 + 56 (one partial panel), not 64 + 64 (two).
  const std::int64_t row_panels = (row1 - row0 + mr - 1) / mr, max_panels = std::max<std::int64_t>(1, kBlockRows / mr);
  const std::int64_t row_blocks = std::max<std::int64_t>(1, (row_panels + max_panels - 1) / max_panels);
  const std::int64_t block_rows = std::max<std::int64_t>(1, (row_panels + row_blocks - 1) / row_blocks) * mr;
  const std::int64_t block_cols = std::max<std::int64_t>(nr, kBlockCols / nr * nr);
  Scratch& s = scratch;
  // Between blocks of k, C's f32 sums live in C itself when it is f32, else in this thread's buffer.
  const bool c_holds_sums = g.c_dtype == DType::F32;
  // An f32 C with no epilogue is also the kernel's output: the last block stores straight into it.
  const bool direct = c_holds_sums && !g.bias && g.activation == Activation::None && g.alpha == 1.0f && !chunked;
  // Its rows are padded by 16 floats: rows 4 KiB apart would share one set of the L1 cache.
  const std::int64_t partial_ld = block_cols + 16;
  float* partial = g.k > block_k && !c_holds_sums ? reserve(s.partial, (row1 - row0) * partial_ld) : nullptr;
  alignas(64) float tile[kMaxTile];

  for (std::int64_t jc = col0; jc < col1; jc += block_cols) {
    const std::int64_t nc = std::min(block_cols, col1 - jc);
    // The f32 sum of C's element (i, j) between blocks of k.
    const auto sum_at = [&](std::int64_t i, std::int64_t j) -> std::pair<float*, std::int64_t> {
      if (c_holds_sums) return {static_cast<float*>(g.c) + i * g.ldc + j, g.ldc};
      if (partial) return {partial + (i - row0) * partial_ld + (j - jc), partial_ld};
      return {nullptr, 0};  // one block of k: no sums kept between blocks
    };
    for (std::int64_t pc = 0; pc == 0 || pc < g.k; pc += block_k) {  // k = 0 still stores the epilogue of 0
      const std::int64_t kc = std::min(block_k, g.k - pc), steps = panel_steps(pairs, kc);
      const bool first = pc == 0, last = pc + block_k >= g.k;
      const std::int64_t b_panel = steps * nr, a_panel = steps * mr;  // elements (or pairs) per micro-panel
      const std::byte* b_block = g.b_panels
                                     ? g.b_panels->block(jc, pc)
                                     : pack_block(g.b, pairs, jc, nc, pc, kc, nr, b_panel, s.b, s.b_pairs, s.packing);
      for (std::int64_t ic = row0; ic < row1; ic += block_rows) {
        const std::int64_t mc = std::min(block_rows, row1 - ic);
        const std::byte* a_block = pack_block(g.a, pairs, ic, mc, pc, kc, mr, a_panel, s.a, s.a_pairs, s.packing);
        for (std::int64_t j = 0; j < nc; j += nr) {
          const int cols = static_cast<int>(std::min<std::int64_t>(nr, nc - j));
          const std::byte* b_micro = b_block + j / nr * b_panel * kPanelEntry;
          for (std::int64_t i = 0; i < mc; i += mr) {
            const int rows = static_cast<int>(std::min<std::int64_t>(mr, mc - i));
            const std::byte* a_micro = a_block + i / mr * a_panel * kPanelEntry;
            const auto [sums, ld] = sum_at(ic + i, jc + j);
            if (chunked) {  // each chunk of the block summed alone, scaled into the running sum (in L1)
              alignas(64) float running[kMaxTile];
              if (!first)
                for (int r = 0; r < rows; ++r)
                  std::memcpy(running + r * nr, sums + r * ld, sizeof(float) * static_cast<std::size_t>(cols));
              for (std::int64_t q = 0; q < kc; q += g.k_chunk) {
                const std::int64_t length = std::min(g.k_chunk, kc - q), at = pairs ? q / 2 : q;
                kernel.run(pairs ? (length + 1) / 2 : length, a_micro + at * mr * kPanelEntry,
                           b_micro + at * nr * kPanelEntry, tile, nr, false);
                add_scaled_chunk(tile, running, rows, cols, nr, first && q == 0, g, ic + i, jc + j, pc + q);
              }
              if (last)
                store_result(running, nr, rows, cols, g, ic + i, jc + j);
              else
                for (int r = 0; r < rows; ++r)
                  std::memcpy(sums + r * ld, running + r * nr, sizeof(float) * static_cast<std::size_t>(cols));
              continue;
            }
            if (rows == mr && cols == nr && sums) {  // a whole tile: the kernel adds into the sums in place
              kernel.run(steps, a_micro, b_micro, sums, ld, !first);
              if (last && !direct) store_result(sums, ld, rows, cols, g, ic + i, jc + j);
              continue;
            }
            // An edge tile, or a whole one whose k is one block and whose C is not f32: through the
            // tile buffer.
            if (!first)
              for (int r = 0; r < rows; ++r)
                std::memcpy(tile + r * nr, sums + r * ld, sizeof(float) * static_cast<std::size_t>(cols));
            kernel.run(steps, a_micro, b_micro, tile, nr, !first);
            if (last) {
              store_result(tile, nr, rows, cols, g, ic + i, jc + j);
            } else {
              for (int r = 0; r < rows; ++r)
                std::memcpy(sums + r * ld, tile + r * nr, sizeof(float) * static_cast<std::size_t>(cols));
            }
          }
        }
      }
    }
  }
}

}  // namespace mg::kernels::cpu

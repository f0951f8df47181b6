// Packing for mixgrad's CPU GEMM (kernels/cpu/gemm_pack.h): one micro-panel of op(A) or op(B) laid
// out in the order the microkernel reads it, converted as it is copied. Tests: build/tests/test_gemm_packed.
#include "kernels/cpu/gemm_pack.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <span>
#include <vector>
#if defined(__F16C__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "core/convert.h"

namespace mg::kernels::cpu {

namespace {

const std::byte* element(const GemmOperand& x, std::int64_t line, std::int64_t k) {
  const std::int64_t at = line * x.line_stride + k * x.k_stride;
  return static_cast<const std::byte*>(x.data) + at * static_cast<std::int64_t>(dtype_size(x.dtype));
}

// n values of a run of x as f32: loops the compiler vectorises for f32 and bf16 (a shift), F16C for f16
// inline where the build targets it (runs are often only MR or NR long: a call to convert() per run
// cost more than the widening), else core/convert.h.
void widen_run(const std::byte* src, DType dtype, float* dst, std::int64_t n) {
  if (dtype == DType::F32) {
    const auto* values = reinterpret_cast<const float*>(src);
    for (std::int64_t i = 0; i < n; ++i) dst[i] = values[i];
  } else if (dtype == DType::BF16) {
    const auto* bits = reinterpret_cast<const std::uint16_t*>(src);
    for (std::int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(std::uint32_t{bits[i]} << 16);
  } else {
#if defined(__F16C__)
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src) + i / 8)));
    if (i < n) convert(src + 2 * i, dtype, dst + i, DType::F32, n - i);
#else
    convert(src, dtype, dst, DType::F32, n);
#endif
  }
}

// count values of one row of an image from column iw0 on (stride 1), zeros where the columns fall in
// the padding: one clamped copy.
template <class Bits>
void copy_clamped(const Bits* row, std::int64_t width, std::int64_t iw0, std::int64_t count, Bits* out) {
  const std::int64_t begin = std::clamp<std::int64_t>(-iw0, 0, count),
                     end = std::clamp<std::int64_t>(width - iw0, 0, count);
#if defined(__AVX512BW__)
  // A run of a panel (at most 32 positions, often a row of 14 or 28) is one or two masked moves: the
  // padding's lanes are masked off the load (a masked-off lane is never read, so row + iw0 may point
  // before the row) and come out as zeros. Scalar loops over runs this short cost 30% of a conv step.
  static constexpr std::int64_t kLanes = 64 / sizeof(Bits);
  if (count <= 2 * kLanes) {
    const auto lanes = [](std::int64_t from, std::int64_t to) {  // bits [from, to) of a kLanes-bit mask
      const auto bits = [](std::int64_t n) {
        return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << std::max<std::int64_t>(n, 0)) - 1;
      };
      return bits(std::min(to, kLanes)) & ~bits(std::min(from, kLanes));
    };
    for (std::int64_t part = 0; part < count; part += kLanes) {
      const std::uint64_t valid = lanes(begin - part, end - part), all = lanes(0, count - part);
      if constexpr (sizeof(Bits) == 2) {
        const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(valid), row + iw0 + part);
        _mm512_mask_storeu_epi16(out + part, static_cast<__mmask32>(all), v);
      } else {
        const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid), row + iw0 + part);
        _mm512_mask_storeu_ps(out + part, static_cast<__mmask16>(all), v);
      }
    }
    return;
  }
#endif
  // Plain loops, not std::copy: runs are a few elements long, shorter than a call to memmove.
  for (std::int64_t i = 0; i < begin; ++i) out[i] = Bits{0};
  for (std::int64_t i = begin; i < end; ++i) out[i] = row[iw0 + i];
  for (std::int64_t i = std::max(begin, end); i < count; ++i) out[i] = Bits{0};
}

// The kc values of one line of a runs or window operand whose k runs contiguously through memory
// (runs: a line of dy over its images; window with positions along k: one tap over every position),
// from k0 on, into values[0, kc): contiguous copies, one per run or output row.
template <class Bits>
void line_along_k(const GemmOperand& x, std::int64_t line, std::int64_t k0, std::int64_t kc, Bits* values) {
  const auto* data = static_cast<const Bits*>(x.data);
  if (!x.window) {  // runs of k_run elements
    assert(x.k_stride == 1);
    for (std::int64_t k = 0; k < kc;) {
      const std::int64_t run = (k0 + k) / x.k_run, within = (k0 + k) % x.k_run,
                         count = std::min(kc - k, x.k_run - within);
      const Bits* from = data + line * x.line_stride + run * x.k_run_stride + within;
      for (std::int64_t i = 0; i < count; ++i) values[k + i] = from[i];
      k += count;
    }
    return;
  }
  const Window2d& w = *x.window;
  const std::int64_t out_w = w.out_w(), positions = w.out_h() * out_w, taps_per_channel = w.kernel_h * w.kernel_w;
  const std::int64_t c = line / taps_per_channel, kh = line % taps_per_channel / w.kernel_w, kw = line % w.kernel_w;
  std::int64_t n = k0 / positions, oh = k0 % positions / out_w, ow = k0 % out_w;
  for (std::int64_t k = 0; k < kc;) {  // one output row (n, oh) at a time
    const std::int64_t count = std::min(kc - k, out_w - ow), ih = oh - w.pad_h + kh;
    if (ih < 0 || ih >= w.height)
      std::fill(values + k, values + k + count, Bits{0});
    else
      copy_clamped(data + ((n * w.channels + c) * w.height + ih) * w.width, w.width, ow - w.pad_w + kw, count,
                   values + k);
    k += count;
    ow = 0;
    if (++oh == w.out_h()) oh = 0, ++n;
  }
}

// A runs operand, or a window operand with the positions along k, has each line contiguous along k
// (runs of a row of dy; one tap over every output row): its lines are copied out one after another
// into buffer ([lines][kc]), and packed from there as any K-major operand, by 8 x 8 transposes in
// registers (a store per value across the panel took a third of a convolution's weight gradient).
bool lines_along_k(const GemmOperand& x) { return x.k_run > 0 || (x.window && x.positions_along_k); }
template <class Bits>
GemmOperand lines_copied(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc,
                         std::vector<Bits>& buffer) {
  Bits* values = reserve(buffer, lines * kc);
  for (std::int64_t l = 0; l < lines; ++l) line_along_k(x, line0 + l, k0, kc, values + l * kc);
  return GemmOperand{.data = values, .dtype = x.dtype, .line_stride = kc, .k_stride = 1};
}

// The elements (line0 + l, k0 + k), l < lines, k < kc, of a window operand whose lines are the
// positions of one image (gemm_packed.h) as they are stored, into raw[k * width + l]; 0 past `lines`.
// Bits is the element's type as stored (uint16_t for f16 and bf16 bits, float for f32): gathering
// moves values without converting them. Windows have stride 1 (kernels/conv.h's conv2d_implicit),
// so along a row of output positions the input is contiguous too: every value is moved by a run
// copy, never found by a division.
template <class Bits>
void gather(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc, int width,
            Bits* raw) {
  assert(x.window && !x.positions_along_k);
  for (std::int64_t k = 0; k < kc; ++k) std::fill(raw + k * width + lines, raw + (k + 1) * width, Bits{0});
  // Lines are the positions of one image, k its taps: at each tap the panel's positions are runs
  // along output rows, each a contiguous run of the input row it reads.
  const Window2d& w = *x.window;
  const auto* image = static_cast<const Bits*>(x.data) + x.image * w.channels * w.height * w.width;
  const std::int64_t out_w = w.out_w(), taps_per_channel = w.kernel_h * w.kernel_w;
  struct Run {
    std::int64_t first_line, count, oh, ow;
  };
  Run runs[32];  // the panel's positions cut at the ends of output rows; the same at every tap
  int run_count = 0;
  for (std::int64_t l = 0; l < lines; ++run_count) {
    const std::int64_t p = line0 + l, ow = p % out_w;
    runs[run_count] = {l, std::min(lines - l, out_w - ow), p / out_w, ow};
    l += runs[run_count].count;
  }
  std::int64_t c = k0 / taps_per_channel, kh = k0 % taps_per_channel / w.kernel_w, kw = k0 % w.kernel_w;
  for (std::int64_t k = 0; k < kc; ++k) {
    const Bits* plane = image + c * w.height * w.width;
    for (const Run& run : std::span(runs, static_cast<std::size_t>(run_count))) {
      const std::int64_t ih = run.oh - w.pad_h + kh;
      Bits* out = raw + k * width + run.first_line;
      if (ih < 0 || ih >= w.height)
        std::fill(out, out + run.count, Bits{0});
      else
        copy_clamped(plane + ih * w.width, w.width, run.ow - w.pad_w + kw, run.count, out);
    }
    if (++kw == w.kernel_w && (kw = 0, ++kh == w.kernel_h)) kh = 0, ++c;
  }
}

#if defined(__AVX2__) && defined(__F16C__)
// 8 values of x from p as f32 in a register: F16C for f16, a shift for bf16.
inline __m256 load_8(const std::byte* p, DType dtype) {
  if (dtype == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (dtype == DType::F16) return _mm256_cvtph_ps(halves);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

// out[k][l] = row l's value k, for 8 rows of 8 32-bit values given in registers: the 8 x 8 transpose
// (interleave pairs of rows, then quads, then join 128-bit halves), stored at out + k * width.
inline void store_transposed_8x8(__m256 r[8], float* out, int width) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2)
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4)
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + j + 2] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // r[0..3] now hold values (0, 4), (2, 6), (1, 5), (3, 7) of the first four rows, one per 128-bit half,
  // and r[4..7] the same of the last four: joining halves gives each value's 8 rows.
  static constexpr int kOrder[4] = {0, 2, 1, 3};
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(out + q * width, _mm256_permute2f128_ps(r[kOrder[q]], r[4 + kOrder[q]], 0x20));
    _mm256_storeu_ps(out + (q + 4) * width, _mm256_permute2f128_ps(r[kOrder[q]], r[4 + kOrder[q]], 0x31));
  }
}

// The panel of lines that are contiguous along k (op(A) untransposed, op(B) transposed), in blocks of
// 8 lines x 8 steps, loaded into registers and transposed, so each store writes 8 lines of one step.
// A step is one k widened to f32 (FMA panels) or one pair of k as its 32 raw bits (dot panels).
// Returns how many lines it packed (a multiple of 8); the caller packs the rest of the lines, and this
// packs the steps past the last multiple of 8 one value at a time.
template <bool Pairs>
std::int64_t pack_transposed_8x8(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0,
                                 std::int64_t kc, int width, float* out) {
  const std::int64_t steps = Pairs ? kc / 2 : kc;  // whole steps (an odd last k is the caller's)
  const std::int64_t blocked_lines = lines / 8 * 8, blocked_steps = steps / 8 * 8;
  // A step is 4 bytes (a pair, or an f32) or 2 (an f16 or bf16 to widen): the 8 lines' starts are
  // found once per block of lines, not per load (element() per load cost a fifth of a conv's packing).
  const std::int64_t step_bytes = Pairs ? 4 : static_cast<std::int64_t>(dtype_size(x.dtype));
  for (std::int64_t l = 0; l < blocked_lines; l += 8) {
    const std::byte* starts[8];
    for (int i = 0; i < 8; ++i) starts[i] = element(x, line0 + l + i, k0);
    for (std::int64_t step = 0; step < blocked_steps; step += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        const std::byte* at = starts[i] + step * step_bytes;
        if constexpr (Pairs)
          r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(at));
        else
          r[i] = load_8(at, x.dtype);
      }
      store_transposed_8x8(r, out + step * width + l, width);
    }
    for (std::int64_t step = blocked_steps; step < steps; ++step)
      for (int i = 0; i < 8; ++i) {
        if constexpr (Pairs)
          std::memcpy(out + step * width + l + i, element(x, line0 + l + i, k0 + 2 * step), 4);
        else
          widen_run(element(x, line0 + l + i, k0 + step), x.dtype, out + step * width + l + i, 1);
      }
  }
  return blocked_lines;
}
#endif

}  // namespace

void pack_f32(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc, int width,
              float* out, PackBuffers& buffers) {
  if (is_code_operand(x))
    return pack_f32(decode_codes(x, line0, lines, k0, kc, buffers), 0, lines, 0, kc, width, out, buffers);
  std::vector<float>& line_buffer = buffers.line;
  if (lines_along_k(x)) {
    const GemmOperand copied = x.dtype == DType::F32 ? lines_copied(x, line0, lines, k0, kc, buffers.lines_f32)
                                                     : lines_copied(x, line0, lines, k0, kc, buffers.lines_bits);
    return pack_f32(copied, 0, lines, 0, kc, width, out, buffers);
  }
  if (x.window) {  // gather the bits, then widen them in place, one k at a time
    if (x.dtype == DType::F32) return gather(x, line0, lines, k0, kc, width, out);
    std::uint16_t* raw = reserve(buffers.raw, kc * width);
    gather(x, line0, lines, k0, kc, width, raw);
    for (std::int64_t k = 0; k < kc; ++k)
      widen_run(reinterpret_cast<const std::byte*>(raw + k * width), x.dtype, out + k * width, width);
    return;
  }
  if (lines < width)
    for (std::int64_t k = 0; k < kc; ++k) std::fill(out + k * width + lines, out + (k + 1) * width, 0.0f);
  if (x.line_stride == 1) {  // the lines are contiguous at each k: one conversion per k
    for (std::int64_t k = 0; k < kc; ++k) widen_run(element(x, line0, k0 + k), x.dtype, out + k * width, lines);
    return;
  }
  std::int64_t first_line = 0;
#if defined(__AVX2__) && defined(__F16C__)
  // Lines contiguous along k: 8 lines x 8 k at a time, widened in registers and transposed.
  if (x.k_stride == 1) first_line = pack_transposed_8x8<false>(x, line0, lines, k0, kc, width, out);
#endif
  // Each remaining line is contiguous along k (or strided): widen the line, then lay it down across the panel.
  float* values = reserve(line_buffer, kc);
  for (std::int64_t line = first_line; line < lines; ++line) {
    if (x.k_stride == 1)
      widen_run(element(x, line0 + line, k0), x.dtype, values, kc);
    else
      for (std::int64_t k = 0; k < kc; ++k)
        convert(element(x, line0 + line, k0 + k), x.dtype, values + k, DType::F32, 1);
    for (std::int64_t k = 0; k < kc; ++k) out[k * width + line] = values[k];
  }
}

void pack_bf16_pairs(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc,
                     int width, std::uint32_t* out, PackBuffers& buffers) {
  if (is_code_operand(x))
    return pack_bf16_pairs(decode_codes(x, line0, lines, k0, kc, buffers), 0, lines, 0, kc, width, out, buffers);
  assert(x.dtype == DType::BF16);
  if (lines_along_k(x)) {
    const GemmOperand copied = lines_copied(x, line0, lines, k0, kc, buffers.lines_bits);
    return pack_bf16_pairs(copied, 0, lines, 0, kc, width, out, buffers);
  }
  if (x.window) {  // gather the bits, then interleave pairs of k
    std::uint16_t* raw = reserve(buffers.raw, (kc + 1) * width);
    gather(x, line0, lines, k0, kc, width, raw);
    if (kc % 2) std::fill(raw + kc * width, raw + (kc + 1) * width, std::uint16_t{0});
    for (std::int64_t s = 0; s < (kc + 1) / 2; ++s)
      for (int l = 0; l < width; ++l)
        out[s * width + l] = std::uint32_t{raw[2 * s * width + l]} | std::uint32_t{raw[(2 * s + 1) * width + l]} << 16;
    return;
  }
  const std::int64_t steps = (kc + 1) / 2, whole = kc / 2;
  const auto* bits = static_cast<const std::uint16_t*>(x.data);
  if (lines < width)
    for (std::int64_t s = 0; s < steps; ++s) std::fill(out + s * width + lines, out + (s + 1) * width, 0u);
  if (x.line_stride == 1) {  // contiguous lines: interleave two rows of k, a vector loop
    for (std::int64_t s = 0; s < whole; ++s) {
      const auto* even = reinterpret_cast<const std::uint16_t*>(element(x, line0, k0 + 2 * s));
      const auto* odd = reinterpret_cast<const std::uint16_t*>(element(x, line0, k0 + 2 * s + 1));
      for (std::int64_t line = 0; line < lines; ++line)
        out[s * width + line] = std::uint32_t{even[line]} | std::uint32_t{odd[line]} << 16;
    }
  } else {
    std::int64_t first_line = 0;
#if defined(__AVX2__) && defined(__F16C__)
    // Lines contiguous along k: each pair is one 32-bit word already; transpose 8 x 8 blocks of them.
    if (x.k_stride == 1)
      first_line = pack_transposed_8x8<true>(x, line0, lines, k0, kc, width, reinterpret_cast<float*>(out));
#endif
    for (std::int64_t line = first_line; line < lines; ++line) {
      const std::uint16_t* values = bits + (line0 + line) * x.line_stride + k0 * x.k_stride;
      for (std::int64_t s = 0; s < whole; ++s)
        out[s * width + line] = std::uint32_t{values[2 * s * x.k_stride]} |
                                std::uint32_t{values[(2 * s + 1) * x.k_stride]} << 16;
    }
  }
  if (whole < steps)
    for (std::int64_t line = 0; line < lines; ++line)
      out[whole * width + line] = *reinterpret_cast<const std::uint16_t*>(element(x, line0 + line, k0 + kc - 1));
}

}  // namespace mg::kernels::cpu

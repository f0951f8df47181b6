// Packing FP8 and FP4 operands for mixgrad's CPU GEMM (kernels/cpu/gemm_pack.h): a panel's lines are
// decoded into bf16 through tables, then laid out by the bf16 packers like any bf16 operand. No decoded
// copy of a whole operand is made: only the lines of the panel being packed, which stay in L1.
//
// Why bf16 holds them exactly: an FP8 value has at most 4 significant bits and lies inside bf16's
// range; an E2M1 value (at most 2 significant bits) times an E4M3 scale (4) or a power of two (E8M0)
// has at most 6, and kernels/fp4_scale.h's fp4_decode_value writes as 0 what would fall below bf16's
// normals. So the tables below hold f32 values whose low 16 bits are zero, and their top halves are the
// bf16 codes. Tests: build/tests/test_fp8_gemm, build/tests/test_fp4_gemm.
#include <array>
#include <bit>
#include <cassert>
#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

#include "core/fp8.h"
#include "kernels/cpu/gemm_pack.h"
#include "kernels/fp4_scale.h"

namespace mg::kernels::cpu {

namespace {

std::uint16_t bf16_bits(float exact) {
  assert((std::bit_cast<std::uint32_t>(exact) & 0xFFFFu) == 0);
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(exact) >> 16);
}

// The bf16 bits of every code of E4M3 (table 0) and E5M2 (table 1).
const std::array<std::uint16_t, 256>& fp8_table(DType format) {
  static const auto tables = [] {
    std::array<std::array<std::uint16_t, 256>, 2> t{};
    for (int code = 0; code < 256; ++code) {
      t[0][static_cast<std::size_t>(code)] = bf16_bits(fp8::decode(static_cast<std::uint8_t>(code), DType::E4M3));
      t[1][static_cast<std::size_t>(code)] = bf16_bits(fp8::decode(static_cast<std::uint8_t>(code), DType::E5M2));
    }
    return t;
  }();
  return tables[format == DType::E4M3 ? 0 : 1];
}

// The bf16 bits of decode(code) * decode(scale) for the 16 E2M1 codes under one scale code: 256 rows a
// format (8 KiB), so a block of 16 or 32 values looks its row up once.
const std::uint16_t* fp4_row(Fp4Format format, std::uint8_t scale) {
  static const auto tables = [] {
    std::array<std::array<std::uint16_t, 16>, 512> t{};
    for (int f = 0; f < 2; ++f)
      for (int s = 0; s < 256; ++s)
        for (int code = 0; code < 16; ++code)
          t[static_cast<std::size_t>(f * 256 + s)][static_cast<std::size_t>(code)] = bf16_bits(
              fp4_decode_value(static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(s),
                               f == 0 ? Fp4Format::Nv : Fp4Format::Mx));
    return t;
  }();
  return tables[static_cast<std::size_t>((format == Fp4Format::Nv ? 0 : 256) + scale)].data();
}

// One line of an E2M1 operand whose codes are contiguous along k and start on a byte, with blocks of an
// even length along k: each block's row looked up once, then 16 values at a time (AVX-512) and a byte
// (two values) at a time.
void decode_fp4_line_bytes(const GemmOperand& x, std::int64_t line, std::int64_t k0, std::int64_t kc,
                           std::uint16_t* out) {
  const auto* bytes = static_cast<const std::uint8_t*>(x.data) + (line * x.line_stride + k0) / 2;
  const auto* scales = static_cast<const std::uint8_t*>(x.fp4_scales.data);
  const std::int64_t block = x.fp4_scales.block_k;
  for (std::int64_t k = 0; k < kc;) {
    const std::int64_t end = std::min(kc, ((k0 + k) / block + 1) * block - k0);  // this block's last k + 1
    const std::uint16_t* row = fp4_row(x.fp4_format, scales[x.fp4_scales.at(line, k0 + k)]);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    // 16 values (8 bytes) at a time: each byte widened to a 32-bit lane as the pair of 16-bit indices
    // (low nibble, high nibble), and vpermw looks all 16 up in the row, which fits one register.
    const __m256i table = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
    for (; k + 16 <= end; k += 16) {
      const __m256i pairs = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + k / 2)));
      const __m256i index = _mm256_or_si256(_mm256_and_si256(pairs, _mm256_set1_epi32(0xF)),
                                            _mm256_slli_epi32(_mm256_and_si256(pairs, _mm256_set1_epi32(0xF0)), 12));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_permutexvar_epi16(index, table));
    }
#endif
    for (; k + 1 < end; k += 2) {
      const std::uint8_t pair = bytes[k / 2];
      out[k] = row[pair & 0xF];
      out[k + 1] = row[pair >> 4];
    }
    if (k < end) out[k] = row[bytes[k / 2] & 0xF], ++k;  // an odd kc's last value
  }
}

}  // namespace

bool is_code_operand(const GemmOperand& x) {
  return x.dtype == DType::E4M3 || x.dtype == DType::E5M2 || x.dtype == DType::E2M1;
}

GemmOperand decode_codes(const GemmOperand& x, std::int64_t line0, std::int64_t lines, std::int64_t k0, std::int64_t kc,
                         PackBuffers& buffers) {
  assert(is_code_operand(x) && !x.window && x.k_run == 0);
  if (buffers.decoded.size() < static_cast<std::size_t>(lines * kc))
    buffers.decoded.resize(static_cast<std::size_t>(lines * kc));
  std::uint16_t* out = buffers.decoded.data();
  const auto* codes = static_cast<const std::uint8_t*>(x.data);
  if (x.dtype != DType::E2M1) {
    const std::array<std::uint16_t, 256>& table = fp8_table(x.dtype);
    for (std::int64_t l = 0; l < lines; ++l) {
      const std::uint8_t* line = codes + (line0 + l) * x.line_stride + k0 * x.k_stride;
      for (std::int64_t k = 0; k < kc; ++k) out[l * kc + k] = table[line[k * x.k_stride]];
    }
  } else if (x.k_stride == 1 && x.line_stride % 2 == 0 && k0 % 2 == 0 && x.fp4_scales.block_k % 2 == 0) {
    for (std::int64_t l = 0; l < lines; ++l) decode_fp4_line_bytes(x, line0 + l, k0, kc, out + l * kc);
  } else {  // any other layout: a value at a time
    const auto* scales = static_cast<const std::uint8_t*>(x.fp4_scales.data);
    for (std::int64_t l = 0; l < lines; ++l)
      for (std::int64_t k = 0; k < kc; ++k) {
        const std::int64_t line = line0 + l, at = k0 + k;
        const std::uint8_t code = fp8::load_code(codes, line * x.line_stride + at * x.k_stride, DType::E2M1);
        out[l * kc + k] = fp4_row(x.fp4_format, scales[x.fp4_scales.at(line, at)])[code];
      }
  }
  return {.data = out, .dtype = DType::BF16, .line_stride = kc, .k_stride = 1};
}

}  // namespace mg::kernels::cpu

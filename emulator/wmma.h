// nvcuda::wmma for the CUDA emulator (included by device.h): the Tensor Core fragments and the four
// operations the kernels use, with the API's collective semantics and its rules checked.
//
// A fragment holds its lane's share of a tile, as on the GPU: a 16x16 operand is 256 elements, 8 a
// lane (lane l holds elements 8l to 8l + 7 of the tile in row-major order; the hardware's mapping is
// unspecified, and code may only apply the same operation to every element, as the kernels' TF32
// rounding does). load_matrix_sync, mma_sync and store_matrix_sync are warp collectives: all 32
// lanes must call the same one (the same line) with the same pointer and leading dimension, and the
// last lane to arrive does the work for the warp, so a lane whose copy of a fragment went astray
// shows in the result. fill_fragment touches only the calling lane's share.
// Rules checked (an mg::Error naming the kernel): the pointer 32-byte aligned (256 bits), ldm a
// multiple of 16 bytes (8 f16/bf16, 4 f32), every lane passing the same arguments.
// Arithmetic: every product exact in f32 (f16 x f16 and bf16 x bf16 always are; TF32 x TF32 too),
// added to the accumulator in f32 in k order. An f16 accumulator (fragment<accumulator, ..., half>)
// is the model of kernels/gemm.h's Accumulation::F16: the products of each block of
// kHalfAccumulatorBlock consecutive k are summed in f32, added to the accumulator, and the result
// rounded to f16 to nearest even. A TF32 operand is an f32 whose low 13 mantissa bits
// the Tensor Core ignores (truncation); __float_to_tf32 rounds them away to nearest, ties away
// from zero, as cvt.rna.tf32.f32 does.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __F16C__
#include <immintrin.h>
#endif

#if defined(__clang__)
#define MG_EMU_HOT __attribute__((no_sanitize("address", "undefined")))
#else
#define MG_EMU_HOT __attribute__((no_sanitize("address", "undefined"), optimize("O3")))
#endif

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32;
}

// Round to TF32 (10 mantissa bits), to nearest with ties away from zero; inf and NaN unchanged.
inline float __float_to_tf32(float x) {
  if (!std::isfinite(x)) return x;
  auto bits = std::bit_cast<std::uint32_t>(x);
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  return std::bit_cast<float>(bits);
}

// Products summed in f32 between two roundings of an f16 accumulator: kernels::kF16AccumulationBlock
// (kernels/gemm.h says why 16: measured on an H200; gemm.cu checks that the two agree).
constexpr int kHalfAccumulatorBlock = 16;

namespace detail {

// The tile a fragment holds: rows x columns, its element type in memory and in the fragment.
template <class Use, int M, int N, int K, class T>
struct Tile;
template <int M, int N, int K, class T>
struct Tile<matrix_a, M, N, K, T> {
  static constexpr int kRows = M, kColumns = K;
  using Element = std::conditional_t<std::is_same_v<T, precision::tf32>, float, T>;
};
template <int M, int N, int K, class T>
struct Tile<matrix_b, M, N, K, T> {
  static constexpr int kRows = K, kColumns = N;
  using Element = std::conditional_t<std::is_same_v<T, precision::tf32>, float, T>;
};
template <int M, int N, int K, class T>
struct Tile<accumulator, M, N, K, T> {
  static constexpr int kRows = M, kColumns = N;
  using Element = T;
};

// Exact widenings to f32 (the toolkit's host __half2float is a slow software conversion).
MG_EMU_HOT inline float widen(float x) { return x; }
MG_EMU_HOT inline float widen(__half x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#ifdef __F16C__
  return _cvtsh_ss(bits);
#else
  return __half2float(x);
#endif
}
MG_EMU_HOT inline float widen(__nv_bfloat16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// An f32 sum stored into an accumulator element: as it is (f32), or rounded to f16 to nearest even.
MG_EMU_HOT inline void narrow(float x, float& to) { to = x; }
MG_EMU_HOT inline void narrow(float x, __half& to) {
#ifdef __F16C__
  const std::uint16_t bits = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
  std::memcpy(static_cast<void*>(&to), &bits, sizeof bits);  // __half has no public way to set its bits
#else
  to = __float2half_rn(x);
#endif
}
// x rounded to f16 and widened back.
MG_EMU_HOT inline float round_to_half(float x) {
  __half h;
  narrow(x, h);
  return widen(h);
}

}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
 public:
  using Tile = detail::Tile<Use, M, N, K, T>;
  using element_type = typename Tile::Element;
  static constexpr int kRows = Tile::kRows, kColumns = Tile::kColumns;
  static constexpr int num_elements = kRows * kColumns / 32;
  static constexpr bool kTf32 = std::is_same_v<T, precision::tf32>;
  element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, typename fragment<Use, M, N, K, T, Layout>::element_type v) {
  for (auto& e : f.x) e = v;
}

namespace detail {

// Element (r, c) of a tile stored at `pointer` with leading dimension ldm.
inline std::int64_t offset(int r, int c, unsigned ldm, bool row_major) {
  return row_major ? static_cast<std::int64_t>(r) * ldm + c : static_cast<std::int64_t>(c) * ldm + r;
}

template <class Element>
void check_memory_arguments(const char* operation, const void* pointer, unsigned ldm) {
  if (reinterpret_cast<std::uintptr_t>(pointer) % 32 != 0)
    ::mg::emu::fail(
        fmt::format("{}: the pointer {} is not 32-byte aligned (256 bits, the WMMA rule)", operation, pointer));
  if ((ldm * sizeof(Element)) % 16 != 0)
    ::mg::emu::fail(fmt::format("{}: ldm {} is {} bytes, not a multiple of 16 (the WMMA rule)", operation, ldm,
                                ldm * sizeof(Element)));
}

// Every lane of a memory collective passed the same arguments.
template <class Lane>
void check_same_arguments(const char* operation, void* const lanes[32]) {
  const auto* first = static_cast<const Lane*>(lanes[0]);
  for (int l = 1; l < 32; ++l) {
    const auto* lane = static_cast<const Lane*>(lanes[l]);
    if (lane->pointer != first->pointer || lane->ldm != first->ldm || lane->row_major != first->row_major)
      ::mg::emu::fail(fmt::format("{}: lane {} passes pointer {} and ldm {}, lane 0 pointer {} and ldm {}; every lane "
                                  "of the warp must pass the same",
                                  operation, l, static_cast<const void*>(lane->pointer), lane->ldm,
                                  static_cast<const void*>(first->pointer), first->ldm));
  }
}

template <class Fragment, class Pointer>
struct MemoryLane {
  Fragment* fragment;
  Pointer pointer;
  unsigned ldm;
  bool row_major;
};

template <class Fragment>
struct Load {
  using Element = typename Fragment::element_type;
  using Lane = MemoryLane<Fragment, const Element*>;
  static void complete(void* const lanes[32], unsigned) {
    check_same_arguments<Lane>("wmma::load_matrix_sync", lanes);
    const auto* first = static_cast<const Lane*>(lanes[0]);
    check_memory_arguments<Element>("wmma::load_matrix_sync", first->pointer, first->ldm);
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int e = 0; e < Fragment::num_elements; ++e) {
        const int i = l * Fragment::num_elements + e;
        lane->fragment->x[e] =
            first->pointer[offset(i / Fragment::kColumns, i % Fragment::kColumns, first->ldm, first->row_major)];
      }
    }
  }
  static constexpr ::mg::emu::Collective kind{"wmma::load_matrix_sync", &complete};
};

template <class Fragment>
struct Store {
  using Element = typename Fragment::element_type;
  using Lane = MemoryLane<const Fragment, Element*>;
  static void complete(void* const lanes[32], unsigned) {
    check_same_arguments<Lane>("wmma::store_matrix_sync", lanes);
    const auto* first = static_cast<const Lane*>(lanes[0]);
    check_memory_arguments<Element>("wmma::store_matrix_sync", first->pointer, first->ldm);
    for (int l = 0; l < 32; ++l) {
      const auto* lane = static_cast<const Lane*>(lanes[l]);
      for (int e = 0; e < Fragment::num_elements; ++e) {
        const int i = l * Fragment::num_elements + e;
        first->pointer[offset(i / Fragment::kColumns, i % Fragment::kColumns, first->ldm, first->row_major)] =
            lane->fragment->x[e];
      }
    }
  }
  static constexpr ::mg::emu::Collective kind{"wmma::store_matrix_sync", &complete};
};

// The Tensor Core's view of an operand element: TF32 ignores the low 13 mantissa bits.
template <bool kTf32, class Element>
MG_EMU_HOT inline float operand(Element x) {
  if constexpr (kTf32)
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0xFFFFE000u);
  else
    return widen(x);
}

template <class D, class A, class B, class C>
struct Mma {
  struct Lane {
    D* d;
    const A* a;
    const B* b;
    const C* c;
  };
  // The fragments are the lanes' registers: nothing here for the sanitizers to check, and it is
  // most of the emulator's time in a GEMM, so it is optimised in every build.
  MG_EMU_HOT static void complete(void* const lanes[32], unsigned) {
    constexpr int kM = D::kRows, kN = D::kColumns, kK = A::kColumns;
    // The tiles, row-major: lane l's share is elements [l * num_elements, (l + 1) * num_elements).
    float a[kM * kK], b[kK * kN], sum[kM * kN];
    for (int l = 0; l < 32; ++l) {
      const auto* lane = static_cast<const Lane*>(lanes[l]);
      for (int e = 0; e < A::num_elements; ++e) a[l * A::num_elements + e] = operand<A::kTf32>(lane->a->x[e]);
      for (int e = 0; e < B::num_elements; ++e) b[l * B::num_elements + e] = operand<B::kTf32>(lane->b->x[e]);
      for (int e = 0; e < C::num_elements; ++e) sum[l * C::num_elements + e] = widen(lane->c->x[e]);
    }
    if constexpr (std::is_same_v<typename C::element_type, float>) {
      for (int i = 0; i < kM; ++i)
        for (int k = 0; k < kK; ++k)
          for (int j = 0; j < kN; ++j) sum[i * kN + j] += a[i * kK + k] * b[k * kN + j];  // exact product, one rounding
    } else {  // f16 accumulator: a block's products summed in f32, then added and rounded to f16
      for (int k0 = 0; k0 < kK; k0 += kHalfAccumulatorBlock) {
        float block[kM * kN] = {};
        for (int i = 0; i < kM; ++i)
          for (int k = k0; k < k0 + kHalfAccumulatorBlock && k < kK; ++k)
            for (int j = 0; j < kN; ++j) block[i * kN + j] += a[i * kK + k] * b[k * kN + j];
        for (int e = 0; e < kM * kN; ++e) sum[e] = round_to_half(sum[e] + block[e]);
      }
    }
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int e = 0; e < D::num_elements; ++e) narrow(sum[l * D::num_elements + e], lane->d->x[e]);
    }
  }
  static constexpr ::mg::emu::Collective kind{"wmma::mma_sync", &complete};
};

}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f,
                      const typename fragment<Use, M, N, K, T, Layout>::element_type* pointer, unsigned ldm,
                      std::source_location where = std::source_location::current()) {
  using Fragment = fragment<Use, M, N, K, T, Layout>;
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "an operand fragment names its layout");
  typename detail::Load<Fragment>::Lane lane{&f, pointer, ldm, std::is_same_v<Layout, row_major>};
  ::mg::emu::warp_collective(0xFFFFFFFFu, detail::Load<Fragment>::kind, &lane, where);
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* pointer, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                       std::source_location where = std::source_location::current()) {
  using Fragment = fragment<accumulator, M, N, K, T>;
  typename detail::Store<Fragment>::Lane lane{&f, pointer, ldm, layout == mem_row_major};
  ::mg::emu::warp_collective(0xFFFFFFFFu, detail::Store<Fragment>::kind, &lane, where);
}

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
              std::source_location where = std::source_location::current()) {
  using Op = detail::Mma<fragment<accumulator, M, N, K, TC>, fragment<matrix_a, M, N, K, TA, LA>,
                         fragment<matrix_b, M, N, K, TB, LB>, fragment<accumulator, M, N, K, TC>>;
  typename Op::Lane lane{&d, &a, &b, &c};
  ::mg::emu::warp_collective(0xFFFFFFFFu, Op::kind, &lane, where);
}

}  // namespace nvcuda::wmma

// What cuda_fp8.h computes for FP8 conversions, for scripts/make-fp8-fixtures (the CUDA columns of
// tests/fixtures/fp8/). A host-only program: compiled with g++ against the CUDA Toolkit headers, the
// conversions of cuda_fp8.hpp take their portable C path (the one nvcc also compiles for the host and
// for GPUs older than sm_89), so no GPU and no CUDA runtime are needed.
//
//   g++ -std=c++17 -O2 -I/usr/local/cuda/include scripts/fp8_cuda_reference.cpp -o fp8_cuda_reference
//   fp8_cuda_reference casts < inputs   # each input line: an f32 bit pattern in hex (e.g. 3f800000);
//                                       # prints "<bits> <e4m3 satfinite> <e4m3 nosat> <e5m2 satfinite>
//                                       # <e5m2 nosat>", the codes as 2 hex digits
//   fp8_cuda_reference codes            # 256 lines "<code> <e4m3 value> <e5m2 value>", the values as
//                                       # f32 bit patterns (__nv_cvt_fp8_to_halfraw, then f16 -> f32)
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

std::uint32_t float_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}

unsigned cast(float x, __nv_saturation_t saturate, __nv_fp8_interpretation_t format) {
  return __nv_cvt_float_to_fp8(x, saturate, format);
}

// The value of a code: CUDA decodes FP8 to f16 (exact: every FP8 value is an f16), then f16 to f32.
std::uint32_t value(unsigned code, __nv_fp8_interpretation_t format) {
  const __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), format);
  return float_bits(__half2float(__half(raw)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "casts") == 0) {
    unsigned bits;
    while (std::scanf("%x", &bits) == 1) {
      float x;
      std::memcpy(&x, &bits, 4);
      std::printf("%08x %02x %02x %02x %02x\n", bits, cast(x, __NV_SATFINITE, __NV_E4M3),
                  cast(x, __NV_NOSAT, __NV_E4M3), cast(x, __NV_SATFINITE, __NV_E5M2), cast(x, __NV_NOSAT, __NV_E5M2));
    }
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "codes") == 0) {
    for (unsigned code = 0; code < 256; ++code)
      std::printf("%02x %08x %08x\n", code, value(code, __NV_E4M3), value(code, __NV_E5M2));
    return 0;
  }
  std::fprintf(stderr, "usage: %s casts < f32-bits-hex | %s codes\n", argv[0], argv[0]);
  return 2;
}

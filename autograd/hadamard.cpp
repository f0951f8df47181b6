// The Hadamard transform (autograd/ops.h): a block-diagonal matrix product, recorded as the matmul it is,
// so its backward (the inverse transform, M^T) comes from matmul's. Tests: build/tests/test_hadamard.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/philox.h"

namespace mg {

namespace {

constexpr const char* kHadamardOp = "mg::hadamard";
constexpr std::uint32_t kSignTag = 0x48440000u;  // "HD": these words are not mg::Generator's under the same seed

void check_block(std::int64_t block) {
  MG_CHECK(block >= 1 && block <= 256 && (block & (block - 1)) == 0,
           "{}: the block must be a power of two from 1 to 256, got {}", kHadamardOp, block);
}

// Sign i of a random transform: the low bit of Philox word i under the seed.
float sign(std::uint64_t seed, std::int64_t i) {
  const philox::Block counter{{static_cast<std::uint32_t>(i / 4), 0, kSignTag, 0}};
  const philox::Block words = philox::rounds(counter, static_cast<std::uint32_t>(seed),
                                             static_cast<std::uint32_t>(seed >> 32));
  return (words.word[i % 4] & 1u) != 0 ? -1.0f : 1.0f;
}

}  // namespace

Tensor hadamard_matrix(const HadamardOptions& options) {
  check_block(options.block);
  const std::int64_t n = options.block;
  Tensor m = Tensor::empty({n, n}, {.dtype = DType::F32});
  float* out = m.data<float>();
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));  // exact for even powers of two (1/4 for 16)
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < n; ++c) {
      // Sylvester: H[r][c] = (-1)^popcount(r & c); the signs scale M's rows (diag(s) H).
      const float h = (__builtin_popcountll(static_cast<unsigned long long>(r & c)) & 1) != 0 ? -1.0f : 1.0f;
      const float s = options.random_signs ? sign(options.seed, r) : 1.0f;
      out[options.inverse ? c * n + r : r * n + c] = s * h * norm;
    }
  return m;
}

Tensor hadamard(const Tensor& x, const HadamardOptions& options) {
  const OpSpan span(kHadamardOp);
  check_block(options.block);
  MG_CHECK(x.defined() && x.dim() >= 1 && is_floating(x.dtype()),
           "{}: needs a floating tensor with at least one dimension, got {}", kHadamardOp,
           x.defined() ? fmt::format("{} {}", x.dtype(), x.shape()) : std::string("an undefined tensor"));
  MG_CHECK(x.size(-1) % options.block == 0,
           "{}: the last dimension ({}) of x {} must be a multiple of the block ({}); pad x first (mg::cat with "
           "zeros), as FP4's weight gradient does",
           kHadamardOp, x.size(-1), x.shape(), options.block);
  const Autocast off(DType::F16, /*enabled=*/false);  // the transform is f32 math, whatever region calls it
  const DType compute = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor m = hadamard_matrix(options).to(x.device()).to(compute);
  const Tensor blocks = reshape(cast(x, compute), {-1, options.block});
  return cast(reshape(matmul(blocks, m), x.shape()), x.dtype());
}

}  // namespace mg

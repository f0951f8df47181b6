// CPU random masks (kernels/random.h): one Philox word per element, computed in place.
// Tests: build/tests/test_ops_elementwise (dropout).
#include "core/philox.h"
#include "kernels/random.h"

namespace mg::kernels::cpu {

void dropout_mask(std::uint64_t seed, std::uint64_t first_block, double p, Tensor& keep) {
  visit_floating(keep.dtype(), "dropout_mask", [&](auto zero) {
    using T = decltype(zero);
    T* out = keep.data<T>();
    for (std::int64_t i = 0; i < keep.numel(); ++i) {
      const float u = philox::unit_float(philox::random_word(seed, first_block, static_cast<std::uint64_t>(i)));
      out[i] = static_cast<double>(u) >= p ? T(1) : T(0);
    }
  });
}

}  // namespace mg::kernels::cpu

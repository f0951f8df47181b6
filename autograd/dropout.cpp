// dropout: zero each element with probability p, scale the survivors by 1 / (1 - p).
//
// Composed as (x * keep) * (1 / (1 - p)) with keep a 0/1 tensor in x's dtype: multiplying by 0 or 1
// is exact, so the result is rounded once, and the tape gives the backward g * keep / (1 - p).
// keep comes from a Philox generator (kernels/random.h): the same seed and offset give the same mask
// on any machine and device, and the generator's (seed, offset) is all a checkpoint needs to resume
// the same masks.
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"
#include "kernels/random.h"

namespace mg {

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  constexpr Op op = Op::Dropout;
  const OpSpan span(op);
  check::floating(op, x);
  MG_CHECK(p >= 0 && p <= 1, "{}: the drop probability must be in [0, 1], got {}", op, p);
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);  // everything dropped (PyTorch returns zeros, not NaN from 0 * inf)
  // keep is drawn on x's device, one Philox word per element (the words mg::rand would use).
  Tensor keep = Tensor::empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  const std::uint64_t first_block = generator.reserve(static_cast<std::uint64_t>(x.numel()));
  kernels::dropout_mask(generator.seed(), first_block, p, keep);
  return mul(mul(x, keep), 1.0 / (1.0 - p));
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

}  // namespace mg

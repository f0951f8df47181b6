// dropout: zero each element with probability p, scale the survivors by 1 / (1 - p).
//
// Composed as (x * keep) * (1 / (1 - p)) with keep a 0/1 tensor in x's dtype: multiplying by 0 or 1
// is exact, so the result is rounded once, and the tape gives the backward g * keep / (1 - p).
// keep comes from a Philox generator: the same seed and offset give the same mask on any machine,
// and the generator's (seed, offset) is all a checkpoint needs to resume the same masks.
#include "autograd/check.h"
#include "autograd/ops.h"
#include "core/factory.h"

namespace mg {

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  const char* op = "mg::dropout";
  check::floating(op, x);
  MG_CHECK(p >= 0 && p <= 1, "{}: the drop probability must be in [0, 1], got {}", op, p);
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);  // everything dropped (PyTorch returns zeros, not NaN from 0 * inf)
  Tensor keep;
  {
    NoGradGuard no_grad;
    Tensor uniform = rand(x.shape(), generator);  // f32 in [0, 1)
    Tensor mask = Tensor::empty(x.shape(), {.dtype = DType::F32});
    const float* u = uniform.data<float>();
    float* m = mask.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) m[i] = u[i] >= p ? 1.0f : 0.0f;
    keep = mask.to(x.dtype());
  }
  return mul(mul(x, keep), 1.0 / (1.0 - p));
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

}  // namespace mg

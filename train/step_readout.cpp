#include "train/step_readout.h"

#include "autograd/ops.h"
#include "autograd/tape.h"

namespace mg::train {

StepReadout::StepReadout(std::int64_t read_every) : read_every_(read_every) {
  MG_CHECK(read_every >= 1, "train::StepReadout: read_every must be >= 1 (1 reads every step), got {}", read_every);
}

void StepReadout::push(std::int64_t step, double lr, const Tensor& loss, const Tensor& scale, const Tensor& found_inf) {
  MG_CHECK(loss.defined() && loss.numel() == 1 && loss.dtype() == DType::F32,
           "train::StepReadout::push: the loss must be one f32 element, got {} {}", loss.dtype(), loss.shape());
  MG_CHECK(scale.defined() == found_inf.defined(), "train::StepReadout::push: give both the scale and found_inf, or "
                                                   "neither (no scaler)");
  for (const Tensor& number : {scale, found_inf})
    MG_CHECK(!number.defined() ||
                 (number.numel() == 1 && number.dtype() == DType::F32 && number.device() == loss.device()),
             "train::StepReadout::push: the scale and found_inf must be one f32 element each on the loss's device "
             "({}), got {} {} on {}",
             loss.device(), number.dtype(), number.shape(), number.device());
  queued_.push_back({step, lr, loss, scale, found_inf});
}

std::vector<StepNumbers> StepReadout::read() {
  if (queued_.empty()) return {};
  NoGradGuard no_grad;
  std::vector<Tensor> numbers;  // each step's loss, then its scale and flag where it has them
  for (const Queued& q : queued_) {
    numbers.push_back(q.loss.reshape({1}));
    if (q.scale.defined()) {
      numbers.push_back(q.scale.reshape({1}));
      numbers.push_back(q.found_inf.reshape({1}));
    }
  }
  const std::vector<double> values = cat(numbers, 0).to_vector<double>();  // the one transfer
  std::vector<StepNumbers> steps;
  std::size_t next = 0;
  for (const Queued& q : queued_) {
    StepNumbers n{.step = q.step, .loss = values[next++], .lr = q.lr};
    if (q.scale.defined()) {
      n.scale = values[next++];
      n.skipped = values[next++] != 0.0;
    }
    steps.push_back(n);
  }
  queued_.clear();
  return steps;
}

}  // namespace mg::train

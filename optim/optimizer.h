// Optimizer: the base of SGD and Adam (and of amp::MasterWeights, which wraps one).
//
//   optim::SGD sgd(parameters, {.lr = 0.1, .momentum = 0.9});
//   sgd.zero_grad();  mg::backward(loss);  sgd.step();
//
// step() reads each parameter's .grad and updates the parameter in place, under NoGradGuard, with
// one fused kernel per parameter (kernels/optim.h): math in f32, rounded once on store, so an f16
// parameter (the pure recipes) loses updates smaller than half its ulp, and last_update() counts them.
// The learning rate of a step is lr * schedule(step_count()): a schedule is a function of the
// number of steps taken, so a step the GradScaler skips does not advance it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/optim.h"

namespace mg::optim {

class Optimizer {
 public:
  // parameters: distinct floating leaves that require grad. name: for messages ("optim::SGD").
  Optimizer(std::vector<Tensor> parameters, double lr, std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  // The tensors the model trains; step() reads their .grad.
  virtual const std::vector<Tensor>& parameters() const { return parameters_; }

  // One update of every parameter that has a .grad (the others are left alone), then
  // step_count() + 1. Each updated parameter's data version is bumped: a graph that saved it
  // before the step refuses to run backward.
  virtual void step();
  // Drops every parameter's .grad (the next backward starts fresh; PyTorch's set_to_none).
  virtual void zero_grad();
  virtual std::int64_t step_count() const { return step_count_; }

  // The learning rate the next step uses: lr * schedule(step_count()), or lr without a schedule.
  virtual double lr() const;
  virtual void set_lr(double lr);
  virtual void set_schedule(std::function<double(std::int64_t step)> factor);

  // The gradients step() will read: each parameter's .grad (amp::MasterWeights: the f32 master
  // gradients). After GradScaler::unscale_ they are the true gradients: clip these.
  virtual std::vector<Tensor> gradients() const;
  // The GradScaler's pass (amp/grad_scaler.h): multiplies every gradient step() will read by
  // `factor` in one fused pass and sets found_inf (one f32 element) to 1 if any result is inf or NaN.
  // f16 gradients cannot be unscaled in place (small values would underflow again): an mg::Error
  // that points to amp::MasterWeights.
  virtual void unscale_gradients(double factor, Tensor& found_inf);

  // Of the elements the last step meant to change, how many kept their value (lost updates).
  virtual kernels::UpdateCount last_update() const { return last_update_; }
  // Momentum buffers, moments: every tensor of optimizer state (empty until the first step).
  virtual std::vector<Tensor> state() const = 0;
  std::size_t state_bytes() const;

 protected:
  // Updates parameter `index` from its gradient with learning rate `lr`, adding to `count`.
  virtual void update(std::size_t index, Tensor& parameter, const Tensor& grad, double lr,
                      kernels::UpdateCount& count) = 0;

 private:
  std::vector<Tensor> parameters_;
  double lr_;
  std::string name_;
  std::function<double(std::int64_t)> schedule_;
  std::int64_t step_count_ = 0;
  kernels::UpdateCount last_update_;
};

}  // namespace mg::optim

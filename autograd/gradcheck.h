// gradcheck: compares the tape's gradients with central differences, in f64.
//
// fn maps the inputs to one output tensor of any shape. To check every output element with a
// single backward, gradcheck contracts the output with fixed random weights w in [-1, 1]:
//   L(x) = sum(w * fn(x))
// dL/dx from backward() is then compared, element by element, with
//   (L(x + h e_i) - L(x - h e_i)) / (2h)
// for every element i of every input that requires grad. The error of one element is
//   |got - expected| / max(1, |expected|)
// (relative for large gradients, absolute below 1), and the check passes when the largest error is
// at most `tolerance`. Inputs that require grad must be f64 CPU leaves; their .grad is restored
// afterwards. Like any backward, gradcheck clears this thread's tape.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mg {

struct GradcheckOptions {
  double step = 1e-6;  // h
  double tolerance = 1e-6;  // largest accepted error
  std::uint64_t seed = 0;  // for the weights w
};

struct GradcheckResult {
  bool passed = false;
  double max_error = 0.0;
  // One line per input, e.g.
  //   gradcheck tanh: input 0 (shape [3, 4]): worst element 7: expected 0.4199743, got 0.4199743, error 2.1e-11 (ok)
  std::string report;
};

GradcheckResult gradcheck(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace mg

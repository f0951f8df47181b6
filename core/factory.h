// Factories: the ways to make a tensor with values in it.
//
//   auto x = mg::randn({64, 784}, gen);                          // f32, N(0, 1)
//   auto w = mg::zeros({784, 256}, {.requires_grad = true});     // a parameter
//   auto y = mg::tensor({0, 3, 1}, {.dtype = DType::I32});       // labels
//   auto m = mg::from_vector({1, 2, 3, 4}, {2, 2});               // row-major values
//
// Random values are drawn in f32 (uniform: 24 random bits) and rounded to the requested dtype,
// so the same seed gives the same values in every dtype up to that rounding.
#pragma once

#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace mg {

Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
// The same shape, dtype and device as `like` (requires_grad off).
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);

// 0, 1, ..., end-1 and start, start+step, ... (< end for step > 0, > end for step < 0).
Tensor arange(double end, TensorOptions options = {});
Tensor arange(double start, double end, double step, TensorOptions options = {});

// Values in row-major order, rounded to the dtype. For i32 every value must be a whole number.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options = {});
// A 1-D tensor of the values, like torch::tensor({1, 2, 3}).
Tensor tensor(const std::vector<double>& values, TensorOptions options = {});

// U[0, 1) and U[low, high): never `high`, even after rounding to f16/bf16 (low < high required).
Tensor rand(const Shape& shape, Generator& generator, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor uniform(const Shape& shape, double low, double high, Generator& generator, TensorOptions options = {});
Tensor randn(const Shape& shape, Generator& generator, TensorOptions options = {});  // N(0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {});
// Integers uniform in [low, high); the dtype defaults to i32 (labels).
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator,
               TensorOptions options = {.dtype = DType::I32});

}  // namespace mg

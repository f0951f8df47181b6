#include "core/factory.h"

#include <cmath>
#include <numbers>

namespace mg {

namespace {

// Factories write values from the host, so for now they make CPU tensors only.
Tensor host_tensor(const Shape& shape, TensorOptions options, const char* op) {
  MG_CHECK(options.device.is_cpu(), "{}: filling a tensor on {} needs the CUDA backend; create it on the "
           "CPU and copy it", op, options.device);
  MG_CHECK(!options.requires_grad || is_floating(options.dtype),
           "{}: a {} tensor cannot require grad; only floating-point tensors are differentiable", op, options.dtype);
  return Tensor::empty(shape, options);
}

// Writes float values (computed once, in f32) into the tensor's dtype with round-to-nearest-even.
Tensor from_floats(const std::vector<float>& values, const Shape& shape, TensorOptions options, const char* op) {
  Tensor out = host_tensor(shape, options, op);
  convert(values.data(), DType::F32, out.data_ptr(), out.dtype(), out.numel());
  return out;
}

// 24 random bits as a float in [0, 1): every value is exactly representable in f32.
float unit_float(std::uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

// Every element set to `value` (rounded to the dtype); `op` names the factory in errors.
Tensor filled(const Shape& shape, double value, TensorOptions options, const char* op) {
  Tensor out = host_tensor(shape, options, op);
  visit_dtype(out.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    T stored = scalar_cast<T>(value);
    T* data = out.data<T>();
    for (std::int64_t i = 0; i < out.numel(); ++i) data[i] = stored;
  });
  return out;
}

}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions options) { return filled(shape, value, options, "mg::full"); }
Tensor zeros(const Shape& shape, TensorOptions options) { return filled(shape, 0.0, options, "mg::zeros"); }
Tensor ones(const Shape& shape, TensorOptions options) { return filled(shape, 1.0, options, "mg::ones"); }

Tensor zeros_like(const Tensor& like) { return full_like(like, 0.0); }
Tensor ones_like(const Tensor& like) { return full_like(like, 1.0); }
Tensor full_like(const Tensor& like, double value) {
  return full(like.shape(), value, {.dtype = like.dtype(), .device = like.device()});
}

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  MG_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "mg::arange: start {}, end {} and step {} must be finite, and step non-zero", start, end, step);
  auto count = static_cast<std::int64_t>(std::max(0.0, std::ceil((end - start) / step)));
  std::vector<double> values(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = start + static_cast<double>(i) * step;
  return from_vector(values, {count}, options);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  MG_CHECK(static_cast<std::int64_t>(values.size()) == numel(shape),
           "mg::from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape, numel(shape));
  if (options.dtype == DType::I32) {
    for (std::size_t i = 0; i < values.size(); ++i)
      MG_CHECK(values[i] == std::trunc(values[i]) && values[i] >= -2147483648.0 && values[i] <= 2147483647.0,
               "mg::from_vector: value {} at index {} is not a 32-bit integer, but the dtype is i32", values[i], i);
  }
  Tensor out = host_tensor(shape, options, "mg::from_vector");
  convert(values.data(), DType::F64, out.data_ptr(), out.dtype(), out.numel());
  return out;
}

Tensor from_vector(const std::vector<double>& values, TensorOptions options) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())}, options);
}

Tensor rand(const Shape& shape, Generator& generator, TensorOptions options) {
  return uniform(shape, 0.0, 1.0, generator, options);
}

Tensor rand(const Shape& shape, TensorOptions options) { return rand(shape, default_generator(), options); }

Tensor uniform(const Shape& shape, double low, double high, Generator& generator, TensorOptions options) {
  MG_CHECK(low <= high, "mg::uniform: low {} must not exceed high {}", low, high);
  auto n = static_cast<std::uint64_t>(numel(shape));
  std::uint64_t first = generator.reserve(n);
  std::vector<float> values(n);
  auto lo = static_cast<float>(low), width = static_cast<float>(high - low);
  for (std::uint64_t i = 0; i < n; ++i) values[i] = lo + width * unit_float(random_word(generator.seed(), first, i));
  return from_floats(values, shape, options, "mg::uniform");
}

Tensor randn(const Shape& shape, Generator& generator, TensorOptions options) {
  // Box-Muller: words (2p, 2p+1) give the pair p of normals, cos for the even element, sin for the odd.
  auto n = static_cast<std::uint64_t>(numel(shape));
  std::uint64_t pairs = (n + 1) / 2;
  std::uint64_t first = generator.reserve(2 * pairs);
  std::vector<float> values(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t pair = i / 2;
    // u1 in (0, 1] so the log is finite; u2 in [0, 1).
    double u1 = (static_cast<double>(random_word(generator.seed(), first, 2 * pair) >> 8) + 1.0) * 0x1p-24;
    double u2 = unit_float(random_word(generator.seed(), first, 2 * pair + 1));
    double radius = std::sqrt(-2.0 * std::log(u1));
    double angle = 2.0 * std::numbers::pi * u2;
    values[i] = static_cast<float>(radius * (i % 2 == 0 ? std::cos(angle) : std::sin(angle)));
  }
  return from_floats(values, shape, options, "mg::randn");
}

Tensor randn(const Shape& shape, TensorOptions options) { return randn(shape, default_generator(), options); }

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator, TensorOptions options) {
  MG_CHECK(low < high && high - low <= (std::int64_t{1} << 32),
           "mg::randint: needs low < high and a range of at most 2^32, got [{}, {})", low, high);
  auto n = static_cast<std::uint64_t>(numel(shape));
  std::uint64_t first = generator.reserve(n);
  auto range = static_cast<std::uint64_t>(high - low);
  std::vector<double> values(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    // Multiply-shift maps a 32-bit word onto [0, range) (Lemire); the bias is below 2^-32 * range.
    std::uint64_t r = (static_cast<std::uint64_t>(random_word(generator.seed(), first, i)) * range) >> 32;
    values[i] = static_cast<double>(low + static_cast<std::int64_t>(r));
  }
  return from_vector(values, shape, options);
}

}  // namespace mg

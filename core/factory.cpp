#include "core/factory.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/device_ops.h"
#include "core/philox.h"

namespace mg {

namespace {

// Everything about the request is checked before any random number is drawn, so a bad call leaves
// the generator as it was.
void check_request(const Shape& shape, TensorOptions options, const char* op) {
  check_shape(shape, op);
  check_device_available(options.device, op);
  MG_CHECK(options.device.is_cpu() || options.dtype != DType::F64, "{}: f64 lives on the CPU only; use f32 on {}", op,
           options.device);
  MG_CHECK(!options.requires_grad || is_floating(options.dtype),
           "{}: a {} tensor cannot require grad; only floating-point tensors are differentiable", op, options.dtype);
}

// Values are computed on the host, into a CPU tensor; one for a GPU is that tensor's copy (random
// numbers are the same bits on every device). `options` are the caller's.
TensorOptions on_cpu(TensorOptions options) { return {.dtype = options.dtype, .device = Device::cpu()}; }

Tensor place(const Tensor& values, TensorOptions options, const char* op) {
  if (options.device.is_cpu()) {
    if (options.requires_grad) Tensor(values).set_requires_grad(true);
    return values;
  }
  Tensor out = Tensor::empty(values.shape(), options);
  copy_bytes(values.data_ptr(), Device::cpu(), out.data_ptr(), options.device, values.nbytes(), op);
  return out;
}

// An integer tensor (i32, i64, u8, bool) holds whole numbers in its range; anything else is refused
// rather than truncated or saturated. The range from the row: [-(max + 1), max] with a sign, [0, max]
// without (i64's max + 1 is 2^63 exactly as a double, the first value past it).
void check_integer(double value, std::size_t index, DType dtype, const char* op) {
  const DTypeInfo d = dtype_info(dtype);
  const double past_max = d.max + 1.0, lowest = d.has_sign ? -past_max : 0.0;
  MG_CHECK(value == std::trunc(value) && value >= lowest && value < past_max,
           "{}: value {} at index {} is not a {}-bit integer{}, but the dtype is {}", op, value, index, d.bits,
           d.has_sign ? "" : " >= 0", dtype);
}

// The values (row-major), rounded to the dtype once.
Tensor from_doubles(const std::vector<double>& values, const Shape& shape, TensorOptions options, const char* op) {
  check_request(shape, options, op);
  MG_CHECK(static_cast<std::int64_t>(values.size()) == numel(shape), "{}: {} values do not fill shape {} ({} elements)",
           op, values.size(), shape, numel(shape));
  if (is_integer(options.dtype))
    for (std::size_t i = 0; i < values.size(); ++i) check_integer(values[i], i, options.dtype, op);
  Tensor out = Tensor::empty(shape, on_cpu(options));
  convert(values.data(), DType::F64, out.data_ptr(), out.dtype(), out.numel());
  return place(out, options, op);
}

// Every element set to `value` (rounded to the dtype).
Tensor filled(const Shape& shape, double value, TensorOptions options, const char* op) {
  check_request(shape, options, op);
  if (is_integer(options.dtype)) check_integer(value, 0, options.dtype, op);
  Tensor out = Tensor::empty(shape, options);
  visit_dtype(out.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const T stored = scalar_cast<T>(value);
    if constexpr (sizeof(T) <= sizeof(std::uint32_t)) {  // f64 never lives on a GPU (check_request)
      if (out.device().is_cuda()) {  // the backend's fill kernel, with the element's bits as its pattern
        std::uint32_t pattern = 0;
        std::memcpy(&pattern, &stored, sizeof(T));
        device_ops(out.device(), op).fill(out.data_ptr(), out.device(), out.dtype(), pattern, out.numel());
        return;
      }
    }
    std::fill_n(out.data<T>(), out.numel(), stored);  // numel() once: a call per element cost 14% of a GPT step
  });
  return out;
}

using philox::unit_float;

// The largest value of T below x (one step toward -inf).
template <class T>
T next_below(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  } else {  // f16 and bf16: sign-magnitude bit patterns of 16 bits
    auto bits = std::bit_cast<std::uint16_t>(x);
    if ((bits & 0x7FFF) == 0) return std::bit_cast<T>(std::uint16_t{0x8001});  // below +-0: -smallest subnormal
    return std::bit_cast<T>(static_cast<std::uint16_t>((bits & 0x8000) ? bits + 1 : bits - 1));
  }
}

// Rounding a value just below `high` to a short dtype can give `high` itself; such values step
// down once, so draws stay in [low, high) in every dtype.
void keep_below(Tensor& t, double high) {
  visit_floating(t.dtype(), "mg::uniform", [&](auto zero) {
    using T = decltype(zero);
    T* data = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      if (static_cast<double>(data[i]) >= high) data[i] = next_below(data[i]);
  });
}

}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions options) {
  return filled(shape, value, options, "mg::full");
}
Tensor zeros(const Shape& shape, TensorOptions options) { return filled(shape, 0.0, options, "mg::zeros"); }
Tensor ones(const Shape& shape, TensorOptions options) { return filled(shape, 1.0, options, "mg::ones"); }

Tensor zeros_like(const Tensor& like) { return full_like(like, 0.0); }
Tensor ones_like(const Tensor& like) { return full_like(like, 1.0); }
Tensor full_like(const Tensor& like, double value) {
  MG_CHECK(like.defined(), "mg::full_like: the tensor to copy the shape from is undefined");
  return filled(like.shape(), value, {.dtype = like.dtype(), .device = like.device()}, "mg::full_like");
}

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  MG_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "mg::arange: start {}, end {} and step {} must be finite, and step non-zero", start, end, step);
  const double steps = std::ceil((end - start) / step);
  MG_CHECK(steps <= static_cast<double>(std::int64_t{1} << 40),
           "mg::arange: [{}, {}) in steps of {} has {} elements, too many for memory", start, end, step, steps);
  auto count = static_cast<std::int64_t>(std::max(0.0, steps));
  std::vector<double> values(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = start + static_cast<double>(i) * step;
  return from_doubles(values, {count}, options, "mg::arange");
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  return from_doubles(values, shape, options, "mg::from_vector");
}

Tensor tensor(const std::vector<double>& values, TensorOptions options) {
  return from_doubles(values, {static_cast<std::int64_t>(values.size())}, options, "mg::tensor");
}

Tensor rand(const Shape& shape, Generator& generator, TensorOptions options) {
  return uniform(shape, 0.0, 1.0, generator, options);
}

Tensor rand(const Shape& shape, TensorOptions options) { return rand(shape, default_generator(), options); }

Tensor uniform(const Shape& shape, double low, double high, Generator& generator, TensorOptions options) {
  const char* op = "mg::uniform";
  check_request(shape, options, op);
  MG_CHECK(is_floating(options.dtype), "{}: needs a floating-point dtype, got {} (use mg::randint)", op, options.dtype);
  MG_CHECK(std::isfinite(low) && std::isfinite(high) && low < high, "{}: needs finite low < high, got [{}, {})", op,
           low, high);
  const auto n = static_cast<std::uint64_t>(numel(shape));
  const std::uint64_t first = generator.reserve(n);
  std::vector<float> values(n);
  const auto lo = static_cast<float>(low), width = static_cast<float>(high - low);
  for (std::uint64_t i = 0; i < n; ++i) values[i] = lo + width * unit_float(random_word(generator.seed(), first, i));
  Tensor out = Tensor::empty(shape, on_cpu(options));
  convert(values.data(), DType::F32, out.data_ptr(), out.dtype(), out.numel());
  keep_below(out, high);
  return place(out, options, op);
}

Tensor randn(const Shape& shape, Generator& generator, TensorOptions options) {
  const char* op = "mg::randn";
  check_request(shape, options, op);
  MG_CHECK(is_floating(options.dtype), "{}: needs a floating-point dtype, got {}", op, options.dtype);
  // Box-Muller: words (2p, 2p+1) give the pair p of normals, cos for the even element, sin for the odd.
  const auto n = static_cast<std::uint64_t>(numel(shape));
  const std::uint64_t pairs = (n + 1) / 2;
  const std::uint64_t first = generator.reserve(2 * pairs);
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
  Tensor out = Tensor::empty(shape, on_cpu(options));
  convert(values.data(), DType::F32, out.data_ptr(), out.dtype(), out.numel());
  return place(out, options, op);
}

Tensor randn(const Shape& shape, TensorOptions options) { return randn(shape, default_generator(), options); }

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator, TensorOptions options) {
  const char* op = "mg::randint";
  check_request(shape, options, op);
  MG_CHECK(low < high && high - low <= (std::int64_t{1} << 32),
           "{}: needs low < high and a range of at most 2^32, got [{}, {})", op, low, high);
  MG_CHECK(options.dtype != DType::I32 || (low >= -2147483648LL && high - 1 <= 2147483647LL),
           "{}: [{}, {}) does not fit in i32", op, low, high);
  const auto n = static_cast<std::uint64_t>(numel(shape));
  const std::uint64_t first = generator.reserve(n);
  const auto range = static_cast<std::uint64_t>(high - low);
  std::vector<double> values(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    // Multiply-shift maps a 32-bit word onto [0, range) (Lemire); the bias is below 2^-32 * range.
    std::uint64_t r = (static_cast<std::uint64_t>(random_word(generator.seed(), first, i)) * range) >> 32;
    values[i] = static_cast<double>(low + static_cast<std::int64_t>(r));
  }
  return from_doubles(values, shape, options, op);
}

}  // namespace mg

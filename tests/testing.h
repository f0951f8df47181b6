// Helpers shared by the test suites.
//
// How to add a test: pick the suite of the module (tests/test_<module>.cpp), write a TEST_CASE that
// builds inputs with the factories, and check
//   - forward values against hand-computed numbers (check_values) or an f64 reference,
//   - gradients with check_gradients (central differences in f64, error <= 1e-6),
//   - f16/bf16 results within tolerance(dtype, factor): factor * eps of the dtype, with the factor
//     derived from the computation (e.g. 1 rounding of the result: 0.5 ulp),
//   - bad input with check_error(fn, "mg::op"), which also asserts the message names the op.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad.h"

namespace mg::testing {

// True when the suite runs with a reduced set of sizes (MG_TEST_REDUCED set): the GPU suites under
// the sanitizers on the CUDA emulator, where a kernel runs about ten times slower than optimised.
// A case that thins its sweep says what it keeps.
inline bool reduced_sizes() {
  const char* reduced = std::getenv("MG_TEST_REDUCED");
  return reduced != nullptr && *reduced != '\0' && *reduced != '0';
}

// True when a CUDA device is visible. Otherwise the test case reports that it is skipped, and why
// (no GPU, and not the CUDA emulator build), and returns: `if (!have_gpu()) return;`.
inline bool have_gpu() {
  if (cuda_device_count() > 0) return true;
  MESSAGE("skipped: no CUDA device visible; "
          << (built_with_cuda() ? "this build has CUDA" : "this build has no CUDA backend"));
  return false;
}

// The relative tolerance for `factor` units of the dtype's eps (f16: 2^-10, bf16: 2^-7).
inline double tolerance(DType dtype, double factor) { return factor * dtype_eps(dtype); }

// An f64 CPU tensor with the given values (a leaf that requires grad unless told otherwise).
inline Tensor f64(const std::vector<double>& values, const Shape& shape, bool requires_grad = true) {
  return from_vector(values, shape, {.dtype = DType::F64, .requires_grad = requires_grad});
}

// Uniform values in [low, high) as an f64 leaf; each seed gives its own values.
inline Tensor random_f64(const Shape& shape, double low, double high, std::uint64_t seed, bool requires_grad = true) {
  Generator generator(seed);
  Tensor t = uniform(shape, low, high, generator, {.dtype = DType::F64});
  return t.set_requires_grad(requires_grad);
}

// Uniform values in [low, high) in `dtype`: drawn in f32 and cast outside any autocast region.
inline Tensor uniform_in(const Shape& shape, DType dtype, std::uint64_t seed, double low = 0.5, double high = 1.5) {
  Generator generator(seed);
  return uniform(shape, low, high, generator, {.dtype = DType::F32}).to(dtype);
}

// Every value of `got` within atol + rtol * |expected| of `expected` (same count).
inline void check_values(const Tensor& got, const std::vector<double>& expected, double rtol = 1e-12,
                         double atol = 1e-12) {
  std::vector<double> values = got.to_vector<double>();
  REQUIRE(values.size() == expected.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", expected " << expected[i]);
    if (std::isnan(expected[i]))
      CHECK(std::isnan(values[i]));
    else if (std::isinf(expected[i]))
      CHECK(values[i] == expected[i]);
    else
      CHECK(std::fabs(values[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]));
  }
}

// Same, against another tensor (compared as doubles).
inline void check_close(const Tensor& got, const Tensor& expected, double rtol, double atol = 0.0) {
  CHECK(got.shape() == expected.shape());
  check_values(got, expected.to_vector<double>(), rtol, atol);
}

// gradcheck with the default f64 settings (h = 1e-6, error <= 1e-6); the report is printed on failure.
inline void check_gradients(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                            const std::vector<Tensor>& inputs) {
  GradcheckResult result = gradcheck(name, fn, inputs);
  INFO(result.report);
  CHECK(result.passed);
}

// The bytes of each tensor: two runs that leave the same bytes took the same steps, bit for bit.
inline std::vector<std::vector<unsigned char>> bytes_of(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<unsigned char>> all;
  for (const Tensor& t : tensors) all.push_back(t.host_bytes("test"));
  return all;
}

// x rounded to f16 once, as a double.
// The values of a state dict of scalars (the GradScaler's), to compare two of them.
inline std::map<std::string, double> scalars_of(const StateDict& state) {
  std::map<std::string, double> values;
  for (const auto& [key, value] : state) values[key] = value.item();
  return values;
}

inline double to_f16(double x) { return from_vector({x}, {1}, {.dtype = DType::F16}).item(); }

// fn must throw mg::Error whose message contains `needle` (usually the op's name, "mg::add").
template <class Fn>
void check_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL("no mg::Error was thrown; expected one mentioning '" << needle << "'");
  } catch (const Error& error) {
    INFO("message: " << std::string(error.what()));
    CHECK(std::string(error.what()).find(needle) != std::string::npos);
  }
}

}  // namespace mg::testing

// The Hadamard transform (mg::hadamard, autograd/ops.h): the Sylvester matrix and its normalisation,
// orthogonality with and without random signs, its own inverse up to scale, signs from the seed, norms
// kept, a product of two transformed operands equal to the product of the originals (what FP4's weight
// gradient relies on), gradients by central differences, and the errors.
#include <cmath>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// a [n, n] . b [n, n] in f64.
std::vector<double> square_product(const std::vector<double>& a, const std::vector<double>& b, std::int64_t n,
                                   bool transpose_b) {
  std::vector<double> c(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < n; ++k)
        c[static_cast<std::size_t>(i * n + j)] += a[static_cast<std::size_t>(i * n + k)] *
                                                  b[static_cast<std::size_t>(transpose_b ? j * n + k : k * n + j)];
  return c;
}

std::vector<double> identity(std::int64_t n) {
  std::vector<double> id(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) id[static_cast<std::size_t>(i * n + i)] = 1.0;
  return id;
}

}  // namespace

TEST_CASE("hadamard_matrix: Sylvester's H / sqrt(n), its own inverse, orthogonal with random signs") {
  for (const std::int64_t n : {1, 2, 4, 16, 64}) {
    CAPTURE(n);
    const std::vector<double> m = hadamard_matrix({.block = n}).to_vector<double>();
    // Entries +-1/sqrt(n), the first row and column all positive, H[r][c] = (-1)^popcount(r & c).
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < n; ++c) {
        const double sign = (__builtin_popcountll(static_cast<unsigned long long>(r & c)) % 2) ? -1.0 : 1.0;
        CHECK(m[static_cast<std::size_t>(r * n + c)] == doctest::Approx(sign / std::sqrt(double(n))).epsilon(1e-7));
      }
    // Without signs, M is symmetric and M M = I: the transform is its own inverse (H H = n I).
    check_values(from_vector(square_product(m, m, n, false), {n, n}), identity(n), 0.0, 1e-6);
    // With random signs, M M^T = I, and the inverse option gives M^T.
    const std::vector<double> s = hadamard_matrix({.block = n, .random_signs = true, .seed = 7}).to_vector<double>();
    check_values(from_vector(square_product(s, s, n, true), {n, n}), identity(n), 0.0, 1e-6);
    const std::vector<double> inverse =
        hadamard_matrix({.block = n, .random_signs = true, .seed = 7, .inverse = true}).to_vector<double>();
    check_values(from_vector(square_product(s, inverse, n, false), {n, n}), identity(n), 0.0, 1e-6);
  }
  // For 16 the entries are +-1/4 exactly and M M^T is exactly I.
  const std::vector<double> m16 = hadamard_matrix({.random_signs = true, .seed = 3}).to_vector<double>();
  CHECK(square_product(m16, m16, 16, true) == identity(16));
}

TEST_CASE("hadamard: signs come from the seed, and every seed's are a mix of both") {
  const Tensor a = hadamard_matrix({.random_signs = true, .seed = 1});
  CHECK(a.to_vector<double>() == hadamard_matrix({.random_signs = true, .seed = 1}).to_vector<double>());
  CHECK(a.to_vector<double>() != hadamard_matrix({.random_signs = true, .seed = 2}).to_vector<double>());
  CHECK(a.to_vector<double>() != hadamard_matrix({}).to_vector<double>());
  // Row r of diag(s) H has the sign s_r in column 0 (H's first column is all +1): count the -1s.
  int negative = 0;
  const std::vector<double> m = hadamard_matrix({.block = 256, .random_signs = true, .seed = 11}).to_vector<double>();
  for (std::int64_t r = 0; r < 256; ++r) negative += m[static_cast<std::size_t>(r * 256)] < 0.0;
  CHECK(negative > 96);  // Binomial(256, 1/2): mean 128, standard deviation 8
  CHECK(negative < 160);
}

TEST_CASE("hadamard: norms are kept, the inverse undoes it, and transformed products equal the originals") {
  Generator generator(5);
  const Tensor x = randn({6, 48}, generator), y = randn({5, 48}, generator);
  const HadamardOptions options{.random_signs = true, .seed = 42};
  const Tensor tx = hadamard(x, options), ty = hadamard(y, options);
  CHECK(tx.shape() == x.shape());
  // Each block of 16 keeps its norm.
  const Tensor block_norms = sum(mul(reshape(x, {6, 3, 16}), reshape(x, {6, 3, 16})), 2);
  check_close(sum(mul(reshape(tx, {6, 3, 16}), reshape(tx, {6, 3, 16})), 2), block_norms, 1e-5);
  // M^T undoes M.
  HadamardOptions inverse = options;
  inverse.inverse = true;
  check_close(hadamard(tx, inverse), x, 1e-5, 1e-6);
  // (x M)(y M)^T = x y^T: the weight gradient's product is unchanged.
  check_close(matmul(tx, transpose(ty, 0, 1)), matmul(x, transpose(y, 0, 1)), 1e-4, 1e-4);
  // bf16 in, bf16 out; leading dimensions kept.
  CHECK(hadamard(reshape(x, {2, 3, 48}).to(DType::BF16)).dtype() == DType::BF16);
  CHECK(hadamard(reshape(x, {2, 3, 48})).shape() == Shape{2, 3, 48});
}

TEST_CASE("hadamard: gradients by central differences in f64") {
  const Tensor x = random_f64({3, 32}, -1.0, 1.0, 8);
  check_gradients("hadamard",
                  [](const std::vector<Tensor>& in) { return hadamard(in[0], {.random_signs = true, .seed = 4}); },
                  {x});
  check_gradients("hadamard block 8", [](const std::vector<Tensor>& in) { return hadamard(in[0], {.block = 8}); }, {x});
}

TEST_CASE("hadamard: bad input is refused with the op's name") {
  check_error([] { (void)hadamard(ones({2, 20})); }, "pad x first");
  check_error([] { (void)hadamard(ones({2, 24}), {.block = 12}); }, "power of two");
  check_error([] { (void)hadamard(ones({2, 512}), {.block = 512}); }, "mg::hadamard");
  check_error([] { (void)hadamard(ones({2, 16}, {.dtype = DType::I32})); }, "floating");
  check_error([] { (void)hadamard_matrix({.block = 0}); }, "power of two");
}

// embedding (autograd/embedding.cpp, kernels/cpu/index.cpp): rows of a weight [num, dim] picked by
// i32 indices of any shape. Forward values against hand-picked rows (bit-exact in f16/bf16), the
// backward that sums the rows of repeated indices (by hand and by f64 gradcheck), f16/bf16 weight
// gradients that accumulate in f32 (counts a running f16/bf16 sum could never reach), and bad
// indices, dtypes and shapes throwing errors that name mg::embedding and the offending value;
// padding_idx (no gradient for its row) in the op and in nn::Embedding (a zero row at the start).
#include <algorithm>
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

Tensor indices_of(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

// `count` copies of index `row`, then `count2` copies of index `row2`.
Tensor repeated(std::size_t count, int row, std::size_t count2, int row2) {
  std::vector<double> values(count, row);
  values.insert(values.end(), count2, row2);
  return tensor(values, {.dtype = DType::I32});
}

}  // namespace

TEST_CASE("embedding: forward picks rows for indices of any shape") {
  Tensor w = arange(12).reshape({4, 3});  // row r is [3r, 3r+1, 3r+2]
  Tensor e = embedding(w, indices_of({2, 0, 3}, {3}));
  CHECK(e.shape() == Shape{3, 3});
  CHECK(e.dtype() == DType::F32);
  check_values(e, {6, 7, 8, 0, 1, 2, 9, 10, 11});
  Tensor e2 = embedding(w, indices_of({1, 1, 3, 0}, {2, 2}));
  CHECK(e2.shape() == Shape{2, 2, 3});
  check_values(e2, {3, 4, 5, 3, 4, 5, 9, 10, 11, 0, 1, 2});
  Tensor scalar = embedding(w, indices_of({2}, {}));
  CHECK(scalar.shape() == Shape{3});
  check_values(scalar, {6, 7, 8});
  CHECK(embedding(w, indices_of({}, {0})).shape() == Shape{0, 3});
}

TEST_CASE("embedding: f16 and bf16 rows are copied bit-exactly") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    Generator generator(1);
    Tensor w = uniform({5, 4}, -3, 3, generator).to(dtype);
    std::vector<double> wv = w.to_vector<double>(), expected;
    for (std::size_t row : {4u, 0u, 4u, 2u})
      for (std::size_t j = 0; j < 4; ++j) expected.push_back(wv[row * 4 + j]);
    Tensor e = embedding(w, indices_of({4, 0, 4, 2}, {4}));
    CHECK(e.dtype() == dtype);
    check_values(e, expected, 0, 0);
  }
}

TEST_CASE("embedding: backward sums the rows of repeated indices") {
  Tensor w = random_f64({4, 2}, -1, 1, 1);
  Tensor g = f64({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, false);
  backward(sum(mul(embedding(w, indices_of({1, 3, 1, 1}, {4})), g)));
  // Row 1 gets output rows 0, 2 and 3; row 3 gets row 1; rows 0 and 2 are never used.
  check_values(w.grad(), {0, 0, 13, 16, 0, 0, 3, 4});
  Tensor idx = indices_of({0, 2, 0, 2, 2, 1}, {2, 3});
  check_gradients("embedding repeated indices", [&](const std::vector<Tensor>& in) { return embedding(in[0], idx); },
                  {random_f64({3, 4}, -1, 1, 2)});
  check_gradients("embedding inside an expression",
                  [&](const std::vector<Tensor>& in) { return tanh(mul(embedding(in[0], idx), in[1])); },
                  {random_f64({3, 4}, -1, 1, 3), random_f64({4}, -1, 1, 4)});
}

TEST_CASE("embedding: f16 and bf16 weight gradients accumulate in f32") {
  // Each occurrence adds a gradient of 1.0 to its row. A running f16 sum stops at 2048 (2048 + 1
  // rounds back to 2048), a bf16 one at 256; summed in f32 and rounded once, the counts below come
  // out exactly (3000, 1000 and 4096 are representable in the weight's dtype).
  struct Case {
    DType dtype;
    std::size_t first;
  };
  for (Case c : {Case{DType::F16, 3000}, Case{DType::BF16, 1000}}) {
    INFO("dtype " << dtype_name(c.dtype));
    Tensor w = zeros({3, 2}, {.dtype = c.dtype, .requires_grad = true});
    backward(sum(embedding(w, repeated(c.first, 0, 4096, 2))));
    CHECK(w.grad().dtype() == c.dtype);
    check_values(w.grad(), {static_cast<double>(c.first), static_cast<double>(c.first), 0, 0, 4096, 4096}, 0, 0);
  }
}

TEST_CASE("embedding: bad indices, dtypes and shapes") {
  Tensor w = ones({4, 3});
  check_error(
      [&] {
        embedding(w, indices_of({0, 4}, {2}));
      },
      "mg::embedding: index 4 at position 1 is out of range for 4 embeddings");
  check_error([&] { embedding(w, indices_of({-1}, {1})); }, "mg::embedding: index -1 at position 0");
  check_error([&] { embedding(w, tensor({0, 1})); }, "mg::embedding: indices must be i32 or i64, got f32");
  check_error([] { embedding(ones({4}), indices_of({0}, {1})); },
              "mg::embedding: the weight must be [num_embeddings, dim]");
  check_error([] { embedding(ones({4, 3, 2}), indices_of({0}, {1})); }, "mg::embedding: the weight must be");
  check_error(
      [] {
        embedding(from_vector({1, 2}, {1, 2}, {.dtype = DType::I32}), indices_of({0}, {1}));
      },
      "mg::embedding: needs a floating-point tensor");
  // The check runs before anything is computed or recorded: the tape does not grow.
  Tensor p = ones({2, 2}, {.requires_grad = true});
  const std::size_t nodes = tape_size();
  check_error([&] { embedding(p, indices_of({2}, {1})); }, "mg::embedding: index 2");
  CHECK(tape_size() == nodes);
}

TEST_CASE("embedding: padding_idx is looked up but gets no gradient, as PyTorch's") {
  Tensor w = random_f64({4, 2}, -1, 1, 5);
  const std::vector<double> rows = w.to_vector<double>();
  Tensor e = embedding(w, indices_of({1, 0, 1, 3}, {4}), 1);
  check_values(e, {rows[2], rows[3], rows[0], rows[1], rows[2], rows[3], rows[6], rows[7]}, 0, 0);
  backward(sum(e));
  check_values(w.grad(), {1, 1, 0, 0, 0, 0, 1, 1}, 0, 0);  // row 1 was used twice, and gets 0
  // Negative: from the end (-1 is row 3); the f16 path and a padding row never used.
  Tensor h = ones({4, 2}, {.dtype = DType::F16, .requires_grad = true});
  backward(sum(embedding(h, indices_of({3, 3, 0}, {3}), -1)));
  CHECK(h.grad().dtype() == DType::F16);
  check_values(h.grad(), {1, 1, 0, 0, 0, 0, 0, 0}, 0, 0);
  // The other rows' gradients are those without padding_idx (which gradcheck verifies above).
  const Tensor idx = indices_of({0, 2, 2, 1}, {2, 2}), upstream = random_f64({2, 2, 4}, -1, 1, 6, false);
  Tensor padded = random_f64({3, 4}, -1, 1, 7), plain = padded.detach().clone().set_requires_grad(true);
  backward(sum(mul(embedding(padded, idx, 2), upstream)));
  backward(sum(mul(embedding(plain, idx), upstream)));
  std::vector<double> expected = plain.grad().to_vector<double>();
  std::fill(expected.begin() + 8, expected.end(), 0.0);  // row 2
  check_values(padded.grad(), expected, 0, 0);
  check_error(
      [] {
        embedding(ones({4, 3}), indices_of({0}, {1}), 4);
      },
      "mg::embedding: padding_idx 4 is out of range for 4 embeddings (valid: -4..3");
  check_error([] { embedding(ones({4, 3}), indices_of({0}, {1}), -5); }, "mg::embedding: padding_idx -5");
}

TEST_CASE("nn::Embedding: padding_idx starts as a zero row and stays without gradient") {
  Generator generator(3);
  nn::Embedding plain(5, 3, generator);
  Generator same_seed(3);
  nn::Embedding padded(5, 3, {.padding_idx = -2}, same_seed);  // row 3
  CHECK(padded.type_name() == "Embedding(5, 3, padding_idx=3)");
  CHECK(plain.type_name() == "Embedding(5, 3)");
  const std::vector<double> before = plain.weight.to_vector<double>(), rows = padded.weight.to_vector<double>();
  for (std::size_t i = 0; i < before.size(); ++i) {
    INFO("element " << i);
    CHECK(rows[i] == (i / 3 == 3 ? 0.0 : before[i]));  // the same draws, with row 3 zeroed
  }
  backward(sum(padded(indices_of({3, 1, 3}, {3}))));
  check_values(padded.weight.grad(), {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0);
  check_error([] { nn::Embedding(5, 3, {.padding_idx = 5}); }, "nn::Embedding: padding_idx 5 is out of range");
}

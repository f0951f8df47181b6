// Shape ops (autograd/shape_ops.cpp, autograd/tensor_methods.cpp): reshape (with -1; a view),
// transpose, permute, cat (dim 0 and a middle dim), stack, slice (a view along dim 0, a copy along
// other dims, Python-style negative and clamped bounds), clone, Tensor::slice and Tensor::copy_
// (which needs NoGradGuard on a tensor that requires grad). Values against hand-computed numbers
// and index loops, storage sharing, f64 gradchecks, i32 tensors moved exactly, and bad input errors.
#include <vector>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// i32 values that an f32 round trip would change (2^24 + 1) or that sit at the ends of the range.
const std::vector<double> kBigInts = {16777217, -2147483647, 2147483647, 7, -16777219, 0};
// kBigInts as [3, 2], transposed to [2, 3].
const std::vector<double> kBigIntsTransposed = {16777217, 2147483647, -16777219, -2147483647, 7, 0};

Tensor i32(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, {.dtype = DType::I32});
}

}  // namespace

TEST_CASE("reshape: -1 inference, a view that shares storage") {
  Tensor x = arange(6);
  Tensor y = reshape(x, {2, -1});
  CHECK(y.shape() == Shape{2, 3});
  check_values(y, {0, 1, 2, 3, 4, 5});
  CHECK(y.shares_storage_with(x));
  CHECK(reshape(x, {-1}).shape() == Shape{6});
  CHECK(reshape(x, {3, -1, 1}).shape() == Shape{3, 2, 1});
  CHECK(x.reshape({-1, 2}).shape() == Shape{3, 2});
  CHECK(reshape(from_vector({7}, Shape{}), {1, 1}).shape() == Shape{1, 1});
  CHECK(reshape(zeros({0, 3}), {3, -1}).shape() == Shape{3, 0});
  y.copy_(from_vector({6, 5, 4, 3, 2, 1}, {2, 3}));  // a write through the view shows in x
  check_values(x, {6, 5, 4, 3, 2, 1});
  Tensor ints = reshape(i32(kBigInts, {6}), {3, 2});
  CHECK(ints.dtype() == DType::I32);
  check_values(ints, kBigInts, 0, 0);
}

TEST_CASE("reshape: gradcheck and bad shapes") {
  check_gradients("reshape [2,3]->[3,2]",
                  [](const std::vector<Tensor>& in) {
                    return reshape(in[0], {3, 2});
                  },
                  {random_f64({2, 3}, -1, 1, 1)});
  check_gradients("reshape [2,3,4]->[-1]", [](const std::vector<Tensor>& in) { return in[0].reshape({-1}); },
                  {random_f64({2, 3, 4}, -1, 1, 2)});
  Tensor x = arange(6);
  check_error([&] { reshape(x, {-1, -1}); }, "mg::reshape: invalid size -1 in shape [-1, -1]");
  check_error([&] { reshape(x, {-2, 3}); }, "mg::reshape: invalid size -2");
  check_error([&] { reshape(x, {4, -1}); }, "mg::reshape: cannot infer the -1 in [4, -1] for 6 elements");
  check_error([&] { reshape(x, {4}); }, "mg::reshape: shape [4] has 4 elements but the tensor [6] has 6");
  check_error([&] { x.reshape({2, 2}); }, "mg::reshape");
}

TEST_CASE("transpose: a copy with two dims swapped") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = transpose(x, 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  check_values(t, {1, 4, 2, 5, 3, 6});
  CHECK_FALSE(t.shares_storage_with(x));
  check_values(transpose(x, -1, -2), {1, 4, 2, 5, 3, 6});
  check_values(transpose(x, 1, 1), {1, 2, 3, 4, 5, 6});
  // [2,3,4] with dims 0 and 2 swapped: out[i,j,k] = x[k,j,i].
  Tensor y = random_f64({2, 3, 4}, -1, 1, 1, false);
  std::vector<double> v = y.to_vector<double>(), expected;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 2; ++k) expected.push_back(v[k * 12 + j * 4 + i]);
  Tensor yt = transpose(y, 0, 2);
  CHECK(yt.shape() == Shape{4, 3, 2});
  check_values(yt, expected, 0, 0);
  check_gradients("transpose 0 2", [](const std::vector<Tensor>& in) { return transpose(in[0], 0, 2); },
                  {random_f64({2, 3, 4}, -1, 1, 2)});
  check_gradients("transpose -1 1", [](const std::vector<Tensor>& in) { return transpose(in[0], -1, 1); },
                  {random_f64({2, 3, 4}, -1, 1, 3)});
  check_values(transpose(i32(kBigInts, {3, 2}), 0, 1), kBigIntsTransposed, 0, 0);
  check_error([&] { transpose(x, 0, 2); }, "mg::transpose: dim 2 is out of range");
}

TEST_CASE("permute: out dim d is x dim dims[d]") {
  Tensor x = random_f64({2, 3, 4}, -1, 1, 1, false);
  std::vector<double> v = x.to_vector<double>(), expected, rows_kept;
  for (std::size_t a = 0; a < 4; ++a)  // {2, 0, 1}: out[a,b,c] = x[b,c,a]
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 3; ++c) expected.push_back(v[b * 12 + c * 4 + a]);
  for (std::size_t a = 0; a < 3; ++a)  // {1, 0, 2}: out[a,b,c] = x[b,a,c], the last dim stays last
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 4; ++c) rows_kept.push_back(v[b * 12 + a * 4 + c]);
  Tensor p = permute(x, {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  check_values(p, expected, 0, 0);
  check_values(permute(x, {-1, 0, 1}), expected, 0, 0);
  CHECK(permute(x, {1, 0, 2}).shape() == Shape{3, 2, 4});
  check_values(permute(x, {1, 0, 2}), rows_kept, 0, 0);
  check_values(permute(x, {0, 1, 2}), v, 0, 0);
  check_gradients("permute 2 0 1",
                  [](const std::vector<Tensor>& in) {
                    return permute(in[0], {2, 0, 1});
                  },
                  {random_f64({2, 3, 4}, -1, 1, 2)});
  check_gradients("permute 1 0 2",
                  [](const std::vector<Tensor>& in) {
                    return permute(in[0], {1, 0, 2});
                  },
                  {random_f64({2, 3, 4}, -1, 1, 3)});
  check_values(permute(i32(kBigInts, {1, 3, 2}), {2, 0, 1}), kBigIntsTransposed, 0, 0);
  check_error([&] { permute(x, {0, 1}); }, "mg::permute: 2 dims given for a tensor with shape [2, 3, 4]");
  check_error([&] { permute(x, {0, 0, 1}); }, "mg::permute: dims [0, 0, 1] repeat a dim");
  check_error([&] { permute(x, {0, 1, 3}); }, "mg::permute: dim 3 is out of range");
}

TEST_CASE("cat: dim 0, a middle dim and the last dim") {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2}), b = from_vector({5, 6}, {1, 2});
  Tensor rows = cat({a, b}, 0);
  CHECK(rows.shape() == Shape{3, 2});
  check_values(rows, {1, 2, 3, 4, 5, 6});
  Tensor m = cat({from_vector({1, 2, 3, 4}, {2, 1, 2}), from_vector({5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 2})}, 1);
  CHECK(m.shape() == Shape{2, 3, 2});
  check_values(m, {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  check_values(cat({from_vector({1, 2}, {2, 1}), from_vector({3, 4, 5, 6}, {2, 2})}, -1), {1, 3, 4, 2, 5, 6});
  check_values(cat({a, zeros({0, 2})}, 0), {1, 2, 3, 4});
  Tensor one = cat({a}, 0);
  check_values(one, {1, 2, 3, 4});
  CHECK_FALSE(one.shares_storage_with(a));
  check_values(cat({i32({16777217, 7}, {2}), i32({-16777219}, {1})}, 0), {16777217, 7, -16777219}, 0, 0);
}

TEST_CASE("cat: gradcheck and bad input") {
  auto fn = [](const std::vector<Tensor>& in) { return cat(in, 1); };
  check_gradients("cat middle dim", fn,
                  {random_f64({2, 1, 3}, -1, 1, 1), random_f64({2, 2, 3}, -1, 1, 2), random_f64({2, 3, 3}, -1, 1, 3)});
  check_gradients("cat dim 0", [](const std::vector<Tensor>& in) { return cat(in, 0); },
                  {random_f64({1, 3}, -1, 1, 4), random_f64({2, 3}, -1, 1, 5)});
  Tensor a = ones({2, 2});
  check_error([] { cat({}, 0); }, "mg::cat: needs at least one tensor");
  check_error([&] { cat({a, ones({2, 3})}, 0); }, "mg::cat: tensor 1 has shape [2, 3] but tensor 0 has [2, 2]");
  check_error([&] { cat({a, ones({2})}, 0); }, "mg::cat: tensor 1 has shape [2]");
  check_error(
      [&] {
        cat({a, ones({2, 2}, {.dtype = DType::F16})}, 0);
      },
      "mg::cat: tensor 1 is f16 but tensor 0 is f32");
  check_error([&] { cat({a, a}, 2); }, "mg::cat: dim 2 is out of range");
}

TEST_CASE("stack: a new dim at the front, middle or end") {
  Tensor a = tensor({1, 2, 3}), b = tensor({4, 5, 6});
  Tensor s0 = stack({a, b}, 0);
  CHECK(s0.shape() == Shape{2, 3});
  check_values(s0, {1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, 1);
  CHECK(s1.shape() == Shape{3, 2});
  check_values(s1, {1, 4, 2, 5, 3, 6});
  check_values(stack({a, b}, -1), {1, 4, 2, 5, 3, 6});
  Tensor m = stack({from_vector({1, 2, 3, 4}, {2, 2}), from_vector({5, 6, 7, 8}, {2, 2})}, 1);
  CHECK(m.shape() == Shape{2, 2, 2});
  check_values(m, {1, 2, 5, 6, 3, 4, 7, 8});
  check_values(stack({i32({16777217}, {1}), i32({-16777219}, {1})}, 0), {16777217, -16777219}, 0, 0);
  for (std::int64_t dim : {0, 1, -1}) {
    check_gradients("stack", [dim](const std::vector<Tensor>& in) { return stack(in, dim); },
                    {random_f64({2, 3}, -1, 1, 1), random_f64({2, 3}, -1, 1, 2)});
  }
  check_error([] { stack({}, 0); }, "mg::stack: needs at least one tensor");
  check_error([&] { stack({a, ones({2})}, 0); }, "mg::stack: tensor 1 has shape [2] but tensor 0 has [3]");
  check_error([&] { stack({a, b}, 2); }, "mg::stack: dim 2 is out of range");
  check_error(
      [&] {
        stack({a, ones({3}, {.dtype = DType::F16})}, 0);
      },
      "mg::stack: tensor 1 is f16 but tensor 0 is f32");
}

TEST_CASE("slice: a view along dim 0, a copy along other dims") {
  Tensor x = arange(12).reshape({4, 3});
  Tensor rows = slice(x, 0, 1, 3);
  CHECK(rows.shape() == Shape{2, 3});
  check_values(rows, {3, 4, 5, 6, 7, 8});
  CHECK(rows.shares_storage_with(x));
  Tensor cols = slice(x, 1, 0, 2);
  CHECK(cols.shape() == Shape{4, 2});
  check_values(cols, {0, 1, 3, 4, 6, 7, 9, 10});
  CHECK_FALSE(cols.shares_storage_with(x));
  check_values(slice(x, -1, 1, 2), {1, 4, 7, 10});
  // Tensor::slice is rows [begin, end) of dim 0, the same view.
  Tensor method = x.slice(1, 3);
  CHECK(method.shares_storage_with(x));
  check_values(method, {3, 4, 5, 6, 7, 8});
  rows.copy_(zeros({2, 3}));  // writes through the view reach x; the column copy is unaffected
  check_values(x, {0, 1, 2, 0, 0, 0, 0, 0, 0, 9, 10, 11});
  check_values(cols, {0, 1, 3, 4, 6, 7, 9, 10});
  check_values(slice(i32(kBigInts, {3, 2}), 1, 0, 1), {16777217, 2147483647, -16777219}, 0, 0);
  check_values(slice(i32(kBigInts, {3, 2}), 0, 1, 2), {2147483647, 7}, 0, 0);
}

TEST_CASE("slice: negative and out-of-range bounds clamp like Python") {
  Tensor x = arange(12).reshape({4, 3});
  check_values(slice(x, 0, -2, 4), {6, 7, 8, 9, 10, 11});  // x[-2:4]
  check_values(slice(x, 0, 1, -2), {3, 4, 5});  // x[1:-2]
  check_values(slice(x, 1, -1, 3), {2, 5, 8, 11});  // x[:, -1:3]
  check_values(slice(x, 0, -10, 10), arange(12).to_vector<double>());  // x[-10:10]: everything
  check_values(slice(x, 1, -10, 2), {0, 1, 3, 4, 6, 7, 9, 10});
  CHECK(slice(x, 0, 3, 1).shape() == Shape{0, 3});  // begin past end: empty
  CHECK(slice(x, 0, 4, 100).shape() == Shape{0, 3});
  CHECK(slice(x, 1, 5, 10).shape() == Shape{4, 0});
  CHECK(slice(x, 1, -1, -2).shape() == Shape{4, 0});
}

TEST_CASE("slice: gradcheck and bad input") {
  check_gradients("slice dim 0", [](const std::vector<Tensor>& in) { return slice(in[0], 0, 1, 3); },
                  {random_f64({4, 3}, -1, 1, 1)});
  check_gradients("slice dim 1 negative", [](const std::vector<Tensor>& in) { return slice(in[0], 1, -2, 3); },
                  {random_f64({4, 3}, -1, 1, 2)});
  check_gradients("slice middle dim", [](const std::vector<Tensor>& in) { return slice(in[0], 1, 1, 2); },
                  {random_f64({2, 3, 4}, -1, 1, 3)});
  check_gradients("Tensor::slice", [](const std::vector<Tensor>& in) { return in[0].slice(-3, -1); },
                  {random_f64({4, 3}, -1, 1, 4)});
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  backward(sum(slice(x, 0, 1, 2)));  // rows outside the slice get zeros
  check_values(x.grad(), {0, 0, 1, 1, 0, 0});
  check_error([] { slice(from_vector({1}, Shape{}), 0, 0, 1); }, "mg::slice: a scalar has no dims to slice");
  check_error([] { slice(ones({2, 3}), 2, 0, 1); }, "mg::slice: dim 2 is out of range");
}

TEST_CASE("clone: a copy with its own storage, gradient passes through") {
  Tensor x = tensor({1, 2, 3});
  Tensor c = clone(x);
  check_values(c, {1, 2, 3});
  CHECK_FALSE(c.shares_storage_with(x));
  c.copy_(zeros({3}));
  check_values(x, {1, 2, 3});
  check_values(x.clone(), {1, 2, 3});
  Tensor h = clone(tensor({0.1, 65504}, {.dtype = DType::F16}));
  CHECK(h.dtype() == DType::F16);
  check_values(h, {0.0999755859375, 65504}, 0, 0);  // bit-exact copies of the f16 values
  check_values(clone(i32(kBigInts, {6})), kBigInts, 0, 0);
  check_gradients("clone", [](const std::vector<Tensor>& in) { return clone(in[0]); }, {random_f64({2, 3}, -1, 1, 1)});
  check_gradients("Tensor::clone", [](const std::vector<Tensor>& in) { return in[0].clone(); },
                  {random_f64({2, 3}, -1, 1, 2)});
}

TEST_CASE("Tensor::copy_: converts dtypes, needs NoGradGuard on a tensor that requires grad") {
  Tensor y = zeros({2, 2});
  y.copy_(from_vector({1.5, 2, 3, 4}, {2, 2}, {.dtype = DType::F64}));
  CHECK(y.dtype() == DType::F32);
  check_values(y, {1.5, 2, 3, 4});
  Tensor h = zeros({1}, {.dtype = DType::F16});
  h.copy_(tensor({1.0 / 3}, {.dtype = DType::F64}));
  check_values(h, {0.333251953125}, 0, 0);  // 1/3 rounded to nearest f16 (1365 * 2^-12)
  Tensor n = zeros({2}, {.dtype = DType::I32});
  n.copy_(tensor({1.7, -2.7}));
  check_values(n, {1, -2}, 0, 0);  // floating -> i32 truncates toward zero

  Tensor p = ones({3}, {.requires_grad = true});
  check_error([&] { p.copy_(zeros({3})); }, "Tensor::copy_: this tensor requires grad");
  check_values(p, {1, 1, 1});
  {
    NoGradGuard no_grad;
    p.copy_(tensor({4, 5, 6}));
  }
  check_values(p, {4, 5, 6});
  CHECK(p.requires_grad());
  check_error([&] { y.copy_(zeros({4})); }, "Tensor::copy_: the source's shape [4] must match");
}

TEST_CASE("Tensor::copy_: overlapping views of one storage") {
  Tensor x = arange(8);
  x.slice(2, 8).copy_(x.slice(0, 6));  // forwards overlap
  check_values(x, {0, 1, 0, 1, 2, 3, 4, 5});
  Tensor z = arange(8);
  z.slice(0, 6).copy_(z.slice(2, 8));  // backwards overlap
  check_values(z, {2, 3, 4, 5, 6, 7, 6, 7});
}

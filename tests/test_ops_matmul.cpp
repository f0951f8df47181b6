// matmul (autograd/matmul.cpp, kernels/cpu/gemm.cpp): 2-D, batched 3-D and 3-D x 2-D products in
// all four transpose layouts, odd sizes (1, 7, 17, [5,784]x[784,10]) and k = 0; PyTorch's 1-D
// operands and broadcast batch dims (against loops over the broadcast batch). Forward values are
// checked against hand-computed numbers and plain f64 loops, gradients with f64 gradchecks for every
// layout, f16/bf16 against an f64 reference built from the rounded operands (exact products, f32
// accumulation, one rounding on store), and bad shapes/dtypes against errors naming mg::matmul.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blas_choice.h"
#include "kernels/gemm.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

struct Dims {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool batched = false, shared_b = false;  // shared_b: [batch, m, k] x [k, n]
};

Dims dims_of(const Tensor& a, const Tensor& b, MatmulOptions o) {
  Dims d;
  d.batched = a.dim() == 3;
  d.shared_b = d.batched && b.dim() == 2;
  d.batch = d.batched ? a.size(0) : 1;
  d.m = o.transpose_a ? a.size(-1) : a.size(-2);
  d.k = o.transpose_a ? a.size(-2) : a.size(-1);
  d.n = o.transpose_b ? b.size(-2) : b.size(-1);
  return d;
}

// op(A) op(B) by plain loops in f64 over the operands' own (already rounded) values, and the
// largest sum of |products| of one element: the scale of any accumulation error.
struct Reference {
  std::vector<double> c;
  double abs_scale = 0.0;
};

Reference reference_matmul(const Tensor& a, const Tensor& b, MatmulOptions o) {
  const Dims d = dims_of(a, b, o);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Reference r;
  for (std::int64_t t = 0; t < d.batch; ++t) {
    const double* A = av.data() + t * d.m * d.k;
    const double* B = bv.data() + (d.shared_b ? 0 : t * d.k * d.n);
    for (std::int64_t i = 0; i < d.m; ++i) {
      for (std::int64_t j = 0; j < d.n; ++j) {
        double sum = 0.0, abs_sum = 0.0;
        for (std::int64_t p = 0; p < d.k; ++p) {
          double x = o.transpose_a ? A[p * d.m + i] : A[i * d.k + p];
          double y = o.transpose_b ? B[j * d.k + p] : B[p * d.n + j];
          sum += x * y;
          abs_sum += std::fabs(x * y);
        }
        r.c.push_back(sum);
        r.abs_scale = std::max(r.abs_scale, abs_sum);
      }
    }
  }
  return r;
}

// matmul against the reference. Allowed error per element: final_rtol * |exact| for the rounding
// into the output dtype, plus (k + 1) * unit * max sum|products| for the products and the
// accumulation in the compute precision (unit = 2^-24 for f32, 2^-53 for f64), in any order.
void check_matmul(const Tensor& a, const Tensor& b, MatmulOptions o, double final_rtol, double unit,
                  double extra_atol = 0.0) {
  const Dims d = dims_of(a, b, o);
  INFO("m " << d.m << ", n " << d.n << ", k " << d.k << ", batch " << d.batch << ", transpose_a " << o.transpose_a
            << ", transpose_b " << o.transpose_b << ", dtype " << dtype_name(a.dtype()));
  Reference r = reference_matmul(a, b, o);
  Tensor c = matmul(a, b, o);
  CHECK(c.dtype() == a.dtype());
  CHECK(c.shape() == (d.batched ? Shape{d.batch, d.m, d.n} : Shape{d.m, d.n}));
  check_values(c, r.c, final_rtol, static_cast<double>(d.k + 1) * unit * r.abs_scale + extra_atol);
}

// A stored operand: [rows, cols] or [batch, rows, cols].
Tensor operand(std::int64_t batch, std::int64_t rows, std::int64_t cols, std::uint64_t seed, DType dtype = DType::F64) {
  Shape shape = batch > 0 ? Shape{batch, rows, cols} : Shape{rows, cols};
  Generator generator(seed);
  Tensor t = randn(shape, generator).to(dtype);  // made in f32, rounded once to dtype
  if (dtype == DType::F64) t.set_requires_grad(true);  // the f64 operands are gradcheck inputs
  return t;
}

// Forward (f64 and f32) and gradcheck of one layout, 2-D and batched, with m, n, k all different.
void check_layout(bool ta, bool tb) {
  const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
  auto fn = [o](const std::vector<Tensor>& in) { return matmul(in[0], in[1], o); };
  for (std::int64_t batch : {0, 3}) {  // 0: a 2-D product
    const std::int64_t m = 3, n = 4, k = 5;
    Tensor a = ta ? operand(batch, k, m, 1) : operand(batch, m, k, 1);
    Tensor b = tb ? operand(batch, n, k, 2) : operand(batch, k, n, 2);
    check_matmul(a, b, o, 0.0, 0x1p-53);
    check_matmul(a.to(DType::F32), b.to(DType::F32), o, 0.0, 0x1p-24);
    check_gradients(batch ? "matmul batched" : "matmul 2-D", fn, {a, b});
  }
}

// f16/bf16 operands multiply exactly and accumulate in f32; the store rounds once (0.5 ulp of each
// element), the accumulation adds k * 2^-24 of the sum of |products|. Subnormal f16 results may be
// off by half their spacing (2^-25).
void check_low_precision(const Tensor& a, const Tensor& b, MatmulOptions o) {
  check_matmul(a, b, o, tolerance(a.dtype(), 0.5), 0x1p-24, a.dtype() == DType::F16 ? 0x1p-25 : 0.0);
}

}  // namespace

TEST_CASE("matmul: 2-D and batched hand-computed values in every layout") {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2}), b = from_vector({5, 6, 7, 8}, {2, 2});
  check_values(matmul(a, b), {19, 22, 43, 50});
  check_values(matmul(a, b, {.transpose_a = true}), {26, 30, 38, 44});
  check_values(matmul(a, b, {.transpose_b = true}), {17, 23, 39, 53});
  check_values(matmul(a, b, {.transpose_a = true, .transpose_b = true}), {23, 31, 34, 46});
  Tensor r = matmul(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), from_vector({1, 0, -1}, {3, 1}));
  CHECK(r.shape() == Shape{2, 1});
  check_values(r, {-2, -2});
  Tensor batched = matmul(from_vector({1, 2, 5, 6}, {2, 1, 2}), from_vector({3, 4, 7, 8}, {2, 2, 1}));
  CHECK(batched.shape() == Shape{2, 1, 1});
  check_values(batched, {11, 83});
}

TEST_CASE("matmul: NN layout forward and gradcheck, 2-D and batched") { check_layout(false, false); }
TEST_CASE("matmul: NT layout forward and gradcheck, 2-D and batched") { check_layout(false, true); }
TEST_CASE("matmul: TN layout forward and gradcheck, 2-D and batched") { check_layout(true, false); }
TEST_CASE("matmul: TT layout forward and gradcheck, 2-D and batched") { check_layout(true, true); }

TEST_CASE("matmul: 3-D x 2-D shares the right operand across the batch") {
  auto fn_nn = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  auto fn_nt = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1], {.transpose_b = true}); };
  Tensor a = operand(2, 3, 4, 1), b = operand(0, 4, 5, 2), bt = operand(0, 5, 4, 3);
  check_matmul(a, b, {}, 0.0, 0x1p-53);
  check_matmul(a, bt, {.transpose_b = true}, 0.0, 0x1p-53);
  CHECK(matmul(a, b).shape() == Shape{2, 3, 5});
  check_gradients("matmul [2,3,4]x[4,5]", fn_nn, {a, b});
  check_gradients("matmul [2,3,4]x[5,4]^T", fn_nt, {a, bt});
}

TEST_CASE("matmul: odd sizes 1, 7, 17 and [5,784]x[784,10]") {
  struct Case {
    std::int64_t m, n, k;
  };
  for (Case s : {Case{1, 1, 1}, Case{1, 1, 7}, Case{7, 7, 1}, Case{17, 7, 17}, Case{1, 17, 7}, Case{5, 10, 784}}) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
      Tensor a = ta ? operand(0, s.k, s.m, 5) : operand(0, s.m, s.k, 5);
      Tensor b = tb ? operand(0, s.n, s.k, 6) : operand(0, s.k, s.n, 6);
      check_matmul(a, b, o, 0.0, 0x1p-53);
      check_matmul(a.to(DType::F32), b.to(DType::F32), o, 0.0, 0x1p-24);
      check_gradients("matmul odd size", [o](const std::vector<Tensor>& in) { return matmul(in[0], in[1], o); },
                      {a, b});
    }
  }
}

TEST_CASE("matmul: k = 0 gives zeros, and empty gradients") {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO("dtype " << dtype_name(dtype));
    {  // leave blocks of the output's size full of 7s in the allocator's cache
      Tensor junk_out = full({2, 3, 4}, 7.0, {.dtype = dtype}), junk_f32 = full({2, 3, 4}, 7.0);
      Tensor junk_2d = full({3, 4}, 7.0, {.dtype = dtype}), junk_2d_f32 = full({3, 4}, 7.0);
    }
    Tensor c = matmul(zeros({3, 0}, {.dtype = dtype}), zeros({0, 4}, {.dtype = dtype}));
    CHECK(c.shape() == Shape{3, 4});
    check_values(c, std::vector<double>(12, 0.0), 0, 0);
    Tensor cb = matmul(zeros({2, 0, 3}, {.dtype = dtype}), zeros({2, 4, 0}, {.dtype = dtype}),
                       {.transpose_a = true, .transpose_b = true});
    CHECK(cb.shape() == Shape{2, 3, 4});
    check_values(cb, std::vector<double>(24, 0.0), 0, 0);
  }
  Tensor a = zeros({3, 0}, {.dtype = DType::F64, .requires_grad = true});
  Tensor b = zeros({0, 4}, {.dtype = DType::F64, .requires_grad = true});
  backward(sum(matmul(a, b)));
  CHECK(a.grad().shape() == Shape{3, 0});
  CHECK(b.grad().shape() == Shape{0, 4});
  CHECK(matmul(zeros({0, 5}), zeros({5, 2})).shape() == Shape{0, 2});  // m = 0: an empty result
}

TEST_CASE("matmul: f16 and bf16 against an f64 reference from the rounded operands") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
      check_low_precision(ta ? operand(0, 784, 5, 11, dtype) : operand(0, 5, 784, 11, dtype),
                          tb ? operand(0, 10, 784, 12, dtype) : operand(0, 784, 10, 12, dtype), o);
      check_low_precision(ta ? operand(2, 17, 3, 13, dtype) : operand(2, 3, 17, 13, dtype),
                          tb ? operand(2, 5, 17, 14, dtype) : operand(2, 17, 5, 14, dtype), o);
    }
    check_low_precision(operand(2, 7, 33, 15, dtype), operand(0, 33, 9, 16, dtype), {});
  }
}

TEST_CASE("matmul: f16/bf16 accumulate in f32") {
  // 4096 products of 1 * 1: an f16 running sum would stop at 2048 (2048 + 1 rounds back to 2048),
  // a bf16 one at 256; in f32 the sum is exact, and 4096 is representable in both.
  for (DType dtype : {DType::F16, DType::BF16}) {
    Tensor c = matmul(ones({1, 4096}, {.dtype = dtype}), ones({4096, 2}, {.dtype = dtype}));
    check_values(c, {4096, 4096}, 0, 0);
  }
  // A gradient that sums over 4096 rows is accumulated the same way: db = op(a)^T dc, in both layouts.
  for (bool ta : {false, true}) {
    Tensor b = ones({2, 1}, {.dtype = DType::F16, .requires_grad = true});
    Tensor a = ones(ta ? Shape{2, 4096} : Shape{4096, 2}, {.dtype = DType::F16});
    backward(sum(matmul(a, b, {.transpose_a = ta})));
    CHECK(b.grad().dtype() == DType::F16);
    check_values(b.grad(), {4096, 4096}, 0, 0);
  }
}

TEST_CASE("matmul: bad shapes, dtypes and layouts") {
  check_error(
      [] {
        matmul(ones({2, 3}), ones({4, 5}));
      },
      "mg::matmul: inner dimensions differ: [2, 3] has k = 3 but [4, 5]");
  check_error([] { matmul(ones({2, 3}), ones({4, 3}), {.transpose_a = true}); }, "mg::matmul: inner dimensions differ");
  check_error(
      [] {
        matmul(ones({2, 3, 4}), ones({3, 4, 5}));
      },
      "mg::matmul: batch sizes differ and do not broadcast: [2, 3, 4] and [3, 4, 5]");
  check_error([] { matmul(ones({2, 5, 3, 4}), ones({3, 4, 5})); }, "mg::matmul: batch sizes differ");
  check_error([] { matmul(ones({3}), ones({4})); }, "mg::matmul: inner dimensions differ: [3] has k = 3 but [4]");
  check_error([] { matmul(ones({2, 3}), ones({2})); }, "mg::matmul: inner dimensions differ");
  check_error([] { matmul(ones({3}), ones({3}), {.transpose_a = true}); },
              "mg::matmul: a 1-D operand takes no transpose");
  check_error([] { matmul(ones({}), ones({3})); }, "mg::matmul: needs operands of at least one dim");
  check_error([] { matmul(ones({2, 3, 4}), ones({4, 5}), {.transpose_a = true}); }, "mg::matmul");
  check_error([] { matmul(ones({2, 3, 4}), ones({5, 6})); }, "mg::matmul: inner dimensions differ");
  check_error(
      [] {
        matmul(ones({2, 3}), ones({3, 2}, {.dtype = DType::F16}));
      },
      "mg::matmul: inputs have different dtypes");
  check_error([] { matmul(ones({2, 3}, {.dtype = DType::BF16}), ones({3, 2}, {.dtype = DType::F16})); }, "mg::matmul");
  Tensor i = from_vector({1, 2, 3, 4}, {2, 2}, {.dtype = DType::I32});
  check_error([&] { matmul(i, i); }, "mg::matmul: needs a floating-point tensor");
  check_error([&] { matmul(ones({2, 2}), i); }, "mg::matmul: needs a floating-point tensor");
}

TEST_CASE("linear: x W^T + b by hand, gradients, autocast keeps the output low precision") {
  Tensor x = f64({1, 2, 3, 4}, {2, 2}), w = f64({1, 0, 2, 1, -1, 3}, {3, 2}), b = f64({0.5, -1, 2}, {3});
  // row 0: [1*1+2*0, 1*2+2*1, 1*-1+2*3] + b = [1.5, 3, 7]; row 1: [3, 10, 9] + b = [3.5, 9, 11]
  check_values(linear(x, w, b), {1.5, 3, 7, 3.5, 9, 11});
  check_values(linear(x, w), {1, 4, 5, 3, 10, 9});
  CHECK(linear(f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, false), w, b).shape() == Shape{2, 2, 3});
  check_gradients("linear", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {random_f64({4, 3}, -1, 1, 1), random_f64({5, 3}, -1, 1, 2), random_f64({5}, -1, 1, 3)});
  {
    // The bias is cast with the GEMM's inputs, so the layer's output stays f16; a bare add of an
    // f32 bias would promote it to f32.
    Autocast autocast(DType::F16);
    Tensor x32 = ones({2, 3}), w32 = ones({4, 3}, {.requires_grad = true}), b32 = ones({4}, {.requires_grad = true});
    CHECK(linear(x32, w32, b32).dtype() == DType::F16);
    CHECK(add(matmul(x32, w32, {.transpose_b = true}), b32).dtype() == DType::F32);
    clear_tape();
  }
  check_error([&] { linear(x, f64({1, 2, 3}, {1, 3})); }, "mg::linear");
  check_error([&] { linear(x, w, f64({1, 2}, {2})); }, "mg::linear: the bias must be [out] = [3]");
}

TEST_CASE("linear: any number of leading dims, and a 1-D input, as torch.nn.functional.linear") {
  // x [2, 3, 5, 4] is 30 rows of 4: each output row is the same as linear of that row alone.
  const Tensor x = random_f64({2, 3, 5, 4}, -1, 1, 11), w = random_f64({7, 4}, -1, 1, 12),
               b = random_f64({7}, -1, 1, 13);
  const Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape{2, 3, 5, 7});
  const Tensor rows = linear(reshape(x, {30, 4}), w, b);
  for (std::int64_t i = 0; i < y.numel(); ++i) CHECK(y.data<double>()[i] == rows.data<double>()[i]);
  clear_tape();
  // 1-D x [in] -> [out]: row 1 of the hand-computed case above, x = [3, 4] -> [3, 10, 9] + b.
  const Tensor w2 = f64({1, 0, 2, 1, -1, 3}, {3, 2}), b2 = f64({0.5, -1, 2}, {3});
  const Tensor y1 = linear(f64({3, 4}, {2}), w2, b2);
  CHECK(y1.shape() == Shape{3});
  check_values(y1, {3.5, 9, 11});
  clear_tape();
  check_gradients("linear 4-D", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {random_f64({2, 3, 2, 3}, -1, 1, 4), random_f64({5, 3}, -1, 1, 5), random_f64({5}, -1, 1, 6)});
  check_gradients("linear 1-D", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {random_f64({3}, -1, 1, 7), random_f64({5, 3}, -1, 1, 8), random_f64({5}, -1, 1, 9)});
  check_gradients("linear 1-D, no bias", [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); },
                  {random_f64({3}, -1, 1, 10), random_f64({2, 3}, -1, 1, 14)});
  // No input features: y is the bias (PyTorch: the same); no rows: an empty result.
  const Tensor no_features = linear(f64({}, {2, 0}, false), f64({}, {3, 0}, false), f64({0.5, -1, 2}, {3}, false));
  CHECK(no_features.shape() == Shape{2, 3});
  check_values(no_features, {0.5, -1, 2, 0.5, -1, 2});
  CHECK(linear(f64({}, {0, 2}, false), w2, b2).shape() == Shape{0, 3});
  check_error(
      [] {
        linear(full({}, 1.0, {.dtype = DType::F64}), f64({1, 2}, {1, 2}));
      },
      "mg::linear: needs x [..., in]");
}

namespace {

// [..., m, k] x [..., k, n] (NN) by loops over the broadcast batch: batch dims aligned at the right,
// a size-1 (or missing) dim repeated.
std::vector<double> broadcast_reference(const Tensor& a, const Tensor& b, Shape& batch) {
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  batch = broadcast_shapes(ab, bb, "test");
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  // The matrix of operand `x_batch` that batch element `t` reads.
  auto offset = [&](const Shape& x_batch, std::int64_t t) {
    std::int64_t index = 0, stride = 1;
    for (std::size_t i = 0; i < batch.size(); ++i) {  // from the right
      const std::int64_t coordinate = t % batch[batch.size() - 1 - i];
      t /= batch[batch.size() - 1 - i];
      if (i >= x_batch.size()) continue;
      const std::int64_t size = x_batch[x_batch.size() - 1 - i];
      if (size > 1) index += coordinate * stride;
      stride *= size;
    }
    return index;
  };
  std::vector<double> c;
  for (std::int64_t t = 0; t < numel(batch); ++t) {
    const double* A = av.data() + offset(ab, t) * m * k;
    const double* B = bv.data() + offset(bb, t) * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += A[i * k + p] * B[p * n + j];
        c.push_back(sum);
      }
    }
  }
  return c;
}

Tensor random_operand(const Shape& shape, std::uint64_t seed) { return random_f64(shape, -1, 1, seed); }

}  // namespace

TEST_CASE("matmul: 1-D operands as torch.matmul: dot, matrix-vector, vector-matrix, batched") {
  const Tensor v = f64({1, 2, 3}, {3}, false), m = f64({1, 0, -1, 2, 1, 0}, {2, 3}, false);
  const Tensor dot = matmul(v, v);
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item() == 14.0);
  const Tensor mv = matmul(m, v);  // [2, 3] x [3] -> [2]
  CHECK(mv.shape() == Shape{2});
  check_values(mv, {-2, 4}, 0, 0);
  const Tensor vm = matmul(f64({1, -1}, {2}, false), m);  // [2] x [2, 3] -> [3]
  CHECK(vm.shape() == Shape{3});
  check_values(vm, {-1, -1, -1}, 0, 0);
  check_values(matmul(m, m, {.transpose_b = true}), {2, 2, 2, 5}, 0, 0);  // m m^T
  const Tensor batched = matmul(f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3}, false), v);  // -> [2, 2]
  CHECK(batched.shape() == Shape{2, 2});
  check_values(batched, {14, 32, 50, 68}, 0, 0);
  const Tensor row_times_batch = matmul(f64({1, -1}, {2}, false), f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, false));
  CHECK(row_times_batch.shape() == Shape{2, 2});  // [2] x [2, 2, 2] -> [2, 2]
  check_values(row_times_batch, {-2, -2, -2, -2}, 0, 0);
  auto product = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  check_gradients("matmul [3] x [3]", product, {random_operand({3}, 1), random_operand({3}, 2)});
  check_gradients("matmul [2, 3] x [3]", product, {random_operand({2, 3}, 3), random_operand({3}, 4)});
  check_gradients("matmul [3] x [3, 4]", product, {random_operand({3}, 5), random_operand({3, 4}, 6)});
  check_gradients("matmul [2, 2, 3] x [3]", product, {random_operand({2, 2, 3}, 7), random_operand({3}, 8)});
  check_gradients("matmul [3] x [2, 3, 4]", product, {random_operand({3}, 9), random_operand({2, 3, 4}, 10)});
}

TEST_CASE("matmul: batch dims broadcast as torch.matmul, against loops; gradients summed back") {
  struct Case {
    Shape a, b;
  };
  for (const Case& c :
       {Case{{1, 2, 3}, {4, 3, 5}}, Case{{4, 2, 3}, {1, 3, 5}}, Case{{2, 3}, {4, 3, 5}}, Case{{2, 1, 2, 3}, {3, 3, 5}},
        Case{{2, 3, 2, 3}, {2, 3, 3, 5}}, Case{{2, 3, 2, 3}, {3, 5}}, Case{{3, 1, 2, 3}, {1, 4, 3, 2}}}) {
    INFO("a " << fmt::format("{}", c.a) << ", b " << fmt::format("{}", c.b));
    const Tensor a = random_operand(c.a, 11), b = random_operand(c.b, 12);
    Shape batch;
    const std::vector<double> expected = broadcast_reference(a, b, batch);
    const Tensor got = matmul(a, b);
    Shape shape = batch;
    shape.insert(shape.end(), {a.size(-2), b.size(-1)});
    CHECK(got.shape() == shape);
    check_values(got, expected, 1e-14, 1e-14);
    check_gradients("matmul broadcast", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  }
  // Transposes still apply to the last two dims: [1, k, m]^T x [b, n, k]^T.
  const Tensor a = random_operand({1, 3, 2}, 13), b = random_operand({4, 5, 3}, 14);
  const Tensor nn_form = matmul(transpose(a, 1, 2), transpose(b, 1, 2));
  check_close(matmul(a, b, {.transpose_a = true, .transpose_b = true}), nn_form, 1e-14, 1e-14);
  check_gradients("matmul broadcast TT",
                  [](const std::vector<Tensor>& in) {
                    return matmul(in[0], in[1], {.transpose_a = true, .transpose_b = true});
                  },
                  {a, b});
  // f16 operands: exact products, f32 sums, one rounding, whichever operand is repeated.
  const Tensor ah = random_f64({1, 4, 64}, -1, 1, 15, false).to(DType::F16),
               bh = random_f64({3, 64, 2}, -1, 1, 16, false).to(DType::F16);
  Shape batch;
  const std::vector<double> expected = broadcast_reference(ah, bh, batch);
  check_values(matmul(ah, bh), expected, tolerance(DType::F16, 0.5), 65 * 0x1p-24 * 64);
}

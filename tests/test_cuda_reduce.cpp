// The CUDA kernels of reductions, softmax and cross-entropy (kernels/cuda/reduce.cu, softmax.cu)
// against their CPU references (kernels/cpu/). How a case reads, and the tolerances: cuda_kernel_checks.h.
// Every case starts with `if (!have_gpu()) return;`. A build without CUDA has no case here.
#include "tests/testing.h"

#ifdef MG_WITH_CUDA
#include "tests/cuda_kernel_checks.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace mg;
using namespace mg::testing;
using kernels::ReduceOp;
using kernels::ReduceShape;

// ---- reduce ---------------------------------------------------------------------------------------

TEST_CASE("cuda reduce: sum, mean and max match the CPU bit for bit on whole numbers, NaN and ties included") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "a warp per row"},
                        {3, 5000, 1, "a block per row"},
                        {1, 100003, 1, "rows in 13 parts"},
                        {2, 17, 7, "columns, one part"},
                        {3, 129, 5, "columns in 5 parts"},
                        {1, 10000, 2, "columns in 250 parts"},
                        {37, 1, 1, "n = 1"},
                        {4, 1, 3, "n = 1, inner > 1"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      INFO(dtype_name(dtype) << " [" << v.outer << ", " << v.n << ", " << v.inner << "]: " << v.path);
      const ReduceShape s{v.outer, v.n, v.inner};
      const Shape out_shape{v.outer, v.inner};
      // |sum| <= 8 * 100003 < 2^24: every partial sum is exact in f32, so every order gives the CPU's bits.
      const Tensor x = whole_numbers({v.outer, v.n, v.inner}, dtype, -8, 9, 11);
      const Tensor x_gpu = gpu(x);
      std::vector<DType> outs{dtype};
      if (dtype != DType::F32) outs.push_back(DType::F32);  // an f32 out keeps an f16 sum exact
      for (DType out_dtype : outs) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
          Tensor expected = cpu_empty(out_shape, out_dtype), got = poisoned(out_shape, out_dtype);
          kernels::cpu::reduce(op, x, s, expected, nullptr);
          kernels::cuda::reduce(op, x_gpu, s, got, nullptr);
          check_exact(got, expected);
        }
      }
      // Max: ties everywhere (17 values), and two NaNs of which the first must win, across parts too.
      const Tensor y = with_nan_at(x, {x.numel() / 2 + 1, x.numel() * 3 / 4});
      const Tensor y_gpu = gpu(y);
      Tensor expected = cpu_empty(out_shape, dtype), got = poisoned(out_shape, dtype);
      Tensor expected_index = cpu_empty(out_shape, DType::I32), got_index = poisoned(out_shape, DType::I32);
      kernels::cpu::reduce(ReduceOp::Max, y, s, expected, &expected_index);
      kernels::cuda::reduce(ReduceOp::Max, y_gpu, s, got, &got_index);
      check_exact(got, expected);
      CHECK(got_index.to(Device::cpu()).to_vector<std::int32_t>() == expected_index.to_vector<std::int32_t>());
    }
  }
}

TEST_CASE("cuda reduce: sums of real values within the reordering tolerance") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "warp"}, {1, 100003, 1, "row parts"}, {3, 129, 5, "column parts"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      INFO(dtype_name(dtype) << " [" << v.outer << ", " << v.n << ", " << v.inner << "]: " << v.path);
      const ReduceShape s{v.outer, v.n, v.inner};
      // Positive terms (0.5 to 1.5): the largest partial sum is the result, so reorder(n) is relative.
      const Tensor x = uniform_values({v.outer, v.n, v.inner}, dtype, 0.5, 1.5, 12);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Tensor expected = cpu_empty({v.outer, v.inner}, dtype), got = poisoned({v.outer, v.inner}, dtype);
        kernels::cpu::reduce(op, x, s, expected, nullptr);
        kernels::cuda::reduce(op, gpu(x), s, got, nullptr);
        check_near(got, expected, reorder(v.n));
      }
    }
  }
}

// ---- softmax and cross-entropy ------------------------------------------------------------------------

TEST_CASE("cuda softmax and log_softmax: forward and backward, every launch path") {
  if (!have_gpu()) return;
  const View views[] = {{37, 129, 1, "a warp per row"},
                        {3, 5000, 1, "a block per row"},
                        {3, 129, 5, "a thread per row"},
                        {5, 1, 1, "n = 1"}};
  for (DType dtype : kFloating) {
    for (const View& v : views) {
      for (bool log : {false, true}) {
        INFO(dtype_name(dtype) << (log ? " log_softmax" : " softmax") << " [" << v.outer << ", " << v.n << ", "
                               << v.inner << "]: " << v.path);
        const ReduceShape s{v.outer, v.n, v.inner};
        const Shape shape{v.outer, v.n, v.inner};
        // One NaN: its whole row must come out NaN on both backends.
        const Tensor x = with_nan_at(uniform_values(shape, dtype, -6.0, 6.0, 21), {v.inner});
        Tensor y = cpu_empty(shape, dtype), y_gpu = poisoned(shape, dtype);
        kernels::cpu::softmax(x, s, log, y);
        kernels::cuda::softmax(gpu(x), s, log, y_gpu);
        // The max is the same element on both; log_sum differs by the sum's relative difference,
        // reorder(n) + 3 eps (expf: 3 ulp between the backends), plus logf's ulp (|log_sum| < 21: 16 eps).
        // log_softmax = x - max - log_sum carries that absolute difference; softmax = exp(it) turns it
        // into a relative one, plus the argument's rounding (|argument| < 33: 16 eps) and expf's 3 ulp.
        if (log)
          check_near(y_gpu, y, 4.0, (reorder(v.n) + 19.0) * kEps32);
        else
          check_near(y_gpu, y, reorder(v.n) + 38.0);

        const Tensor dy = uniform_values(shape, dtype, -1.0, 1.0, 22);
        Tensor dx = cpu_empty(shape, dtype), dx_gpu = poisoned(shape, dtype);
        kernels::cpu::softmax_backward(y, dy, s, log, dx);
        kernels::cuda::softmax_backward(gpu(y), gpu(dy), s, log, dx_gpu);
        // softmax: dx = y (dy - dot) with |dot| <= sum |dy y| <= 1, so dot is off by reorder(n) eps and dx
        // by |y| <= 1 times that. log_softmax: dx = dy - exp(y) dot with dot = sum(dy), off by reorder(n)
        // eps of the row's sum |dy|, times exp(y) <= 1.
        // (The NaN row is NaN on both; it is left out of the scale.)
        const double scale = log ? std::exp(max_ignoring_nan(y)) * mg::max(sum(abs(dy.to(DType::F32)), 1)).item() + 1.0
                                 : 2.0;
        check_near(dx_gpu, dx, 8.0, reorder(v.n) * scale * kEps32);
      }
    }
  }
}

TEST_CASE("cuda cross_entropy: loss and row statistics per row, gradient per logit, ignore_index rows") {
  if (!have_gpu()) return;
  const std::int64_t ignore_index = -100;
  const std::int64_t sizes[][2] = {{37, 129}, {3, 5000}, {5, 1}};
  for (DType dtype : kFloating) {
    for (const auto& size : sizes) {
      const std::int64_t rows = size[0], classes = size[1];
      INFO(dtype_name(dtype) << " logits [" << rows << ", " << classes << "]");
      const Tensor logits = uniform_values({rows, classes}, dtype, -6.0, 6.0, 31);
      Generator generator(32);
      std::vector<double> label_values = randint(0, classes, {rows}, generator).to_vector<double>();
      label_values[0] = label_values[static_cast<std::size_t>(rows / 2)] = static_cast<double>(ignore_index);
      const Tensor labels = from_vector(label_values, {rows}, {.dtype = DType::I32});
      Tensor loss = cpu_empty({rows}, DType::F32), stats = cpu_empty({rows, 2}, DType::F32);
      Tensor loss_gpu = poisoned({rows}, DType::F32), stats_gpu = poisoned({rows, 2}, DType::F32);
      kernels::cpu::cross_entropy(logits, labels, ignore_index, loss, stats);
      kernels::cuda::cross_entropy(gpu(logits), gpu(labels), ignore_index, loss_gpu, stats_gpu);
      // The max is the same value on both. log_sum: off by the sum's reorder(classes) + 3 eps (expf) and
      // logf's ulp (|log_sum| < 16: 8 eps); the loss log_sum - (x - max) one more rounding (|loss| < 32:
      // 4 eps); absolute, all f32. Ignored rows are exactly 0 on both.
      check_near(stats_gpu, stats, 0.0, (reorder(classes) + 11.0) * kEps32);
      check_near(loss_gpu, loss, 0.0, (reorder(classes) + 15.0) * kEps32);
      CHECK(loss_gpu.to(Device::cpu()).to_vector<double>()[0] == 0.0);

      // Backward from the CPU's statistics on both, so only the kernel is compared: (x - max) - log_sum is
      // the same on both, p = expf(it) <= 1 differs by 3 ulp, and p - [c == label] and the product with
      // |w| < 1.5 round once each.
      const Tensor row_weight = uniform_values({rows}, DType::F32, 0.5, 1.5, 33);
      Tensor dlogits = cpu_empty({rows, classes}, dtype), dlogits_gpu = poisoned({rows, classes}, dtype);
      kernels::cpu::cross_entropy_backward(logits, labels, stats, row_weight, ignore_index, dlogits);
      kernels::cuda::cross_entropy_backward(gpu(logits), gpu(labels), gpu(stats), gpu(row_weight), ignore_index,
                                            dlogits_gpu);
      check_near(dlogits_gpu, dlogits, 4.0, 1.5 * 4.0 * kEps32);
    }
  }
}

#else
TEST_CASE("cuda reduce: this build has no CUDA backend") { MESSAGE("skipped: built without CUDA"); }
#endif

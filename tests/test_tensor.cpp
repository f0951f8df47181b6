// Tensor basics: factories, the seeded counter-based generator, item/to_vector, views that share
// storage, requires_grad rules and fmt formatting.
#include <cmath>

#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("tensor: factories fill shape, dtype and values") {
  Tensor z = zeros({2, 3}, {.dtype = DType::F16});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::F16);
  CHECK(z.numel() == 6);
  CHECK(z.nbytes() == 12);
  CHECK(z.device() == Device::cpu());
  check_values(z, std::vector<double>(6, 0.0));
  check_values(ones({4}, {.dtype = DType::BF16}), {1, 1, 1, 1});
  check_values(full({2}, 65520.0, {.dtype = DType::F16}), {INFINITY, INFINITY});
  check_values(full({}, 2.5), {2.5});
  CHECK(full({}, 2.5).dim() == 0);
  check_values(arange(5), {0, 1, 2, 3, 4});
  check_values(arange(1, 2, 0.25), {1, 1.25, 1.5, 1.75});
  check_values(arange(3, 0, -1), {3, 2, 1});
  CHECK(arange(4, {.dtype = DType::I32}).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3});
  check_values(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).slice(1, 2), {4, 5, 6});
  Tensor like = zeros_like(ones({3, 1}, {.dtype = DType::F64}));
  CHECK(like.shape() == Shape{3, 1});
  CHECK(like.dtype() == DType::F64);
  check_values(full_like(like, -1.0), {-1, -1, -1});
  CHECK(Tensor::empty({0, 4}).numel() == 0);
}

TEST_CASE("tensor: item, size and to_vector") {
  Tensor t = from_vector({1.5, -2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 3);
  CHECK(from_vector({7.25}, {1, 1}).item() == 7.25);
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2, 3, 4, 5, 6});
  CHECK(t.to_vector<std::int32_t>()[1] == -2);
  check_error([&] { t.item(); }, "Tensor::item");
  check_error([&] { t.size(2); }, "Tensor::size");
}

TEST_CASE("tensor: PyTorch's spellings: item<T>, requires_grad_ and backward as a member") {
  CHECK(from_vector({2.75}, {1}).item<float>() == 2.75f);
  CHECK(from_vector({-2.75}, {1}).item<int>() == -2);  // truncated toward zero, as PyTorch
  CHECK(full({1}, 3, {.dtype = DType::I32}).item<std::int64_t>() == 3);
}

TEST_CASE("tensor: item<T> refuses a value the integer type cannot hold") {
  check_error([] { full({1}, 65504, {.dtype = DType::F16}).item<std::int16_t>(); }, "does not fit");
  check_error([] { full({1}, std::nan(""), {}).item<int>(); }, "Tensor::item: nan does not fit");
  check_error([] { full({1}, -1, {}).item<unsigned>(); }, "does not fit");
  CHECK(full({1}, 4294967295.0, {.dtype = DType::F64}).item<unsigned>() == 4294967295u);
  check_error([] { full({1}, 4294967296.0, {.dtype = DType::F64}).item<unsigned>(); }, "does not fit");
}

TEST_CASE("tensor: requires_grad_ and loss.backward() do what set_requires_grad and mg::backward do") {
  Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  CHECK(w.requires_grad());
  Tensor loss = sum(mul(w, w));  // d/dw = 2w
  loss.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(tape_size() == 0);  // cleared, as mg::backward does
  CHECK_FALSE(w.requires_grad_(false).requires_grad());
  check_error([&] { from_vector({1, 2}, {2}).backward(); }, "backward");  // not one element
}

TEST_CASE("tensor: Philox matches Random123's published answers") {
  using Words = std::array<std::uint32_t, 4>;
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("tensor: the same seed gives the same numbers; draws advance the state") {
  Generator a(42), b(42), c(43);
  std::vector<double> first = randn({100}, a).to_vector<double>();
  CHECK(first == randn({100}, b).to_vector<double>());
  CHECK(first != randn({100}, c).to_vector<double>());
  CHECK(a.offset() == 25);  // 100 normals use 100 words (a pair of words per pair of normals): 25 blocks
  CHECK(randn({100}, a).to_vector<double>() != first);  // the next draw is new numbers

  // A draw is a pure function of (seed, offset): restoring the state replays it.
  Generator d(5);
  rand({10}, d);
  std::uint64_t offset = d.offset();
  std::vector<double> next = rand({10}, d).to_vector<double>();
  d.set_state(5, offset);
  CHECK(rand({10}, d).to_vector<double>() == next);

  // Every dtype gets the same draw, rounded.
  Generator e(9), f(9);
  Tensor r32 = randn({64}, e);
  Tensor r16 = randn({64}, f, {.dtype = DType::F16});
  CHECK(r16.to_vector<double>() == r32.to(DType::F16).to_vector<double>());

  // The default generator follows manual_seed.
  manual_seed(3);
  std::vector<double> seeded = rand({5}).to_vector<double>();
  manual_seed(3);
  CHECK(rand({5}).to_vector<double>() == seeded);
}

TEST_CASE("tensor: random distributions have the right range and moments") {
  Generator generator(1);
  const int n = 100000;
  std::vector<double> u = rand({n}, generator).to_vector<double>();
  double sum = 0, lo = 1, hi = 0;
  for (double v : u) sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  // The mean of n uniforms has standard deviation sqrt(1/12/n) = 0.0009; allow 5 of them.
  CHECK(std::fabs(sum / n - 0.5) < 5 * std::sqrt(1.0 / 12 / n));

  std::vector<double> g = randn({n}, generator).to_vector<double>();
  double mean = 0, square = 0;
  for (double v : g) mean += v, square += v * v;
  mean /= n;
  double variance = square / n - mean * mean;
  CHECK(std::fabs(mean) < 5 / std::sqrt(n));  // sd of the mean: 1/sqrt(n)
  CHECK(std::fabs(variance - 1.0) < 5 * std::sqrt(2.0 / n));  // sd of the variance: sqrt(2/n)

  std::vector<double> w = uniform({1000}, -3, 5, generator).to_vector<double>();
  for (double v : w) CHECK((v >= -3 && v < 5));

  std::vector<std::int32_t> labels = randint(0, 10, {10000}, generator).to_vector<std::int32_t>();
  std::vector<int> counts(10, 0);
  for (std::int32_t l : labels) {
    REQUIRE((l >= 0 && l < 10));
    ++counts[static_cast<std::size_t>(l)];
  }
  for (int c : counts) CHECK(std::abs(c - 1000) < 5 * 30);  // binomial sd = sqrt(10000 * 0.1 * 0.9) = 30
}

TEST_CASE("tensor: from_vector checks its values") {
  check_error([] { from_vector({1, 2, 3}, {2, 2}); }, "mg::from_vector");
  check_error([] { from_vector({1.5}, {1}, {.dtype = DType::I32}); }, "not a 32-bit integer");
  check_error([] { zeros({2}, {.dtype = DType::I32, .requires_grad = true}); }, "cannot require grad");
  check_error([] { arange(0, 1, 0); }, "mg::arange");
  check_error([] { Tensor::empty({2, -1}); }, "negative size");
}

TEST_CASE("tensor: views share storage; clone and detach") {
  Tensor t = arange(6).reshape({2, 3});
  Tensor row = t.slice(1, 2);
  CHECK(row.shares_storage_with(t));
  CHECK(t.reshape({3, 2}).shares_storage_with(t));
  Tensor copy = t.clone();
  CHECK_FALSE(copy.shares_storage_with(t));
  check_values(copy, {0, 1, 2, 3, 4, 5});

  Tensor w = ones({2}, {.requires_grad = true});
  Tensor d = w.detach();
  CHECK(d.shares_storage_with(w));
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.id() != w.id());
  {
    NoGradGuard no_grad;
    w.copy_(tensor({3, 4}));
  }
  check_values(d, {3, 4});  // detach shares the data
}

TEST_CASE("tensor: requires_grad is for floating leaves") {
  Tensor w = zeros({2});
  CHECK_FALSE(w.requires_grad());
  w.set_requires_grad(true);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  Tensor y = mg::mul(w, 2.0);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  check_error([&] { y.set_requires_grad(false); }, "only leaves");
  check_error([] { zeros({2}, {.dtype = DType::I32}).set_requires_grad(true); }, "i32");
  CHECK_FALSE(w.grad().defined());
  check_error([&] { w.set_grad(zeros({3})); }, "Tensor::set_grad");
  clear_tape();
}

TEST_CASE("tensor: fmt shows values, shape and dtype, and abbreviates large tensors") {
  std::string small = fmt::format("{}", from_vector({1, 2.5, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::F16}));
  CHECK(small == "tensor([[  1, 2.5,   3],\n        [  4,   5,   6]], shape=[2, 3], dtype=f16)");
  CHECK(fmt::format("{}", full({}, 0.5)) == "tensor(0.5, shape=[], dtype=f32)");
  CHECK(fmt::format("{}", zeros({0})) == "tensor([], shape=[0], dtype=f32)");
  CHECK(fmt::format("{}", Tensor()) == "tensor(undefined)");
  CHECK(fmt::format("{}", ones({1}, {.requires_grad = true})).find("requires_grad") != std::string::npos);
  CHECK(fmt::format("{}", arange(3, {.dtype = DType::I32})) == "tensor([0, 1, 2], shape=[3], dtype=i32)");

  std::string large = fmt::format("{}", arange(2000).reshape({40, 50}));
  CHECK(large.find("...") != std::string::npos);
  CHECK(large.find("1999") != std::string::npos);  // the last element is shown
  CHECK(large.find("1000") == std::string::npos);  // a middle one is not
  CHECK(large.find("shape=[40, 50]") != std::string::npos);
  CHECK(std::count(large.begin(), large.end(), '\n') == 6);  // 3 + "..." + 3 rows
}

TEST_CASE("tensor: devices and the CUDA build flag") {
  CHECK(Device::cpu().is_cpu());
  CHECK(Device::cuda(1).index == 1);
  CHECK(fmt::format("{}", Device::cuda(1)) == "cuda:1");
  CHECK(Device::cuda(0) != Device::cpu());
  const int gpus = cuda_device_count();
  CHECK(gpus >= 0);
  if (!built_with_cuda()) CHECK(gpus == 0);
  if (gpus == 0) MESSAGE("no CUDA device visible (built with CUDA: " << built_with_cuda() << "): GPU tests skip");
}

TEST_CASE("tensor: shapes too large for memory are refused before anything is allocated") {
  check_error([] { zeros({std::int64_t{1} << 62}); }, "mg::zeros: shape [4611686018427387904] has too many elements");
  check_error([] { zeros({std::int64_t{1} << 32, std::int64_t{1} << 32}); }, "too many elements");
  check_error([] { Tensor::empty({std::int64_t{1} << 40, std::int64_t{1} << 40}); }, "Tensor::empty");
  check_error([] { reshape(zeros({0}), {std::int64_t{1} << 32, std::int64_t{1} << 32, 0}); }, "mg::reshape");
  check_error([] { arange(0, 1e30, 1); }, "mg::arange");
  Generator generator(1);
  check_error([&] { randn({-1}, generator); }, "mg::randn: negative size");
  check_error([&] { rand({2, -3}, generator); }, "mg::uniform");
  check_error([&] { randint(0, 5, {-1}, generator); }, "mg::randint");
  CHECK(generator.offset() == 0);  // a refused draw takes no random numbers
  check_error([] { broadcast_to(zeros({1}), {-1}); }, "mg::broadcast_to");
  check_error([] { full({1}, 1e10, {.dtype = DType::I32}); }, "mg::full: value 10000000000");
  check_error([] { zeros_like(Tensor()); }, "mg::full_like");
}

TEST_CASE("tensor: uniform draws stay below high after rounding to f16 and bf16") {
  Generator generator(2);
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    std::vector<double> u = rand({1 << 16}, generator, {.dtype = dtype}).to_vector<double>();
    CHECK(*std::max_element(u.begin(), u.end()) < 1.0);
    CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
    std::vector<double> w = uniform({1 << 14}, -2.0, -1.0, generator, {.dtype = dtype}).to_vector<double>();
    CHECK(*std::max_element(w.begin(), w.end()) < -1.0);
    CHECK(*std::min_element(w.begin(), w.end()) >= -2.0);
  }
  check_error([&] { uniform({2}, 1.0, 1.0, generator); }, "low < high");
}

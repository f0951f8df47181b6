// train/evaluation.h: how `mixgrad train` and `mixgrad repro` feed and score a model.
#include "tests/testing.h"
#include "train/evaluation.h"

using namespace mg;
using namespace mg::testing;

TEST_CASE("standardize_pixels_ in place gives mg::div(mg::sub(x, mean), std) bit for bit") {
  Generator generator(3);
  const Tensor pixels = rand({5, 1, 28, 28}, generator);  // in [0, 1), as the IDX reader gives them
  Tensor images = pixels.clone();
  const void* storage = images.data_ptr();
  train::standardize_pixels_(images);
  CHECK(images.data_ptr() == storage);  // no new tensor
  const Tensor expected = div(sub(pixels, train::kPixelMean), train::kPixelStd);
  CHECK(std::memcmp(images.data_ptr(), expected.data_ptr(), expected.nbytes()) == 0);
  CHECK(images.to_vector<float>()[0] != pixels.to_vector<float>()[0]);  // it did change them
}

TEST_CASE("standardize_pixels_ refuses what it cannot change in place") {
  Tensor f16 = zeros({2, 2}, {.dtype = DType::F16});
  check_error([&] { train::standardize_pixels_(f16); }, "train::standardize_pixels_: needs f32 images");
  Tensor leaf = zeros({2, 2}, {.requires_grad = true});
  check_error([&] { train::standardize_pixels_(leaf); }, "requiring grad");
}

TEST_CASE("test_accuracy scores the same in any batch size") {
  Generator generator(1);
  auto model = nn::mlp({12, 16, 4}, generator);
  const Tensor images = randn({37, 12}, generator);
  const Tensor labels = randint(0, 4, {37}, generator);
  const amp::Recipe fp32 = amp::Recipe::parse("fp32");
  const double whole = train::test_accuracy(*model, images, labels, fp32, Device::cpu(), 37);
  CHECK(whole > 0.0);  // some of 37 random points are right by chance: the comparison below means something
  for (std::int64_t batch : {1, 5, 36, 250})
    CHECK(train::test_accuracy(*model, images, labels, fp32, Device::cpu(), batch) == whole);
  check_error([&] { train::test_accuracy(*model, images, labels, fp32, Device::cpu(), 0); }, "batch must be >= 1");
}

// The storage-only integer dtypes of PyTorch's files: i64 (labels and indices), u8 (images), bool
// (masks). Their rows, their conversions to and from every dtype (saturating, exact where the values
// are), printing, a file written by the safetensors package read back value for value and saved
// again, the BOOL byte rule for untrusted files, and the ops that take them: cross_entropy and
// embedding read i64 indices as i32, where reads a bool mask, a DataLoader carries i64 labels.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include "data/batches.h"
#include "data/safetensors.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
const double kNan = std::nan("");
const double kInf = std::numeric_limits<double>::infinity();

// The values of `values` (f64) converted into `to`, read back as f64: what Tensor::to gives.
std::vector<double> converted(const std::vector<double>& values, DType to) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())}, {.dtype = DType::F64})
      .to(to)
      .to_vector<double>();
}

std::string fixture() { return std::string(MG_SOURCE_DIR) + "/tests/fixtures/pytorch_integers.safetensors"; }

template <class T>
std::vector<T> elements(const Tensor& t) {
  return {t.data<T>(), t.data<T>() + t.numel()};
}

}  // namespace

TEST_CASE("i64, u8 and bool: rows of MG_DTYPES, storage only") {
  CHECK(dtype_size(DType::I64) == 8);
  CHECK(dtype_size(DType::U8) == 1);
  CHECK(dtype_size(DType::BOOL) == 1);
  CHECK(dtype_file_name(DType::I64) == "I64");
  CHECK(dtype_file_name(DType::BOOL) == "BOOL");
  for (DType dtype : {DType::I32, DType::I64, DType::U8, DType::BOOL}) {
    CHECK(is_integer(dtype));
    CHECK_FALSE(is_floating(dtype));
  }
  CHECK_FALSE(is_integer(DType::E4M3));
  CHECK(dtype_max(DType::U8) == 255);
  CHECK(dtype_names().find("i64, u8, bool") != std::string::npos);
  // No kernel computes in them: an error naming the op, saying what to convert to.
  check_error([] { visit_dtype(DType::I64, "mg::some_kernel", [](auto) {}); },
              "mg::some_kernel: i64 tensors are for storage");
  check_error([] { visit_dtype(DType::BOOL, "mg::some_kernel", [](auto) {}); }, "x.to(DType::I32) for indices");
  check_error(
      [] {
        exp(from_vector({1, 2}, {2}, {.dtype = DType::U8}));
      },
      "mg::exp: needs a floating-point tensor, got u8");
}

TEST_CASE("conversions into i64, u8 and bool: truncated and saturated, NaN 0; bool is non-zero") {
  CHECK(converted({1.9, -1.9, kNan, 1e30, -1e30, 0x1p62}, DType::I64) ==
        std::vector<double>{1, -1, 0, 0x1p63, -0x1p63, 0x1p62});
  const Tensor big = from_vector({1e30, -1e30}, {2}, {.dtype = DType::F64}).to(DType::I64);
  CHECK(elements<std::int64_t>(big) == std::vector<std::int64_t>{kI64Max, kI64Min});
  CHECK(converted({-3, 0.5, 255.9, 300, kNan}, DType::U8) == std::vector<double>{0, 0, 255, 255, 0});
  CHECK(converted({0, -0.0, 2.5, -1, kNan, kInf}, DType::BOOL) == std::vector<double>{0, 0, 1, 1, 1, 1});
  // From f16 and FP8 too: each reaches the integer through its exact f32 value.
  CHECK(from_vector({-2.75, 7.5}, {2}, {.dtype = DType::F16}).to(DType::I64).to_vector<double>() ==
        std::vector<double>{-2, 7});
  CHECK(from_vector({448}, {1}, {.dtype = DType::E4M3}).to(DType::U8).to_vector<double>() == std::vector<double>{255});
}

TEST_CASE("conversions out of i64, u8 and bool: exact where the values fit, one rounding otherwise") {
  // i64 past 2^53 survives i64 -> i64 and the i64 -> i32 saturation, bit for bit.
  Tensor wide = Tensor::empty({4}, {.dtype = DType::I64});
  const std::vector<std::int64_t> values{(std::int64_t{1} << 53) + 1, kI64Min, std::int64_t{1} << 40, -7};
  std::copy(values.begin(), values.end(), wide.data<std::int64_t>());
  CHECK(elements<std::int64_t>(wide.clone()) == values);
  CHECK(wide.to_vector<std::int32_t>() == std::vector<std::int32_t>{2147483647, -2147483647 - 1, 2147483647, -7});
  // Into f32, rounded once: f32's spacing at 2^53 is 2^30, so 2^53 + 1 rounds to 2^53. Into f16: 65519
  // rounds to 65504, 65520 (the tie) to inf, as from f64.
  CHECK(wide.to(DType::F32).to_vector<double>()[0] == 0x1p53);
  CHECK(from_vector({65519, 65520, -3}, {3}, {.dtype = DType::I64}).to(DType::F16).to_vector<double>() ==
        std::vector<double>{65504, kInf, -3});
  CHECK(from_vector({0, 1, 255}, {3}, {.dtype = DType::U8}).to(DType::BF16).to_vector<double>() ==
        std::vector<double>{0, 1, 255});
  CHECK(from_vector({1, 0}, {2}, {.dtype = DType::BOOL}).to(DType::E5M2).to_vector<double>() ==
        std::vector<double>{1, 0});
  // u8 -> i64 -> bool -> i32: integers into integers keep or saturate.
  CHECK(from_vector({0, 200}, {2}, {.dtype = DType::U8}).to(DType::I64).to(DType::BOOL).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 1});
  CHECK(from_vector({-5, 300}, {2}, {.dtype = DType::I64}).to(DType::U8).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 255});
}

TEST_CASE("from_vector refuses what an integer dtype cannot hold; printing shows integers and bools") {
  check_error([] { from_vector({1.5}, {1}, {.dtype = DType::I64}); }, "value 1.5 at index 0 is not a 64-bit integer");
  check_error([] { from_vector({0x1p63}, {1}, {.dtype = DType::I64}); }, "but the dtype is i64");
  check_error([] { from_vector({-1}, {1}, {.dtype = DType::U8}); }, "not a 8-bit integer >= 0, but the dtype is u8");
  check_error([] { from_vector({2}, {1}, {.dtype = DType::BOOL}); }, "but the dtype is bool");
  Tensor wide = Tensor::empty({2}, {.dtype = DType::I64});
  wide.data<std::int64_t>()[0] = (std::int64_t{1} << 53) + 1;  // a double would print ...992
  wide.data<std::int64_t>()[1] = kI64Min;
  // Right-aligned in columns of the widest, as every dtype prints.
  CHECK(to_string(wide) == "tensor([    9007199254740993, -9223372036854775808], shape=[2], dtype=i64)");
  CHECK(to_string(from_vector({1, 0}, {2}, {.dtype = DType::BOOL})) == "tensor([ true, false], shape=[2], dtype=bool)");
  CHECK(to_string(from_vector({0, 255}, {2}, {.dtype = DType::U8})) == "tensor([  0, 255], shape=[2], dtype=u8)");
}

TEST_CASE("a file of the safetensors package (PyTorch's writer): i64, u8 and bool read value for value") {
  const data::SafetensorsFile file = data::load_safetensors(fixture());
  const Tensor& extremes = file.tensors.at("extremes");
  REQUIRE(extremes.dtype() == DType::I64);
  CHECK(elements<std::int64_t>(extremes) ==
        std::vector<std::int64_t>{0, -1, (std::int64_t{1} << 53) + 1, kI64Min, kI64Max});
  const Tensor& pixels = file.tensors.at("pixels");
  REQUIRE(pixels.dtype() == DType::U8);
  CHECK(pixels.shape() == Shape{2, 3});
  CHECK(elements<std::uint8_t>(pixels) == std::vector<std::uint8_t>{0, 1, 127, 128, 254, 255});
  const Tensor& mask = file.tensors.at("mask");
  REQUIRE(mask.dtype() == DType::BOOL);
  CHECK(mask.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 1, 1});

  // Saved again and read back: the same dtypes, shapes and bytes.
  const std::string path = (std::filesystem::temp_directory_path() / "mg_test_integer_dtypes.safetensors").string();
  data::save_safetensors(path, {{"extremes", extremes}, {"pixels", pixels}, {"mask", mask}});
  const data::SafetensorsFile back = data::load_safetensors(path);
  for (const char* name : {"extremes", "pixels", "mask"}) {
    const Tensor& a = file.tensors.at(name);
    const Tensor& b = back.tensors.at(name);
    CHECK(b.dtype() == a.dtype());
    CHECK(b.shape() == a.shape());
    CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
  }

  // A BOOL byte other than 0 or 1 is refused: files are untrusted input.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t header = 8 + static_cast<std::size_t>(static_cast<unsigned char>(bytes[0])) +
                             256 * static_cast<std::size_t>(static_cast<unsigned char>(bytes[1]));
  const std::size_t mask_at = header + 40;  // the tiling is sorted by name: extremes (40 bytes), mask, pixels
  REQUIRE(bytes[mask_at + 1] == 0);
  bytes[mask_at + 1] = 2;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  check_error([&] { data::load_safetensors(path); }, "tensor 'mask' is BOOL, but its element 1 is the byte 2");
  std::filesystem::remove(path);
}

TEST_CASE("cross_entropy and embedding take PyTorch's i64 indices, where a bool mask: the i32 results") {
  const data::SafetensorsFile file = data::load_safetensors(fixture());
  const Tensor& labels = file.tensors.at("labels");  // [2, 0, 1, 2] as int64
  const Tensor labels_i32 = labels.to(DType::I32);
  Tensor logits = uniform_in({4, 3}, DType::F32, 5, -2.0, 2.0).set_requires_grad(true);
  Tensor logits_again = logits.detach().clone().set_requires_grad(true);
  const Tensor loss = cross_entropy(logits, labels);
  backward(loss);
  const Tensor loss_i32 = cross_entropy(logits_again, labels_i32);
  backward(loss_i32);
  CHECK(loss.item() == loss_i32.item());
  CHECK(logits.grad().to_vector<double>() == logits_again.grad().to_vector<double>());
  CHECK(cross_entropy(logits.detach(), labels, {.label_smoothing = 0.1}).item() ==
        cross_entropy(logits.detach(), labels_i32, {.label_smoothing = 0.1}).item());
  check_error(
      [&] {
        cross_entropy(logits, from_vector({0, 3, 1, 2}, {4}, {.dtype = DType::I64}));
      },
      "mg::cross_entropy: label 3 at row 1 is out of range for 3 classes");
  check_error(
      [&] {
        cross_entropy(logits, from_vector({0, 1, 1, 2}, {4}, {.dtype = DType::U8}));
      },
      "mg::cross_entropy: labels must be i32 or i64, got u8");

  const Tensor table = uniform_in({3, 2}, DType::F32, 6, -1.0, 1.0);
  CHECK(embedding(table, labels).to_vector<double>() == embedding(table, labels_i32).to_vector<double>());
  check_error([&] { embedding(table, from_vector({5}, {1}, {.dtype = DType::I64})); },
              "mg::embedding: index 5 at position 0 is out of range for 3 embeddings");

  const Tensor& mask = file.tensors.at("mask");  // [true, false, true, true]
  CHECK(where(mask, full({4}, 1.0), full({4}, -1.0)).to_vector<double>() == std::vector<double>{1, -1, 1, 1});
}

TEST_CASE("a DataLoader carries i64 labels, which cross_entropy takes") {
  const Tensor inputs = uniform_in({4, 3}, DType::F32, 7, -1.0, 1.0);
  const Tensor labels = from_vector({2, 0, 1, 2}, {4}, {.dtype = DType::I64});
  data::DataLoader loader(inputs, labels, {.batch_size = 2, .shuffle = false});
  const data::Batch batch = loader.next();
  CHECK(batch.labels.dtype() == DType::I64);
  CHECK(batch.labels.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 0});
  CHECK(std::isfinite(cross_entropy(batch.inputs, batch.labels).item()));
}

// safetensors' "F4" (E2M1, two a byte, the header's shape counting elements) and "F8_E8M0", against
// tests/fixtures/torch_fp4.safetensors, which PyTorch's safetensors wrote (scripts/make-fp4-fixtures):
// mixgrad reads torch's file value for value, and writes the same tensors byte for byte. The file it
// writes is left at build/tests/mixgrad_fp4.safetensors, for `scripts/make-fp4-fixtures --check` to
// load with torch. A packed tensor whose last dimension is odd cannot be saved or loaded.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "data/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;

namespace {

std::string fixture() { return std::string(MG_SOURCE_DIR) + "/tests/fixtures/torch_fp4.safetensors"; }

// The tensors of the fixture, made by mixgrad from values (not from the file).
StateDict expected_tensors() {
  // Byte k holds the codes k % 16 (element 2k) and k / 16 (element 2k + 1): every pair of codes.
  std::vector<double> pairs;
  for (int k = 0; k < 256; ++k) {
    pairs.push_back(fp8::decode(static_cast<std::uint8_t>(k % 16), DType::E2M1));
    pairs.push_back(fp8::decode(static_cast<std::uint8_t>(k / 16), DType::E2M1));
  }
  // E8M0: 2^-127 .. 2^127 from their values; 0xFF, the NaN, from a NaN.
  std::vector<double> scales;
  for (int code = 0; code < 256; ++code) scales.push_back(fp8::decode(static_cast<std::uint8_t>(code), DType::E8M0));
  return {{"e2m1_pairs", from_vector(pairs, {16, 32}).to(DType::E2M1)},
          {"e2m1_row", from_vector({0.5, 1, 1.5, 2, 3, 4, 6, -6}, {8}).to(DType::E2M1)},
          {"e8m0_codes", from_vector(scales, {256}).to(DType::E8M0)}};
}

// A file of one tensor with the given header entry and data bytes.
void write_raw(const std::string& path, const std::string& entry, std::size_t data_bytes) {
  std::string header = "{\"t\":" + entry + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t size = header.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << header << std::string(data_bytes, '\0');
}

}  // namespace

TEST_CASE("safetensors fp4: a file PyTorch wrote loads with every code in place") {
  const data::SafetensorsFile file = data::load_safetensors(fixture());
  REQUIRE(file.tensors.size() == 3);
  CHECK(file.metadata.at("writer").starts_with("torch "));
  const Tensor& pairs = file.tensors.at("e2m1_pairs");
  CHECK(pairs.dtype() == DType::E2M1);
  CHECK(pairs.shape() == Shape{16, 32});  // torch's [16, 16] of float4_e2m1fn_x2, counted in elements
  const std::vector<double> values = pairs.to(DType::F32).to_vector<double>();
  for (int k = 0; k < 256; ++k) {
    CAPTURE(k);
    CHECK(values[2 * static_cast<std::size_t>(k)] == fp8::decode(static_cast<std::uint8_t>(k % 16), DType::E2M1));
    CHECK(values[2 * static_cast<std::size_t>(k) + 1] == fp8::decode(static_cast<std::uint8_t>(k / 16), DType::E2M1));
  }
  CHECK(file.tensors.at("e2m1_row").to(DType::F32).to_vector<double>() ==
        std::vector<double>{0.5, 1, 1.5, 2, 3, 4, 6, -6});
  const Tensor& scales = file.tensors.at("e8m0_codes");
  CHECK(scales.dtype() == DType::E8M0);
  const std::vector<double> powers = scales.to(DType::F64).to_vector<double>();
  CHECK(powers[0] == 0x1p-127);
  CHECK(powers[127] == 1.0);
  CHECK(powers[254] == 0x1p127);
  CHECK(std::isnan(powers[255]));
}

TEST_CASE("safetensors fp4: mixgrad writes what PyTorch wrote, byte for byte, and reads it back") {
  const data::SafetensorsFile torch_file = data::load_safetensors(fixture());
  const StateDict ours = expected_tensors();
  for (const auto& [name, tensor] : ours) {
    CAPTURE(name);
    CHECK(tensor.shape() == torch_file.tensors.at(name).shape());
    CHECK(tensor.host_bytes("test") == torch_file.tensors.at(name).host_bytes("test"));
  }
  // Left for scripts/make-fp4-fixtures --check (torch loads it): ctest runs this in build/tests.
  data::save_safetensors("mixgrad_fp4.safetensors", ours, {{"writer", "mixgrad test_safetensors_fp4"}});
  const data::SafetensorsFile back = data::load_safetensors("mixgrad_fp4.safetensors");
  for (const auto& [name, tensor] : ours) {
    CAPTURE(name);
    CHECK(back.tensors.at(name).dtype() == tensor.dtype());
    CHECK(back.tensors.at(name).host_bytes("test") == tensor.host_bytes("test"));
  }
}

TEST_CASE("safetensors fp4: an odd last dimension is refused on saving and on loading") {
  testing::TempDir tmp;
  const Tensor odd_rows = from_vector({1, 2, 3, 4, 6, 0}, {2, 3}).to(DType::E2M1);  // 6 elements, whole bytes
  testing::check_error(
      [&] {
        data::save_safetensors(tmp / "odd.safetensors", {{"w", odd_rows}});
      },
      "must be a multiple of 2");
  CHECK_FALSE(std::filesystem::exists(tmp / "odd.safetensors"));
  write_raw(tmp / "odd_rows.safetensors", R"({"dtype":"F4","shape":[2,3],"data_offsets":[0,3]})", 3);
  testing::check_error([&] { (void)data::load_safetensors(tmp / "odd_rows.safetensors"); }, "is F4 of shape [2, 3]");
  write_raw(tmp / "odd_count.safetensors", R"({"dtype":"F4","shape":[3],"data_offsets":[0,2]})", 8);
  testing::check_error([&] { (void)data::load_safetensors(tmp / "odd_count.safetensors"); }, "multiple of 2");
  write_raw(tmp / "scalar.safetensors", R"({"dtype":"F4","shape":[],"data_offsets":[0,1]})", 8);
  testing::check_error([&] { (void)data::load_safetensors(tmp / "scalar.safetensors"); }, "a scalar cannot be stored");
  // The right size for the elements, 2 a byte: [4, 2] is 4 bytes, not 8.
  write_raw(tmp / "short.safetensors", R"({"dtype":"F4","shape":[4,2],"data_offsets":[0,8]})", 8);
  testing::check_error([&] { (void)data::load_safetensors(tmp / "short.safetensors"); }, "needs 4 bytes");
}

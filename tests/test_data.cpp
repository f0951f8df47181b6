// data/: IDX files written here byte by byte (plain, and gzipped with zlib) and read back exactly,
// every damaged-file error naming the file and the fault; the text corpus; the seeded loaders against
// a Fisher-Yates reference written from their documented contract. The installed Fashion-MNIST and
// King James Bible are checked when their Debian packages are present.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/batches.h"
#include "data/idx.h"
#include "data/text.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

// A fresh directory, removed with everything in it at the end of the test.
// An IDX file: big-endian magic and sizes, then the payload.
Bytes idx_file(std::uint32_t magic, const std::vector<std::uint32_t>& sizes, const Bytes& payload) {
  Bytes out;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
  };
  put(magic);
  for (std::uint32_t s : sizes) put(s);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(file), {});
}

// The message of the mg::Error fn throws ("" if it throws none); CHECKs that it contains each needle.
template <class Fn>
void check_error_names(Fn&& fn, const std::vector<std::string>& needles) {
  std::string message;
  try {
    fn();
  } catch (const Error& error) {
    message = error.what();
  }
  INFO("message: " << message);
  REQUIRE(!message.empty());
  for (const auto& needle : needles) CHECK(message.find(needle) != std::string::npos);
}

// Three 2x3 images whose pixels are 0, 1, ..., 16 and 255, and their labels 9, 0, 4.
Bytes image_pixels() {
  Bytes pixels(18);
  std::iota(pixels.begin(), pixels.end(), 0);
  pixels.back() = 255;
  return pixels;
}
const Bytes kLabels = {9, 0, 4};

std::vector<double> scaled(const Bytes& pixels) {
  std::vector<double> out;
  for (std::uint8_t b : pixels) out.push_back(static_cast<float>(b) / 255.0f);
  return out;
}

bool program_exists(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (std::size_t begin = 0, end; begin <= dirs.size(); begin = end + 1) {
    end = std::min(dirs.find(':', begin), dirs.size());
    if (fs::exists(fs::path(dirs.substr(begin, end - begin)) / name)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("IDX images and labels read back exactly, gzipped or plain, whole or limited") {
  TempDir dir;
  const Bytes pixels = image_pixels();
  const Bytes images = idx_file(0x803, {3, 2, 3}, pixels), labels = idx_file(0x801, {3}, kLabels);
  write_plain(dir / "images", images);
  write_gzip(dir / "images.gz", images);
  write_plain(dir / "labels", labels);
  write_gzip(dir / "labels.gz", labels);
  for (const std::string suffix : {"", ".gz"}) {
    Tensor x = data::read_idx_images(dir / ("images" + suffix));
    CHECK(x.shape() == Shape{3, 1, 2, 3});
    CHECK(x.dtype() == DType::F32);
    check_values(x, scaled(pixels), 0.0, 0.0);
    Tensor y = data::read_idx_labels(dir / ("labels" + suffix));
    CHECK(y.dtype() == DType::I32);
    check_values(y, {9, 0, 4}, 0.0, 0.0);
    Tensor first = data::read_idx_images(dir / ("images" + suffix), 2);
    CHECK(first.shape() == Shape{2, 1, 2, 3});
    check_values(first, scaled(Bytes(pixels.begin(), pixels.begin() + 12)), 0.0, 0.0);
    CHECK(data::read_idx_labels(dir / ("labels" + suffix), 5).numel() == 3);  // a limit past N reads N
  }
}

TEST_CASE("load_fashion_mnist finds .gz or plain files and checks that they agree") {
  TempDir dir;
  write_gzip(dir / "train-images-idx3-ubyte.gz", idx_file(0x803, {3, 2, 3}, image_pixels()));
  write_gzip(dir / "train-labels-idx1-ubyte.gz", idx_file(0x801, {3}, kLabels));
  write_plain(dir / "t10k-images-idx3-ubyte", idx_file(0x803, {3, 2, 3}, image_pixels()));
  write_plain(dir / "t10k-labels-idx1-ubyte", idx_file(0x801, {2}, {1, 2}));
  data::LabeledImages train = data::load_fashion_mnist(dir.path.string(), data::Split::Train, 2);
  CHECK(train.size() == 2);
  check_values(train.labels, {9, 0}, 0.0, 0.0);
  check_error_names([&] { data::load_fashion_mnist(dir.path.string(), data::Split::Test, 1); },
                    {"t10k-images-idx3-ubyte", "holds 3 images", "t10k-labels-idx1-ubyte", "2 labels"});
  fs::remove(dir / "t10k-labels-idx1-ubyte");
  check_error_names([&] { data::load_fashion_mnist(dir.path.string(), data::Split::Test); },
                    {"t10k-labels-idx1-ubyte.gz", dir.path.string(), "apt-get install dataset-fashion-mnist"});
  check_error_names([&] { data::load_fashion_mnist(dir / "nowhere"); },
                    {"nowhere", "does not exist", "dataset-fashion-mnist"});
  CHECK(data::fashion_mnist_classes()[9] == "Ankle boot");
}

TEST_CASE("damaged IDX files give an mg::Error naming the file and the fault") {
  TempDir dir;
  const Bytes images = idx_file(0x803, {3, 2, 3}, image_pixels());
  const std::string path = dir / "bad";
  auto images_error = [&](const Bytes& bytes, const std::vector<std::string>& needles) {
    write_plain(path, bytes);
    check_error_names([&] { data::read_idx_images(path); }, needles);
    write_gzip(path, bytes);  // the same fault inside a sound gzip stream reads the same
    check_error_names([&] { data::read_idx_images(path); }, needles);
  };
  images_error(Bytes(images.begin(), images.end() - 1), {path, "truncated", "18 bytes of data", "got 17"});
  images_error(Bytes(images.begin(), images.begin() + 10), {path, "truncated inside its header"});
  images_error(Bytes(images.begin(), images.begin() + 2), {path, "too short"});
  images_error(idx_file(0x801, {3}, kLabels), {path, "bad magic", "0x00000801", "expected 0x00000803"});
  images_error(idx_file(0x803, {3, 0, 3}, {}), {path, "absurd sizes"});
  images_error(idx_file(0x803, {3, 1u << 20, 3}, {}), {path, "absurd sizes"});
  images_error(idx_file(0x803, {0, 2, 3}, {}), {path, "0 items"});
  Bytes longer = images;
  longer.push_back(7);
  images_error(longer, {path, "bytes past the 3 items"});

  write_plain(path, idx_file(0x801, {3}, {9, 10, 4}));
  check_error_names([&] { data::read_idx_labels(path); }, {path, "label 10 at index 1", "0..9"});
  check_error_names([&] { data::read_idx_images(dir / "missing.gz"); }, {"missing.gz", "no such file"});

  // A gzip stream cut in half, and one whose first deflate block claims the reserved type 3.
  write_gzip(path, images);
  const Bytes gz = read_bytes(path);
  write_plain(path, Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  check_error_names([&] { data::read_idx_images(path); }, {path, "gzip", "zlib"});
  Bytes corrupt = gz;
  corrupt[10] |= 0x06;  // the byte after the 10-byte gzip header starts the first block
  write_plain(path, corrupt);
  check_error_names([&] { data::read_idx_images(path); }, {path, "gzip", "invalid block type"});
}

TEST_CASE("the installed Fashion-MNIST: 60000 + 10000 images in [0, 1], 6000 of each class") {
  if (!fs::exists(data::default_fashion_mnist_dir())) return;  // Debian package dataset-fashion-mnist
  data::LabeledImages train = data::load_fashion_mnist();
  data::LabeledImages test = data::load_fashion_mnist(data::default_fashion_mnist_dir(), data::Split::Test);
  CHECK(train.images.shape() == Shape{60000, 1, 28, 28});
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
  std::vector<int> per_class(10, 0);
  for (std::int32_t label : train.labels.to_vector<std::int32_t>()) ++per_class[static_cast<std::size_t>(label)];
  CHECK(per_class == std::vector<int>(10, 6000));
  const float* pixels = train.images.data<float>();
  auto [lowest, highest] = std::minmax_element(pixels, pixels + train.images.numel());
  CHECK(*lowest == 0.0f);
  CHECK(*highest == 1.0f);
}

TEST_CASE("TextCorpus: sorted byte vocabulary, encode/decode, a 90/10 split, and its errors") {
  const std::string text = "abracadabra, said the cat; abracadabra!";  // 39 characters
  data::TextCorpus corpus(text, "spell");
  CHECK(corpus.vocabulary() == " !,;abcdehirst");
  Tensor ids = corpus.encode("cat!");
  check_values(ids, {6, 4, 13, 1}, 0.0, 0.0);
  CHECK(corpus.decode(ids) == "cat!");
  CHECK(corpus.train().numel() == 35);  // floor(0.9 * 39)
  CHECK(corpus.decode(corpus.train()) + corpus.decode(corpus.validation()) == text);

  check_error_names([&] { corpus.encode("cab?"); }, {"encode", "'?' (0x3f) at position 3", "spell"});
  Tensor bad = tensor({4, 14}, {.dtype = DType::I32});
  check_error_names([&] { corpus.decode(bad); }, {"decode", "id 14 at position 1", "0..13"});
  check_error_names([&] { corpus.decode(tensor({-1}, {.dtype = DType::I32})); }, {"id -1 at position 0"});
  check_error_names([] { data::TextCorpus("too short", "tiny"); }, {"'tiny' has 9 characters", "at least 20"});

  TempDir dir;
  write_plain(dir / "text.txt", Bytes(text.begin(), text.end()));
  CHECK(data::load_text_file(dir / "text.txt").text() == text);
  write_plain(dir / "empty.txt", {});
  check_error_names([&] { data::load_text_file(dir / "empty.txt"); }, {"empty.txt", "is empty"});
  check_error_names([&] { data::load_text_file(dir / "none.txt"); }, {"none.txt", "no such file"});
}

TEST_CASE("the King James Bible from bible-kjv: 4.3 MB, cached after the first call") {
  if (!program_exists("bible")) return;  // Debian package bible-kjv
  TempDir dir;
  const char* previous = std::getenv("MG_CACHE_DIR");
  const std::string saved = previous != nullptr ? previous : "";
  ::setenv("MG_CACHE_DIR", dir.path.c_str(), 1);
  const std::string first = data::kjv_text();
  CHECK(fs::file_size(dir / "kjv.txt") == first.size());
  const std::string second = data::kjv_text();  // from the cache this time
  previous != nullptr ? ::setenv("MG_CACHE_DIR", saved.c_str(), 1) : ::unsetenv("MG_CACHE_DIR");

  CHECK(second == first);
  CHECK(first.size() > 4'200'000);
  CHECK(first.size() < 4'400'000);
  CHECK(first.starts_with("\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n"));
  CHECK(first.ends_with("The grace of our Lord Jesus Christ be with you all. Amen.\n"));
  data::TextCorpus corpus(first, "KJV");
  CHECK(corpus.vocab_size() == 73);  // newline, space, 10 punctuation marks, digits and letters
  CHECK(corpus.train().numel() == static_cast<std::int64_t>(0.9 * static_cast<double>(first.size())));
  CHECK(corpus.train().numel() + corpus.validation().numel() == corpus.size());
}

namespace {

// Inputs [10, 2] whose row r is (r, 100 + r), labels [10] = r: a batch shows which rows it holds.
data::DataLoader make_loader(data::DataLoaderOptions options) {
  std::vector<double> rows;
  for (int r = 0; r < 10; ++r) rows.insert(rows.end(), {double(r), 100.0 + r});
  return data::DataLoader(from_vector(rows, {10, 2}), arange(10, {.dtype = DType::I32}), options);
}

// The rows of one whole epoch, in the order served.
std::vector<std::int32_t> epoch_rows(data::DataLoader& loader) {
  std::vector<std::int32_t> rows;
  do {
    data::Batch batch = loader.next();
    for (std::int32_t r : batch.labels.to_vector<std::int32_t>()) rows.push_back(r);
    std::vector<float> x = batch.inputs.to_vector<float>();
    for (std::size_t i = 0; i < x.size() / 2; ++i) CHECK(x[2 * i + 1] == 100.0f + x[2 * i]);
  } while (!loader.end_of_epoch());
  return rows;
}

// Fisher-Yates as batches.h documents it, written out here to pin the order on every machine.
std::vector<std::int32_t> reference_order(std::uint64_t seed, std::int64_t epoch, std::int64_t n) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const std::uint64_t first_block = static_cast<std::uint64_t>(epoch) * ((2 * (n - 1) + 3) / 4);
  for (std::int64_t i = n - 1, draw = 0; i >= 1; --i, ++draw) {
    std::uint64_t u = (std::uint64_t{random_word(seed, first_block, 2 * draw)} << 32) |
                      random_word(seed, first_block, 2 * draw + 1);
    auto j = static_cast<std::size_t>((static_cast<unsigned __int128>(u) * (i + 1)) >> 64);
    std::swap(order[static_cast<std::size_t>(i)], order[j]);
  }
  return order;
}

}  // namespace

TEST_CASE("DataLoader: each row once per epoch, seeded order, drop_last, batches that stay put") {
  data::DataLoader loader = make_loader({.batch_size = 3, .seed = 7});
  CHECK(loader.batches_per_epoch() == 4);
  std::vector<std::int32_t> epoch0 = epoch_rows(loader), epoch1 = epoch_rows(loader);
  CHECK(loader.epoch() == 1);
  CHECK(epoch0 == reference_order(7, 0, 10));
  CHECK(epoch1 == reference_order(7, 1, 10));
  CHECK(epoch0 != epoch1);
  std::vector<std::int32_t> sorted = epoch1;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

  data::DataLoader same = make_loader({.batch_size = 3, .seed = 7}), other = make_loader({.batch_size = 3, .seed = 8});
  CHECK(epoch_rows(same) == epoch0);
  CHECK(epoch_rows(other) != epoch0);
  data::DataLoader ordered = make_loader({.batch_size = 4, .shuffle = false});
  CHECK(epoch_rows(ordered) == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

  data::DataLoader dropping = make_loader({.batch_size = 4, .drop_last = true, .seed = 7});
  CHECK(dropping.batches_per_epoch() == 2);
  data::Batch held = dropping.next();
  const std::vector<std::int32_t> held_labels = held.labels.to_vector<std::int32_t>();
  CHECK(held.inputs.shape() == Shape{4, 2});
  CHECK(dropping.next().labels.numel() == 4);
  CHECK(dropping.end_of_epoch());
  for (int i = 0; i < 4; ++i) dropping.next();
  CHECK(held.labels.to_vector<std::int32_t>() == held_labels);  // later batches left it alone

  check_error_names([] { make_loader({.batch_size = 0}); }, {"DataLoader", "batch_size must be >= 1, got 0"});
  check_error_names([] { make_loader({.batch_size = 11, .drop_last = true}); }, {"larger than the 10 examples"});
  check_error_names([] { data::DataLoader(zeros({10, 2}), zeros({9})); }, {"DataLoader", "10 vs 9"});
}

TEST_CASE("DataLoader: a run resumed from state_dict serves the batches it would have served") {
  data::DataLoader run = make_loader({.batch_size = 3, .seed = 11});
  for (int i = 0; i < 5; ++i) run.next();  // into the second epoch
  const StateDict state = run.state_dict();
  CHECK(state.at("epoch").item() == 1);
  CHECK(state.at("batch_index").item() == 1);
  data::DataLoader resumed = make_loader({.batch_size = 3, .seed = 0});
  resumed.load_state_dict(state);
  for (int i = 0; i < 9; ++i) {
    data::Batch a = run.next(), b = resumed.next();
    CHECK(a.labels.to_vector<std::int32_t>() == b.labels.to_vector<std::int32_t>());
    CHECK(a.inputs.to_vector<float>() == b.inputs.to_vector<float>());
  }
  data::DataLoader big_seed = make_loader({.batch_size = 3, .seed = 0xfedcba9876543210u});
  data::DataLoader copy = make_loader({.batch_size = 3});
  copy.load_state_dict(big_seed.state_dict());
  CHECK(copy.options().seed == 0xfedcba9876543210u);  // every bit of a 64-bit seed survives f64

  data::DataLoader wrong = make_loader({.batch_size = 4, .seed = 11});
  check_error_names([&] { wrong.load_state_dict(state); }, {"load_state_dict", "batch_size = 3", "batch_size = 4"});
  CHECK(wrong.epoch() == 0);
}

TEST_CASE("TextBatcher: random windows whose targets are the inputs shifted by one; resumable") {
  Tensor tokens = arange(100, {.dtype = DType::I32});  // token i is i, so a window shows its start
  data::TextBatcher batcher(tokens, 4, 8, 3);
  std::vector<std::int32_t> starts;
  for (int step = 0; step < 3; ++step) {
    data::TextBatch batch = batcher.next();
    CHECK(batch.inputs.shape() == Shape{4, 8});
    std::vector<std::int32_t> x = batch.inputs.to_vector<std::int32_t>(), y = batch.targets.to_vector<std::int32_t>();
    for (int b = 0; b < 4; ++b) {
      const std::int32_t start = x[static_cast<std::size_t>(8 * b)];
      starts.push_back(start);
      CHECK(start <= 91);  // the window's last target, start + 8, is token 99 at most
      for (int t = 0; t < 8; ++t) {
        CHECK(x[static_cast<std::size_t>(8 * b + t)] == start + t);
        CHECK(y[static_cast<std::size_t>(8 * b + t)] == start + t + 1);
      }
    }
  }
  data::TextBatcher same(tokens, 4, 8, 3), other(tokens, 4, 8, 4);
  CHECK(same.next().inputs.to_vector<std::int32_t>() != other.next().inputs.to_vector<std::int32_t>());

  data::TextBatcher resumed(tokens, 4, 8);
  resumed.load_state_dict(batcher.state_dict());
  CHECK(resumed.step() == 3);
  for (int i = 0; i < 3; ++i)
    CHECK(resumed.next().inputs.to_vector<std::int32_t>() == batcher.next().inputs.to_vector<std::int32_t>());
  check_error_names([&] { data::TextBatcher(tokens, 4, 100); }, {"TextBatcher", "101 tokens is longer than the 100"});
  check_error_names([&] { data::TextBatcher(tokens, 0, 8); }, {"TextBatcher", "batch_size must be >= 1"});
  check_error_names([&] { data::TextBatcher(zeros({100}), 4, 8); }, {"1-D i32"});
}

TEST_CASE("sequential_batches: non-overlapping windows in order, the last batch smaller") {
  Tensor tokens = arange(20, {.dtype = DType::I32});
  std::vector<data::TextBatch> batches = data::sequential_batches(tokens, 2, 5);  // (20 - 1) / 5 = 3 windows
  REQUIRE(batches.size() == 2);
  check_values(batches[0].inputs, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0.0, 0.0);
  check_values(batches[0].targets, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.0, 0.0);
  CHECK(batches[1].inputs.shape() == Shape{1, 5});
  check_values(batches[1].targets, {11, 12, 13, 14, 15}, 0.0, 0.0);
  CHECK(data::sequential_batches(tokens, 3, 19).size() == 1);  // one window: tokens 0..19
  check_error_names([&] { data::sequential_batches(tokens, 3, 20); }, {"sequential_batches", "longer than"});
}

#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace mg::data {

namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // u8, 3 dims: N, rows, cols
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // u8, 1 dim: N
// A side longer than this is a corrupt header, not a picture (Fashion-MNIST's are 28).
constexpr std::uint32_t kMaxSide = 1u << 14;

// One gzFile, closed on every way out. zlib's gz* calls read plain files too (gzread copies
// bytes that do not start with the gzip magic), so one path serves both kinds of file.
class GzReader {
 public:
  GzReader(const std::string& path, const char* op) : path_(path), op_(op) {
    std::error_code ec;
    MG_CHECK(std::filesystem::exists(path, ec), "{}: cannot open '{}': no such file", op, path);
    MG_CHECK(!std::filesystem::is_directory(path, ec), "{}: '{}' is a directory, not an IDX file", op, path);
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    MG_CHECK(file_ != nullptr, "{}: cannot open '{}': {}", op, path,
             errno != 0 ? std::strerror(errno) : "zlib could not allocate its state");
    gzbuffer(file_, 1u << 18);  // fewer, larger reads than the 8 KiB default
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into dst and returns how many came: fewer only at the end of the data.
  // A damaged gzip stream (bad bytes, or one that stops before its end) is an mg::Error with zlib's
  // own words; the caller reports a clean but short file.
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    std::size_t total = 0;
    while (total < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - total, 1u << 30));
      const int got = gzread(file_, dst + total, chunk);
      check_stream(got < 0);
      if (got <= 0) break;
      total += static_cast<std::size_t>(got);
      if (static_cast<unsigned>(got) < chunk) break;
    }
    if (total < n) check_stream(false);
    return total;
  }

 private:
  void check_stream(bool failed) {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (!failed && (code == Z_OK || code == Z_STREAM_END)) return;
    if (code == Z_ERRNO) message = std::strerror(errno);
    throw Error(fmt::format("{}: '{}' is not a readable gzip stream (zlib: {}); the file is damaged or "
                            "cut short: download or reinstall it",
                            op_, path_, message));
  }

  std::string path_;
  const char* op_;
  gzFile file_ = nullptr;
};

std::uint32_t big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

// What a magic number claims to be, for the message when it is not the one expected.
std::string describe_magic(std::uint32_t magic) {
  if (magic == kImagesMagic) return "an IDX file of u8 images";
  if (magic == kLabelsMagic) return "an IDX file of u8 labels";
  if ((magic >> 16) == 0x1f8b) return "a gzip header inside the data: a file gzipped twice?";
  if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) >= 0x08) return "an IDX file of another element type or rank";
  return "not an IDX file";
}

// The contents of one u8 IDX file: its sizes as the header gives them and the bytes of the first
// `count` items (all of them unless a limit was asked for).
struct IdxBytes {
  std::string path;
  std::vector<std::int64_t> header_sizes;  // [N] or [N, rows, cols]
  std::int64_t count = 0;  // items read: N, or the limit if smaller
  std::vector<std::uint8_t> bytes;  // count * item size
};

IdxBytes read_idx(const std::string& path, std::uint32_t magic, std::int64_t limit, const char* op) {
  MG_CHECK(limit >= 0, "{}: limit must be >= 0 (0 reads every item), got {}", op, limit);
  GzReader reader(path, op);
  const int rank = static_cast<int>(magic & 0xff);

  std::uint8_t header[16];
  const std::size_t header_bytes = 4 * static_cast<std::size_t>(1 + rank);
  const std::size_t got_header = reader.read(header, header_bytes);
  MG_CHECK(got_header >= 4, "{}: '{}' is too short to be an IDX file: expected a {}-byte header, got {} bytes", op,
           path, header_bytes, got_header);
  const std::uint32_t found = big_endian_u32(header);
  MG_CHECK(found == magic, "{}: '{}' has bad magic number 0x{:08x} ({}); expected 0x{:08x} ({})", op, path, found,
           describe_magic(found), magic, describe_magic(magic));
  MG_CHECK(got_header == header_bytes, "{}: '{}' is truncated inside its header: expected {} bytes, got {}", op, path,
           header_bytes, got_header);

  IdxBytes idx;
  idx.path = path;
  for (int d = 0; d < rank; ++d) idx.header_sizes.push_back(big_endian_u32(header + 4 * (1 + d)));
  MG_CHECK(idx.header_sizes[0] > 0, "{}: '{}' says it holds 0 items; an empty data set is of no use", op, path);
  for (int d = 1; d < rank; ++d)
    MG_CHECK(idx.header_sizes[d] >= 1 && idx.header_sizes[d] <= kMaxSide,
             "{}: '{}' has absurd sizes {} (each image side must be 1..{}): a corrupt header", op, path,
             idx.header_sizes, kMaxSide);

  // The sizes are checked against the bytes actually present, so the buffer grows with what the
  // file delivers: a header claiming 2^32 items fails as "truncated", not as a 3 TB allocation.
  const std::size_t item_bytes = static_cast<std::size_t>(product(idx.header_sizes, 1, idx.header_sizes.size()));
  idx.count = limit > 0 ? std::min(limit, idx.header_sizes[0]) : idx.header_sizes[0];
  const std::size_t want = static_cast<std::size_t>(idx.count) * item_bytes;
  std::size_t have = 0;
  while (have < want) {
    const std::size_t chunk = std::min(want - have, std::max<std::size_t>(have, 1u << 20));
    idx.bytes.resize(have + chunk);
    const std::size_t got = reader.read(idx.bytes.data() + have, chunk);
    have += got;
    if (got < chunk) break;
  }
  MG_CHECK(have == want,
           "{}: '{}' is truncated: its header promises {} items of {} bytes, so {} bytes of data; "
           "got {}",
           op, path, idx.count, item_bytes, want, have);
  if (limit == 0) {
    std::uint8_t extra = 0;
    MG_CHECK(reader.read(&extra, 1) == 0,
             "{}: '{}' has bytes past the {} items its header describes: the "
             "header and the data disagree",
             op, path, idx.count);
  }
  return idx;
}

Tensor images_tensor(const IdxBytes& idx) {
  // b / 255.0f for every byte, computed once: the conversion is then one lookup per pixel.
  std::array<float, 256> scale{};
  for (int b = 0; b < 256; ++b) scale[b] = static_cast<float>(b) / 255.0f;
  Tensor images = Tensor::empty({idx.count, 1, idx.header_sizes[1], idx.header_sizes[2]});
  float* out = images.data<float>();
  for (std::size_t i = 0; i < idx.bytes.size(); ++i) out[i] = scale[idx.bytes[i]];
  return images;
}

Tensor labels_tensor(const IdxBytes& idx, int num_classes, const char* op) {
  MG_CHECK(num_classes >= 1 && num_classes <= 256, "{}: num_classes must be 1..256 (labels are bytes), got {}", op,
           num_classes);
  Tensor labels = Tensor::empty({idx.count}, {.dtype = DType::I32});
  std::int32_t* out = labels.data<std::int32_t>();
  for (std::size_t i = 0; i < idx.bytes.size(); ++i) {
    MG_CHECK(idx.bytes[i] < num_classes, "{}: '{}' has label {} at index {}, out of range 0..{}", op, idx.path,
             idx.bytes[i], i, num_classes - 1);
    out[i] = idx.bytes[i];
  }
  return labels;
}

// `directory`/`name`.gz, else `directory`/`name`, else an error that says how to get the set.
std::string find_file(const std::string& directory, const std::string& name, const char* op) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& candidate : {name + ".gz", name})
    if (fs::exists(fs::path(directory) / candidate, ec)) return (fs::path(directory) / candidate).string();
  const std::string what = fs::is_directory(directory, ec)
                               ? fmt::format("no '{}.gz' (nor '{}') in '{}'", name, name, directory)
                               : fmt::format("the directory '{}' does not exist", directory);
  throw Error(fmt::format("{}: {}. Fashion-MNIST comes with the Debian package dataset-fashion-mnist (apt-get "
                          "install dataset-fashion-mnist); or pass the directory that holds the four files, or "
                          "set MG_FASHION_MNIST_DIR",
                          op, what));
}

}  // namespace

Tensor read_idx_images(const std::string& path, std::int64_t limit) {
  return images_tensor(read_idx(path, kImagesMagic, limit, "mg::data::read_idx_images"));
}

Tensor read_idx_labels(const std::string& path, std::int64_t limit, int num_classes) {
  const char* op = "mg::data::read_idx_labels";
  return labels_tensor(read_idx(path, kLabelsMagic, limit, op), num_classes, op);
}

std::string default_fashion_mnist_dir() {
  const char* from_env = std::getenv("MG_FASHION_MNIST_DIR");
  return from_env != nullptr && *from_env != '\0' ? from_env : "/usr/share/datasets/fashion-mnist";
}

LabeledImages load_fashion_mnist(const std::string& directory, Split split, std::int64_t limit) {
  const char* op = "mg::data::load_fashion_mnist";
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string images_path = find_file(directory, prefix + "-images-idx3-ubyte", op);
  const std::string labels_path = find_file(directory, prefix + "-labels-idx1-ubyte", op);
  IdxBytes images = read_idx(images_path, kImagesMagic, limit, op);
  IdxBytes labels = read_idx(labels_path, kLabelsMagic, limit, op);
  // Compared on the headers, so a mismatch is caught even when a limit reads fewer of both.
  MG_CHECK(images.header_sizes[0] == labels.header_sizes[0],
           "{}: '{}' holds {} images but '{}' holds {} labels; the two files are from different sets", op, images_path,
           images.header_sizes[0], labels_path, labels.header_sizes[0]);
  return {.images = images_tensor(images), .labels = labels_tensor(labels, 10, op)};
}

const std::array<std::string, 10>& fashion_mnist_classes() {
  static const std::array<std::string, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

}  // namespace mg::data

// IDX files (LeCun's MNIST format) and the Fashion-MNIST set read from them.
//
//   data::LabeledImages train = data::load_fashion_mnist();                // 60000 images
//   data::LabeledImages test = data::load_fashion_mnist(dir, data::Split::Test, 1000);  // first 1000
//   // train.images: [60000, 1, 28, 28] f32 in [0, 1];  train.labels: [60000] i32 in 0..9
//
// The format: a big-endian 32-bit magic number 0x000008TD, where T is the element type (0x08 =
// unsigned byte, the only one these files use) and D the number of dimensions; then D big-endian
// 32-bit sizes; then the elements, row-major. Images are 0x00000803 (N, rows, cols), labels
// 0x00000801 (N). A file may be gzipped or plain: zlib reads both through the same calls.
//
// Every failure is an mg::Error that names the file and what is wrong (missing, bad magic, too
// short, corrupt gzip, absurd sizes, labels out of range, images and labels that disagree), thrown
// before any tensor is returned: a reader never hands back part of a file.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mg::data {

enum class Split { Train, Test };

struct LabeledImages {
  Tensor images;  // [N, 1, rows, cols] f32: byte / 255, so 0 is black and 1 is white
  Tensor labels;  // [N] i32: class ids
  std::int64_t size() const { return labels.numel(); }
};

// An IDX file of u8 images, as [N, 1, rows, cols] f32 with each byte b stored as b / 255.0f.
// limit > 0 reads the first `limit` images only (fewer if the file holds fewer); 0 reads all, and
// then bytes past the last image are an error (the header and the data disagree).
Tensor read_idx_images(const std::string& path, std::int64_t limit = 0);

// An IDX file of u8 labels, as [N] i32. Every label must be below num_classes. limit as above.
Tensor read_idx_labels(const std::string& path, std::int64_t limit = 0, int num_classes = 10);

// Where Debian's package dataset-fashion-mnist puts the files: $MG_FASHION_MNIST_DIR if set,
// otherwise /usr/share/datasets/fashion-mnist.
std::string default_fashion_mnist_dir();

// The images and labels of one split: train-*-idx?-ubyte(.gz) (60000) or t10k-* (10000), from
// `directory`. Each file is looked for gzipped first, then plain (as a downloaded set unpacks).
// limit > 0 keeps the first `limit` examples. The two files must hold the same number of examples.
LabeledImages load_fashion_mnist(const std::string& directory = default_fashion_mnist_dir(), Split split = Split::Train,
                                 std::int64_t limit = 0);

// The ten class names, by label: 0 "T-shirt/top", 1 "Trouser", ..., 9 "Ankle boot".
const std::array<std::string, 10>& fashion_mnist_classes();

}  // namespace mg::data

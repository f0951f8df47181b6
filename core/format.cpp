#include "core/format.h"

#include <algorithm>

namespace mg {

namespace {

constexpr std::int64_t kSummariseAbove = 1000;  // elements
constexpr std::int64_t kEdgeItems = 3;  // shown at each end of a dim when summarising

// The indices of one dim that are printed; -1 stands for "...".
std::vector<std::int64_t> shown_indices(std::int64_t size, bool summarise) {
  std::vector<std::int64_t> indices;
  if (!summarise || size <= 2 * kEdgeItems) {
    for (std::int64_t i = 0; i < size; ++i) indices.push_back(i);
    return indices;
  }
  for (std::int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
  indices.push_back(-1);
  for (std::int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
  return indices;
}

struct Printer {
  const Tensor& tensor;
  bool summarise;
  std::vector<std::string> cells;  // every printed value, in order, to compute the column width
  std::size_t width = 0;

  std::string value(std::int64_t flat) const {
    const void* data = tensor.data_ptr();
    const DType dtype = tensor.dtype();
    if (dtype == DType::I64)  // read as itself: a double holds every i64 only up to 2^53
      return fmt::format("{}", static_cast<const std::int64_t*>(data)[flat]);
    if (dtype == DType::BOOL) return static_cast<const std::uint8_t*>(data)[flat] ? "true" : "false";
    if (is_integer(dtype)) return fmt::format("{}", static_cast<std::int64_t>(load_as_double(data, dtype, flat)));
    return fmt::format("{:.5g}", load_as_double(data, dtype, flat));
  }

  void collect(std::size_t dim, std::int64_t base) {
    const Shape& shape = tensor.shape();
    if (dim == shape.size()) {
      cells.push_back(value(base));
      return;
    }
    std::int64_t stride = product(shape, dim + 1, shape.size());
    for (std::int64_t i : shown_indices(shape[dim], summarise))
      if (i >= 0) collect(dim + 1, base + i * stride);
  }

  // Writes dim `dim` starting at cell `next`; `indent` is the column where its '[' sits.
  void write(std::string& out, std::size_t dim, std::size_t& next, std::size_t indent) const {
    const Shape& shape = tensor.shape();
    if (dim == shape.size()) {
      out += fmt::format("{:>{}}", cells[next++], width);
      return;
    }
    out += '[';
    auto indices = shown_indices(shape[dim], summarise);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      if (k > 0) {
        out += ',';
        // Inner rows break the line, with a blank line between blocks of higher dims.
        if (dim + 1 < shape.size())
          out += std::string(shape.size() - dim - 1, '\n') + std::string(indent + 1, ' ');
        else
          out += ' ';
      }
      if (indices[k] < 0)
        out += "...";
      else
        write(out, dim + 1, next, indent + 1);
    }
    out += ']';
  }
};

}  // namespace

std::string to_string(const Tensor& tensor) {
  if (!tensor.defined()) return "tensor(undefined)";
  std::string suffix = fmt::format("shape={}, dtype={}", tensor.shape(), tensor.dtype());
  if (!tensor.device().is_cpu()) suffix += fmt::format(", device={}", tensor.device());
  if (tensor.requires_grad()) suffix += ", requires_grad";
  if (!tensor.device().is_cpu()) return fmt::format("tensor(<values on {}>, {})", tensor.device(), suffix);
  if (tensor.numel() == 0) return fmt::format("tensor([], {})", suffix);

  Printer printer{tensor, tensor.numel() > kSummariseAbove, {}, 0};
  printer.collect(0, 0);
  for (const auto& cell : printer.cells) printer.width = std::max(printer.width, cell.size());
  std::string out = "tensor(";
  std::size_t next = 0;
  printer.write(out, 0, next, out.size());
  return out + ", " + suffix + ")";
}

}  // namespace mg

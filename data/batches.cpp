#include "data/batches.h"

#include <cmath>
#include <cstring>

#include "core/generator.h"

namespace mg::data {

namespace {

// Word pair (2 index, 2 index + 1) of a draw, as one 64-bit number: 64 bits make the bias of
// the multiply-shift below (at most n / 2^64) invisible for any n a data set can have.
std::uint64_t random_u64(std::uint64_t seed, std::uint64_t first_block, std::uint64_t index) {
  return (std::uint64_t{random_word(seed, first_block, 2 * index)} << 32) |
         random_word(seed, first_block, 2 * index + 1);
}

// floor(u * n / 2^64): uniform in [0, n) for a uniform 64-bit u (Lemire's multiply-shift).
std::int64_t below(std::uint64_t u, std::int64_t n) {
  return static_cast<std::int64_t>((static_cast<unsigned __int128>(u) * static_cast<std::uint64_t>(n)) >> 64);
}

std::uint64_t blocks_for_words(std::uint64_t words) { return (words + 3) / 4; }

// A new tensor of `count` rows of `source` ([N, ...]): rows[0], rows[1], ... of dim 0.
Tensor gather_rows(const Tensor& source, const std::int64_t* rows, std::int64_t count) {
  Shape shape = source.shape();
  shape[0] = count;
  Tensor out = Tensor::empty(shape, {.dtype = source.dtype()});
  const std::size_t row_bytes = source.nbytes() / static_cast<std::size_t>(source.size(0));
  const auto* from = static_cast<const char*>(source.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  for (std::int64_t i = 0; i < count; ++i)
    std::memcpy(to + i * row_bytes, from + rows[i] * static_cast<std::int64_t>(row_bytes), row_bytes);
  return out;
}

// The seed in two 32-bit halves: an f64 holds integers exactly only up to 2^53.
void put_seed(StateDict& state, std::uint64_t seed) {
  state["seed_high"] = state_scalar(static_cast<double>(seed >> 32));
  state["seed_low"] = state_scalar(static_cast<double>(seed & 0xffffffffu));
}

std::uint64_t get_seed(const StateDict& state, const std::string& owner) {
  constexpr std::int64_t kMaxHalf = 0xffffffff;
  const auto high = static_cast<std::uint64_t>(state_whole_number(state, "seed_high", owner, 0, kMaxHalf));
  const auto low = static_cast<std::uint64_t>(state_whole_number(state, "seed_low", owner, 0, kMaxHalf));
  return (high << 32) | low;
}

// The saved value under `key` must equal this object's: a different size or batching would serve
// different batches, so resuming from it would not be a resume.
void check_same(const StateDict& state, const std::string& key, double mine, const std::string& owner) {
  const double saved = state_value(state, key, owner);
  MG_CHECK(saved == mine,
           "{}: the state was saved with {} = {}, this object has {} = {}; it would serve "
           "different batches. Build it with the same data and options as the run that saved it",
           owner, key, saved, key, mine);
}

void check_cpu(const Tensor& tensor, const char* what, const char* op) {
  MG_CHECK(tensor.defined(), "{}: {} is undefined", op, what);
  MG_CHECK(tensor.device().is_cpu(),
           "{}: {} is on {}; batches are gathered on the CPU, so pass a CPU tensor "
           "and copy each batch to the device",
           op, what, tensor.device());
  MG_CHECK(tensor.dim() >= 1, "{}: {} must have a batch dimension (dim 0), got a 0-d tensor", op, what);
}

void check_shard(const Shard& shard, const char* op) {
  MG_CHECK(shard.count >= 1 && shard.index >= 0 && shard.index < shard.count,
           "{}: shard {} of {} does not exist; "
           "a shard's index runs from 0 to count - 1 (the rank and the number of ranks)",
           op, shard.index, shard.count);
}

}  // namespace

// ---- DataLoader -----------------------------------------------------------------------------------

DataLoader::DataLoader(Tensor inputs, Tensor labels, DataLoaderOptions options)
    : inputs_(std::move(inputs)), labels_(std::move(labels)), options_(options) {
  const char* op = "mg::data::DataLoader";
  check_cpu(inputs_, "inputs", op);
  check_cpu(labels_, "labels", op);
  size_ = inputs_.size(0);
  MG_CHECK(labels_.size(0) == size_, "{}: inputs {} and labels {} disagree on the number of examples ({} vs {})", op,
           inputs_.shape(), labels_.shape(), size_, labels_.size(0));
  MG_CHECK(size_ >= 1, "{}: inputs {} hold no examples", op, inputs_.shape());
  MG_CHECK(options_.batch_size >= 1, "{}: batch_size must be >= 1, got {}", op, options_.batch_size);
  batches_per_epoch_ = options_.drop_last ? size_ / options_.batch_size
                                          : (size_ + options_.batch_size - 1) / options_.batch_size;
  MG_CHECK(batches_per_epoch_ >= 1,
           "{}: batch_size {} is larger than the {} examples and drop_last is set, so "
           "no batch would ever be served; lower the batch size or turn drop_last off",
           op, options_.batch_size, size_);
  check_shard(options_.shard, op);
  const std::int64_t last = size_ % options_.batch_size;  // rows of the last, smaller batch (0: none)
  const std::int64_t fewest = options_.drop_last || last == 0 ? options_.batch_size : last;
  MG_CHECK(options_.batch_size >= options_.shard.count,
           "{}: a batch of {} rows cannot be shared by {} ranks (one row "
           "each at least); use a batch of at least {}",
           op, options_.batch_size, options_.shard.count, options_.shard.count);
  MG_CHECK(fewest >= options_.shard.count,
           "{}: a batch of {} rows cannot be shared by {} ranks (one row each at "
           "least): {} rows in batches of {} leave a last batch of {}. Use another batch size or number of examples, "
           "or drop_last",
           op, fewest, options_.shard.count, size_, options_.batch_size, last);
  order_.resize(static_cast<std::size_t>(size_));
  start_epoch(0);
}

void DataLoader::start_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  batch_index_ = 0;
  for (std::int64_t i = 0; i < size_; ++i) order_[static_cast<std::size_t>(i)] = i;
  if (!options_.shuffle) return;
  const std::uint64_t words = 2 * static_cast<std::uint64_t>(size_ - 1);
  const std::uint64_t first_block = static_cast<std::uint64_t>(epoch) * blocks_for_words(words);
  for (std::int64_t i = size_ - 1, draw = 0; i >= 1; --i, ++draw) {
    const std::int64_t j = below(random_u64(options_.seed, first_block, static_cast<std::uint64_t>(draw)), i + 1);
    std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
  }
}

Batch DataLoader::next() {
  if (end_of_epoch()) start_epoch(epoch_ + 1);
  const std::int64_t begin = batch_index_ * options_.batch_size;
  const std::int64_t count = std::min(options_.batch_size, size_ - begin);
  const auto [first, end] = options_.shard.rows(count);
  const std::int64_t* rows = order_.data() + begin + first;
  Batch batch{.inputs = gather_rows(inputs_, rows, end - first),
              .labels = gather_rows(labels_, rows, end - first),
              .global_rows = count};
  ++batch_index_;
  return batch;
}

StateDict DataLoader::state_dict() const {
  StateDict state;
  state["epoch"] = state_scalar(static_cast<double>(epoch_));
  state["batch_index"] = state_scalar(static_cast<double>(batch_index_));
  put_seed(state, options_.seed);
  state["size"] = state_scalar(static_cast<double>(size_));
  state["batch_size"] = state_scalar(static_cast<double>(options_.batch_size));
  state["shuffle"] = state_scalar(options_.shuffle ? 1.0 : 0.0);
  state["drop_last"] = state_scalar(options_.drop_last ? 1.0 : 0.0);
  return state;
}

void DataLoader::load_state_dict(const StateDict& state) {
  const std::string owner = "mg::data::DataLoader::load_state_dict";
  // Everything is read and checked before anything changes, so a bad state leaves the loader as it was.
  check_same(state, "size", static_cast<double>(size_), owner);
  check_same(state, "batch_size", static_cast<double>(options_.batch_size), owner);
  check_same(state, "shuffle", options_.shuffle ? 1.0 : 0.0, owner);
  check_same(state, "drop_last", options_.drop_last ? 1.0 : 0.0, owner);
  const std::int64_t epoch = state_whole_number(state, "epoch", owner, 0, std::int64_t{1} << 53);
  const std::int64_t batch_index = state_whole_number(state, "batch_index", owner, 0, batches_per_epoch_);
  options_.seed = get_seed(state, owner);
  start_epoch(epoch);
  batch_index_ = batch_index;
}

// ---- TextBatcher ----------------------------------------------------------------------------------

namespace {

void check_tokens(const Tensor& tokens, std::int64_t batch_size, std::int64_t context, const char* op) {
  check_cpu(tokens, "tokens", op);
  MG_CHECK(tokens.dim() == 1 && tokens.dtype() == DType::I32,
           "{}: tokens must be 1-D i32 (a TextCorpus split), "
           "got shape {} {}",
           op, tokens.shape(), tokens.dtype());
  MG_CHECK(batch_size >= 1, "{}: batch_size must be >= 1, got {}", op, batch_size);
  MG_CHECK(context >= 1, "{}: context must be >= 1, got {}", op, context);
  MG_CHECK(context + 1 <= tokens.numel(),
           "{}: a window of context + 1 = {} tokens is longer than the {} tokens "
           "given; use a shorter context or more text",
           op, context + 1, tokens.numel());
}

// Fills row `row` of inputs and targets from the window that starts at `start`.
void copy_window(const std::int32_t* tokens, std::int64_t start, std::int64_t context, std::int64_t row,
                 std::int32_t* inputs, std::int32_t* targets) {
  const auto bytes = static_cast<std::size_t>(context) * sizeof(std::int32_t);
  std::memcpy(inputs + row * context, tokens + start, bytes);
  std::memcpy(targets + row * context, tokens + start + 1, bytes);
}

}  // namespace

TextBatcher::TextBatcher(Tensor tokens, std::int64_t batch_size, std::int64_t context, std::uint64_t seed, Shard shard)
    : tokens_(std::move(tokens)), batch_size_(batch_size), context_(context), seed_(seed), shard_(shard) {
  const char* op = "mg::data::TextBatcher";
  check_tokens(tokens_, batch_size_, context_, op);
  check_shard(shard_, op);
  MG_CHECK(batch_size_ >= shard_.count,
           "{}: a batch of {} windows cannot be shared by {} ranks (one window each at "
           "least); use a batch of at least {}",
           op, batch_size_, shard_.count, shard_.count);
}

TextBatch TextBatcher::next() {
  // Every rank draws the starts of the whole batch (cheap) and copies its own windows.
  const auto [first, end] = shard_.rows(batch_size_);
  TextBatch batch{.inputs = Tensor::empty({end - first, context_}, {.dtype = DType::I32}),
                  .targets = Tensor::empty({end - first, context_}, {.dtype = DType::I32}),
                  .global_rows = batch_size_};
  const std::uint64_t first_block = static_cast<std::uint64_t>(step_) *
                                    blocks_for_words(2 * static_cast<std::uint64_t>(batch_size_));
  const std::int64_t starts = tokens_.numel() - context_;  // window starts 0 .. N - T - 1
  for (std::int64_t b = first; b < end; ++b) {
    const std::int64_t start = below(random_u64(seed_, first_block, static_cast<std::uint64_t>(b)), starts);
    copy_window(tokens_.data<std::int32_t>(), start, context_, b - first, batch.inputs.data<std::int32_t>(),
                batch.targets.data<std::int32_t>());
  }
  ++step_;
  return batch;
}

StateDict TextBatcher::state_dict() const {
  StateDict state;
  state["step"] = state_scalar(static_cast<double>(step_));
  put_seed(state, seed_);
  state["size"] = state_scalar(static_cast<double>(tokens_.numel()));
  state["batch_size"] = state_scalar(static_cast<double>(batch_size_));
  state["context"] = state_scalar(static_cast<double>(context_));
  return state;
}

void TextBatcher::load_state_dict(const StateDict& state) {
  const std::string owner = "mg::data::TextBatcher::load_state_dict";
  check_same(state, "size", static_cast<double>(tokens_.numel()), owner);
  check_same(state, "batch_size", static_cast<double>(batch_size_), owner);
  check_same(state, "context", static_cast<double>(context_), owner);
  const std::int64_t step = state_whole_number(state, "step", owner, 0, std::int64_t{1} << 53);
  seed_ = get_seed(state, owner);
  step_ = step;
}

std::vector<TextBatch> sequential_batches(const Tensor& tokens, std::int64_t batch_size, std::int64_t context) {
  check_tokens(tokens, batch_size, context, "mg::data::sequential_batches");
  const std::int64_t windows = (tokens.numel() - 1) / context;
  std::vector<TextBatch> batches;
  for (std::int64_t first = 0; first < windows; first += batch_size) {
    const std::int64_t count = std::min(batch_size, windows - first);
    TextBatch batch{.inputs = Tensor::empty({count, context}, {.dtype = DType::I32}),
                    .targets = Tensor::empty({count, context}, {.dtype = DType::I32})};
    for (std::int64_t row = 0; row < count; ++row)
      copy_window(tokens.data<std::int32_t>(), (first + row) * context, context, row, batch.inputs.data<std::int32_t>(),
                  batch.targets.data<std::int32_t>());
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace mg::data

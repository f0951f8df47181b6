// data::Shard: one rank's rows of every batch in data-parallel training. The shards of a DataLoader's
// and a TextBatcher's batches, joined in rank order, are the batches one process gets, across epoch
// boundaries; a batch too small to give every rank a row is refused with its sizes.
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// 10 rows [r, 100 + r] labelled r (the loader of test_data.cpp's cases).
data::DataLoader make_loader(data::DataLoaderOptions options) {
  std::vector<double> rows;
  for (int r = 0; r < 10; ++r) rows.insert(rows.end(), {double(r), 100.0 + r});
  return data::DataLoader(from_vector(rows, {10, 2}), arange(10, {.dtype = DType::I32}), options);
}

// fn throws an mg::Error whose message holds every needle.
template <class Fn>
void check_error_names(Fn&& fn, const std::vector<std::string>& needles) {
  for (const std::string& needle : needles) check_error(fn, needle);
}

}  // namespace

TEST_CASE("Shard: the shards of every batch, in rank order, are the batch one process gets; errors name the sizes") {
  CHECK(data::Shard{0, 3}.rows(10) == std::pair<std::int64_t, std::int64_t>{0, 3});
  CHECK(data::Shard{1, 3}.rows(10) == std::pair<std::int64_t, std::int64_t>{3, 6});
  CHECK(data::Shard{2, 3}.rows(10) == std::pair<std::int64_t, std::int64_t>{6, 10});
  // 10 rows in batches of 4 (the last of 2): with 2 ranks every batch splits; its rows keep the order.
  data::DataLoader whole = make_loader({.batch_size = 4, .seed = 7});
  data::DataLoader first = make_loader({.batch_size = 4, .seed = 7, .shard = {0, 2}});
  data::DataLoader second = make_loader({.batch_size = 4, .seed = 7, .shard = {1, 2}});
  for (int step = 0; step < 7; ++step) {  // into the second epoch
    INFO("step " << step);
    const data::Batch batch = whole.next(), a = first.next(), b = second.next();
    std::vector<std::int32_t> joined = a.labels.to_vector<std::int32_t>();
    for (std::int32_t label : b.labels.to_vector<std::int32_t>()) joined.push_back(label);
    CHECK(joined == batch.labels.to_vector<std::int32_t>());
    CHECK(a.inputs.size(0) + b.inputs.size(0) == batch.inputs.size(0));
    CHECK(a.global_rows == batch.global_rows);
    CHECK(b.global_rows == batch.labels.numel());
  }
  CHECK(first.state_dict().at("batch_index").item() == whole.state_dict().at("batch_index").item());

  Tensor tokens = arange(100, {.dtype = DType::I32});
  data::TextBatcher text(tokens, 5, 8, 3);
  data::TextBatcher text0(tokens, 5, 8, 3, {0, 2}), text1(tokens, 5, 8, 3, {1, 2});
  for (int step = 0; step < 3; ++step) {
    const data::TextBatch batch = text.next(), a = text0.next(), b = text1.next();
    CHECK(a.inputs.shape() == Shape{2, 8});
    CHECK(b.inputs.shape() == Shape{3, 8});
    std::vector<std::int32_t> joined = a.targets.to_vector<std::int32_t>();
    for (std::int32_t token : b.targets.to_vector<std::int32_t>()) joined.push_back(token);
    CHECK(joined == batch.targets.to_vector<std::int32_t>());
    CHECK(b.global_rows == 5);
  }

  check_error_names(
      [] {
        make_loader({.batch_size = 4, .shard = {2, 2}});
      },
      {"DataLoader", "shard 2 of 2 does not exist"});
  // 10 rows in batches of 3 leave a last batch of 1 row: not enough for 2 ranks.
  check_error_names(
      [] {
        make_loader({.batch_size = 3, .shard = {0, 2}});
      },
      {"DataLoader", "a batch of 1 rows cannot be shared by 2 ranks", "last batch of 1"});
  make_loader({.batch_size = 3, .drop_last = true, .shard = {0, 2}});  // without it: fine
  check_error_names(
      [] {
        make_loader({.batch_size = 2, .shard = {0, 3}});
      },
      {"DataLoader", "a batch of 2 rows cannot be shared by 3 ranks", "use a batch of at least 3"});
  check_error_names(
      [&] {
        data::TextBatcher(tokens, 2, 8, 3, {0, 3});
      },
      {"TextBatcher", "a batch of 2 windows cannot "
                      "be shared by 3 ranks"});
}

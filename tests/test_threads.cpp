// The CPU thread pool (kernels/cpu/parallel.h, kernels/threads.h): chunks fixed by the problem size,
// every chunk run once, errors carried back, and results bit-identical on 1, 2 and 3 threads,
// from single kernels up to training steps of the MLP and the CNN under fp32 and mixed_float16.
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/parallel.h"
#include "tests/testing.h"
#include "train/trainer.h"

using namespace mg;
using kernels::cpu::chunks_of;
using kernels::cpu::kMaxChunks;
using kernels::cpu::parallel_for;

namespace {

// Restores the thread count a test case found.
struct ThreadCountGuard {
  int previous = num_threads();
  ~ThreadCountGuard() { set_num_threads(previous); }
};

std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor contiguous = t.to(Device::cpu());
  const auto* begin = static_cast<const unsigned char*>(contiguous.data_ptr());
  return {begin, begin + contiguous.nbytes()};
}

// Every parameter's bytes after `steps` SGD-with-momentum (or Adam) steps of `model` under `recipe`
// on one fixed random batch, run on `threads` threads.
std::vector<std::vector<unsigned char>> trained_bytes(const std::string& model_name, const std::string& recipe_name,
                                                      int threads, int steps, std::int64_t batch) {
  set_num_threads(threads);
  Generator generator(7);
  amp::Recipe recipe = amp::Recipe::parse(recipe_name);
  std::shared_ptr<nn::Module> model = model_name == "mlp"
                                          ? std::shared_ptr<nn::Module>(nn::mlp({784, 256, 256, 10}, generator))
                                          : std::shared_ptr<nn::Module>(nn::cnn({}, generator));
  model->to(recipe.parameter_dtype);
  auto optimizer = train::make_optimizer({.name = model_name == "mlp" ? "sgd" : "adam", .lr = 0.01, .momentum = 0.9},
                                         model->parameters(), recipe.master_weights);
  amp::GradScaler scaler = recipe.make_scaler();
  Tensor x = randn({batch, 1, 28, 28}, generator);
  Tensor labels = randint(0, 10, {batch}, generator);
  for (int step = 0; step < steps; ++step) {
    optimizer->zero_grad();
    Tensor loss;
    {
      Autocast region = recipe.autocast();
      loss = cast(cross_entropy((*model)(x), labels), DType::F32);
    }
    backward(scaler.scale(loss));
    scaler.step(*optimizer);
    scaler.update();
  }
  std::vector<std::vector<unsigned char>> result;
  for (const Tensor& p : model->parameters()) result.push_back(bytes_of(p));
  return result;
}

}  // namespace

TEST_CASE("chunks_of cuts [0, n) by n and grain alone, into at most kMaxChunks nearly equal chunks") {
  CHECK(chunks_of(0, 10).count == 0);
  CHECK(chunks_of(5, 10).count == 1);
  CHECK(chunks_of(19, 10).count == 1);  // two chunks would hold fewer than `grain` items each
  CHECK(chunks_of(20, 10).count == 2);
  CHECK(chunks_of(1'000'000, 10).count == kMaxChunks);
  for (std::int64_t n : {1, 7, 64, 65, 1000, 123457}) {
    const auto chunks = chunks_of(n, 3);
    std::int64_t covered = 0;
    for (std::int64_t i = 0; i < chunks.count; ++i) {
      CHECK(chunks.begin(i) == covered);  // contiguous, in order
      CHECK(chunks.end(i) - chunks.begin(i) >= std::min<std::int64_t>(n, 3));
      CHECK(chunks.end(i) - chunks.begin(i) <= n / chunks.count + 1);  // nearly equal
      covered = chunks.end(i);
    }
    CHECK(covered == n);
  }
}

TEST_CASE("parallel_for runs every item exactly once on any thread count, nested loops included") {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    CHECK(num_threads() == threads);
    constexpr std::int64_t n = 10'000;
    std::vector<std::atomic<int>> seen(n);
    parallel_for(n, 10, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) ++seen[static_cast<std::size_t>(i)];
      // A loop inside a chunk runs serially on that thread: no deadlock, every item once.
      std::atomic<int> inner{0};
      parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) { inner += static_cast<int>(e - b); });
      CHECK(inner.load() == 100);
    });
    for (const auto& count : seen) REQUIRE(count.load() == 1);
  }
}

TEST_CASE("an exception in a chunk reaches the caller once every chunk has ended, and the pool goes on") {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(parallel_for(64, 1,
                                    [&](std::int64_t begin, std::int64_t) {
                                      ++ran;
                                      if (begin == 5) throw std::runtime_error("chunk 5 failed");
                                    }),
                       "chunk 5 failed", std::runtime_error);
  CHECK(ran.load() == 64);
  std::atomic<std::int64_t> total{0};
  parallel_for(1000, 1, [&](std::int64_t begin, std::int64_t end) { total += end - begin; });
  CHECK(total.load() == 1000);
}

TEST_CASE("set_num_threads and MG_NUM_THREADS reject counts that are not whole numbers from 1 to 1024") {
  ThreadCountGuard guard;
  mg::testing::check_error([] { set_num_threads(0); }, "set_num_threads: got 0");
  mg::testing::check_error([] { set_num_threads(-3); }, "set_num_threads: got -3");
  CHECK(kernels::cpu::thread_count_from("3") == 3);
  CHECK(kernels::cpu::thread_count_from(nullptr) >= 1);  // unset: the cores this process may use
  CHECK(kernels::cpu::thread_count_from("") >= 1);
  for (const char* bad : {"0", "two", "4x", "-1", "5000"})
    mg::testing::check_error([bad] { kernels::cpu::thread_count_from(bad); }, "MG_NUM_THREADS=");
}

TEST_CASE("kernels give the same bits on 1, 2 and 3 threads: GEMM tiles, reductions, softmax, elementwise") {
  ThreadCountGuard guard;
  Generator generator(3);
  // Large enough that every kernel cuts its work into many chunks.
  const Tensor a = randn({300, 700}, generator), b = randn({700, 500}, generator);
  const Tensor big = randn({3, 400'000}, generator);  // rows of 6 reduction blocks each
  const Tensor a16 = a.to(DType::F16), b16 = b.to(DType::F16);
  auto run_all = [&] {
    std::vector<std::vector<unsigned char>> out;
    out.push_back(bytes_of(matmul(a, b)));
    out.push_back(bytes_of(matmul(a16, b16)));
    out.push_back(bytes_of(matmul(transpose(b, 0, 1), transpose(a, 0, 1))));
    out.push_back(bytes_of(sum(big)));
    out.push_back(bytes_of(sum(big, 1)));
    out.push_back(bytes_of(sum(big, 0)));
    out.push_back(bytes_of(max(big, 1)));
    out.push_back(bytes_of(softmax(a, 1)));
    out.push_back(bytes_of(log_softmax(a, 0)));
    out.push_back(bytes_of(tanh(a) * sum(b)));
    out.push_back(bytes_of(exp(a16)));
    return out;
  };
  set_num_threads(1);
  const auto one = run_all();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const auto many = run_all();
    for (std::size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CAPTURE(threads);
      CHECK(many[i] == one[i]);
    }
  }
}

TEST_CASE("training steps give the same bits on 1, 2 and 3 threads (MLP and CNN, fp32 and mixed_float16)") {
  ThreadCountGuard guard;
  const std::int64_t cnn_batch = testing::reduced_sizes() ? 8 : 16;
  for (const std::string recipe : {"fp32", "mixed_float16"}) {
    for (const std::string model : {"mlp", "cnn"}) {
      CAPTURE(recipe);
      CAPTURE(model);
      const std::int64_t batch = model == "mlp" ? 256 : cnn_batch;
      const auto one = trained_bytes(model, recipe, 1, 3, batch);
      for (int threads : {2, 3}) {
        CAPTURE(threads);
        CHECK(trained_bytes(model, recipe, threads, 3, batch) == one);
      }
    }
  }
}

// Data-parallel training on 2 ranks: the MPI collectives, the loss scaler's agreement across ranks,
// the gradient buckets, and training that equals one process's.
//
// ctest runs it as `mpirun -n 2 test_dist` (tests/CMakeLists.txt): both ranks run every case, so
// each case makes the same collectives in the same order on both (a REQUIRE that fails on one rank
// alone would leave the other waiting: ctest's timeout ends such a run). Only rank 0's doctest
// report is printed in full; a failure on rank 1 still fails the run (mpirun's status).
//
// One process, the reference: 2 ranks with shards of B/2 rows compute what one process computes by
// accumulating the gradients of the two halves of the batch and halving them. With f32 on the wire
// the sum of 2 values is one IEEE addition, so that equality is exact, and the test holds it bit for
// bit. A plain one-process step on the whole batch sums the rows in one GEMM instead (another order),
// and agrees to within f32 rounding, checked with a tolerance.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/elementwise.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// The group of mpirun's ranks, made once; world_ptr() shares it with what keeps a handle.
std::shared_ptr<dist::ProcessGroup> world_ptr() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(Device::cpu());
  return group;
}
dist::ProcessGroup& world() { return *world_ptr(); }

// Whether every rank holds the same bytes in `tensors` (rank 0's sent to all and compared).
bool same_on_every_rank(const std::vector<Tensor>& tensors) {
  int differs = 0;
  for (const Tensor& t : tensors) {
    Tensor reference = t.clone();
    world().broadcast(reference, 0);
    differs |= reference.host_bytes("test") != t.host_bytes("test");
  }
  Tensor flag = full({}, differs);
  world().all_reduce(flag, dist::ReduceOp::Max);
  return flag.item() == 0.0;
}

std::shared_ptr<nn::Module> mlp(std::uint64_t seed) {
  Generator generator(seed);
  return nn::mlp({12, 32, 32, 5}, generator);
}

// 64 examples of 12 features in 5 classes.
struct Examples {
  Tensor x, y;
};
Examples examples() {
  Generator generator(21);
  return {uniform({64, 12}, -2.0, 2.0, generator), randint(0, 5, {64}, generator)};
}

void halve_gradients(const std::vector<Tensor>& parameters) {
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    kernels::unary(kernels::UnaryOp::MulScalar, grad, grad, {.a = 0.5});
  }
}

}  // namespace

TEST_CASE("dist: mpirun's world is the group; rank and size") {
  REQUIRE(dist::available());
  CHECK(dist::launched_by_mpirun());
  CHECK(world().size() == 2);
  CHECK(world().rank() == dist::launched_world_size() - 2 + world().rank());
  CHECK((world().rank() == 0 || world().rank() == 1));
  CHECK(std::string(world().backend()) == "mpi");
  CHECK(world().device() == Device::cpu());
}

TEST_CASE("dist: all_reduce sums and maxes f32, f64 and i32 in place; every rank holds the result") {
  const double r = world().rank();
  for (DType dtype : {DType::F32, DType::F64, DType::I32}) {
    INFO(dtype);
    Tensor sum = from_vector(std::vector<double>{1 + r, 10 * r, -3, 7 - 7 * r}, {2, 2}, {.dtype = dtype});
    world().all_reduce(sum, dist::ReduceOp::Sum);
    CHECK(sum.to_vector<double>() == std::vector<double>{3, 10, -6, 7});
    Tensor max = from_vector(std::vector<double>{1 + r, -r, 5}, {3}, {.dtype = dtype});
    world().all_reduce(max, dist::ReduceOp::Max);
    CHECK(max.to_vector<double>() == std::vector<double>{2, 0, 5});
  }
  Tensor mean = from_vector(std::vector<double>{1 + r, 10 * r, -3}, {3});
  world().all_reduce(mean, dist::ReduceOp::Mean);
  CHECK(mean.to_vector<double>() == std::vector<double>{1.5, 5, -3});
  Tensor half_mean = full({2}, 1 + r, {.dtype = DType::F16});
  world().all_reduce_async(half_mean, dist::ReduceOp::Mean)->wait();
  CHECK(half_mean.to_vector<double>() == std::vector<double>{1.5, 1.5});
  // An f32 sum of 2 ranks is one addition: a + b, rounded once, on both ranks alike.
  Tensor third = full({5}, r == 0 ? 1.0 / 3.0 : 1e-9);
  world().all_reduce(third);
  CHECK(third.to_vector<float>()[0] == static_cast<float>(1.0 / 3.0) + static_cast<float>(1e-9));
}

TEST_CASE("dist: f16 and bf16 are summed in f32 and rounded once to their dtype") {
  const int r = world().rank();
  for (DType dtype : {DType::F16, DType::BF16}) {
    INFO(dtype);
    // Rank 0 holds 1, 3, 2^-14 ...; rank 1 values chosen so that a sum rounds: 1 + 2^-11 (a tie in f16,
    // to even), 3 + 1/3, and two subnormal-ish small numbers.
    std::vector<double> mine = r == 0 ? std::vector<double>{1.0, 3.0, 6.1e-5, 1000.0}
                                      : std::vector<double>{1.0 / 2048, 1.0 / 3.0, 3.0e-6, 0.4};
    std::vector<double> theirs = r == 0 ? std::vector<double>{1.0 / 2048, 1.0 / 3.0, 3.0e-6, 0.4}
                                        : std::vector<double>{1.0, 3.0, 6.1e-5, 1000.0};
    Tensor t = from_vector(mine, {4}, {.dtype = dtype});
    const std::vector<float> a = t.to_vector<float>();
    const std::vector<float> b = from_vector(theirs, {4}, {.dtype = dtype}).to_vector<float>();
    world().all_reduce(t);
    std::vector<double> expected;
    for (std::size_t i = 0; i < a.size(); ++i)
      expected.push_back(from_vector({static_cast<double>(a[i] + b[i])}, {1}, {.dtype = dtype}).item());
    CHECK(t.to_vector<double>() == expected);
  }
}

TEST_CASE("dist: broadcast, the nonblocking all_reduce and barrier") {
  const double r = world().rank();
  Tensor t = full({3, 4}, 5 + r);
  world().broadcast(t, 1);
  CHECK(t.to_vector<double>() == std::vector<double>(12, 6.0));
  Tensor a = full({1000}, 1 + r);
  auto work = world().all_reduce_async(a);
  work->wait();
  CHECK(work->test());
  CHECK(a.to_vector<double>() == std::vector<double>(1000, 3.0));
  world().barrier();
}

TEST_CASE("dist: bad calls are refused with an mg::Error before any rank communicates") {
  Tensor half = zeros({4}, {.dtype = DType::F16});
  check_error([&] { world().all_reduce(half, dist::ReduceOp::Max); }, "dist::all_reduce");
  check_error([&] { world().all_reduce(half, dist::ReduceOp::Max); }, "max of a f16 tensor");
  Tensor t = zeros({4});
  check_error([&] { world().broadcast(t, 2); }, "root 2 is not a rank of this group of 2");
  Tensor counts = zeros({2}, {.dtype = DType::I32});
  check_error([&] { world().all_reduce(counts, dist::ReduceOp::Mean); }, "the avg of an i32 tensor");
  Tensor undefined;
  check_error([&] { world().all_reduce(undefined); }, "the tensor is undefined");
  // Options that differ between ranks: every rank gets the same error, naming the first that differs.
  check_error([&] { dist::check_same_on_every_rank("--batch", world().rank() == 0 ? "64" : "32"); },
              "rank 1 has --batch '32' but rank 0 has '64'");
  dist::check_same_on_every_rank("--batch", "64");  // equal: no error
}

TEST_CASE("dist: found_inf is the max over the ranks: an inf on one rank skips the step on both") {
  // Each rank's own gradients (no DataParallel): rank 1's hold an inf, rank 0's are finite.
  for (bool agree : {true, false}) {
    INFO("found_inf reduced across ranks: " << agree);
    std::shared_ptr<nn::Module> model = mlp(3);
    optim::SGD sgd(model->parameters(), {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024});
    if (agree) scaler.set_process_group(world_ptr());
    const std::vector<std::vector<unsigned char>> before = bytes_of(model->parameters());
    const Examples data = examples();
    backward(scaler.scale(cross_entropy((*model)(data.x), data.y)));
    if (world().rank() == 1) model->parameters()[0].grad().data<float>()[3] = std::numeric_limits<float>::infinity();
    const bool stepped = scaler.step(sgd);
    scaler.update();
    const bool rank0_steps = world().rank() == 0 && !agree;
    CHECK(stepped == rank0_steps);
    CHECK((bytes_of(model->parameters()) == before) == !rank0_steps);
    CHECK(scaler.get_scale() == (rank0_steps ? 1024.0 : 512.0));
    // With the rule the replicas stay equal; without it rank 0 alone moved on and they part.
    CHECK(same_on_every_rank(model->parameters()) == agree);
  }
}

TEST_CASE("dist: DataParallel's gradients are the mean of the ranks', bit for bit the halves accumulated by one "
          "process, and within f32 rounding of one step on the whole batch") {
  const Examples data = examples();
  const auto [first, end] = data::Shard{world().rank(), 2}.rows(64);
  for (DType dtype : {DType::F32, DType::F16}) {
    INFO("gradients of " << dtype << " parameters, f32 on the wire");
    std::shared_ptr<nn::Module> model = mlp(world().rank() == 0 ? 3 : 4);  // rank 1's weights are replaced
    model->to(dtype);
    train::DataParallel replicas(world_ptr(), *model, {.bucket_bytes = 512});
    std::shared_ptr<nn::Module> rank0_model = mlp(3);
    rank0_model->to(dtype);
    CHECK(bytes_of(model->parameters()) == bytes_of(rank0_model->parameters()));  // rank 0's weights everywhere
    {
      train::GradientSync sync(replicas);
      backward(cross_entropy((*model)(data.x.slice(first, end).to(dtype)), data.y.slice(first, end)));
      sync.finish();
    }
    CHECK(replicas.last_sync().buckets >= 3);
    CHECK(replicas.last_sync().launched_during_backward == replicas.last_sync().buckets);

    std::shared_ptr<nn::Module> one = mlp(3);
    one->to(dtype);
    for (int half = 0; half < 2; ++half) {
      const auto [a, b] = data::Shard{half, 2}.rows(64);
      backward(cross_entropy((*one)(data.x.slice(a, b).to(dtype)), data.y.slice(a, b)));
    }
    halve_gradients(one->parameters());
    for (std::size_t i = 0; i < one->parameters().size(); ++i) {
      const Tensor mine = model->parameters()[i].grad();
      const Tensor reference = one->parameters()[i].grad();
      if (dtype == DType::F32)
        CHECK(mine.host_bytes("test") == reference.host_bytes("test"));
      else
        check_close(mine.to(DType::F32), reference.to(DType::F32), tolerance(DType::F16, 1.0), 1e-6);
    }
    // One step on the whole batch: the same gradient up to the order of the sums over 64 rows.
    std::shared_ptr<nn::Module> whole = mlp(3);
    backward(cross_entropy((*whole)(data.x), data.y));
    if (dtype == DType::F32)
      for (std::size_t i = 0; i < whole->parameters().size(); ++i)
        check_close(model->parameters()[i].grad(), whole->parameters()[i].grad(), 64 * dtype_eps(DType::F32), 1e-7);
  }
}

TEST_CASE("dist: micro-batches accumulate without a GradientSync and are sent with the last; two backward passes in "
          "one sync are refused") {
  const Examples data = examples();
  const auto [first, end] = data::Shard{world().rank(), 2}.rows(64);
  const std::int64_t middle = (first + end) / 2;
  std::shared_ptr<nn::Module> model = mlp(3);
  train::DataParallel replicas(world_ptr(), *model, {.bucket_bytes = 512});
  backward(cross_entropy((*model)(data.x.slice(first, middle)), data.y.slice(first, middle)));
  {
    train::GradientSync sync(replicas);
    backward(cross_entropy((*model)(data.x.slice(middle, end)), data.y.slice(middle, end)));
    sync.finish();
  }
  // The reference: the four quarters accumulated in one process, halved.
  std::shared_ptr<nn::Module> one = mlp(3);
  for (int quarter = 0; quarter < 4; ++quarter) {
    const std::int64_t a = quarter * 16, b = a + 16;
    backward(cross_entropy((*one)(data.x.slice(a, b)), data.y.slice(a, b)));
  }
  halve_gradients(one->parameters());
  for (std::size_t i = 0; i < one->parameters().size(); ++i)
    check_close(model->parameters()[i].grad(), one->parameters()[i].grad(), 4 * dtype_eps(DType::F32), 1e-7);

  std::shared_ptr<nn::Module> twice = mlp(3);
  train::DataParallel twice_replicas(world_ptr(), *twice, {.bucket_bytes = 512});
  train::GradientSync sync(twice_replicas);
  backward(cross_entropy((*twice)(data.x.slice(first, end)), data.y.slice(first, end)));
  check_error([&] { backward(cross_entropy((*twice)(data.x.slice(first, end)), data.y.slice(first, end))); },
              "a second backward inside one GradientSync");
}

TEST_CASE("dist: the replicas start from rank 0's weights, f32 masters included, whatever each rank initialised") {
  const Examples data = examples();
  const auto [first, end] = data::Shard{world().rank(), 2}.rows(64);
  train::Trainer replica(mlp(world().rank() == 0 ? 3 : 4), {.recipe = amp::Recipe::parse("float16_master"),
                                                            .optimizer = {.name = "sgd", .lr = 0.05, .momentum = 0.9},
                                                            .process_group = world_ptr()});
  CHECK(same_on_every_rank(replica.model().parameters()));
  for (int step = 0; step < 3; ++step) replica.step(data.x.slice(first, end), data.y.slice(first, end));
  std::vector<Tensor> masters;
  for (std::size_t i = 0; i < replica.optimizer().parameters().size(); ++i)
    masters.push_back(replica.optimizer().master(i));
  CHECK(same_on_every_rank(masters));
  CHECK(same_on_every_rank(replica.model().parameters()));
}

TEST_CASE("dist: f16 and bf16 on the wire send half the bytes; the mean stays within one rounding of the wire dtype") {
  const Examples data = examples();
  const auto [first, end] = data::Shard{world().rank(), 2}.rows(64);
  std::vector<Tensor> f32_grads;
  std::int64_t f32_bytes = 0;
  for (DType wire : {DType::F32, DType::F16, DType::BF16}) {
    INFO("wire " << wire);
    std::shared_ptr<nn::Module> model = mlp(3);
    train::DataParallel replicas(world_ptr(), *model, {.wire_dtype = wire});
    {
      train::GradientSync sync(replicas);
      backward(cross_entropy((*model)(data.x.slice(first, end)), data.y.slice(first, end)));
      sync.finish();
    }
    const std::vector<Tensor> parameters = model->parameters();
    if (wire == DType::F32) {
      f32_bytes = replicas.last_sync().payload_bytes;
      for (const Tensor& p : parameters) f32_grads.push_back(p.grad());
      continue;
    }
    CHECK(replicas.last_sync().payload_bytes * 2 == f32_bytes);
    // Each rank's g / 2 is rounded once to the wire dtype (an error of at most eps/2 of |g / 2|), and
    // their sum once more (eps/2 of the result): the bound is relative to the halves, not to the
    // mean, which may be small where the ranks' gradients cancel. Below f16's normal range (these
    // gradients are not loss-scaled) a rounding loses up to half of 2^-24, absolutely.
    std::shared_ptr<nn::Module> local = mlp(3);
    backward(cross_entropy((*local)(data.x.slice(first, end)), data.y.slice(first, end)));
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      Tensor bound = mul(abs(local->parameters()[i].grad()), 0.5);
      world().all_reduce(bound);
      const std::vector<float> got = parameters[i].grad().to_vector<float>();
      const std::vector<float> exact = f32_grads[i].to_vector<float>();
      const std::vector<float> halves = bound.to_vector<float>();
      const double subnormal_step = wire == DType::F16 ? std::ldexp(1.0, -24) : 0.0;
      int outside = 0;
      for (std::size_t k = 0; k < got.size(); ++k)
        outside += std::fabs(got[k] - exact[k]) >
                   dtype_eps(wire) / 2 * (halves[k] + std::fabs(exact[k])) + subnormal_step;
      CHECK(outside == 0);
    }
    CHECK(same_on_every_rank(parameters));
  }
}

namespace {

bool same_number(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Both ranks train 8 steps, each on its half of every global batch of 16 rows: the losses, the
// scales and the final weights must be the reference's: one process accumulating the two halves'
// gradients and halving them (exactly what the all-reduce computes). `poison` may change rank 1's
// half of a step's inputs (and the reference's second half alike). Returns the steps skipped.
int train_two_ways(const std::string& recipe_name, double init_scale, const std::function<void(Tensor&, int)>& poison) {
  const amp::Recipe recipe = amp::Recipe::parse(recipe_name);
  const Examples data = examples();
  const train::OptimizerSpec sgd{.name = "sgd", .lr = 0.05, .momentum = 0.9};
  train::Trainer replica(mlp(3), {.recipe = recipe,
                                  .optimizer = sgd,
                                  .scaler = {.init_scale = init_scale},
                                  .process_group = world_ptr(),
                                  .data_parallel = {.bucket_bytes = 2048}});
  data::DataLoader shards(data.x, data.y, {.batch_size = 16, .seed = 7, .shard = {world().rank(), 2}});

  train::Trainer one(mlp(3), {.recipe = recipe, .optimizer = sgd, .scaler = {.init_scale = init_scale}});
  data::DataLoader whole(data.x, data.y, {.batch_size = 16, .seed = 7});
  for (int step = 0; step < 8; ++step) {
    INFO("step " << step);
    data::Batch mine = shards.next();
    if (world().rank() == 1) poison(mine.inputs, step);
    const train::StepResult result = replica.step(mine);

    const data::Batch batch = whole.next();
    one.optimizer().zero_grad();
    double loss = 0;
    for (int half = 0; half < 2; ++half) {
      const auto [a, b] = data::Shard{half, 2}.rows(16);
      Tensor x = batch.inputs.slice(a, b).clone();
      if (half == 1) poison(x, step);  // what rank 1 saw
      Tensor half_loss;
      {
        Autocast region = recipe.autocast();
        half_loss = cast(cross_entropy(one.model()(x), batch.labels.slice(a, b)), DType::F32);
      }
      loss += static_cast<float>(half_loss.item() * 0.5);  // each rank's loss times its half, in f32
      backward(one.scaler().scale(half_loss));
    }
    halve_gradients(one.optimizer().parameters());
    const double scale = one.scaler().get_scale();
    const bool stepped = one.scaler().step(one.optimizer());
    one.scaler().update();
    CHECK(same_number(result.loss.item(), static_cast<float>(loss)));
    CHECK(result.scale() == scale);
    CHECK(result.skipped() == !stepped);
  }
  CHECK(bytes_of(replica.model().parameters()) == bytes_of(one.model().parameters()));
  CHECK(same_on_every_rank(replica.model().parameters()));
  CHECK(replica.scaler().get_scale() == one.scaler().get_scale());
  return static_cast<int>(replica.monitor().skipped_steps());
}

}  // namespace

TEST_CASE("dist: 2 ranks train exactly as one process with the same global batch, in fp32 and mixed_float16") {
  for (const char* recipe : {"fp32", "mixed_float16"}) {
    INFO(recipe);
    CHECK(train_two_ways(recipe, 1024, [](Tensor&, int) {}) == 0);
  }
}

TEST_CASE("dist: an inf in rank 1's data alone skips the step on both ranks; the scales stay identical") {
  // Step 3's first row of rank 1 holds an inf: its loss and gradients are not finite, rank 0's are.
  // Both ranks skip that step (scale 1024 -> 512) and go on in step, as the reference does.
  const int skipped = train_two_ways("mixed_float16", 1024, [](Tensor& x, int step) {
    if (step == 3) x.data<float>()[5] = std::numeric_limits<float>::infinity();
  });
  CHECK(skipped == 1);
}

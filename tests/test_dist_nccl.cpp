// The NCCL backend of dist/ on one GPU: the collectives on CUDA tensors, queued on the device's
// stream, and data-parallel training through it. Built only in a CUDA build with NCCL and MPI
// (MG_WITH_NCCL); ctest runs it as `mpirun -n 1 test_dist_nccl`, the single-GPU path of the
// issue. Each case skips without a GPU (CI compiles it, a GPU session runs it).
//
// With one rank the sums are the tensors themselves and the broadcast changes nothing, so what is
// checked is that NCCL takes mixgrad's CUDA tensors of every dtype, and that a data-parallel
// Trainer on one GPU takes exactly the steps of a plain one.
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {}  // namespace

TEST_CASE("nccl: all_reduce and broadcast of CUDA tensors of every dtype, on the device's stream") {
  if (!have_gpu()) return;
  std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(Device::cuda(dist::local_rank()));
  CHECK(std::string(group->backend()) == "nccl");
  CHECK(group->size() == dist::launched_world_size());
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    INFO(dtype);
    // Exact in every dtype, and so are their sums over a few ranks (an i32 takes whole numbers only).
    const std::vector<double> values = dtype == DType::I32 ? std::vector<double>{3, -2, 7, 1000}
                                                           : std::vector<double>{1.5, -2, 0.25, 1000};
    Tensor t = from_vector(values, {4}, {.dtype = dtype, .device = group->device()});
    group->all_reduce(t);
    const std::vector<double> expected = from_vector(values, {4}, {.dtype = dtype}).to_vector<double>();
    std::vector<double> sums;
    for (double v : expected) sums.push_back(v * group->size());
    CHECK(t.to_vector<double>() == sums);
    group->broadcast(t, 0);
  }
  Tensor flag = full({}, 1.0, {.device = group->device()});
  group->all_reduce(flag, dist::ReduceOp::Max);
  CHECK(flag.item() == 1.0);
  Tensor cpu = zeros({4});
  check_error([&] { group->all_reduce(cpu); }, "this nccl group reduces tensors on cuda");
  group->barrier();
}

TEST_CASE("nccl: a data-parallel Trainer on one GPU takes the steps of a plain one, bit for bit") {
  if (!have_gpu()) return;
  std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(Device::cuda(dist::local_rank()));
  if (group->size() != 1) return;  // the comparison below is the one-rank case
  Generator generator(9);
  const Tensor x = uniform({32, 12}, -2.0, 2.0, generator);
  const Tensor y = randint(0, 5, {32}, generator);
  for (const char* recipe : {"fp32", "mixed_float16"}) {
    INFO(recipe);
    auto model = [] {
      Generator init(3);
      return std::shared_ptr<nn::Module>(nn::mlp({12, 32, 5}, init));
    };
    const train::TrainerOptions options{.recipe = amp::Recipe::parse(recipe),
                                        .optimizer = {.name = "sgd", .lr = 0.05, .momentum = 0.9},
                                        .device = group->device()};
    train::TrainerOptions parallel = options;
    parallel.process_group = group;
    train::Trainer plain(model(), options), replica(model(), parallel);
    for (int step = 0; step < 4; ++step) {
      const train::StepResult a = plain.step(x, y), b = replica.step(x, y);
      CHECK(a.loss.item() == b.loss.item());
      CHECK(a.scale() == b.scale());
    }
    CHECK(bytes_of(plain.model().parameters()) == bytes_of(replica.model().parameters()));
  }
}

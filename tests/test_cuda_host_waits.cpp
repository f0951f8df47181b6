// How often a training step makes the host wait for the GPU, and the optimizer's bookkeeping when
// the GradScaler's skip is decided on the device (kernels/cuda/runtime.h counts every wait:
// cuda::host_waits()). On the CUDA emulator in CI; GPU cases skip with a message without a device.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

using namespace mg;
using namespace mg::testing;

#ifdef MG_WITH_CUDA
namespace {

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

}  // namespace

// The optimizer's bookkeeping when the skip is decided on the device: no wait per step; the step
// count and the lost-update count are read back when asked, and a skipped step counts nothing.
TEST_CASE("optimizer (GPU): steps skipped on the device; step count and lost updates read back when asked") {
  if (!have_gpu()) return;
  Tensor w = gpu(full({4}, 1.0, {.dtype = DType::F16})).set_requires_grad(true);
  optim::SGD sgd({w}, {.lr = std::ldexp(1.0, -12), .master_weights = true});  // 2^-12: lost in f16, kept in f32
  const Tensor clean = gpu(zeros({})), overflow = gpu(ones({}));
  w.set_grad(gpu(full({4}, 1.0, {.dtype = DType::F16})));
  const std::uint64_t mark = cuda::host_waits();
  for (const Tensor* flag : {&clean, &overflow, &clean, &overflow}) sgd.step({.found_inf = flag});
  CHECK(cuda::host_waits() == mark);  // four steps queued, nothing read
  CHECK(sgd.step_count() == 2);  // one read for all four
  CHECK(cuda::host_waits() == mark + 1);
  CHECK(sgd.step_count() == 2);  // already read
  CHECK(cuda::host_waits() == mark + 1);
  const kernels::UpdateCount last = sgd.last_update();  // the last step taken, not the skipped one after it
  CHECK(last.nonzero == 4);
  CHECK(last.lost == 0);  // the master moved
  check_values(sgd.master(0), std::vector<double>(4, 1.0 - 2 * std::ldexp(1.0, -12)), 0.0, 0.0);
  // round(master): 1 - 2^-11 is an f16 value (the spacing below 1.0 is 2^-11), so the copy moved too.
  check_values(w, std::vector<double>(4, 1.0 - std::ldexp(1.0, -11)), 0.0, 0.0);
}

// Adagrad's lr_decay reads each parameter's own step count, which lives on the device beside its sum
// and which the kernel advances: a step skipped there does not count, and no step waits. The CPU's
// result, bit for bit (the same functors, kernels/optim_functors.h).
TEST_CASE("Adagrad (GPU): per-parameter step counts advance on the device, skipped steps not; the CPU's bits") {
  if (!have_gpu()) return;
  const optim::AdagradOptions options{.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.01, .master_weights = true};
  Generator generator(4);
  const Tensor init = uniform({33}, -1, 1, generator, {.dtype = DType::F16});
  Tensor w_cpu = init.clone().set_requires_grad(true), w_gpu = gpu(init).set_requires_grad(true);
  optim::Adagrad on_cpu({w_cpu}, options), on_gpu({w_gpu}, options);
  const std::string script = "cscsc";  // c: a clean step, s: one found_inf skips
  std::vector<Tensor> grads, flags, grads_gpu, flags_gpu;
  for (char kind : script) {
    grads.push_back(uniform({33}, -1, 1, generator, {.dtype = DType::F16}));
    flags.push_back(full({}, kind == 's' ? 1.0 : 0.0));
    grads_gpu.push_back(gpu(grads.back()));
    flags_gpu.push_back(gpu(flags.back()));
  }
  const std::uint64_t mark = cuda::host_waits();
  for (std::size_t k = 0; k < script.size(); ++k) {
    w_cpu.set_grad(grads[k]);
    w_gpu.set_grad(grads_gpu[k]);
    on_cpu.step({.found_inf = &flags[k]});
    on_gpu.step({.found_inf = &flags_gpu[k]});
  }
  CHECK(cuda::host_waits() == mark);
  CHECK(on_gpu.step_count() == 3);
  const StateDict state_cpu = on_cpu.state_dict(), state_gpu = on_gpu.state_dict();
  CHECK(state_value(state_gpu, "state.0.step", "test") == 3.0);
  for (const char* key : {"state.0.sum", "state.0.master"}) {
    INFO(key);
    check_close(state_gpu.at(key).to(Device::cpu()), state_cpu.at(key), 0.0, 0.0);
  }
  check_close(w_gpu.to(Device::cpu()), w_cpu, 0.0, 0.0);
}

// How often one training step under a GradScaler stops the host, phase by phase (kernels/cuda/runtime.h
// counts every wait). Issue 17's measurement: before it, the GradScaler decided on the host, reading
// found_inf in step() and again in update(), and the optimizer collected its lost-update count
// (forward 1, backward 0, scaler.step 2, scaler.update 1). Now the check, the skip, Adam's and
// Adagrad's step counts and the scale's update stay on the device, and cross_entropy checks labels
// uploaded from the host on the host (until issue 31, the forward's one wait).
TEST_CASE("host waits of one step under a GradScaler on a GPU, by phase: none for the scaler") {
  if (!have_gpu()) return;
  struct Setup {
    const char* recipe;
    const char* optimizer;
  };
  for (const Setup& setup : {Setup{"mixed_float16", "sgd"}, Setup{"mixed_float16", "adam"},
                             Setup{"float16_master", "adamw"}, Setup{"float16_master", "adagrad"}}) {
    const std::string name = std::string(setup.recipe) + " with " + setup.optimizer;
    INFO(name);
    Generator generator(3);
    nn::Sequential model(std::make_shared<nn::Linear>(8, 16, true, generator), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(16, 4, true, generator));
    const amp::Recipe recipe = amp::Recipe::parse(setup.recipe);
    model.to(recipe.parameter_dtype);
    model.to(Device::cuda());
    auto optimizer = train::make_optimizer({.name = setup.optimizer, .lr = 0.01, .momentum = 0.9}, model.parameters(),
                                           recipe.master_weights);
    amp::GradScaler scaler = recipe.make_scaler();
    const Tensor x = gpu(uniform_in({32, 8}, DType::F32, 1, -1.0, 1.0));
    const Tensor labels = gpu(from_vector(std::vector<double>(32, 1.0), {32}, {.dtype = DType::I32}));
    std::uint64_t forward = 0, backward_pass = 0, step = 0, update = 0;
    for (int i = 0; i < 3; ++i) {  // the same count every step
      std::uint64_t mark = cuda::host_waits();
      optimizer->zero_grad();
      Tensor loss;
      {
        Autocast region = recipe.autocast();
        loss = cross_entropy(model(x), labels);
      }
      forward = cuda::host_waits() - mark;
      mark = cuda::host_waits();
      backward(scaler.scale(loss));
      backward_pass = cuda::host_waits() - mark;
      mark = cuda::host_waits();
      const amp::Stepped stepped = scaler.step(*optimizer);
      step = cuda::host_waits() - mark;
      mark = cuda::host_waits();
      scaler.update();
      update = cuda::host_waits() - mark;
      mark = cuda::host_waits();
      CHECK(stepped);  // asking is what waits
      CHECK(cuda::host_waits() - mark == 1);
    }
    MESSAGE(name << ": host waits per step: forward " << forward << ", backward " << backward_pass << ", scaler.step "
                 << step << ", scaler.update " << update);
    CHECK(forward == 0);  // the labels were uploaded from the host: checked there (issue 31; it was 1)
    CHECK(backward_pass == 0);
    CHECK(step == 0);
    CHECK(update == 0);
    CHECK(optimizer->step_count() == 3);  // read back when asked
  }
}

// train::Trainer, the step of mixgrad train, repro and the examples: no wait in a step, the batch's
// upload included; every read_every-th step reads the steps since the last read in one wait, and the
// monitor observes them (its hysteresis, floor and cap act on the device in between).
TEST_CASE("Trainer on a GPU: no host wait per step; one batched read every read_every steps") {
  if (!have_gpu()) return;
  for (const char* recipe : {"fp32", "mixed_float16", "float16_master"}) {
    INFO(recipe);
    Generator generator(5);
    auto model = std::shared_ptr<nn::Module>(nn::mlp({8, 16, 4}, generator));
    train::Trainer trainer(model, {.recipe = amp::Recipe::parse(recipe),
                                   .optimizer = {.name = "adam", .lr = 0.01},
                                   .device = Device::cuda(),
                                   .scaler = {.rule = {.hysteresis = 2}},
                                   .read_every = 4});
    const Tensor x = uniform_in({32, 8}, DType::F32, 1, -1.0, 1.0);  // batches on the CPU, as a loader gives them
    const Tensor labels = from_vector(std::vector<double>(32, 1.0), {32}, {.dtype = DType::I32});
    std::vector<std::uint64_t> waits;
    std::vector<std::size_t> read;
    for (int step = 1; step <= 8; ++step) {
      const std::uint64_t mark = cuda::host_waits();
      const train::StepResult result = trainer.step(x, labels);
      waits.push_back(cuda::host_waits() - mark);
      read.push_back(result.read.size());
    }
    // The first step places the scaler's numbers and the optimizer's state; steps 2..8 are the steady state.
    CHECK(waits == std::vector<std::uint64_t>{waits[0], 0, 0, 1, 0, 0, 0, 1});
    CHECK(read == std::vector<std::size_t>{0, 0, 0, 4, 0, 0, 0, 4});
    std::uint64_t mark = cuda::host_waits();
    CHECK(trainer.read_steps().empty());  // nothing queued: no wait
    CHECK(cuda::host_waits() == mark);
    trainer.step(x, labels);
    const std::vector<train::StepNumbers> rest = trainer.read_steps();  // one wait for the one queued step
    CHECK(cuda::host_waits() == mark + 1);
    REQUIRE(rest.size() == 1);
    CHECK(rest[0].step == 9);
    CHECK(std::isfinite(rest[0].loss));
    CHECK(trainer.monitor().steps() == (std::string(recipe) == "fp32" ? 0 : 9));
  }
}

// fp8_linear on a GPU: every quantisation measures its amax and makes its scales on the device
// (kernels::fp8_quantize_fitted, and delayed scaling's history there too), so a forward and a backward
// queue their work without a wait, in every recipe. A history left on the CPU is the one exception:
// its bookkeeping is copied over and back (two waits, the history and the scales, for each of x, W and dy).
TEST_CASE("fp8_linear on a GPU: no host wait in forward or backward, scales made on the device") {
  if (!have_gpu()) return;
  Generator generator(6);
  const Tensor x = gpu(randn({16, 64}, generator)).set_requires_grad(true);
  const Tensor w = gpu(randn({32, 64}, generator)).set_requires_grad(true);
  const Tensor b = gpu(randn({32}, generator)).set_requires_grad(true);
  const Tensor dy = gpu(randn({16, 32}, generator).to(DType::BF16));
  for (const Fp8Scaling scaling : {Fp8Scaling::Current, Fp8Scaling::Delayed, Fp8Scaling::Block, Fp8Scaling::Mx})
    for (const bool history_on_cpu : {false, true}) {
      if (history_on_cpu && scaling != Fp8Scaling::Delayed) continue;
      const Fp8Options options{.scaling = scaling};
      INFO(options.describe() << (history_on_cpu ? std::string(", history on the CPU") : std::string()));
      Fp8History history = Fp8History::fresh(4);
      if (!history_on_cpu) history = {gpu(history.amax_history), gpu(history.scale)};
      const std::uint64_t mark = cuda::host_waits();
      const Tensor y = fp8_linear(x, w, b, options, &history);
      backward(y, dy);
      const std::uint64_t waits = cuda::host_waits() - mark;
      CHECK(waits == (history_on_cpu ? 6 : 0));
      CHECK(std::isfinite(x.grad().to(Device::cpu()).to(DType::F64).to_vector<double>()[0]));
      for (Tensor t : {x, w, b}) t.zero_grad();
    }
}

// Labels and token ids uploaded from the host are checked on the host; an in-place write to them on
// the device drops that copy, and the check reads the device again: a bad label is refused either way.
TEST_CASE("cross_entropy on a GPU: uploaded labels are checked with no wait, and still checked") {
  if (!have_gpu()) return;
  const Tensor logits = gpu(uniform_in({4, 3}, DType::F32, 2, -1.0, 1.0));
  const Tensor good = gpu(from_vector({0.0, 2.0, 1.0, 2.0}, {4}, {.dtype = DType::I32}));
  std::uint64_t mark = cuda::host_waits();
  cross_entropy(logits, good);
  CHECK(cuda::host_waits() == mark);
  const Tensor bad = gpu(from_vector({0.0, 3.0, 1.0, 2.0}, {4}, {.dtype = DType::I32}));
  check_error([&] { cross_entropy(logits, bad); }, "label 3 at row 1 is out of range for 3 classes");
  Tensor rewritten = gpu(from_vector({0.0, 1.0, 1.0, 2.0}, {4}, {.dtype = DType::I32}));
  rewritten.copy_(bad);  // on the device: the upload's copy is no longer these values
  mark = cuda::host_waits();
  check_error([&] { cross_entropy(logits, rewritten); }, "label 3 at row 1 is out of range for 3 classes");
  CHECK(cuda::host_waits() == mark + 1);  // read from the device
  const Tensor ids = gpu(from_vector({0.0, 5.0}, {2}, {.dtype = DType::I32}));
  check_error([&] { embedding(gpu(zeros({5, 2})), ids); }, "index 5 at position 1 is out of range for 5 embeddings");
}

// PyTorch's i64 labels (a file's): converted to i32 on the device with the upload's host copy
// following, so they are checked with no wait, as i32 labels are, and give the i32 labels' loss.
TEST_CASE("cross_entropy on a GPU: i64 labels are checked with no wait and give the i32 labels' loss") {
  if (!have_gpu()) return;
  const Tensor logits = gpu(uniform_in({4, 3}, DType::F32, 2, -1.0, 1.0));
  const Tensor as_i32 = gpu(from_vector({0.0, 2.0, 1.0, 2.0}, {4}, {.dtype = DType::I32}));
  const Tensor as_i64 = gpu(from_vector({0.0, 2.0, 1.0, 2.0}, {4}, {.dtype = DType::I64}));
  const std::uint64_t mark = cuda::host_waits();
  const Tensor loss = cross_entropy(logits, as_i64);
  CHECK(cuda::host_waits() == mark);
  CHECK(loss.item() == cross_entropy(logits, as_i32).item());
  check_error(
      [&] {
        cross_entropy(logits, gpu(from_vector({0.0, 3.0, 1.0, 2.0}, {4}, {.dtype = DType::I64})));
      },
      "label 3 at row 1 is out of range for 3 classes");
  // The cast kernel's integer rules are the CPU's: saturated, truncated, bool non-zero.
  const Tensor values = from_vector({-1e30, -2.5, 0.0, 300.0, 1e30}, {5});
  for (DType dtype : {DType::I64, DType::U8, DType::BOOL})
    CHECK(gpu(values).to(dtype).to(Device::cpu()).to_vector<double>() == values.to(dtype).to_vector<double>());
  const Tensor wide = from_vector({-5.0, 70000.0, 1.0}, {3}, {.dtype = DType::I64});
  for (DType dtype : {DType::I32, DType::U8, DType::F16, DType::BF16})
    CHECK(gpu(wide).to(dtype).to(Device::cpu()).to_vector<double>() == wide.to(dtype).to_vector<double>());
}
#endif

// train::PrecisionInspector on a small MLP: the rows it writes per layer and kind (checked against
// the layers' own tensors and the optimizer's own lost-update count), that it changes none of the
// run's bits, that a skipped step's first inf/NaN op and layer are named as amp::OverflowDetector
// (which reads every op) names them, and that bad options are refused before any step.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "tests/trainer_fixtures.h"
#include "train/precision_inspector.h"
#ifdef MG_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

using namespace mg;
using namespace mg::testing;
using amp::Outcome;
using train::TensorKind;

namespace {

std::vector<const train::LayerRecord*> rows(const train::PrecisionInspector& inspector, std::int64_t step,
                                            TensorKind kind) {
  std::vector<const train::LayerRecord*> found;
  for (const train::LayerRecord& r : inspector.records())
    if (r.step == step && r.kind == kind) found.push_back(&r);
  return found;
}

}  // namespace

TEST_CASE("inspector: every N steps, one row per layer and kind, with the layers' own numbers") {
  TempDir dir;
  const std::string csv = dir / "inspect.csv";
  train::Trainer trainer(small_mlp(), {.recipe = amp::Recipe::parse("float16_pure"), .optimizer = {.lr = 0.5}});
  train::PrecisionInspector inspector(trainer, {.every = 2, .csv_path = csv});
  const std::vector<Batch> data = batches(3);
  for (const Batch& b : data) inspector.steps_read(trainer.step(b.x, b.y, {&inspector}).read);
  inspector.steps_read(trainer.read_steps());
  inspector.finish();

  // Steps 1 and 3 are inspected; step 2 is not.
  CHECK(rows(inspector, 2, TensorKind::Activation).empty());
  for (std::int64_t step : {1, 3}) {
    const auto activations = rows(inspector, step, TensorKind::Activation);
    REQUIRE(activations.size() == 4);
    CHECK(activations[0]->layer == "0");
    CHECK(activations[0]->stats.values.count == 8 * 6);  // the flattened input
    CHECK(activations[1]->layer == "1");
    CHECK(activations[1]->dtype == DType::F16);
    CHECK(activations[1]->stats.values.count == 8 * 16);
    CHECK(activations[3]->layer == "3");
    CHECK(activations[3]->stats.values.count == 8 * 4);  // the logits
    // The ReLU's output: its zeros are exactly the zeros the inspector counts.
    CHECK(activations[2]->stats.values.zero > 0);
    // Backward reaches the layers that need gradients, last first: "3", "2", "1" (not the Flatten).
    const auto gradients = rows(inspector, step, TensorKind::ActivationGrad);
    REQUIRE(gradients.size() == 3);
    CHECK(gradients[0]->layer == "3");
    CHECK(gradients[0]->stats.values.count == 8 * 4);
    CHECK(gradients[2]->layer == "1");
    const auto weights = rows(inspector, step, TensorKind::Weight);
    REQUIRE(weights.size() == 2);
    CHECK(weights[0]->layer == "1");
    CHECK(weights[0]->stats.values.count == 6 * 16 + 16);  // weight and bias together
    CHECK(weights[1]->stats.values.count == 16 * 4 + 4);
    CHECK(rows(inspector, step, TensorKind::WeightGrad).size() == 2);
    const auto updates = rows(inspector, step, TensorKind::Update);
    REQUIRE(updates.size() == 2);
    REQUIRE(updates[0]->lost.has_value());
  }
  // The last step's updates: SGD without momentum moves exactly the elements with a non-zero
  // gradient, so the layers' lost counts add up to the optimizer's own.
  const kernels::UpdateCount own = trainer.optimizer().last_update();
  std::int64_t meant = 0, lost = 0;
  for (const auto* r : rows(inspector, 3, TensorKind::Update)) {
    meant += r->lost->meant;
    lost += r->lost->lost;
  }
  CHECK(meant == own.nonzero);
  CHECK(lost == own.lost);

  // The CSV: a header and one line per record.
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  CHECK(line.rfind("step,layer,kind,dtype,values,amax,zero,nonfinite,f16_flushed,", 0) == 0);
  std::size_t lines = 0;
  while (std::getline(in, line)) ++lines;
  CHECK(lines == inspector.records().size());
}

TEST_CASE("inspector: inspecting every step changes none of the run's bits") {
  for (const char* recipe : {"mixed_float16", "float16_pure", "float16_master"}) {
    CAPTURE(recipe);
    const std::vector<Batch> data = batches(4);
    train::Trainer plain(small_mlp(), {.recipe = amp::Recipe::parse(recipe)});
    train::Trainer watched(small_mlp(), {.recipe = amp::Recipe::parse(recipe)});
    train::PrecisionInspector inspector(watched, {.every = 1});
    for (const Batch& b : data) {
      plain.step(b.x, b.y);
      inspector.steps_read(watched.step(b.x, b.y, {&inspector}).read);
    }
    inspector.finish();
    CHECK(bytes_of(plain.model().parameters()) == bytes_of(watched.model().parameters()));
    CHECK(plain.scaler().get_scale() == watched.scaler().get_scale());
    CHECK_FALSE(inspector.first_nonfinite().has_value());
  }
}

TEST_CASE("inspector: a skipped step names the op and layer of its first inf/NaN, as OverflowDetector does") {
  // Inputs of 10^5 overflow f16 in layer "1"'s autocast cast: the loss is NaN, the step is skipped.
  Batch huge = batches(1, 1e5).front();
  train::Trainer detected(small_mlp(), {.recipe = amp::Recipe::parse("mixed_float16")});
  std::optional<amp::OverflowEvent> event;
  {
    amp::OverflowDetector detector;
    detected.step(huge.x, huge.y);
    event = detector.first();
  }
  REQUIRE(event.has_value());
  CHECK(event->scope == "1");

  train::Trainer trainer(small_mlp(), {.recipe = amp::Recipe::parse("mixed_float16"), .read_every = 4});
  train::PrecisionInspector inspector(trainer, {.every = 100});
  const std::vector<Batch> clean = batches(2);
  inspector.steps_read(trainer.step(clean[0].x, clean[0].y, {&inspector}).read);
  inspector.steps_read(trainer.step(huge.x, huge.y, {&inspector}).read);  // step 2: skipped
  CHECK_FALSE(inspector.first_nonfinite().has_value());  // not read yet: no host wait
  inspector.steps_read(trainer.step(clean[1].x, clean[1].y, {&inspector}).read);
  inspector.steps_read(trainer.read_steps());
  REQUIRE(inspector.first_nonfinite().has_value());
  const amp::NonfiniteOp& op = *inspector.first_nonfinite();
  CHECK(op.step == 2);
  CHECK(op.backward == event->backward);
  CHECK(op.op == event->op);
  CHECK(op.scope == event->scope);
  CHECK(op.describe() == fmt::format("step 2: the output (forward) of op {} in layer '1'", event->op));
  CHECK(inspector.nonfinite_steps().size() == 1);
}

TEST_CASE("inspector: bad options are refused before any step") {
  train::Trainer trainer(small_mlp(), {});
  check_error([&] { train::PrecisionInspector(trainer, {.every = 0}); }, "every must be >= 1");
  check_error([&] { train::PrecisionInspector(trainer, {.every = 5, .csv_path = "/nonexistent-dir/inspect.csv"}); },
              "cannot write the inspection CSV /nonexistent-dir/inspect.csv");
}

TEST_CASE("NonfiniteTrace: the first op whose output holds an inf or NaN, in every floating dtype, at any position") {
  for (DType dtype : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    for (std::int64_t position : {0, 36, 99}) {  // the first, one inside, the last element (past the vector width)
      CAPTURE(dtype);
      CAPTURE(position);
      std::vector<double> values(100, 1.0);
      values[static_cast<std::size_t>(position)] = dtype == DType::F16 ? 60000.0 : 1e38;
      const Tensor x = from_vector(values, {100}, {.dtype = dtype});
      amp::NonfiniteTrace trace;
      trace.begin_step(1);
      Tensor finite = mul(x, 0.5);  // finite
      Tensor overflow;
      {
        NameScope scope("block.fc");
        overflow = mul(x, dtype == DType::F64 ? 1e300 : 4.0);  // past the format's max at `position` alone
      }
      Tensor nan = sub(overflow, overflow);  // inf - inf: NaN, but not the first
      trace.end_step();
      REQUIRE(trace.first(1).has_value());
      CHECK(trace.first(1)->op == "mul");
      CHECK(trace.first(1)->scope == "block.fc");
      CHECK_FALSE(trace.first(1)->backward);
      CHECK_FALSE(trace.first(2).has_value());  // not traced
      trace.drop_through(1);
      CHECK(trace.kept_steps() == 0);
    }
  }
  for (DType dtype : {DType::E4M3, DType::E5M2}) {  // FP8 codes: a NaN among them is found by its bits too
    CAPTURE(dtype);
    amp::NonfiniteTrace trace;
    trace.begin_step(1);
    Tensor finite = cast(from_vector({1.0, -448.0, 2.0}, {3}), dtype);  // E4M3's largest code, 0xFE: finite
    Tensor nan;
    {
      NameScope scope("codes");
      nan = cast(from_vector({1.0, std::nan(""), 2.0}, {3}), dtype);
    }
    trace.end_step();
    REQUIRE(trace.first(1).has_value());
    CHECK(trace.first(1)->op == "cast");
    CHECK(trace.first(1)->scope == "codes");
  }
  amp::NonfiniteTrace trace;  // between steps nothing is observed
  Tensor inf = mul(from_vector({60000.0}, {1}, {.dtype = DType::F16}), 4.0);
  trace.begin_step(1);
  trace.end_step();
  CHECK_FALSE(trace.first(1).has_value());
}

#ifdef MG_WITH_CUDA
// On a GPU (or the CUDA emulator) the flags stay on the device: a step that is not inspected makes the
// host wait no more than without the inspector, and a skipped step's op is named as on the CPU.
TEST_CASE("inspector (GPU): no host wait on steps not inspected; the skipped step's op named as on the CPU") {
  if (!have_gpu()) return;
  Batch huge = batches(1, 1e5).front();
  const std::vector<Batch> clean = batches(3);
  train::Trainer cpu(small_mlp(), {.recipe = amp::Recipe::parse("mixed_float16")});
  train::PrecisionInspector cpu_inspector(cpu, {.every = 100});
  cpu.step(huge.x, huge.y, {&cpu_inspector});
  cpu_inspector.steps_read(cpu.read_steps());
  REQUIRE(cpu_inspector.first_nonfinite().has_value());

  std::uint64_t waits_first_two = 0;  // steps 1 and 2 without the inspector (run first)
  auto run = [&](bool inspect) {
    train::Trainer trainer(small_mlp(),
                           {.recipe = amp::Recipe::parse("mixed_float16"), .device = Device::cuda(), .read_every = 8});
    std::optional<train::PrecisionInspector> inspector;
    if (inspect) inspector.emplace(trainer, train::InspectorOptions{.every = 100});
    train::StepObserver* observer = inspector ? &*inspector : nullptr;
    std::uint64_t mark = cuda::host_waits();
    trainer.step(clean[0].x, clean[0].y, {observer});  // step 1: inspected (reads)
    trainer.step(clean[1].x, clean[1].y, {observer});  // step 2: reads step 1's updated parameters
    if (inspect) CHECK(cuda::host_waits() - mark <= waits_first_two + 3);  // one batched read each, and the step count
    waits_first_two = cuda::host_waits() - mark;
    mark = cuda::host_waits();
    trainer.step(huge.x, huge.y, {observer});  // steps 3 and 4: neither inspected nor reading
    trainer.step(clean[2].x, clean[2].y, {observer});
    const std::uint64_t waits = cuda::host_waits() - mark;
    const std::vector<train::StepNumbers> read = trainer.read_steps();
    std::optional<amp::NonfiniteOp> op;
    if (inspector) {
      inspector->steps_read(read);  // reads step 3's flags: one transfer
      op = inspector->first_nonfinite();
    }
    return std::pair{waits, op};
  };
  const auto [waits_off, none] = run(false);
  const auto [waits_on, op] = run(true);
  CHECK(waits_on == waits_off);
  CHECK_FALSE(none.has_value());
  REQUIRE(op.has_value());
  CHECK(op->step == 3);
  CHECK(op->op == cpu_inspector.first_nonfinite()->op);
  CHECK(op->scope == cpu_inspector.first_nonfinite()->scope);
  CHECK(op->backward == cpu_inspector.first_nonfinite()->backward);
}
#endif

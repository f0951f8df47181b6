// The op profile (train/op_profile.h) and the spans it reads (OpSpan, OpObserver::begin/end in
// autograd/tape.h): spans open and close around every op and every backward node, nested as they
// ran, also when an op throws; the profile's self times and "outside ops" rows add up to its phases
// exactly; calls and bytes per op are the model's; the table and the Chrome trace say so. On a GPU
// (the emulator in CI) the same profile runs on CUDA events.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "train/op_profile.h"

using namespace mg;
using namespace mg::testing;

namespace {

// Every begin, end, forward and backward event, as "begin matmul", "end matmul", "forward cast", ...
struct SpanLog : OpObserver {
  SpanLog() { add_observer(this); }
  ~SpanLog() override { remove_observer(this); }
  void forward(const char* op, const std::string&, const std::vector<Tensor>&, const Tensor&) override {
    events.push_back(std::string("forward ") + op);
  }
  void backward(const char* op, const std::string&, const Tensor&, const Grads&) override {
    events.push_back(std::string("backward ") + op);
  }
  void begin(const char* op, const std::string& scope, bool backward) override {
    events.push_back(std::string(backward ? "begin-bw " : "begin ") + op);
    scopes.push_back(scope);
  }
  void end(const char* op, bool backward) override {
    events.push_back(std::string(backward ? "end-bw " : "end ") + op);
  }
  std::vector<std::string> events, scopes;
};

std::map<std::pair<std::string, train::Phase>, train::OpRow> by_op(const train::OpProfile& profile) {
  std::map<std::pair<std::string, train::Phase>, train::OpRow> rows;
  for (const train::OpRow& row : profile.rows()) rows[{row.op, row.phase}] = row;
  return rows;
}

// A Trainer on the 8-16-16-4 MLP (three Linear layers) and a batch of 4 rows.
struct SmallRun {
  explicit SmallRun(const char* recipe, Device device = Device::cpu()) {
    Generator generator(3);
    trainer = std::make_unique<train::Trainer>(std::shared_ptr<nn::Module>(nn::mlp({8, 16, 16, 4}, generator)),
                                               train::TrainerOptions{.recipe = amp::Recipe::parse(recipe),
                                                                     .optimizer = {.name = "sgd", .lr = 0.01},
                                                                     .device = device});
    x = uniform_in({4, 8}, DType::F32, 1, -1.0, 1.0);
    labels = from_vector(std::vector<double>{0, 1, 2, 3}, {4}, {.dtype = DType::I32});
  }
  std::unique_ptr<train::Trainer> trainer;
  Tensor x, labels;
};

}  // namespace

TEST_CASE("OpSpan: an op's span encloses the casts autocast makes for it, and closes when the op throws") {
  const Tensor a = ones({2, 3}).set_requires_grad(true), b = ones({3, 4});
  SpanLog log;
  {
    Autocast region(DType::BF16);
    NameScope scope("layer");
    (void)matmul(a, b);
  }
  CHECK(log.events == std::vector<std::string>{"begin matmul", "begin cast", "forward cast", "end cast", "begin cast",
                                               "forward cast", "end cast", "forward matmul", "end matmul"});
  CHECK(log.scopes == std::vector<std::string>{"layer", "layer", "layer"});
  log.events.clear();
  CHECK_THROWS_AS((void)matmul(a, ones({4, 4})), Error);  // [2, 3] x [4, 4]: refused, and its span closed
  CHECK(log.events == std::vector<std::string>{"begin matmul", "end matmul"});
  log.events.clear();
  {
    const OpSpan outer("optimizer step");  // a span of one's own, around ops
    (void)add(a, 1.0);
  }
  CHECK(log.events ==
        std::vector<std::string>{"begin optimizer step", "begin add", "forward add", "end add", "end optimizer step"});
}

TEST_CASE("OpSpan in backward: one span around each node's backward function, none for the ops it calls") {
  const Tensor x = ones({2, 3}).set_requires_grad(true), w = ones({4, 3}).set_requires_grad(true);
  const Tensor loss = sum(linear(x, w, Tensor()));
  SpanLog log;
  backward(loss);
  // linear's backward calls matmul twice: those are inside its span, not spans of their own.
  CHECK(log.events == std::vector<std::string>{"begin-bw sum", "backward sum", "end-bw sum", "begin-bw linear",
                                               "backward linear", "end-bw linear"});
}

TEST_CASE("OpProfile: self times and outside-ops rows add up to the phases; calls and bytes are the model's") {
  SmallRun run("fp32");
  train::OpProfile profile;  // skips the first step
  for (int step = 0; step < 3; ++step) run.trainer->step(run.x, run.labels, {&profile});
  REQUIRE(profile.counted_steps() == 2);
  const auto rows = by_op(profile);
  const train::OpRow& linear_fw = rows.at({"linear", train::Phase::Forward});
  CHECK(linear_fw.calls == 3 * 2);
  // What three Linear layers write per step in forward: [4, 16], [4, 16] and [4, 4] f32 outputs.
  CHECK(linear_fw.bytes == 2.0 * 4 * (4 * 16 + 4 * 16 + 4 * 4));
  const train::OpRow& linear_bw = rows.at({"linear", train::Phase::Backward});
  CHECK(linear_bw.calls == 3 * 2);
  // Their input gradients: dx for the two upper layers (the first's input needs none), dW and db for each.
  const double grads = 4 * 16 + 4 * 16 + (16 * 8 + 16) + (16 * 16 + 16) + (4 * 16 + 4);
  CHECK(linear_bw.bytes == 2.0 * 4 * grads);
  CHECK(rows.at({"optimizer step", train::Phase::Update}).calls == 2);
  CHECK(rows.at({"cross_entropy", train::Phase::Forward}).calls == 2);
  CHECK(rows.count({"outside ops", train::Phase::Backward}) == 1);

  double sum_self = 0;
  for (const auto& [key, row] : rows) {
    CHECK(row.self_seconds >= 0);
    CHECK(row.total_seconds >= row.self_seconds - 1e-12);
    sum_self += row.self_seconds;
  }
  // Every instant of a phase is in exactly one row: the spans' self times and the time outside them.
  CHECK(sum_self == doctest::Approx(profile.step_seconds() * 2).epsilon(1e-9));
  CHECK(profile.step_seconds() > 0);
  CHECK(profile.phase_seconds(train::Phase::Forward) > 0);

  const std::string table = profile.table();
  CHECK(table.find("2 step(s) counted after 1 warm-up") != std::string::npos);
  CHECK(table.find("linear") != std::string::npos);
  CHECK(table.find("outside ops") != std::string::npos);
}

TEST_CASE("OpProfile: an op's self time leaves out the spans nested in it; its total keeps them") {
  train::OpProfile profile({.skip_steps = 0});
  profile.start(train::Phase::Forward);
  {
    const OpSpan outer("outer");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const OpSpan inner("inner");
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  profile.finish_step();
  const auto rows = by_op(profile);
  const train::OpRow& outer = rows.at({"outer", train::Phase::Forward});
  const train::OpRow& inner = rows.at({"inner", train::Phase::Forward});
  CHECK(inner.total_seconds >= 0.003);  // slept at least that long
  CHECK(inner.self_seconds == inner.total_seconds);
  CHECK(outer.self_seconds >= 0.002);
  CHECK(outer.self_seconds == doctest::Approx(outer.total_seconds - inner.total_seconds).epsilon(1e-12));
}

TEST_CASE("OpProfile: the Chrome trace holds the traced steps, ops inside their phases") {
  SmallRun run("mixed_bfloat16");
  train::OpProfile profile({.skip_steps = 1, .trace_steps = 1});
  for (int step = 0; step < 3; ++step) run.trainer->step(run.x, run.labels, {&profile});
  TempDir dir;
  const std::string path = dir / "trace.json";
  profile.write_chrome_trace(path);
  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(path));
  std::vector<nlohmann::json> phases, ops;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    (e.at("tid") == 0 ? phases : ops).push_back(e);
  }
  REQUIRE(phases.size() == 3);  // one step traced: forward, backward, update
  CHECK(phases[0].at("name") == "forward");
  CHECK(phases[2].at("name") == "update");
  bool saw_cast = false;
  for (const nlohmann::json& op : ops) {
    saw_cast = saw_cast || op.at("name") == "cast";
    const double begin = op.at("ts"), end = begin + op.at("dur").get<double>();
    bool inside = false;  // a tolerance of a microsecond's rounding
    for (const nlohmann::json& p : phases)
      inside = inside || (begin >= p.at("ts").get<double>() - 1e-3 &&
                          end <= p.at("ts").get<double>() + p.at("dur").get<double>() + 1e-3);
    CHECK(inside);
  }
  CHECK(saw_cast);  // mixed_bfloat16 casts the weights
  CHECK_THROWS_WITH_AS(profile.write_chrome_trace(dir / "missing/trace.json"), doctest::Contains("cannot open"), Error);
}

TEST_CASE("OpProfile: errors before anything was measured name what to do") {
  train::OpProfile profile;
  CHECK_THROWS_WITH_AS((void)profile.table(), doctest::Contains("no step was counted"), Error);
  CHECK_THROWS_WITH_AS(profile.write_chrome_trace("trace.json"), doctest::Contains("no step was traced"), Error);
  CHECK_THROWS_WITH_AS(train::OpProfile({.skip_steps = -1}), doctest::Contains("must be >= 0"), Error);
}

#ifdef MG_WITH_CUDA
TEST_CASE("OpProfile on a GPU: CUDA events time the ops; the rows still add up to the phases") {
  if (!have_gpu()) return;
  SmallRun run("mixed_float16", Device::cuda());
  train::OpProfile profile({.device = Device::cuda()});
  for (int step = 0; step < 3; ++step) run.trainer->step(run.x, run.labels, {&profile});
  const auto rows = by_op(profile);
  CHECK(rows.at({"linear", train::Phase::Forward}).calls == 6);
  double sum_self = 0;
  for (const auto& [key, row] : rows) sum_self += row.self_seconds;
  CHECK(sum_self == doctest::Approx(profile.step_seconds() * 2).epsilon(1e-6));
  CHECK(profile.step_seconds() > 0);  // the events' elapsed times were read, not left at 0
  CHECK(profile.table().find("CUDA events") != std::string::npos);
}
#endif

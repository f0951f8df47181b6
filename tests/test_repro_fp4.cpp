// `mixgrad repro`'s FP4 and stochastic-rounding experiments (tools/repro/e12..e14), reduced: NVFP4 and
// MXFP4 train the MLP near mixed_bfloat16 and E8's runs are taken rather than trained again (E12); each
// ablation reaches the GEMMs, and NVFP4's scales quantise with less error than MXFP4's (E13); the bytes a
// parameter costs, exactly, and bfloat16_pure's update roundings (E14). As in test_repro.cpp the runs are
// tiny, so the assertions on training are orderings with margins.
#include <cmath>

#include "tests/repro_fixtures.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"
#include "tools/repro/e12_fp4_parity.h"
#include "tools/repro/e13_fp4_ingredients.h"
#include "tools/repro/e14_master_or_rounding.h"
#include "tools/repro/e4_loss_scaling.h"

using namespace mg;
using namespace mg::tools::repro;
using namespace mg::testing::repro;

namespace {

E8Options small_training(std::vector<std::string> ids) {
  E8Options o;
  o.images.mlp_steps = 150;
  o.images.cnn_steps = 20;
  o.images.cnn = nn::CnnOptions{.channels1 = 4, .channels2 = 8, .hidden = 32};
  o.images.batch = 32;
  o.images.log_every = 10;
  o.images.eval_every = 0;
  o.variant_ids = std::move(ids);
  return o;
}

}  // namespace

TEST_CASE("E12: NVFP4 and MXFP4 train the MLP near mixed_bfloat16, and E8's runs are taken, not trained again") {
  E12Options o;
  o.training = small_training({"V5", "V9", "V16", "V17"});
  o.training.lstm = false;
  E8Options e8_options = o.training;
  e8_options.variant_ids = {"V5", "V9"};
  const E8Result e8 = run_e8(e8_options, small_fashion(), nullptr);
  const E12Result r = run_e12(o, small_fashion(), small_text(), &e8);
  REQUIRE(r.models.size() == 2);  // MLP and CNN: not the char LSTM, though text was given
  const E8Model& mlp = r.models[0];
  REQUIRE(mlp.runs.size() == 4);
  const RunResult& bf16 = e8_runs_of(mlp, "V5")->front();
  // Taken from E8: the very same record (a second training would take its own seconds).
  CHECK(bf16.seconds == e8_runs_of(e8.models[0], "V5")->front().seconds);
  for (const char* id : {"V16", "V17"}) {
    const RunResult& fp4 = e8_runs_of(mlp, id)->front();
    INFO(id << ": " << fp4.final_accuracy << " vs mixed_bfloat16 " << bf16.final_accuracy);
    CHECK(fp4.variant.recipe.fp8.has_value());
    CHECK_FALSE(identical_trajectories(fp4, bf16));  // FP4 reached the GEMMs
    CHECK(std::fabs(fp4.final_accuracy - bf16.final_accuracy) < 0.05);
    CHECK(std::fabs(late_loss_gap(fp4, bf16)) < 0.1);
  }
  mg::testing::TempDir tmp;
  Report report(tmp / "out");
  const Section s = e12_section(r, report);
  CHECK(s.verdict.find("MLP: against mixed_bfloat16") != std::string::npos);
  CHECK(s.verdict.find("**") != std::string::npos);
}

TEST_CASE("E13: every ablation changes the training, and NVFP4's scales beat MXFP4's on the same values") {
  E13Options o;
  o.training = small_training({"V5", "V16", "V18", "V19", "V20", "V21", "V22"});
  o.training.images.mlp_steps = 40;
  o.training.cnn = o.training.lstm = false;
  o.rows = 64;
  o.cols = 256;
  const E13Result r = run_e13(o, tiny_fashion(), nullptr);
  REQUIRE(r.training.models.size() == 1);
  const E8Model& mlp = r.training.models[0];
  const RunResult& nv = e8_runs_of(mlp, "V16")->front();
  for (const char* id : {"V18", "V19", "V20", "V21", "V22"}) {
    INFO(id);
    const RunResult& ablated = e8_runs_of(mlp, id)->front();
    CHECK_FALSE(identical_trajectories(ablated, nv));  // the switch reached the step
    CHECK(std::isfinite(ablated.final_loss));
  }
  REQUIRE(r.formats.size() == 3);
  for (const E13FormatError& f : r.formats) {
    INFO(f.values << ": NVFP4 " << f.nv_error << ", MXFP4 " << f.mx_error);
    CHECK(f.nv_error < f.mx_error);  // E4M3 scales fit a block's amax to 6; a power of two, somewhere in [4, 8)
    CHECK(f.nv_error > 0.05);  // 4 bits: errors of several percent, not fractions of one
    CHECK(f.nv_error < 0.2);
  }
  // Gaussian values: nothing of a block of 16 falls below E2M1's 0.25 of 6 / amax often: a few percent.
  CHECK(r.formats[0].nv_flushed < 0.1);
}

TEST_CASE("E14: the bytes a parameter costs, exactly, and bfloat16_pure's roundings against f32 weights") {
  E14Options o;
  o.runs = small_e2();
  o.runs.variant_ids = {"V5", "V6", "V23", "V24"};
  const E14Result r = run_e14(o, small_fashion());
  REQUIRE(r.runs.size() == 4);
  REQUIRE(r.bytes.size() == 4);
  // SGD without momentum: weight + gradient; Adam adds two moments; Kahan a bf16 compensation.
  const double expected[4][3] = {{8, 16, 16}, {4, 8, 12}, {4, 8, 12}, {6, 10, 14}};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(r.bytes[i].variant);
    CHECK(r.bytes[i].sgd == expected[i][0]);
    CHECK(r.bytes[i].adam == expected[i][1]);
    CHECK(r.bytes[i].adam_f32_moments == expected[i][2]);
  }
  const RunResult &master = by_id(r.runs, "V5"), &nearest = by_id(r.runs, "V6");
  const RunResult &stochastic = by_id(r.runs, "V23"), &kahan = by_id(r.runs, "V24");
  // Rounded to nearest, most small SGD updates are lost; stochastically or with Kahan the weights keep
  // up with the f32 run at least as well.
  CHECK(nearest.lost_update_fraction > 0.5);
  CHECK(std::fabs(kahan.final_accuracy - master.final_accuracy) <=
        std::fabs(nearest.final_accuracy - master.final_accuracy) + 0.01);
  CHECK(std::fabs(stochastic.final_accuracy - master.final_accuracy) <=
        std::fabs(nearest.final_accuracy - master.final_accuracy) + 0.01);
  CHECK(kahan.final_loss < nearest.final_loss);
}

#include "tools/repro/repro.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "core/error.h"
#include "tools/repro/e2_master_weights.h"
#include "tools/repro/e4_loss_scaling.h"

namespace mg::tools::repro {

namespace {

// An experiment still to be written: its claim is known, so the report can say what it will show.
Experiment pending(std::string id, std::string title, std::string reference, std::string claim) {
  return Experiment{.id = std::move(id), .title = std::move(title), .reference = std::move(reference),
                    .claim = std::move(claim), .run = {}};
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

}  // namespace

std::vector<Experiment> experiments() {
  return {
      pending("E1", "Parity", "Table 1",
              "ImageNet CNNs trained in mixed precision (FP16 storage and math, FP32 master weights) match FP32 "
              "top-1 accuracy within a few tenths of a point (e.g. ResNet-50 75.92 -> 76.04), without loss scaling."),
      e2_experiment(),
      pending("E3", "Gradient histograms", "Figures 2b and 3",
              "About 5% of the weight gradients of a speech model have exponents below -24 (zero in FP16); in SSD, "
              "67% of activation-gradient values are zero and many non-zero ones lie below 2^-24."),
      e4_experiment(),
      pending("E5", "bigLSTM", "Figure 5",
              "A language model (bigLSTM) diverges after ~300K iterations with loss scale 1; with S = 128 it "
              "matches FP32's training curve."),
      pending("E6", "Speed and memory", "§1, §5",
              "Half-precision math is 2-8x faster on the GPUs of the time and memory use is nearly halved "
              "(activations dominate)."),
  };
}

void add_repro_flags(CLI::App& c, ReproOptions& o) {
  c.add_option("--experiment", o.experiment, "Which experiment: E1..E6 (see tools/README.md) or all")
      ->check(CLI::IsMember({"E1", "E2", "E3", "E4", "E5", "E6", "all"}))->capture_default_str();
  c.add_option("--preset", o.preset, "quick (minutes on 2 CPU cores, small subsets) or full (the GPU-sized version)")
      ->check(CLI::IsMember({"quick", "full"}))->capture_default_str();
  c.add_option("--device", o.device, "Device: cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  c.add_option("--out", o.out, "Directory of the report (report.md, CSVs, plots); created if missing")
      ->capture_default_str();
  c.add_option("--seed", o.seed, "Seed of every run's initialization and data order (shared by the variants)")
      ->capture_default_str();
  c.add_flag("--quiet", o.quiet, "No progress lines, only the report's path");
}

std::string run_repro(const ReproOptions& o) {
  MG_CHECK(o.preset == "quick" || o.preset == "full", "mixgrad repro: --preset must be quick or full, got {}", o.preset);
  const Device device = o.device == "cuda" ? Device::cuda() : Device::cpu();
  if (device.is_cuda()) check_device_available(device, "mixgrad repro --device cuda");
  std::vector<Experiment> chosen;
  for (Experiment& e : experiments())
    if (o.experiment == "all" || o.experiment == e.id) chosen.push_back(std::move(e));
  MG_CHECK(!chosen.empty(), "mixgrad repro: unknown experiment '{}'; choose E1..E6 or all", o.experiment);

  Context context(o.preset == "full" ? Preset::Full : Preset::Quick, device, o.seed, o.quiet);
  Report report(o.out);
  const auto start = std::chrono::steady_clock::now();
  for (const Experiment& e : chosen) {
    if (!e.run) {
      context.progress(fmt::format("{} ({}, {}): not implemented yet; listed as pending in the report", e.id, e.title,
                                   e.reference));
      report.add(Section{.id = e.id, .title = e.title, .reference = e.reference, .claim = e.claim, .pending = true});
      continue;
    }
    context.progress(fmt::format("{} ({}, {}): running", e.id, e.title, e.reference));
    report.add(e.run(context, report));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string preamble = fmt::format(
      "Made by `mixgrad repro --experiment {} --preset {} --device {} --seed {}` on {} in {:.0f} s. Paper: Micikevicius "
      "et al., *Mixed Precision Training*, ICLR 2018 (arXiv 1710.03740). Variants: V0 fp32, V1 float16_pure, V2 "
      "float16_master without loss scaling, V3 float16_master with a static scale S, V4 float16_master with the "
      "dynamic GradScaler, V5 mixed_bfloat16, V6 bfloat16_pure (tools/repro/variants.h). Every run of an experiment "
      "starts from the same weights and sees the same batches; only the precision differs.",
      o.experiment, o.preset, o.device, o.seed, utc_now(), seconds);
  return report.write(preamble);
}

}  // namespace mg::tools::repro

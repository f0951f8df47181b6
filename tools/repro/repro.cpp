#include "tools/repro/repro.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "core/error.h"
#include "kernels/gemm.h"
#include "tools/flag_checks.h"
#include "tools/repro/e1_parity.h"
#include "tools/repro/e2_master_weights.h"
#include "tools/repro/e3_histograms.h"
#include "tools/repro/e4_loss_scaling.h"
#include "tools/repro/e5_language_model.h"
#include "tools/repro/e6_speed_memory.h"
#include "tools/repro/e7_accumulation.h"
#include "tools/repro/e8_fp8_parity.h"
#include "tools/repro/e9_granularity.h"
#include "tools/repro/e10_fp8_accumulation.h"
#include "tools/repro/e11_gradient_formats.h"

namespace mg::tools::repro {

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

}  // namespace

// Each experiment's heading and how it runs in a context: its options for the preset, then the data
// it trains on, loaded through the context in this order (once per size, shared), its run, its section.
std::vector<Experiment> experiments() {
  return {
      {kE1Parity,
       [](Context& c, Report& report) {
         const E1Options o = e1_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.train_examples, o.test_examples);
         return e1_section(run_e1(o, images, c.progress_sink()), report);
       }},
      {kE2MasterWeights,
       [](Context& c, Report& report) {
         const E2Options o = e2_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.train_examples, o.test_examples);
         return e2_section(run_e2(o, images, c.progress_sink()), report);
       }},
      {kE3Histograms,
       [](Context& c, Report& report) {
         const E3Options o = e3_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.images.train_examples, o.images.test_examples);
         auto text = o.text ? c.kjv(o.language.train_chars, o.language.validation_chars) : nullptr;
         return e3_section(run_e3(o, images, text, c.progress_sink()), report);
       }},
      {kE4LossScaling,
       [](Context& c, Report& report) {
         const E4Options o = e4_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.train_examples, o.test_examples);
         return e4_section(run_e4(o, images, c.progress_sink()), report);
       }},
      {kE5LanguageModel,
       [](Context& c, Report& report) {
         const E5Options o = e5_options(c.preset, c.device, c.seed);
         auto text = c.kjv(o.train_chars, o.validation_chars);
         return e5_section(run_e5(o, text, c.progress_sink()), report);
       }},
      {kE6SpeedMemory,
       [](Context& c, Report& report) {
         const E6Options o = e6_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.train_examples, o.test_examples);
         auto text = o.large ? c.kjv(20 * 1000 * 1000, 50000) : nullptr;
         return e6_section(run_e6(o, images, text, c.progress_sink()), report);
       }},
      {kE7Accumulation,
       [](Context& c, Report& report) {
         const E7Options o = e7_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.train_examples, o.test_examples);
         auto text = c.kjv(o.train_chars, o.validation_chars);
         return e7_section(run_e7(o, images, text, c.progress_sink()), report);
       }},
      {kE8Fp8Parity,
       [](Context& c, Report& report) {
         const E8Options o = e8_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.images.train_examples, o.images.test_examples);
         auto text = c.kjv(o.language.train_chars, o.language.validation_chars);
         auto result = std::make_shared<const E8Result>(run_e8(o, images, text, c.progress_sink()));
         c.keep<E8Result>("E8", result);  // E9 takes its MLP runs' loss gaps
         return e8_section(*result, report);
       }},
      {kE9Granularity,
       [](Context& c, Report& report) {
         const E9Options o = e9_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.training.images.train_examples, o.training.images.test_examples);
         auto text = c.kjv(o.training.language.train_chars, o.training.language.validation_chars);
         const auto e8 = c.kept<E8Result>("E8");
         return e9_section(run_e9(o, images, text, e8.get(), c.progress_sink()), report);
       }},
      {kE10Fp8Accumulation,
       [](Context& c, Report& report) {
         const E10Options o = e10_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.images.train_examples, o.images.test_examples);
         return e10_section(run_e10(o, images, c.progress_sink()), report);
       }},
      {kE11GradientFormats,
       [](Context& c, Report& report) {
         const E11Options o = e11_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.images.train_examples, o.images.test_examples);
         auto text = c.kjv(o.language.train_chars, o.language.validation_chars);
         return e11_section(run_e11(o, images, text, c.progress_sink()), report);
       }},
  };
}

void add_repro_flags(CLI::App& c, ReproOptions& o) {
  std::vector<std::string> ids;
  for (const Experiment& e : experiments()) ids.emplace_back(e.id);
  ids.emplace_back("all");
  c.add_option(
       "--experiment", o.experiment,
       "Which experiment: E1..E7 (Mixed Precision Training), E8..E11 (FP8: parity, scaling granularity, accumulation, gradient formats; see tools/README.md) or all")
      ->check(CLI::IsMember(ids))
      ->capture_default_str();
  c.add_option("--preset", o.preset, "quick (minutes on 2 CPU cores, small subsets) or full (the GPU-sized version)")
      ->check(CLI::IsMember({"quick", "full"}))
      ->capture_default_str();
  c.add_option("--device", o.device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  c.add_option("--out", o.out, "Directory of the report (report.md, CSVs, plots); created if missing")
      ->capture_default_str();
  c.add_option("--seed", o.seed, "Seed of every run's initialization and data order (shared by the variants)")
      ->check(seed_value())
      ->capture_default_str();
  c.add_flag("--quiet", o.quiet, "No progress lines, only the report's path");
}

std::string run_repro(const ReproOptions& o) {
  MG_CHECK(o.preset == "quick" || o.preset == "full", "mixgrad repro: --preset must be quick or full, got {}",
           o.preset);
  const Device device = o.device == "cuda" ? Device::cuda() : Device::cpu();
  if (device.is_cuda()) check_device_available(device, "mixgrad repro --device cuda");
  std::vector<Experiment> chosen;
  for (Experiment& e : experiments())
    if (o.experiment == "all" || o.experiment == e.id) chosen.push_back(std::move(e));
  MG_CHECK(!chosen.empty(), "mixgrad repro: unknown experiment '{}'; choose E1..E11 or all", o.experiment);

  Context context(o.preset == "full" ? Preset::Full : Preset::Quick, device, o.seed, o.quiet);
  Report report(o.out);
  const std::string machine = fmt::format("CPU {}, its GEMM {}", kernels::cpu::cpu_model(),
                                          kernels::cpu::gemm_backend());
  const auto start = std::chrono::steady_clock::now();
  // report.md is rewritten after every experiment: a long run stopped midway keeps what it finished.
  std::string path;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const Experiment& e = chosen[i];
    context.progress(fmt::format("{} ({}, {}): running", e.id, e.title, e.reference));
    report.add(e.run(context, report));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string status = i + 1 == chosen.size()
                                   ? ""
                                   : fmt::format(" **Incomplete:** {} of {} experiments so far.", i + 1, chosen.size());
    path = report.write(fmt::format(
        "Made by `mixgrad repro --experiment {} --preset {} --device {} --seed {}` on {} in {:.0f} s ({}).{} Papers: "
        "E1-E7 Micikevicius et al., *Mixed Precision Training*, ICLR 2018 (arXiv 1710.03740); E8-E11 Micikevicius et "
        "al., *FP8 Formats for Deep Learning*, 2022 (arXiv 2209.05433), the DeepSeek-V3 technical report (arXiv "
        "2412.19437, §3.3) and the OCP Microscaling Formats (MX) v1.0 specification. Variants: V0 fp32, V1 "
        "float16_pure, V2 float16_master without loss scaling, V3 float16_master with a static scale S, V4 "
        "float16_master with the dynamic GradScaler, V5 mixed_bfloat16, V6 bfloat16_pure, V7 V4 with its GEMMs "
        "accumulating in f16; V8 fp8_delayed, V9 fp8_current, V10 fp8_block, V11 mxfp8 (every Linear's GEMMs in "
        "FP8, the rest as V5), V12 V8 with E4M3 gradients, V13 V8 with the 13-bit Hopper accumulator model, V14 V13 "
        "promoted to f32 every 128 products, V15 V11 with its scale exponents rounded up (tools/repro/variants.h). "
        "Every run of an experiment starts from the same weights and sees the same batches; only the precision "
        "differs. Test accuracy, test loss and validation bits/char are measured in fp32 for every variant (an f32 "
        "copy of the model holding its f32 master weights, or its weights widened, run without autocast), as the "
        "PyTorch and Keras mixed-precision guides recommend.",
        o.experiment, o.preset, o.device, o.seed, utc_now(), seconds, machine, status));
  }
  return path;
}

}  // namespace mg::tools::repro

#include "tools/repro/repro.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>

#include "core/error.h"
#include "core/warning.h"
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
#include "tools/repro/e12_fp4_parity.h"
#include "tools/repro/e13_fp4_ingredients.h"
#include "tools/repro/e14_master_or_rounding.h"
#include "tools/repro/manifest.h"
#include "tools/repro/stopping.h"
#include "train/stop_signals.h"

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

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The ids of --experiment's value: "all", or ids separated by commas ("E4,E5").
std::vector<std::string> asked_ids(const std::string& asked) {
  std::vector<std::string> ids;
  for (std::size_t begin = 0; begin <= asked.size();) {
    const std::size_t comma = std::min(asked.find(',', begin), asked.size());
    ids.push_back(asked.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return ids;
}

// "E1", "E1 and E2", "E1, E2 and E4".
std::string id_list(const std::vector<std::string>& ids) {
  if (ids.size() <= 1) return ids.empty() ? "" : ids.front();
  return fmt::format("{} and {}", fmt::join(ids.begin(), ids.end() - 1, ", "), ids.back());
}

// What this call keeps in DIR, for the line that ends a stopped call.
std::string kept_line(const std::vector<std::string>& complete, const std::string& out) {
  if (complete.empty()) return fmt::format("no experiment of this call is complete in {} yet", out);
  return fmt::format("{} {} complete in {}", id_list(complete), complete.size() == 1 ? "is" : "are", out);
}

// A call stopped by a signal: one line that says what is kept and how to go on, then the end of the
// process by the signal's default action. `where`: "during E5 (Language model)".
[[noreturn]] void end_stopped(const train::StopSignals& stop, const std::string& where,
                              const std::vector<std::string>& complete, const std::string& out) {
  fmt::print("mixgrad repro: {}: stopped {}; {}; run the same command again to go on (complete experiments are "
             "skipped)\n",
             train::signal_name(stop.signal()), where, kept_line(complete, out));
  stop.end_process();
}

// Why an experiment runs although DIR has a manifest of it: "" when it has none.
std::string why_again(const EarlierRun& earlier, const std::string& out) {
  switch (earlier.state) {
    case EarlierRun::State::none:
      return "";
    case EarlierRun::State::damaged:
      return fmt::format(" again: its manifest in {} is damaged", out);
    case EarlierRun::State::different:
      return fmt::format(" again: the run complete in {} differs ({})", out, earlier.why);
    case EarlierRun::State::incomplete:
      return fmt::format(" again: the run in {} is incomplete ({})", out, earlier.why);
    case EarlierRun::State::complete:
      return fmt::format(" again (--rerun): it is complete in {}", out);
  }
  return "";
}

// Runs `e`, adds its section to the report (its plots made) and writes its manifest; an earlier manifest
// of it goes first. false when a stop is asked for before the new one is written: the experiment is
// abandoned, and with no manifest it is not complete (some of its files may be in DIR; the next call
// runs it again and writes them anew).
bool run_and_keep(const Experiment& e, const RunIdentity& identity, Context& context, Report& report,
                  const train::StopSignals& stop) {
  remove_manifest(report.directory(), identity.experiment);
  const auto started = std::chrono::steady_clock::now();
  std::optional<Section> section;
  try {
    ExperimentScope scope(identity.experiment, [&stop] { return stop.requested(); });
    section = e.run(context, report);
  } catch (const Stopped&) {
    return false;
  }
  if (stop.requested()) return false;  // asked while the section was written, after the runs
  Manifest manifest{.identity = identity, .finished = utc_now(), .section = *section};
  report.add(std::move(*section));  // the plots
  if (stop.requested()) return false;  // asked while gnuplot drew (a Ctrl-C that ended it too: report.cpp)
  manifest.seconds = seconds_since(started);
  manifest.not_drawn = report.not_drawn();
  write_manifest(report.directory(), manifest);
  return true;
}

// The report's opening paragraph: the command, the program, when and where it ran, the papers, the variants.
std::string preamble(const ReproOptions& o, double seconds, const std::string& machine,
                     const std::vector<std::string>& earlier, std::size_t done, std::size_t asked) {
  const std::string status = done == asked ? ""
                                           : fmt::format(" **Incomplete:** {} of {} experiments so far.", done, asked);
  const std::string taken =
      earlier.empty()
          ? ""
          : fmt::format(" {} {} complete in this folder from an earlier call (the manifest {} names the same preset, "
                        "device, seed and version, and its files are here), so {} not run again; `--rerun` runs {} "
                        "again.",
                        id_list(earlier), earlier.size() == 1 ? "was" : "were",
                        earlier.size() == 1 ? manifest_name(earlier.front()) : std::string("EN.manifest.json of each"),
                        earlier.size() == 1 ? "it was" : "they were", earlier.size() == 1 ? "it" : "them");
  return fmt::format(
      "Made by `mixgrad repro --experiment {} --preset {} --device {} --seed {}` with mixgrad {} on {} in {:.0f} s "
      "({}).{}{} Papers: "
      "E1-E7 Micikevicius et al., *Mixed Precision Training*, ICLR 2018 (arXiv 1710.03740); E8-E11 Micikevicius et "
      "al., *FP8 Formats for Deep Learning*, 2022 (arXiv 2209.05433), the DeepSeek-V3 technical report (arXiv "
      "2412.19437, §3.3) and the OCP Microscaling Formats (MX) v1.0 specification; E12-E13 NVIDIA, *Pretraining Large "
      "Language Models with NVFP4*, 2025 (arXiv 2509.25149), with Tseng et al., *Training LLMs with MXFP4*, 2025 "
      "(arXiv 2502.20586); E14 Zamirai et al., *Revisiting BFloat16 Training*, 2020 (arXiv 2010.06192). Variants: V0 "
      "fp32, V1 "
      "float16_pure, V2 float16_master without loss scaling, V3 float16_master with a static scale S, V4 "
      "float16_master with the dynamic GradScaler, V5 mixed_bfloat16, V6 bfloat16_pure, V7 V4 with its GEMMs "
      "accumulating in f16; V8 fp8_delayed, V9 fp8_current, V10 fp8_block, V11 mxfp8 (every Linear's GEMMs in "
      "FP8, the rest as V5), V12 V8 with E4M3 gradients, V13 V8 with the 13-bit Hopper accumulator model, V14 V13 "
      "promoted to f32 every 128 products, V15 V11 with its scale exponents rounded up; V16 nvfp4, V17 mxfp4 (every "
      "Linear's GEMMs but the head's in FP4), V18-V22 V16 without the Hadamard transform, with a deterministic one, "
      "with gradients rounded to nearest, with 1x16 weight blocks, with the head in FP4 too; V23 and V24 V6 with "
      "stochastically rounded and Kahan-compensated updates (tools/repro/variants.h). "
      "Every run of an experiment starts from the same weights and sees the same batches; only the precision "
      "differs. Test accuracy, test loss and validation bits/char are measured in fp32 for every variant (an f32 "
      "copy of the model holding its f32 master weights, or its weights widened, run without autocast), as the "
      "PyTorch and Keras mixed-precision guides recommend.",
      o.experiment, o.preset, o.device, o.seed, program_version().text(), utc_now(), seconds, machine, status, taken);
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
         auto result = std::make_shared<const E2Result>(run_e2(o, images, c.progress_sink()));
         c.keep<E2Result>("E2", result);  // E14 takes its V5 and V6 runs
         return e2_section(*result, report);
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
      {kE12Fp4Parity,
       [](Context& c, Report& report) {
         const E12Options o = e12_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.training.images.train_examples, o.training.images.test_examples);
         auto text = o.training.gpt ? c.kjv(o.training.language.train_chars, o.training.language.validation_chars)
                                    : nullptr;
         const auto e8 = c.kept<E8Result>("E8");  // its V5 and V9 runs
         auto result = std::make_shared<const E12Result>(run_e12(o, images, text, e8.get(), c.progress_sink()));
         c.keep<E12Result>("E12", result);  // E13 takes its V5 and V16 runs
         return e12_section(*result, report);
       }},
      {kE13Fp4Ingredients,
       [](Context& c, Report& report) {
         const E13Options o = e13_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.training.images.train_examples, o.training.images.test_examples);
         auto text = o.training.gpt ? c.kjv(o.training.language.train_chars, o.training.language.validation_chars)
                                    : nullptr;
         const auto e12 = c.kept<E12Result>("E12");
         return e13_section(run_e13(o, images, text, e12.get(), c.progress_sink()), report);
       }},
      {kE14MasterOrRounding,
       [](Context& c, Report& report) {
         const E14Options o = e14_options(c.preset, c.device, c.seed);
         auto images = c.fashion_mnist(o.runs.train_examples, o.runs.test_examples);
         const auto e2 = c.kept<E2Result>("E2");
         return e14_section(run_e14(o, images, e2.get(), c.progress_sink()), report);
       }},
  };
}

void add_repro_flags(CLI::App& c, ReproOptions& o) {
  std::vector<std::string> ids;
  for (const Experiment& e : experiments()) ids.emplace_back(e.id);
  c.add_option("--experiment", o.experiment,
               "Which experiments: E1..E7 (Mixed Precision Training), E8..E11 (FP8: parity, scaling granularity, "
               "accumulation, gradient formats; see tools/README.md), E12..E14 (FP4 parity, FP4's ingredients, "
               "master weights or stochastic rounding), several separated by commas (E4,E5; they run in E1..E14's "
               "order), or all")
      ->check(CLI::Validator(
          [ids](std::string& text) -> std::string {
            if (text == "all") return "";
            for (const std::string& id : asked_ids(text)) {
              if (id == "all") return "all stands alone: give it, or E1..E14 separated by commas (E4,E5)";
              if (std::find(ids.begin(), ids.end(), id) == ids.end())
                return fmt::format("{} is not an experiment: give E1..E14, several separated by commas (E4,E5), "
                                   "or all",
                                   id.empty() ? "''" : id);
            }
            return "";
          },
          "E1..E14[,..]|all"))
      ->capture_default_str();
  c.add_option("--preset", o.preset, "quick (minutes on 2 CPU cores, small subsets) or full (the GPU-sized version)")
      ->check(CLI::IsMember({"quick", "full"}))
      ->capture_default_str();
  c.add_option("--device", o.device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  c.add_option("--out", o.out,
               "Directory of the report (report.md, CSVs, plots, and EN.manifest.json for each experiment "
               "finished); created if missing. Experiments complete there already are skipped (see --rerun)")
      ->capture_default_str();
  c.add_option("--seed", o.seed, "Seed of every run's initialization and data order (shared by the variants)")
      ->check(seed_value())
      ->capture_default_str();
  c.add_flag("--quiet", o.quiet, "No progress lines, only the report's path");
  c.add_flag("--rerun", o.rerun,
             "Run every experiment asked for, also those complete in --out already. Without it, an experiment "
             "whose manifest there (EN.manifest.json) names the same preset, device, seed and program version, "
             "its files all present, is skipped and its section taken as it is");
}

std::string run_repro(const ReproOptions& o) { return run_repro(o, experiments()); }

std::string run_repro(const ReproOptions& o, std::vector<Experiment> all) {
  MG_CHECK(o.preset == "quick" || o.preset == "full", "mixgrad repro: --preset must be quick or full, got {}",
           o.preset);
  const Device device = o.device == "cuda" ? Device::cuda() : Device::cpu();
  if (device.is_cuda()) check_device_available(device, "mixgrad repro --device cuda");
  const bool every = o.experiment == "all";
  const std::vector<std::string> asked = asked_ids(o.experiment);
  for (const std::string& id : asked)
    MG_CHECK(every || std::any_of(all.begin(), all.end(), [&](const Experiment& e) { return e.id == id; }),
             "mixgrad repro: unknown experiment '{}'; choose E1..E11, several separated by commas, or all", id);
  std::vector<Experiment> chosen;
  for (Experiment& e : all)
    if (every || std::find(asked.begin(), asked.end(), e.id) != asked.end()) chosen.push_back(std::move(e));
  MG_CHECK(!chosen.empty(), "mixgrad repro: no experiment in '{}'; choose E1..E11 or all", o.experiment);

  Context context(o.preset == "full" ? Preset::Full : Preset::Quick, device, o.seed, o.quiet);
  Report report(o.out);
  const std::string machine = fmt::format("CPU {}, its GEMM {}", kernels::cpu::cpu_model(),
                                          kernels::cpu::gemm_backend());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> complete;  // the experiments of this call complete in DIR, in order
  std::vector<std::string> earlier;  // of them, those an earlier call finished (skipped here)
  // From here a signal lets the step under way finish, then abandons the experiment (stopping.h).
  train::StopSignals stop;
  // report.md is rewritten after every experiment: a long run stopped midway keeps what it finished.
  std::string path;
  for (const Experiment& e : chosen) {
    const std::string where = fmt::format("{} ({})", e.id, e.title);
    if (stop.requested()) end_stopped(stop, "before " + where, complete, o.out);
    const RunIdentity identity{.experiment = std::string(e.id),
                               .preset = o.preset,
                               .device = o.device,
                               .seed = o.seed,
                               .program = program_version()};
    EarlierRun found = find_earlier_run(o.out, identity);
    if (found.state == EarlierRun::State::complete && !o.rerun) {
      context.progress(fmt::format("{}: complete in {} ({}, same preset, device, seed and version); skipped — "
                                   "--rerun to run it again",
                                   where, o.out, manifest_name(e.id)));
      report.add_made_earlier(std::move(found.manifest->section), found.manifest->not_drawn);
      earlier.push_back(identity.experiment);
    } else {
      if (found.state == EarlierRun::State::damaged)
        warn(fmt::format("mixgrad repro: {} in {} is damaged ({}); {} runs again", manifest_name(e.id), o.out,
                         found.why, e.id));
      context.progress(fmt::format("{} ({}, {}): running{}", e.id, e.title, e.reference, why_again(found, o.out)));
      if (!run_and_keep(e, identity, context, report, stop)) end_stopped(stop, "during " + where, complete, o.out);
    }
    complete.push_back(identity.experiment);
    path = report.write(preamble(o, seconds_since(start), machine, earlier, complete.size(), chosen.size()));
  }
  if (stop.requested()) {
    fmt::print("mixgrad repro: {}: stopped after the last experiment; {}\n", train::signal_name(stop.signal()),
               kept_line(complete, o.out));
    stop.end_process();
  }
  return path;
}

}  // namespace mg::tools::repro

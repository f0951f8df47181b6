// `mixgrad train --graph FILE` (tools/run_graph.h), run as a user runs it: the first step of every
// model drawn as DOT, its SVG where Graphviz's `dot` is installed, one line saying how to render it
// where it is not, and bad paths refused before training starts.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/checkpoint_files.h"
#include "tests/cli_runner.h"
#include "tests/program_runner.h"
#include "tests/temp_dir.h"
#include "tests/testing.h"

using mg::testing::check_same_checkpoint;
using mg::testing::mixgrad;
using mg::testing::Run;
using mg::testing::run_command;
using mg::testing::TempDir;

namespace {

std::string read(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool dot_installed() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

// One quick step of each model: few images, a small text file (so that the evaluation after it is quick).
std::string model_run(const std::string& model, const TempDir& tmp) {
  if (model == "mlp" || model == "cnn")
    return fmt::format("train --model {} --subset 64 --batch 16 --steps 1 --quiet", model);
  std::ofstream(tmp / "text.txt") << std::string(40, 'a') << " the quick brown fox jumps over the lazy dog\n";
  return fmt::format("train --data text --model {} --text-file {} --batch 2 --context 8 --steps 1 --quiet", model,
                     tmp / "text.txt");
}

}  // namespace

TEST_CASE("--graph draws the first step of every model as DOT, and as SVG where dot is installed") {
  // Each model's own op, drawn with its scope, under mixed_float16.
  const std::vector<std::pair<std::string, std::string>> models{{"mlp", "linear\\n1"},
                                                                {"cnn", "conv2d\\n0"},
                                                                {"lstm", "lstm_recurrence\\nlstm"},
                                                                {"gpt", "class=\"repeat\""}};
  for (const auto& [model, own_op] : models) {
    INFO(model);
    TempDir tmp;
    Run run = mixgrad(model_run(model, tmp) + fmt::format(" --precision mixed_float16 --graph {}", tmp / "step.dot"));
    INFO(run.output);
    REQUIRE(run.status == 0);
    const std::string dot = read(tmp / "step.dot");
    CHECK(dot.starts_with("digraph step {"));
    CHECK(dot.ends_with("}\n"));
    CHECK(contains(dot, own_op));
    CHECK(contains(dot, "class=\"op taped\""));
    CHECK(contains(dot, "autocast, weight cache"));  // the f32 weights cast to f16
    CHECK(contains(dot, "dtype=f16"));
    CHECK(contains(dot, "loss x S\\nS = 65536"));
    CHECK(contains(dot, "-> unscale"));
    CHECK(contains(dot, "the f32 master"));
    if (dot_installed()) {
      CHECK(contains(read(tmp / "step.svg"), "<svg"));
    } else {
      CHECK(contains(run.output, "dot -Tsvg"));
    }
  }
  // The GPT's four blocks: the first drawn, three collapsed into one node.
  TempDir tmp;
  REQUIRE(mixgrad(model_run("gpt", tmp) + fmt::format(" --graph {}", tmp / "gpt.dot")).status == 0);
  CHECK(contains(read(tmp / "gpt.dot"), "blocks.1 ... blocks.3: x3\\nthe same "));
}

TEST_CASE("--graph without dot on the PATH writes the DOT file and says how to render it") {
  TempDir tmp;
  Run run = run_command(
      fmt::format("env PATH=/nonexistent {} {} --graph {}", MG_CLI_PATH, model_run("mlp", tmp), tmp / "step.dot"));
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(read(tmp / "step.dot").starts_with("digraph step {"));
  CHECK(!std::filesystem::exists(tmp / "step.svg"));
  CHECK(contains(run.output, "apt-get install graphviz"));
  CHECK(contains(run.output, fmt::format("dot -Tsvg '{}' -o '{}'", tmp / "step.dot", tmp / "step.svg")));
}

TEST_CASE("--graph names the batch's tensors on every device, also where the step moved them there") {
  std::vector<std::string> devices{"cpu"};
  if (mg::testing::have_gpu()) devices.push_back("cuda");  // a GPU, or the CUDA emulator's build
  for (const std::string& device : devices) {
    INFO(device);
    TempDir tmp;
    Run run = mixgrad(model_run("mlp", tmp) +
                      fmt::format(" --device {} --test-subset 1000 --graph {}", device, tmp / "step.dot"));
    INFO(run.output);
    REQUIRE(run.status == 0);
    const std::string dot = read(tmp / "step.dot");
    CHECK(contains(dot, "the batch: inputs"));
    CHECK(contains(dot, "the batch: targets"));
    CHECK_FALSE(contains(dot, "label=\"tensor"));  // every tensor no op made is named
  }
}

TEST_CASE("a run with --graph takes the same steps, bit for bit, as one without") {
  TempDir tmp;
  for (const std::string model : {"mlp", "lstm"}) {
    INFO(model);
    const std::string run = model_run(model, tmp) + " --precision mixed_float16 --steps 3 --save ";
    REQUIRE(mixgrad(run + tmp / "plain.safetensors").status == 0);
    REQUIRE(mixgrad(run + tmp / "drawn.safetensors" + " --graph " + tmp / "step.dot").status == 0);
    check_same_checkpoint(tmp / "plain.safetensors", tmp / "drawn.safetensors");
  }
}

TEST_CASE("--graph on a resumed run that is complete already says that there is no step to draw") {
  TempDir tmp;
  const std::string run = model_run("mlp", tmp);
  REQUIRE(mixgrad(run + " --save " + tmp / "done.safetensors").status == 0);
  Run resumed = mixgrad(run + " --resume " + tmp / "done.safetensors" + " --graph " + tmp / "step.dot");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK(contains(resumed.output, "the run took no step, so there is none to draw"));
  CHECK(!std::filesystem::exists(tmp / "step.dot"));
}

TEST_CASE("--help documents --graph") {
  Run run = mixgrad("train --help");
  CHECK(run.status == 0);
  CHECK(contains(run.output, "--graph"));
  CHECK(contains(run.output, "Graphviz DOT"));
}

TEST_CASE("--graph refuses a path it cannot write before training starts") {
  for (const auto& [graph, needle] :
       std::vector<std::pair<std::string, std::string>>{{"/nonexistent-dir/step.dot",
                                                         "the directory /nonexistent-dir does not exist"},
                                                        {"step.svg", "must name the DOT file to write"}}) {
    Run run = mixgrad("train --steps 1 --graph " + graph);
    INFO(run.output);
    CHECK(run.status == 1);
    CHECK(run.output.starts_with("error: mixgrad train: "));
    CHECK(contains(run.output, needle));
    CHECK(!contains(run.output, "step 1/"));
  }
}

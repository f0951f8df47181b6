#include "tools/run_graph.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tools/shell_quoted.h"

namespace mg::tools {

namespace {

bool dot_installed() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

}  // namespace

std::string graph_svg_path(const std::string& dot_path) {
  return std::filesystem::path(dot_path).replace_extension(".svg").string();
}

StepGraphDrawing::StepGraphDrawing(const TrainOptions& o, train::Trainer& trainer) : path_(o.graph), quiet_(o.quiet) {
  dot_options_.title = fmt::format("mixgrad train: {} on {}, {}, batch {}: one training step", o.model, o.data,
                                   o.precision, o.batch);
  dot_options_.recipe = trainer.recipe();
  dot_options_.loss_scale = trainer.scaler().get_scale();
  dot_options_.optimizer = o.optimizer;
  for (const auto& [name, parameter] : trainer.model().named_parameters())
    dot_options_.tensor_names[parameter.id()] = name;
}

train::StepObserver* StepGraphDrawing::next(const data::Batch& batch) {
  if (used_) return nullptr;
  used_ = true;
  batch_on_device(batch.inputs, batch.labels);
  return this;
}

void StepGraphDrawing::batch_on_device(const Tensor& inputs, const Tensor& targets) {
  dot_options_.tensor_names[inputs.id()] = "the batch: inputs";
  dot_options_.tensor_names[targets.id()] = "the batch: targets";
}

void StepGraphDrawing::finish() const {
  if (!used_) fmt::print("mixgrad train: --graph {}: the run took no step, so there is none to draw\n", path_);
}

void StepGraphDrawing::before_forward() { recorder_.emplace(); }
void StepGraphDrawing::before_backward() { recorder_->loss_scaling_begins(); }

void StepGraphDrawing::after_backward(const optim::Optimizer& /*optimizer*/) {
  recorder_->stop();
  const std::string dot = amp::step_graph_dot(recorder_->graph(), dot_options_);
  {
    std::ofstream file(path_);
    file << dot;
    MG_CHECK(file.good(), "mixgrad train --graph: cannot write {}", path_);
  }
  const std::string svg = graph_svg_path(path_);
  if (!dot_installed()) {
    fmt::print("mixgrad train: the first step is drawn in {} (Graphviz DOT); `dot` is not installed (apt-get install "
               "graphviz), so render it with: dot -Tsvg {} -o {}\n",
               path_, shell_quoted(path_), shell_quoted(svg));
    return;
  }
  const int status = std::system(fmt::format("dot -Tsvg {} -o {}", shell_quoted(path_), shell_quoted(svg)).c_str());
  MG_CHECK(status == 0, "mixgrad train --graph: `dot -Tsvg {} -o {}` failed (status {}); {} holds the DOT text", path_,
           svg, status, path_);
  if (!quiet_)
    fmt::print("mixgrad train: the first step is drawn in {} ({} ops) and {}\n", path_, recorder_->graph().ops.size(),
               svg);
}

}  // namespace mg::tools

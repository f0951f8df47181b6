// mixgrad train --graph FILE: the run's first training step drawn as a picture (amp/step_graph.h).
// FILE gets the Graphviz DOT text; FILE's name with .svg the rendering, when the `dot` program
// (Debian's graphviz) is on the PATH, else one line says how to render it.
#pragma once

#include <optional>
#include <string>

#include "amp/step_graph.h"
#include "tools/train_options.h"
#include "train/trainer.h"

namespace mg::tools {

// Where --graph's SVG goes: FILE with its extension replaced by .svg ("step.dot" -> "step.svg").
std::string graph_svg_path(const std::string& dot_path);

// A StepObserver for one step: it records from before the forward pass to the end of backward, and
// then writes the files. Only looks: the drawn step's bits are those of any other run.
class StepGraphDrawing : public train::StepObserver {
 public:
  // Reads what the picture names from the trainer before its first step: the recipe, the loss
  // scale, the parameters' names.
  StepGraphDrawing(const TrainOptions& options, train::Trainer& trainer);
  // This observer for the first step, null after it: trainer.step(batch, {drawing.next(batch)}).
  train::StepObserver* next(const data::Batch& batch);
  // After the last step: says so when no step was drawn (a resumed run that was complete already).
  void finish() const;

  void before_forward() override;
  // Names the batch's tensors as the model reads them (next() named them as loaded: they differ on a GPU).
  void batch_on_device(const Tensor& inputs, const Tensor& targets) override;
  void before_backward() override;
  void after_backward(const optim::Optimizer& optimizer) override;

 private:
  std::string path_;
  bool quiet_;
  amp::DotOptions dot_options_;
  std::optional<amp::StepRecorder> recorder_;
  bool used_ = false;
};

}  // namespace mg::tools

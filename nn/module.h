// Module: the base of every layer and model, as torch::nn::Module.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 256));
//     std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 10));
//     Tensor forward(const Tensor& x) override { return (*fc2)(mg::relu((*fc1)(x))); }
//     std::string type_name() const override { return "Net"; }
//   };
//
// A module owns named parameters (leaves that require grad; the optimizer trains them), named
// buffers (state that is saved but not trained: BatchNorm's running statistics) and named child
// modules. Names are dotted paths in registration order: "fc1.weight", "0.bias", "blocks.2.ln.weight".
// Call a module as module(x), not module.forward(x): the call records its ops under the same
// dotted path ("blocks.2.ln"), which amp::OverflowDetector reports (amp/diagnostics.h).
//
// Every layer maps one tensor to one tensor (forward), so any of them can sit in a Sequential.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace mg::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& input) = 0;
  // Runs forward inside a NameScope (autograd/tape.h) of the name this module's parent registered
  // it under; scopes nest, so TinyGPT's call of blocks.0.attention.qkv records its ops under
  // "blocks.0.attention.qkv". A module registered nowhere (the model itself) opens no scope.
  Tensor operator()(const Tensor& input);
  // One line describing this module alone ("Linear(784, 256)"); to_string() prints the tree.
  virtual std::string type_name() const = 0;

  // ---- what the module holds (recursively, children after the module's own entries)
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::int64_t parameter_count() const;  // number of trainable elements

  // ---- mode, dtype, gradients
  // Training mode (the default) or evaluation mode, for this module and every child: Dropout drops
  // only in training, BatchNorm uses batch statistics in training and its running ones in evaluation.
  void train(bool training = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts every floating parameter, and every buffer not kept in f32, to `dtype` in place (the
  // Tensor handles held elsewhere see the change; gradients are dropped). Build the optimizer after.
  // BatchNorm's running statistics stay f32: they are sums over many batches.
  void to(DType dtype);
  // Moves every parameter and buffer to `device` in place (gradients are dropped): model.to(Device::cuda()).
  // Build the optimizer after.
  void to(Device device);
  void zero_grad();  // drops every parameter's .grad

  // ---- state: parameters and buffers by name (the tensors themselves, sharing data)
  StateDict state_dict() const;
  // Copies every entry into the parameter or buffer of that name. Checked before anything is
  // written: each name must exist (and, when strict, every parameter and buffer must be present)
  // with the same shape and dtype; the error names the entry and what to do.
  void load_state_dict(const StateDict& state, bool strict = true);

  // The tree: one line per module, indented, with its parameter count.
  std::string to_string() const;

 protected:
  // Registers `value` as a parameter (it becomes a leaf that requires grad) and returns it.
  Tensor register_parameter(const std::string& name, Tensor value);
  // Registers a buffer; keep_f32 buffers are left alone by to(dtype).
  Tensor register_buffer(const std::string& name, Tensor value, bool keep_f32 = false);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  struct Buffer {
    std::string name;
    Tensor value;
    bool keep_f32 = false;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                       bool f32_only_too = true) const;
  void append_tree(std::string& out, const std::string& name, int depth) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // The name this module's parent registered it under: the scope operator() opens. A module
  // registered twice (shared between parents) keeps its first name.
  std::string name_in_parent_;
  bool training_ = true;
};

// Runs its modules in order, each one's output the next one's input; children are named "0", "1", ...
//   auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256),
//                                                 std::make_shared<nn::ReLU>(),
//                                                 std::make_shared<nn::Linear>(256, 10));
// or one by one: model->push_back(std::make_shared<nn::Linear>(784, 256)).
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  // Any number of modules of any layer type, in one expression (as torch::nn::Sequential(...)).
  template <class... Layers>
  requires(sizeof...(Layers) > 0 &&
           (std::is_base_of_v<Module, Layers> && ...)) explicit Sequential(std::shared_ptr<Layers>... modules) {
    (push_back(std::move(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  std::size_t size() const { return children().size(); }
  Module& operator[](std::size_t index) const;

  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Sequential"; }
};

}  // namespace mg::nn

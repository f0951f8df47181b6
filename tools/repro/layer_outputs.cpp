#include "tools/repro/layer_outputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "autograd/tape.h"
#include "core/factory.h"

namespace mg::tools::repro {

namespace {

// One op of a forward pass: its name, its scope, its output's shape, and whether the tape recorded
// it (some input needs a gradient, so backward will hand its output a gradient).
struct ForwardOp {
  std::string op, scope;
  Shape shape;
  bool recorded = false;
};

// Sees every op of the forward passes run while it is alive.
class ForwardOps : public OpObserver {
 public:
  ForwardOps() { add_observer(this); }
  ~ForwardOps() override { remove_observer(this); }
  ForwardOps(const ForwardOps&) = delete;
  ForwardOps& operator=(const ForwardOps&) = delete;

  void forward(const char* op, const std::string& scope, const std::vector<Tensor>& inputs,
               const Tensor& output) override {
    const bool recorded = grad_enabled() &&
                          std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.requires_grad(); });
    ops.push_back(ForwardOp{.op = op, .scope = scope, .shape = output.shape(), .recorded = recorded});
  }
  void backward(const char*, const std::string&, const Tensor&, const Grads&) override {}

  std::vector<ForwardOp> ops;
};

// Whether `scope` is `outer` or nested in it ("3.fc" is in "3", "30" is not).
bool within(const std::string& scope, const std::string& outer) {
  return scope == outer || (scope.size() > outer.size() && scope.starts_with(outer) && scope[outer.size()] == '.');
}

// Ops whose output holds their input's values, rearranged: a layer made of these only is a Flatten.
bool moves_data(const std::string& op) {
  for (Op moving : {Op::Reshape, Op::Permute, Op::Transpose, Op::Slice, Op::Clone, Op::Cast, Op::ToDevice})
    if (op == op_name(moving)) return true;
  return false;
}

// The module at a dotted path below `root` ("blocks.0.attention"), or nullptr.
const nn::Module* module_at(const nn::Module& root, const std::string& path) {
  const nn::Module* module = &root;
  for (std::size_t from = 0; module != nullptr && from <= path.size();) {
    const std::size_t dot = std::min(path.find('.', from), path.size());
    const std::string name = path.substr(from, dot - from);
    const nn::Module* child = nullptr;
    for (const auto& [child_name, candidate] : module->children())
      if (child_name == name) child = candidate.get();
    module = child;
    from = dot + 1;
  }
  return module;
}

}  // namespace

std::string E3Layer::label() const { return fmt::format("{} {} {}", module, type, shape); }

std::vector<E3Layer> e3_layer_outputs(const RunConfig& c) {
  MG_CHECK(c.make_model && (c.data || c.text), "repro E3: e3_layer_outputs needs a run configuration with a model "
                                               "and its data");
  Generator generator(c.seed);
  const std::shared_ptr<nn::Module> model = c.make_model(generator);
  const Tensor input = c.data ? c.data->train_images.slice(0, std::min(c.batch, c.data->train_images.size(0)))
                              : zeros({c.batch, c.context}, {.dtype = DType::I32});  // token 0 everywhere: any will do
  std::vector<ForwardOp> ops;
  {
    ForwardOps observer;
    (*model)(input);
    ops = std::move(observer.ops);
  }
  clear_tape();  // the forward's nodes: no backward follows
  std::vector<E3Layer> layers;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ForwardOp& op = ops[i];
    const bool module_goes_on = i + 1 < ops.size() && within(ops[i + 1].scope, op.scope);
    // The model itself opens no scope; a module's last op made its output; an output that needs no
    // gradient (a Flatten of the images) gets none.
    if (op.scope.empty() || module_goes_on || !op.recorded) continue;
    bool moves_data_only = true;
    for (std::size_t j = i + 1; j-- > 0 && within(ops[j].scope, op.scope);)  // the module's ops, back to its first
      moves_data_only = moves_data_only && moves_data(ops[j].op);
    if (moves_data_only) continue;
    const nn::Module* module = module_at(*model, op.scope);
    const std::string type = module ? module->type_name() : std::string();
    layers.push_back(E3Layer{.module = op.scope,
                             .type = type.substr(0, type.find('(')),
                             .entry = fmt::format("{} {}", op.op, op.shape),
                             .shape = op.shape});
  }
  return layers;
}

// Points each layer at its gradient's slot in the run's activation histograms. Backward meets the
// layers' outputs in reverse order, each before the ops inside its layer (a convolution's output
// before its GEMM rows and im2col), so each is the first entry of its name after the previous one.
std::vector<E3Layer> in_backward_order(const std::vector<E3Layer>& forward_order, const GradientHistograms& h,
                                       const std::string& model) {
  std::vector<E3Layer> layers(forward_order.rbegin(), forward_order.rend());
  std::size_t next = 0;
  for (E3Layer& layer : layers) {
    const auto begin = h.activation_names.begin();
    const auto found = std::find(begin + static_cast<std::ptrdiff_t>(next), h.activation_names.end(), layer.entry);
    MG_CHECK(found != h.activation_names.end(),
             "repro E3 ({}): the output of layer {} is '{}', but no activation "
             "gradient of that name follows entry {} of the backward pass (entries: {}); the model's forward and "
             "its recorded backward disagree",
             model, layer.label(), layer.entry, next, fmt::join(h.activation_names, "; "));
    layer.index = static_cast<std::size_t>(found - begin);
    next = layer.index + 1;
  }
  return layers;
}

}  // namespace mg::tools::repro

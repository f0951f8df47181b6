#include "autograd/tape.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autocast.h"
#include "core/factory.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"

namespace mg {

namespace {

struct NodeInput {
  std::uint64_t id;
  bool requires_grad;
  Tensor leaf;  // held only for leaves that require grad: backward adds into their .grad
  Shape shape;  // to check the gradient a backward function returns
  DType dtype;
};

struct Node {
  const char* op;
  bool is_cast;  // an mg::cast, whose backward takes the f32 sum of its output's gradients
  std::vector<NodeInput> inputs;
  std::uint64_t output_id;
  DType output_dtype;  // a gradient summed in f32 is rounded back to this before the node uses it
  BackwardFn backward;  // owns the tensors the op saved
  std::shared_ptr<const std::string> scope;
  std::vector<std::weak_ptr<Storage>> saved;  // what `backward` keeps alive, for saved_tensor_bytes()
};

thread_local std::vector<Node> tape;
thread_local std::uint64_t generation = 0;
thread_local bool grad_mode = true;
thread_local std::shared_ptr<const std::string> scope = std::make_shared<const std::string>();
thread_local std::vector<OpObserver*> observers;
thread_local std::vector<GradReadyHook*> ready_hooks;
thread_local bool backward_running = false;  // ops run by backward formulas are not forward events
// Storage of the Saved tensors made since the last record(): an op builds its Saved captures just
// before it calls record(), which hands them to the node (or drops them when nothing is recorded).
thread_local std::vector<std::weak_ptr<Storage>> pending_saved;

void empty_tape() {
  tape.clear();
  ++generation;
}

// A gradient that will become a leaf's .grad must own its memory: later in-place updates of the
// .grad (accumulation, unscaling, zeroing) must not write into a tensor someone else holds.
Tensor owned(Tensor grad) {
  const auto& impl = grad.impl_ptr();
  if (impl.use_count() == 1 && impl->storage.use_count() == 1) return grad;
  Tensor copy = Tensor::empty(grad.shape(), {.dtype = grad.dtype(), .device = grad.device()});
  kernels::unary(kernels::UnaryOp::Copy, grad, copy);
  return copy;
}

// Adds a gradient into a leaf's .grad: in place (an in-place write, so it counts as a new version
// of the .grad's data), or by adopting the gradient when the leaf has none yet.
void accumulate(const Tensor& leaf, Tensor grad) {
  Tensor existing = leaf.grad();
  if (existing.defined()) {
    kernels::binary(kernels::BinaryOp::Add, existing, grad, existing);
    existing.impl().storage->bump_version();
  } else {
    leaf.impl().grad = owned(std::move(grad)).impl_ptr();
  }
}

// t in another dtype (t itself when it already has it). Takes t by value so that a caller that
// moves its last handle in lets accumulate() adopt the gradient without copying it.
Tensor converted(Tensor t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), {.dtype = dtype, .device = t.device()});
  kernels::cast(t, out);
  return out;
}

// Gradients meeting at one tensor are added. f16/bf16 ones are added in f32 and rounded back only
// when the sum is used, so a weight used 64 times (an unrolled LSTM, autocast's cached cast) is
// rounded once, not 63 times.
Tensor sum_of(const Tensor& a, const Tensor& b) {
  const DType dtype = is_low_precision(a.dtype()) ? DType::F32 : a.dtype();
  Tensor out = Tensor::empty(a.shape(), {.dtype = dtype, .device = a.device()});
  kernels::binary(kernels::BinaryOp::Add, converted(a, dtype), converted(b, dtype), out);
  return out;
}

void check_gradient(const Node& node, std::size_t i, const Tensor& grad) {
  const NodeInput& input = node.inputs[i];
  MG_CHECK(grad.shape() == input.shape && grad.dtype() == input.dtype,
           "backward of {}: the gradient for input {} is {} {}, but the input is {} {} (a bug in the op's "
           "backward function)",
           node.op, i, grad.shape(), grad.dtype(), input.shape, input.dtype);
}

// The reverse walk. Returns the gradient of every leaf it reached, keyed by id.
// With gradient-ready hooks, the walk hands each leaf's gradient over as soon as it is complete.
// first_uses lists (index of the leaf's first node on the tape, leaf id), latest first: once the walk
// is below that index, no node can add to the leaf's gradient.
std::vector<std::pair<std::size_t, std::uint64_t>> first_uses_latest_first() {
  std::vector<std::pair<std::size_t, std::uint64_t>> first_uses;
  if (ready_hooks.empty()) return first_uses;
  std::unordered_set<std::uint64_t> seen;
  for (std::size_t k = 0; k < tape.size(); ++k)
    for (const NodeInput& input : tape[k].inputs)
      if (input.leaf.defined() && seen.insert(input.id).second) first_uses.emplace_back(k, input.id);
  std::reverse(first_uses.begin(), first_uses.end());
  return first_uses;
}

void hand_over(std::unordered_map<std::uint64_t, std::pair<Tensor, Tensor>>& leaves, std::uint64_t id) {
  auto found = leaves.find(id);
  if (found == leaves.end()) return;  // no gradient reached it
  const Tensor leaf = found->second.first;
  accumulate(leaf, converted(std::move(found->second.second), leaf.dtype()));
  leaves.erase(found);
  for (GradReadyHook* hook : ready_hooks) hook->ready(leaf);
}

// Tells the observers, last added first, that a span ended. It runs in destructors, also while an
// exception unwinds: an observer's error here would end the process, so it is dropped (OpProfile
// leaves such a span out of its table; the op's own error, if any, goes on).
void end_spans(const char* op, bool backward) noexcept {
  for (auto it = observers.rbegin(); it != observers.rend(); ++it) {
    try {
      (*it)->end(op, backward);
    } catch (...) {}
  }
}

// The observers' span of one node's backward function (OpObserver::begin/end, backward = true).
struct BackwardSpan {
  explicit BackwardSpan(const Node& node) : op(node.op) {
    for (OpObserver* observer : observers) observer->begin(op, *node.scope, true);
  }
  ~BackwardSpan() { end_spans(op, true); }
  BackwardSpan(const BackwardSpan&) = delete;
  BackwardSpan& operator=(const BackwardSpan&) = delete;
  const char* op;
};

std::unordered_map<std::uint64_t, std::pair<Tensor, Tensor>> walk(const Tensor& root, const Tensor& seed,
                                                                  bool keep_tape) {
  std::unordered_map<std::uint64_t, Tensor> pending;  // gradients of non-leaf tensors, by id
  std::unordered_map<std::uint64_t, std::pair<Tensor, Tensor>> leaves;  // id -> (leaf, gradient)
  pending.emplace(root.id(), seed);
  const auto first_uses = first_uses_latest_first();
  auto next_first_use = first_uses.begin();
  for (std::size_t k = tape.size(); k-- > 0;) {
    for (; next_first_use != first_uses.end() && next_first_use->first > k; ++next_first_use)
      hand_over(leaves, next_first_use->second);
    Node* node = &tape[k];
    auto found = pending.find(node->output_id);
    if (found == pending.end()) continue;  // not on a path to the root
    // A cast's backward converts the gradient anyway: it gets the f32 sum itself, not a copy rounded
    // to f16 first (64 uses of autocast's cached weight cast can sum past 65504 where f32 cannot).
    Tensor grad_output = node->is_cast ? found->second : converted(found->second, node->output_dtype);
    pending.erase(found);

    std::vector<bool> needs_grad;
    for (const NodeInput& input : node->inputs) needs_grad.push_back(input.requires_grad);
    MG_CHECK(node->backward,
             "backward: the node of {} was already used by a backward; pass "
             "{{.keep_tape = true}} to the first backward to run twice",
             node->op);
    Grads grads;
    {
      const BackwardSpan span(*node);
      try {
        grads = node->backward(grad_output, needs_grad);
      } catch (const Error& error) {
        throw Error(fmt::format("backward of {}: {}", node->op, error.what()));
      }
      if (!keep_tape) node->backward = nullptr;  // release the saved tensors now, not at the end
      MG_CHECK(grads.size() == node->inputs.size(), "backward of {}: returned {} gradients for {} inputs", node->op,
               grads.size(), node->inputs.size());
      for (OpObserver* observer : observers) observer->backward(node->op, *node->scope, grad_output, grads);
    }

    for (std::size_t i = 0; i < grads.size(); ++i) {
      const NodeInput& input = node->inputs[i];
      if (!input.requires_grad || !grads[i].defined()) continue;
      check_gradient(*node, i, grads[i]);
      if (input.leaf.defined()) {
        auto [slot, fresh] = leaves.try_emplace(input.id, input.leaf, grads[i]);
        if (!fresh) slot->second.second = sum_of(slot->second.second, grads[i]);
      } else {
        auto [slot, fresh] = pending.try_emplace(input.id, grads[i]);
        if (!fresh) slot->second = sum_of(slot->second, grads[i]);
      }
    }
  }
  for (; next_first_use != first_uses.end(); ++next_first_use) hand_over(leaves, next_first_use->second);
  // A gradient still pending reached a non-leaf whose op was not on the tape: everything upstream
  // of it would silently get nothing.
  MG_CHECK(pending.empty(),
           "backward: a gradient reached a tensor made by an op that is no longer on the tape (a "
           "previous backward or clear_tape() removed it, or another thread recorded it), so the tensors it was "
           "computed from would get no gradient; recompute it in this graph, or detach() it to use it as a constant");
  return leaves;
}

}  // namespace

bool grad_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

namespace {

// Bytes of the distinct storage among `saved` that is still alive.
std::size_t storage_bytes(const std::vector<std::weak_ptr<Storage>>& saved) {
  std::unordered_set<const Storage*> counted;
  std::size_t bytes = 0;
  for (const std::weak_ptr<Storage>& weak : saved) {
    std::shared_ptr<Storage> storage = weak.lock();
    if (storage && counted.insert(storage.get()).second) bytes += storage->nbytes();
  }
  return bytes;
}

void record_node(const char* op, bool is_cast, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward) {
  std::vector<std::weak_ptr<Storage>> saved = std::move(pending_saved);
  pending_saved.clear();
  if (!backward_running) {
    for (OpObserver* observer : observers) observer->forward(op, *scope, inputs, output);
  }
  if (!grad_mode) return;
  bool any = false;
  for (const Tensor& input : inputs) any = any || input.requires_grad();
  if (!any) return;
  Node node{op, is_cast, {}, output.id(), output.dtype(), std::move(backward), scope, std::move(saved)};
  for (const Tensor& input : inputs) {
    bool is_tracked_leaf = input.is_leaf() && input.requires_grad();
    node.inputs.push_back(
        {input.id(), input.requires_grad(), is_tracked_leaf ? input : Tensor(), input.shape(), input.dtype()});
  }
  output.impl().requires_grad = true;
  output.impl().is_leaf = false;
  tape.push_back(std::move(node));
  if (!observers.empty()) {
    const std::size_t saved_bytes = storage_bytes(tape.back().saved);
    for (OpObserver* observer : observers) observer->taped(saved_bytes);
  }
}

}  // namespace

void record(Op op, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward) {
  record_node(op_name(op), op == Op::Cast, inputs, output, std::move(backward));
}

void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward) {
  record_node(op, false, inputs, output, std::move(backward));
}

void backward(const Tensor& loss, BackwardOptions options) {
  MG_CHECK(loss.defined(), "backward: the loss tensor is undefined");
  MG_CHECK(loss.numel() == 1,
           "backward: the loss has shape {} ({} elements); reduce it to one value with mg::sum or mg::mean, "
           "or pass a seed gradient of shape {}: backward(output, seed)",
           loss.shape(), loss.numel(), loss.shape());
  Tensor seed;
  try {
    seed = ones_like(loss);
  } catch (...) {
    empty_tape();  // out of memory already: the graph's saved tensors go, as when the walk fails
    throw;
  }
  backward(loss, seed, options);
}

void backward(const Tensor& output, const Tensor& seed, BackwardOptions options) {
  MG_CHECK(output.defined() && seed.defined(), "backward: the output or the seed gradient is undefined");
  MG_CHECK(seed.shape() == output.shape() && seed.dtype() == output.dtype() && seed.device() == output.device(),
           "backward: the seed gradient ({} {} on {}) must match the output ({} {} on {})", seed.shape(), seed.dtype(),
           seed.device(), output.shape(), output.dtype(), output.device());
  MG_CHECK(output.requires_grad(),
           "backward: the output does not require grad: no input of the ops that made it requires grad (set "
           "requires_grad on the parameters), or it was computed under NoGradGuard");
  NoGradGuard no_grad;  // backward formulas are not recorded: there is no double backward
  // Backward formulas produce gradients in their inputs' dtypes; autocast must not recast them.
  Autocast no_autocast(DType::F32, /*enabled=*/false);
  struct Running {
    bool previous = std::exchange(backward_running, true);
    ~Running() { backward_running = previous; }
  } running;
  if (output.is_leaf()) {
    accumulate(output, seed);
    return;
  }
  bool on_tape = false;
  for (const Node& node : tape) on_tape = on_tape || node.output_id == output.id();
  MG_CHECK(on_tape, "backward: the output was made by ops that are no longer on the tape (a previous backward "
                    "cleared it); recompute the forward pass, or pass {{.keep_tape = true}} to the first backward");

  // Every gradient is made (the walk, then each one in its leaf's dtype and memory of its own)
  // before the first .grad changes: running out of memory on the way changes none.
  std::vector<std::pair<Tensor, Tensor>> gradients;  // (leaf, the gradient to add into its .grad)
  try {
    auto leaves = walk(output, seed, options.keep_tape);
    for (auto& [id, entry] : leaves) {
      Tensor grad = converted(std::move(entry.second), entry.first.dtype());
      gradients.emplace_back(entry.first, entry.first.grad().defined() ? grad : owned(std::move(grad)));
    }
  } catch (...) {
    // Partly consumed: unusable. No .grad has been touched, unless a GradReadyHook is registered:
    // then the leaves handed over before the error keep what was added to them (README, the tape).
    empty_tape();
    throw;
  }
  if (!options.keep_tape) empty_tape();
  for (auto& [leaf, grad] : gradients) accumulate(leaf, std::move(grad));
}

Saved::Saved(const Tensor& tensor)
    : tensor_(tensor), storage_(tensor.impl().storage), version_(tensor.impl().storage->version()) {
  // Parameters are held by the model anyway: only the rest is activation memory.
  if (!(tensor.is_leaf() && tensor.requires_grad())) pending_saved.push_back(tensor.impl().storage);
}

const Tensor& Saved::get() const {
  MG_CHECK(storage_.lock() == tensor_.impl().storage,
           "a tensor it saved for backward ({} {}) had its storage "
           "replaced after the forward pass (e.g. by amp::Recipe::cast_parameters); convert parameters before "
           "running the model",
           tensor_.shape(), tensor_.dtype());
  const std::uint64_t now = tensor_.impl().storage->version();
  MG_CHECK(now == version_,
           "a tensor it saved for backward ({} {}) was modified in place after the forward pass "
           "(version {}, now {}); do not write into tensors a graph uses until backward has run, or clone() them "
           "before the graph uses them",
           tensor_.shape(), tensor_.dtype(), version_, now);
  return tensor_;
}

std::size_t tape_size() { return tape.size(); }
void clear_tape() { empty_tape(); }
std::uint64_t tape_generation() { return generation; }

std::size_t saved_tensor_bytes() {
  std::unordered_set<const Storage*> counted;
  std::size_t bytes = 0;
  for (const Node& node : tape) {
    if (!node.backward) continue;  // already consumed by a backward that kept the tape
    for (const std::weak_ptr<Storage>& weak : node.saved) {
      std::shared_ptr<Storage> storage = weak.lock();
      if (storage && counted.insert(storage.get()).second) bytes += storage->nbytes();
    }
  }
  return bytes;
}

NameScope::NameScope(const std::string& name) : previous_(scope) {
  scope = std::make_shared<const std::string>(previous_->empty() ? name : *previous_ + "." + name);
}
NameScope::~NameScope() { scope = std::move(previous_); }
const std::string& current_scope() { return *scope; }

OpSpan::OpSpan(Op op) : OpSpan(op_name(op)) {}
OpSpan::OpSpan(const char* op) {
  if (observers.empty() || backward_running) return;  // inside backward, the node's span covers it
  op_ = op;
  for (OpObserver* observer : observers) observer->begin(op, *scope, false);
}
OpSpan::~OpSpan() {
  if (op_ != nullptr) end_spans(op_, false);
}

void add_observer(OpObserver* observer) { observers.push_back(observer); }
void add_grad_ready_hook(GradReadyHook* hook) { ready_hooks.push_back(hook); }
void remove_grad_ready_hook(GradReadyHook* hook) { std::erase(ready_hooks, hook); }
void remove_observer(OpObserver* observer) { std::erase(observers, observer); }

}  // namespace mg

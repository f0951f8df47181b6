// The drawing half of amp/step_graph.h: a StepGraph as Graphviz DOT text.
//
// Node ids say what a node is, so that tests (and readers of the .dot file) can find them:
//   op<i>      the i-th recorded op (a box; a cast is a hexagon; the scaler's op is gold)
//   repeat<i>  the repeats of a block, collapsed (first op i), with count=<n> blocks
//   more       every op past max_nodes
//   t<id>      a tensor no recorded op made: a parameter, the batch, a constant
//   master<id> the optimizer's f32 master of a low-precision parameter
//   unscale, optimizer, legend
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_map>

#include "amp/step_graph.h"

namespace mg::amp {

namespace {

std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string bytes_text(std::size_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1 << 10));
  return fmt::format("{} B", bytes);
}

// "blocks.2.attention" -> "blocks.#.attention": scopes of repeats of one block read alike.
std::string pattern_of(const std::string& scope) {
  std::string out, part;
  auto flush = [&] {
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c); });
    out += number ? "#" : part;
    part.clear();
  };
  for (char c : scope) {
    if (c == '.') {
      flush();
      out += '.';
    } else {
      part += c;
    }
  }
  flush();
  return out;
}

// The block an op belongs to: its scope up to the first numbered part ("blocks.2.attention.qkv" ->
// "blocks.2"); "" when no part is a number. Consecutive ops of one block form one instance of it.
std::string block_of(const std::string& scope) {
  std::size_t start = 0;
  while (start <= scope.size()) {
    std::size_t end = scope.find('.', start);
    if (end == std::string::npos) end = scope.size();
    const std::string_view part(scope.data() + start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c); }))
      return scope.substr(0, end);
    start = end + 1;
  }
  return "";
}

// What must match for two instances of a block to be repeats: each op, its scope inside the block,
// its tensors' shapes and dtypes, and what its inputs are made of, not their ids.
std::string op_signature(const GraphOp& op, std::size_t block_length) {
  std::string s = fmt::format("{}|{}|{}{}", op.op, pattern_of(op.scope.substr(block_length)), op.output.shape,
                              dtype_name(op.output.dtype));
  for (const GraphTensor& t : op.inputs) s += fmt::format("|{}{}", t.shape, dtype_name(t.dtype));
  return s;
}

struct Instance {
  std::size_t first, last;  // ops [first, last)
  std::string block, pattern, signature;
};

std::vector<Instance> instances_of(const StepGraph& graph) {
  std::vector<Instance> out;
  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const std::string block = block_of(graph.ops[i].scope);
    if (out.empty() || out.back().block != block || block.empty()) out.push_back({i, i, block, pattern_of(block), ""});
    out.back().last = i + 1;
    out.back().signature += op_signature(graph.ops[i], block.size()) + "\n";
  }
  return out;
}

std::string op_label(const GraphOp& op, double loss_scale) {
  if (op.loss_scaling) return fmt::format("{}: loss x S\\nS = {:g} (scaler.scale)", op.op, loss_scale);
  std::string label = op.op;
  if (op.op == "cast" && !op.inputs.empty())
    label = fmt::format("cast {} -> {}", dtype_name(op.inputs[0].dtype), dtype_name(op.output.dtype));
  if (!op.scope.empty()) label += "\\n" + escaped(op.scope);
  if (op.cache_fill)
    label += "\\nautocast, weight cache";
  else if (op.autocast)
    label += "\\nautocast";
  // FP8 recipes quantise inside the op (autograd/fp8.h): its E4M3/E5M2 codes never leave it as tensors.
  if (op.op.find("fp8") != std::string::npos) label += "\\nGEMMs in FP8 (E4M3 / E5M2) inside";
  if (!op.taped) label += "\\nnot on the tape";
  if (op.saved_bytes > 0) label += "\\nsaves " + bytes_text(op.saved_bytes);
  return label;
}

std::string tensor_text(const GraphTensor& t) { return fmt::format("{} {}", t.shape, dtype_name(t.dtype)); }

bool has_master(const GraphTensor& t, const DotOptions& options) {
  return t.parameter && is_low_precision(t.dtype) && options.recipe.master_weights;
}

// Where each op is drawn, and the DOT lines of the op nodes. Ops are taken in order; the repeats
// of a block go into one node; once the next op and the tensors it would add pass max_nodes,
// every op left goes into "more".
struct Placement {
  std::vector<std::string> node_of;  // per op: "op<i>", "repeat<i>" or "more"
  std::set<std::uint64_t> leaves;  // tensors no op made, read by a drawn op
  std::string nodes;
};

Placement place_ops(const StepGraph& graph, const DotOptions& options,
                    const std::unordered_map<std::uint64_t, std::size_t>& producer) {
  Placement placed;
  placed.node_of.resize(graph.ops.size());
  std::size_t drawn = 0;  // nodes so far, against max_nodes
  std::size_t more = 0;
  bool capped = false;
  // Draws op i unless the cap is reached: the op and the leaves (and masters) it reads first.
  auto place = [&](std::size_t i) {
    const GraphOp& op = graph.ops[i];
    std::set<std::uint64_t> fresh;
    std::size_t nodes = 1;
    for (const GraphTensor& t : op.inputs)
      if (t.id != 0 && !producer.contains(t.id) && !placed.leaves.contains(t.id) && fresh.insert(t.id).second)
        nodes += has_master(t, options) ? 2 : 1;
    capped = capped || drawn + nodes > options.max_nodes;
    if (capped) {
      placed.node_of[i] = "more";
      ++more;
      return;
    }
    drawn += nodes;
    placed.leaves.insert(fresh.begin(), fresh.end());
    placed.node_of[i] = fmt::format("op{}", i);
    const bool fp8 = op.op.find("fp8") != std::string::npos;
    placed.nodes +=
        fmt::format("  op{} [label=\"{}\", shape={}, style=\"{}\", fillcolor=\"{}\", color=\"{}\", class=\"{}\"];\n", i,
                    op_label(op, options.loss_scale), op.op == "cast" ? "hexagon" : "box",
                    op.taped ? "rounded,filled" : "rounded,filled,dashed",
                    op.loss_scaling   ? "#ffe08a"
                    : op.op == "cast" ? "#eeeeee"
                                      : "#ffffff",
                    fp8 ? dtype_colour(DType::E4M3) : "#000000", op.taped ? "op taped" : "op untaped");
  };

  const std::vector<Instance> instances = instances_of(graph);
  for (std::size_t k = 0; k < instances.size(); ++k) {
    const Instance& first = instances[k];
    for (std::size_t i = first.first; i < first.last; ++i) place(i);
    std::size_t repeats = 0;  // instances right after `first` that repeat it
    while (options.collapse_repeats && !first.block.empty() && k + repeats + 1 < instances.size() &&
           instances[k + repeats + 1].pattern == first.pattern &&
           instances[k + repeats + 1].signature == first.signature)
      ++repeats;
    if (repeats == 0) continue;
    // The repeats become one node, which stands for their ops and the parameters only they read.
    const std::size_t begin = instances[k + 1].first, end = instances[k + repeats].last;
    const std::string id = fmt::format("repeat{}", begin);
    capped = capped || drawn + 1 > options.max_nodes;
    for (std::size_t i = begin; i < end; ++i) placed.node_of[i] = capped ? "more" : id;
    if (capped) {
      more += end - begin;
    } else {
      ++drawn;
      std::size_t saved = 0;
      for (std::size_t i = begin; i < end; ++i) saved += graph.ops[i].saved_bytes;
      placed.nodes += fmt::format(
          "  {} [label=\"{} ... {}: x{}\\nthe same {} ops as {}\\nsave {} in all\", shape=box3d, style=filled, "
          "fillcolor=\"#f4f0ff\", class=\"repeat\", count={}];\n",
          id, escaped(instances[k + 1].block), escaped(instances[k + repeats].block), repeats, first.last - first.first,
          escaped(first.block), bytes_text(saved), repeats);
    }
    k += repeats;
  }
  if (more > 0)
    placed.nodes += fmt::format("  more [label=\"... {} more ops, not drawn\\n(a picture stops at {} nodes)\", "
                                "shape=note, class=\"more\", count={}];\n",
                                more, options.max_nodes, more);
  return placed;
}

// The tensors no op made, read by drawn ops: parameters (each low-precision one with its f32
// master, where the optimizer keeps one), the batch, constants such as the loss scale.
std::string leaf_nodes(const StepGraph& graph, const DotOptions& options, std::set<std::uint64_t> leaves) {
  std::string dot;
  for (const GraphOp& op : graph.ops)
    for (const GraphTensor& t : op.inputs) {
      if (!leaves.erase(t.id)) continue;  // not drawn, or drawn already
      auto name = options.tensor_names.find(t.id);
      const std::string what = name != options.tensor_names.end() ? name->second
                               : t.parameter                      ? "parameter"
                               : op.loss_scaling                  ? "loss scale S"
                                                                  : "tensor";
      // Under autocast an f32 parameter is the master copy itself; autocast casts it for each use.
      const bool master = t.parameter && t.dtype == DType::F32 && options.recipe.autocast_dtype;
      dot += fmt::format("  t{} [label=\"{}\\n{}{}\", shape={}, style=filled, fillcolor=\"{}\", class=\"{}\"];\n", t.id,
                         escaped(what), tensor_text(t), master ? "\\nthe f32 master" : "",
                         t.parameter ? "cylinder" : "ellipse",
                         t.parameter       ? "#dde8f5"
                         : op.loss_scaling ? "#ffe08a"
                                           : "#f5f5f5",
                         t.parameter ? "parameter" : "tensor");
      if (has_master(t, options))
        dot += fmt::format("  master{0} [label=\"f32 master of {1}\\n{2} f32\\n(optimizer state)\", shape=cylinder, "
                           "style=filled, fillcolor=\"#dde8f5\", class=\"master\"];\n"
                           "  master{0} -> t{0} [label=\"rounded to {3}\\nafter each update\", style=dashed, "
                           "color=\"{4}\"];\n",
                           t.id, escaped(what), t.shape, dtype_name(t.dtype), dtype_colour(t.dtype));
    }
  return dot;
}

// Every tensor an op reads is an edge from where it was made, once per (from, to, tensor). Edges
// inside a collapsed node, or into it from the parameters it stands for, are not drawn.
std::string tensor_edges(const StepGraph& graph, const Placement& placed,
                         const std::unordered_map<std::uint64_t, std::size_t>& producer) {
  std::string dot;
  std::set<std::string> edges;
  for (std::size_t i = 0; i < graph.ops.size(); ++i)
    for (std::size_t j = 0; j < graph.ops[i].inputs.size(); ++j) {
      const GraphTensor& t = graph.ops[i].inputs[j];
      if (t.id == 0) continue;  // an optional input left out
      auto made = producer.find(t.id);
      const bool leaf = made == producer.end();
      if (leaf && !placed.leaves.contains(t.id)) continue;
      const std::string from = leaf ? fmt::format("t{}", t.id) : placed.node_of[made->second];
      const std::string& to = placed.node_of[i];
      if (from == to || (leaf && to.starts_with("repeat"))) continue;
      if (!edges.insert(fmt::format("{}>{}>{}", from, to, t.id)).second) continue;
      const bool hit = graph.ops[i].cache_hit[j];
      dot += fmt::format("  {} -> {} [label=\"{}{}\", color=\"{}\", fontcolor=\"{}\", penwidth=1.6{}, dtype={}];\n",
                         from, to, tensor_text(t), hit ? "\\nweight-cast cache hit" : "", dtype_colour(t.dtype),
                         dtype_colour(t.dtype), hit ? ", style=dashed" : "", dtype_name(t.dtype));
    }
  return dot;
}

// After the forward pass: backward, the unscale and the optimizer, which are not ops on the tape.
std::string after_forward(const std::string& last, const DotOptions& options) {
  const bool scaled = options.recipe.loss_scaling != LossScaling::None;
  const bool masters = options.recipe.master_weights || options.recipe.autocast_dtype;
  std::string dot;
  if (scaled)
    dot += fmt::format("  unscale [label=\"unscale: gradients x 1/S\\ninf/NaN check (scaler.step)\", shape=box, "
                       "style=filled, fillcolor=\"#ffe08a\", class=\"unscale\"];\n"
                       "  {} -> unscale [label=\"backward: gradients x S\", style=bold, color=\"#b8860b\"];\n",
                       last);
  dot += fmt::format("  optimizer [label=\"{} step on the {}{}\", shape=box, style=filled, fillcolor=\"#dde8f5\", "
                     "class=\"optimizer\"];\n  {} -> optimizer [label=\"{}\", style=bold, color=\"#555555\"];\n",
                     escaped(options.optimizer), masters ? "f32 masters" : "weights",
                     scaled ? "\\n(skipped when a gradient is inf/NaN)" : "", scaled ? "unscale" : last,
                     scaled ? "true gradients" : "backward: gradients");
  return dot;
}

// The colours of the dtypes this step used, and what the shapes mean.
std::string legend(const StepGraph& graph) {
  std::set<DType> used;
  for (const GraphOp& op : graph.ops) {
    used.insert(op.output.dtype);
    for (const GraphTensor& t : op.inputs)
      if (t.id != 0) used.insert(t.dtype);
  }
  std::string rows;
  for (DType dtype : used)
    rows += fmt::format("<tr><td><font color=\"{}\">&#9473;&#9473;&#9473; {}</font></td></tr>", dtype_colour(dtype),
                        dtype_name(dtype));
  return fmt::format("  legend [shape=plaintext, class=\"legend\", label=<<table border=\"0\" cellspacing=\"0\">"
                     "<tr><td><b>edges: tensors, by dtype</b></td></tr>{}"
                     "<tr><td>hexagon: a cast</td></tr><tr><td>dashed: not on the tape</td></tr>"
                     "<tr><td>gold: the loss scale S</td></tr></table>>];\n",
                     rows);
}

}  // namespace

std::string_view dtype_colour(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "#1f77b4";
    case DType::F16:
      return "#d62728";
    case DType::BF16:
      return "#2ca02c";
    case DType::E4M3:
      return "#ff7f0e";
    case DType::E5M2:
      return "#9467bd";
    case DType::E2M1:
      return "#e377c2";
    case DType::E8M0:
      return "#8c564b";
    case DType::F64:
      return "#7f7f7f";
    case DType::I32:
    case DType::I64:
    case DType::U8:
    case DType::BOOL:
      return "#000000";
  }
  return "#000000";
}

std::string step_graph_dot(const StepGraph& graph, const DotOptions& options) {
  std::unordered_map<std::uint64_t, std::size_t> producer;  // tensor id -> the op that made it
  for (std::size_t i = 0; i < graph.ops.size(); ++i) producer[graph.ops[i].output.id] = i;
  const Placement placed = place_ops(graph, options, producer);

  std::string dot = fmt::format("digraph step {{\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
                                "  edge [fontname=\"Helvetica\", fontsize=9];\n  labelloc=t;\n  label=\"{}\";\n",
                                escaped(options.title));
  dot += placed.nodes;
  dot += leaf_nodes(graph, options, placed.leaves);
  dot += tensor_edges(graph, placed, producer);
  if (!graph.ops.empty()) dot += after_forward(placed.node_of.back(), options);
  return dot + legend(graph) + "}\n";
}

}  // namespace mg::amp

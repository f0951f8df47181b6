// amp/step_graph.h: one training step as a picture. The DOT text is read back here: its op nodes
// are exactly the taped ops with their scopes, every cast autocast made is a node (weight-cast cache
// hits marked on their edges), edges carry their dtype's colour, saved bytes and the loss scale are
// shown, repeated blocks collapse with their count, the node cap holds, and recording changes no bit.
#include <bit>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing.h"

#include "amp/nonfinite_trace.h"

using namespace mg;
using mg::testing::uniform_in;

namespace {

struct DotNode {
  std::string id, label, cls;
  std::int64_t count = -1;  // the count= attribute, where there is one
};
struct DotEdge {
  std::string from, to, label, colour, dtype;
};

std::vector<DotNode> nodes_of(const std::string& dot) {
  static const std::regex node(R"re(^  (\w+) \[label="((?:[^"\\]|\\.)*)".*class="([^"]*)"(?:, count=(\d+))?)re");
  static const std::regex edge_start(R"re(^  \w+ -> )re");
  std::vector<DotNode> out;
  std::smatch m;
  std::istringstream lines(dot);
  for (std::string line; std::getline(lines, line);)
    if (!std::regex_search(line, edge_start) && std::regex_search(line, m, node))
      out.push_back({m[1], m[2], m[3], m[4].matched ? std::stoll(m[4]) : -1});
  return out;
}

std::vector<DotEdge> edges_of(const std::string& dot) {
  static const std::regex edge(R"re(^  (\w+) -> (\w+) \[label="((?:[^"\\]|\\.)*)", color="([^"]*)".*dtype=(\w+)\])re");
  std::vector<DotEdge> out;
  std::smatch m;
  std::istringstream lines(dot);
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, edge)) out.push_back({m[1], m[2], m[3], m[4], m[5]});
  return out;
}

std::vector<DotNode> with_class(const std::vector<DotNode>& nodes, const std::string& cls) {
  std::vector<DotNode> out;
  for (const DotNode& n : nodes)
    if (n.cls == cls) out.push_back(n);
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Tensor parameter(const Shape& shape, std::uint64_t seed) {
  Generator generator(seed);
  return uniform(shape, -0.5, 0.5, generator).set_requires_grad(true);
}

}  // namespace

TEST_CASE("step graph: the op nodes are exactly the taped ops, with their scopes, in tape order") {
  Generator generator(3);
  auto model = nn::mlp({8, 6, 4}, generator);
  const Tensor x = uniform({5, 8}, -1, 1, generator);
  const Tensor y = from_vector({0, 1, 2, 3, 0}, {5}, {.dtype = DType::I32});
  clear_tape();
  amp::StepRecorder recorder;
  {
    Autocast region(DType::F16);
    Tensor loss = cross_entropy((*model)(x), y);
  }
  recorder.stop();
  const std::size_t taped_ops = tape_size();
  const std::string dot = amp::step_graph_dot(recorder.graph(), {.recipe = amp::Recipe::parse("mixed_float16")});
  INFO(dot);
  const std::vector<DotNode> taped = with_class(nodes_of(dot), "op taped");
  REQUIRE(taped.size() == taped_ops);
  // Linear 1 and 3 (each with its two weight casts), the ReLU between them, and the loss after the
  // logits' cast back to f32 (cross_entropy is on the f32 list). The input's flatten and cast are
  // not on the tape: nothing upstream of them needs a gradient.
  const std::vector<std::string> expected{"cast f32 -> f16\\n1\\n", "cast f32 -> f16\\n1\\n",
                                          "linear\\n1\\n",          "relu\\n2\\n",
                                          "cast f32 -> f16\\n3\\n", "cast f32 -> f16\\n3\\n",
                                          "linear\\n3\\n",          "cast f16 -> f32",
                                          "cross_entropy"};
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK_MESSAGE(taped[i].label.starts_with(expected[i]), taped[i].label, " vs ", expected[i]);
  CHECK(with_class(nodes_of(dot), "op untaped").size() == 2);  // flatten, and the input's cast
  clear_tape();
}

TEST_CASE("step graph: every cast autocast made is a node; a reused weight cast is a cache-hit edge") {
  const Tensor x = uniform_in({2, 8}, DType::F32, 1);
  const Tensor w = parameter({8, 8}, 2);
  clear_tape();
  const CastCacheStats before = cast_cache_stats();
  amp::StepRecorder recorder;
  {
    Autocast region(DType::F16);
    Tensor loss = sum(matmul(matmul(x, w), w));  // w is cast once and served again
  }
  recorder.stop();
  const CastCacheStats after = cast_cache_stats();
  REQUIRE(after.misses - before.misses == 1);
  REQUIRE(after.hits - before.hits == 1);
  const std::string dot = amp::step_graph_dot(recorder.graph(), {.recipe = amp::Recipe::parse("mixed_float16")});
  INFO(dot);
  std::vector<DotNode> casts;
  for (const DotNode& n : nodes_of(dot))
    if (n.label.starts_with("cast")) casts.push_back(n);
  // x's (not on the tape: x needs no gradient), w's (made for the cache), and the product's back to
  // f32 for sum (on the f32 list); the second matmul's w comes from the cache, with no cast.
  REQUIRE(casts.size() == 3);
  for (const DotNode& cast : casts) CHECK(contains(cast.label, "\\nautocast"));
  CHECK(casts[0].cls == "op untaped");
  CHECK(contains(casts[1].label, "autocast, weight cache"));
  CHECK(casts[1].cls == "op taped");
  CHECK(casts[2].label.starts_with("cast f16 -> f32"));
  // op0 casts x, op1 casts w, op2 and op3 are the matmuls.
  std::vector<DotEdge> hits;
  for (const DotEdge& e : edges_of(dot))
    if (contains(e.label, "cache hit")) hits.push_back(e);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].from == "op1");
  CHECK(hits[0].to == "op3");
  CHECK(hits[0].dtype == "f16");
  // The weight itself is drawn once, as the f32 master autocast casts from.
  const std::vector<DotNode> parameters = with_class(nodes_of(dot), "parameter");
  REQUIRE(parameters.size() == 1);
  CHECK(parameters[0].id == fmt::format("t{}", w.id()));
  CHECK(contains(parameters[0].label, "[8, 8] f32\\nthe f32 master"));
  clear_tape();
}

TEST_CASE("step graph: every edge has its dtype's colour and its tensor's shape") {
  const Tensor x = uniform_in({2, 8}, DType::F32, 1);
  const Tensor w = parameter({8, 4}, 2);
  clear_tape();
  amp::StepRecorder recorder;
  {
    Autocast region(DType::BF16);
    Tensor loss = sum(cast(matmul(x, w), DType::F32));
  }
  recorder.stop();
  const std::string dot = amp::step_graph_dot(recorder.graph(), {.recipe = amp::Recipe::parse("mixed_bfloat16")});
  INFO(dot);
  const std::vector<DotEdge> edges = edges_of(dot);
  REQUIRE(edges.size() == 6);  // x and w to their casts, the casts to matmul, matmul to the cast, that to sum
  std::set<std::string> dtypes;
  for (const DotEdge& e : edges) {
    dtypes.insert(e.dtype);
    const DType dtype = e.dtype == "f32" ? DType::F32 : DType::BF16;
    CHECK_MESSAGE(e.colour == amp::dtype_colour(dtype), e.from, " -> ", e.to);
    CHECK(contains(e.label, " " + e.dtype));
  }
  CHECK(dtypes == std::set<std::string>{"f32", "bf16"});
  CHECK(amp::dtype_colour(DType::F32) != amp::dtype_colour(DType::BF16));
  CHECK(amp::dtype_colour(DType::F16) != amp::dtype_colour(DType::E4M3));
  const DotEdge& weight = edges[1];
  CHECK(weight.from == fmt::format("t{}", w.id()));
  CHECK(weight.label == "[8, 4] f32");
  CHECK(contains(dot, fmt::format("op2 -> op3 [label=\"[2, 4] bf16\", color=\"{}\"", amp::dtype_colour(DType::BF16))));
  clear_tape();
}

TEST_CASE("step graph: saved bytes, the loss scale from loss to unscale, and masters beside f16 weights") {
  const Tensor x = uniform_in({2, 8}, DType::F16, 1);
  Tensor w = parameter({8, 8}, 2);
  amp::Recipe recipe = amp::Recipe::parse("float16_master");
  recipe.cast_parameters({w});
  amp::GradScaler scaler;
  clear_tape();
  amp::StepRecorder recorder;
  Tensor loss;
  {
    Autocast region = recipe.autocast();
    loss = cast(sum(matmul(x, w)), DType::F32);
  }
  recorder.loss_scaling_begins();
  Tensor scaled = scaler.scale(loss);
  recorder.stop();
  const std::string dot = amp::step_graph_dot(recorder.graph(), {.recipe = recipe,
                                                                 .loss_scale = scaler.get_scale(),
                                                                 .optimizer = "adam",
                                                                 .tensor_names = {{w.id(), "fc.weight"}}});
  const std::vector<DotNode> nodes = nodes_of(dot);
  // matmul keeps x and w, both f16 already: 2*8*2 + 8*8*2 bytes, x's only (w is a parameter).
  CHECK(contains(nodes[0].label, "matmul\\nsaves 32 B"));
  const std::vector<DotNode> scaling = with_class(nodes, "op taped");
  REQUIRE(!scaling.empty());
  CHECK(contains(scaling.back().label, "loss x S\\nS = 65536"));
  CHECK(with_class(nodes, "unscale").size() == 1);
  CHECK(contains(dot, fmt::format("{} -> unscale [label=\"backward: gradients x S\"", scaling.back().id)));
  CHECK(contains(dot, "unscale -> optimizer [label=\"true gradients\""));
  CHECK(contains(with_class(nodes, "optimizer").at(0).label, "adam step on the f32 masters"));
  const std::vector<DotNode> masters = with_class(nodes, "master");
  REQUIRE(masters.size() == 1);
  CHECK(masters[0].id == fmt::format("master{}", w.id()));
  CHECK(contains(masters[0].label, "f32 master of fc.weight"));
  CHECK(contains(dot, fmt::format("master{0} -> t{0} [label=\"rounded to f16", w.id())));
  clear_tape();
}

namespace {

// `blocks` blocks of linear + relu, each in scope "blocks.<b>", each with its own weight.
amp::StepGraph blocks_step(int blocks, std::int64_t width_of_last) {
  std::vector<Tensor> weights;
  for (int b = 0; b < blocks; ++b)
    weights.push_back(parameter({8, b + 1 == blocks ? width_of_last : 8}, static_cast<std::uint64_t>(b)));
  Tensor h = uniform_in({2, 8}, DType::F32, 9);
  clear_tape();
  amp::StepRecorder recorder;
  {
    NameScope outer("blocks");
    for (int b = 0; b < blocks; ++b) {
      NameScope scope(std::to_string(b));
      h = relu(matmul(h, weights[static_cast<std::size_t>(b)]));
    }
  }
  recorder.stop();
  clear_tape();
  return recorder.graph();
}

}  // namespace

TEST_CASE("step graph: repeated blocks collapse into one node with their count") {
  const amp::StepGraph graph = blocks_step(5, 4);  // blocks 0..3 alike, block 4 narrower
  const std::string dot = amp::step_graph_dot(graph, {});
  const std::vector<DotNode> nodes = nodes_of(dot);
  const std::vector<DotNode> repeats = with_class(nodes, "repeat");
  REQUIRE(repeats.size() == 1);
  CHECK(repeats[0].count == 3);  // blocks 1, 2, 3 behind the drawn block 0
  CHECK(contains(repeats[0].label, "blocks.1 ... blocks.3: x3\\nthe same 2 ops as blocks.0"));
  CHECK(with_class(nodes, "op taped").size() == 4);  // block 0's two ops, block 4's two
  CHECK(contains(dot, "op1 -> repeat2"));  // block 0 feeds the repeats, which feed block 4
  CHECK(contains(dot, "repeat2 -> op8"));
  CHECK(with_class(nodes, "parameter").size() == 2);  // the collapsed blocks' weights are inside

  const std::string full = amp::step_graph_dot(graph, {.collapse_repeats = false});
  CHECK(with_class(nodes_of(full), "repeat").empty());
  CHECK(with_class(nodes_of(full), "op taped").size() == 10);
}

TEST_CASE("step graph: at most max_nodes nodes are drawn; the rest is one node with its count") {
  const amp::StepGraph graph = blocks_step(6, 8);
  const std::string dot = amp::step_graph_dot(graph, {.collapse_repeats = false, .max_nodes = 7});
  INFO(dot);
  const std::vector<DotNode> nodes = nodes_of(dot);
  std::size_t drawn = 0;  // ops and the tensors they read
  for (const DotNode& n : nodes) drawn += n.cls.starts_with("op ") || n.cls == "parameter" || n.cls == "tensor";
  CHECK(drawn <= 7);
  const std::vector<DotNode> more = with_class(nodes, "more");
  REQUIRE(more.size() == 1);
  // input, weight, matmul, relu; weight, matmul, relu: the next matmul and its weight would make 9.
  CHECK(with_class(nodes, "op taped").size() == 4);
  CHECK(more[0].count == 8);
  CHECK(contains(dot, "op3 -> more"));
}

TEST_CASE("step graph: recording changes no bit of the step") {
  auto run = [](bool record) {
    Generator generator(5);
    auto model = nn::mlp({8, 6, 4}, generator);
    const Tensor x = uniform({5, 8}, -1, 1, generator);
    const Tensor y = from_vector({0, 1, 2, 3, 0}, {5}, {.dtype = DType::I32});
    std::optional<amp::StepRecorder> recorder;
    if (record) recorder.emplace();
    Tensor loss;
    {
      Autocast region(DType::F16);
      loss = cross_entropy((*model)(x), y);
    }
    backward(loss);
    std::vector<double> bits{loss.item()};
    for (const Tensor& p : model->parameters())
      for (float g : p.grad().to_vector<float>()) bits.push_back(g);
    return bits;
  };
  const std::vector<double> plain = run(false);
  const std::vector<double> recorded = run(true);
  REQUIRE(plain.size() == recorded.size());
  for (std::size_t i = 0; i < plain.size(); ++i)
    CHECK(std::bit_cast<std::uint64_t>(plain[i]) == std::bit_cast<std::uint64_t>(recorded[i]));
}

TEST_CASE("step graph: the precision inspector's inf/NaN flags beside it draw nothing, on every device") {
  // mixgrad train --graph --inspect: amp::NonfiniteTrace flags every op of the step, on a GPU with a
  // kernel of its own. The picture must be the step's, the same as without the trace.
  std::vector<Device> devices{Device::cpu()};
  if (mg::testing::have_gpu()) devices.push_back(Device::cuda());
  for (Device device : devices) {
    INFO(device);
    auto draw = [&](bool trace_too) {
      Generator generator(7);
      auto model = nn::mlp({8, 6, 4}, generator);
      model->to(device);
      const Tensor x = uniform({5, 8}, -1, 1, generator).to(device);
      const Tensor y = from_vector({0, 1, 2, 3, 0}, {5}, {.dtype = DType::I32}).to(device);
      clear_tape();
      amp::NonfiniteTrace trace;
      if (trace_too) trace.begin_step(1);
      amp::StepRecorder recorder;
      {
        Autocast region(DType::F16);
        backward(cross_entropy((*model)(x), y));
      }
      recorder.stop();
      trace.end_step();
      CHECK(!trace.first(1).has_value());  // finite: the trace saw the step, and found nothing
      return amp::step_graph_dot(recorder.graph(), {.recipe = amp::Recipe::parse("mixed_float16")});
    };
    // Tensor ids are numbered as tensors are met, so the two pictures' ids differ: renumber them in
    // order of appearance first.
    auto renumbered = [](const std::string& dot) {
      static const std::regex id(R"re(\bt\d+\b)re");
      std::map<std::string, int> numbers;
      std::string out;
      std::sregex_iterator it(dot.begin(), dot.end(), id), end;
      std::size_t last = 0;
      for (; it != end; ++it) {
        const auto [entry, added] = numbers.try_emplace(it->str(), static_cast<int>(numbers.size()));
        out += dot.substr(last, static_cast<std::size_t>(it->position()) - last) + "t" + std::to_string(entry->second);
        last = static_cast<std::size_t>(it->position() + it->length());
      }
      return out + dot.substr(last);
    };
    CHECK(renumbered(draw(true)) == renumbered(draw(false)));
  }
}

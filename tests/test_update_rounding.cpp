// How an f16/bf16 parameter without a master stores its update (optim/optimizer.h, kernels/optim.h):
// to nearest, stochastically, or Kahan-compensated. The bfloat16_pure ablation of Zamirai et al.,
// "Revisiting BFloat16 Training": updates of a quarter ulp vanish to nearest, survive on average
// stochastically, and add up exactly with Kahan's compensation. Adam's moments in a dtype of their own
// (state_dtype), and the bytes a parameter costs each way. The GPU's bits: test_cuda_amp.cpp.
#include <cmath>

#include "amp/memory_report.h"
#include "core/stochastic_round.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/optim_update_cases.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

// Element i of a bf16 tensor.
double at(const Tensor& t, std::int64_t i) { return load_as_double(t.data_ptr(), t.dtype(), i); }

// A bf16 leaf of `n` ones.
Tensor bf16_ones(std::int64_t n) { return full({n}, 1.0, {.dtype = DType::BF16}).set_requires_grad(true); }

// One SGD step of lr 1 with every gradient `g` (exact in bf16): the update is exactly -g.
void step_by(optim::Optimizer& opt, Tensor& w, double g) {
  opt.zero_grad();
  w.set_grad(full(w.shape(), g, {.dtype = DType::BF16}));
  opt.step();
}

}  // namespace

TEST_CASE("update rounding: a quarter ulp below 1.0 is lost to nearest, kept on average stochastically") {
  const double update = std::ldexp(1.0, -10);  // bf16's spacing below 1.0 is 2^-8: a quarter of it
  const std::int64_t n = 4096;
  Tensor nearest = bf16_ones(n), stochastic = bf16_ones(n);
  optim::SGD plain({nearest}, {.lr = 1.0});
  optim::SGD sr({stochastic}, {.lr = 1.0, .update_rounding = optim::UpdateRounding::Stochastic, .rounding_seed = 3});
  step_by(plain, nearest, update);
  step_by(sr, stochastic, update);
  check_values(nearest, std::vector<double>(n, 1.0), 0.0, 0.0);
  CHECK(plain.last_update().lost == n);

  // Each weight lands on one of the two bf16 values around 1 - 2^-10, the lower with probability 1/4:
  // the mean moves by the update itself. Its standard deviation over n weights is
  // 2^-8 * sqrt(3/16) / sqrt(n) = 2.6e-5; 6 of them is under a sixth of the update.
  double sum = 0.0;
  std::int64_t down = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = at(stochastic, i);
    REQUIRE((v == 1.0 || v == 1.0 - std::ldexp(1.0, -8)));
    down += v != 1.0;
    sum += v;
  }
  const double sigma = std::ldexp(1.0, -8) * std::sqrt(3.0 / 16.0) / std::sqrt(static_cast<double>(n));
  CHECK(std::abs(sum / n - (1.0 - update)) < 6.0 * sigma);
  CHECK(down > 0);
  CHECK(sr.last_update().lost == n - down);  // the weights that stayed at 1.0
}

TEST_CASE("update rounding: element e of parameter i at step t rounds with the word of (seed, t, i, e)") {
  const std::uint64_t seed = 0x1234'5678'9ABCull;
  std::vector<Tensor> ws{uniform_in({37}, DType::BF16, 1, -2.0, 2.0).set_requires_grad(true),
                         uniform_in({5, 3}, DType::BF16, 2, -2.0, 2.0).set_requires_grad(true)};
  optim::SGD opt(ws, {.lr = 1.0, .update_rounding = optim::UpdateRounding::Stochastic, .rounding_seed = seed});
  for (std::uint32_t step = 0; step < 3; ++step) {
    std::vector<Tensor> before;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      before.push_back(ws[i].detach().clone());
      ws[i].set_grad(uniform_in(ws[i].shape(), DType::BF16, 10 + step + 5 * i, -0.01, 0.01));
    }
    opt.step();
    for (std::size_t i = 0; i < ws.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      const stochastic::RoundingStream stream{.seed = seed, .step = step, .tensor = static_cast<std::uint32_t>(i)};
      std::vector<double> expected;
      for (std::int64_t e = 0; e < ws[i].numel(); ++e) {
        const float p = static_cast<float>(at(before[i], e));
        const float g = static_cast<float>(at(ws[i].grad(), e));
        expected.push_back(stochastic::stochastic_round(p - g, DType::BF16, stochastic::rounding_word(stream, e)));
      }
      check_values(ws[i].reshape({ws[i].numel()}), expected, 0.0, 0.0);
    }
  }
}

TEST_CASE("update rounding: Kahan's parameter plus compensation is the exact sum of the updates") {
  const double update = std::ldexp(1.0, -10);
  Tensor w = bf16_ones(3);
  optim::SGD opt({w}, {.lr = 1.0, .update_rounding = optim::UpdateRounding::Kahan});
  CHECK(!opt.compensation(0).defined());  // made at the first update
  for (int k = 1; k <= 64; ++k) {
    INFO("step " << k);
    step_by(opt, w, update);
    // By hand: 1 - 2^-10 rounds to 1 with 2^-10 owed; 1 - 2^-9 is a tie, to even: 1 again; 1 - 3 2^-10
    // rounds to 1 - 2^-8 with 2^-10 over; ... every partial sum is exact in f32 and in bf16's debt.
    const double p = at(w, 0), c = at(opt.compensation(0), 0);
    CHECK(p + c == 1.0 - k * update);
    CHECK(std::abs(c) <= std::ldexp(1.0, -9));  // at most half the spacing at p
  }
  CHECK(at(w, 0) == 1.0 - 64 * update);  // 0.9375, a bf16 value: nothing owed
  CHECK(at(opt.compensation(0), 0) == 0.0);
  CHECK(opt.state_bytes() == 3 * 2);  // the compensation: 2 bytes a bf16 parameter (SGD without momentum)

  // The same updates to nearest: every one lost.
  Tensor v = bf16_ones(3);
  optim::SGD plain({v}, {.lr = 1.0});
  for (int k = 1; k <= 64; ++k) step_by(plain, v, update);
  CHECK(at(v, 0) == 1.0);
}

TEST_CASE("update rounding: an f32 parameter beside bf16 ones stores its update as it is") {
  Tensor a = uniform_in({9}, DType::F32, 4).set_requires_grad(true);
  Tensor b = a.detach().clone().set_requires_grad(true);
  Tensor w = bf16_ones(4);
  optim::Adam plain({b}, {.lr = 0.01});
  optim::Adam kahan({a, w}, {.lr = 0.01, .update_rounding = optim::UpdateRounding::Kahan});
  for (int k = 0; k < 3; ++k) {
    const Tensor g = uniform_in({9}, DType::F32, 20 + k, -1.0, 1.0);
    a.set_grad(g);
    b.set_grad(g);
    w.set_grad(full({4}, 0.5, {.dtype = DType::BF16}));
    plain.step();
    kahan.step();
  }
  check_identical(a, b, "the f32 parameter");
  CHECK(!kahan.compensation(0).defined());
  CHECK(kahan.compensation(1).defined());
}

TEST_CASE("update rounding: a resumed run continues bit for bit (Adam, stochastic and Kahan)") {
  for (optim::UpdateRounding rounding : {optim::UpdateRounding::Stochastic, optim::UpdateRounding::Kahan}) {
    INFO(optim::update_rounding_name(rounding));
    const optim::AdamOptions options{.lr = 3e-3, .update_rounding = rounding, .rounding_seed = 11};
    auto make = [] { return uniform_in({4, 33}, DType::BF16, 7, -1.0, 1.0).set_requires_grad(true); };
    auto grad = [](int step) { return uniform_in({4, 33}, DType::BF16, 100 + step, -1.0, 1.0); };
    Tensor whole = make(), resumed = make();
    optim::Adam straight({whole}, options);
    for (int step = 0; step < 6; ++step) {
      whole.set_grad(grad(step));
      straight.step();
    }
    StateDict saved;
    {
      optim::Adam first({resumed}, options);
      for (int step = 0; step < 3; ++step) {
        resumed.set_grad(grad(step));
        first.step();
      }
      saved = first.state_dict();
    }
    CHECK(saved.count("state.0.compensation") == (rounding == optim::UpdateRounding::Kahan ? 1u : 0u));
    optim::Adam second({resumed}, options);
    second.load_state_dict(saved);
    for (int step = 3; step < 6; ++step) {
      resumed.set_grad(grad(step));
      second.step();
    }
    check_identical(resumed, whole, "parameter");
    if (rounding == optim::UpdateRounding::Kahan)
      check_identical(second.compensation(0), straight.compensation(0), "compensation");
  }
}

TEST_CASE("update rounding: what cannot work is an mg::Error that says what to do") {
  Tensor w = bf16_ones(4);
  check_error([&] { optim::parse_update_rounding("round"); }, "choose one of nearest, stochastic, kahan");
  check_error([&] { optim::SGD({w}, {.master_weights = true, .update_rounding = optim::UpdateRounding::Stochastic}); },
              "with master_weights the f32 masters take them unrounded");
  Tensor f = ones({4}, {.requires_grad = true});
  check_error([&] { optim::Adam({f}, {.update_rounding = optim::UpdateRounding::Kahan}); },
              "applies to f16/bf16 parameters, and all 1 here are f32");
  // A Kahan run's state does not load into a run that rounds to nearest, and nothing changes.
  optim::SGD kahan({w}, {.lr = 1.0, .update_rounding = optim::UpdateRounding::Kahan});
  step_by(kahan, w, 0.25);
  Tensor v = bf16_ones(4);
  optim::SGD plain({v}, {.lr = 1.0});
  check_error([&] { plain.load_state_dict(kahan.state_dict()); },
              "is Kahan's compensation, but parameter 0 (bf16) keeps none here (update_rounding nearest)");
  StateDict wrong = kahan.state_dict();
  wrong["state.0.compensation"] = zeros({4});  // f32
  optim::SGD again({v}, {.lr = 1.0, .update_rounding = optim::UpdateRounding::Kahan});
  check_error([&] { again.load_state_dict(wrong); }, "'state.0.compensation' must be bf16 [4]");
  CHECK(!again.compensation(0).defined());
}

TEST_CASE("Adam's state_dtype: f32 moments beside bf16 weights are an f32 parameter's moments") {
  Tensor w = uniform_in({50}, DType::BF16, 3, -1.0, 1.0).set_requires_grad(true);
  Tensor f = w.detach().to(DType::F32).set_requires_grad(true);
  optim::Adam mixed({w}, {.lr = 1e-2, .state_dtype = DType::F32});
  optim::Adam reference({f}, {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const Tensor g = uniform_in({50}, DType::BF16, 30 + step, -1.0, 1.0);
    w.set_grad(g);
    f.set_grad(g.to(DType::F32));
    mixed.step();
    reference.step();
    // Without weight decay the moments see only the gradients: the same f32 values, bit for bit.
    const StateDict got = mixed.state_dict(), expected = reference.state_dict();
    check_identical(got.at("state.0.exp_avg"), expected.at("state.0.exp_avg"), "exp_avg");
    check_identical(got.at("state.0.exp_avg_sq"), expected.at("state.0.exp_avg_sq"), "exp_avg_sq");
  }
  check_values(w, f.to(DType::BF16).to_vector<double>(), 0.0, std::ldexp(1.0, -7));  // within a bf16 ulp or so
  // A checkpoint keeps the moments' dtype, and another one is refused before anything changes.
  Tensor v = w.detach().clone().set_requires_grad(true);
  optim::Adam all_bf16({v}, {.lr = 1e-2});
  check_error([&] { all_bf16.load_state_dict(mixed.state_dict()); }, "is [50] f32, but parameter 0 is [50] bf16");
  optim::Adam again({v}, {.lr = 1e-2, .state_dtype = DType::F32});
  again.load_state_dict(mixed.state_dict());
  check_error([&] { optim::Adam({v}, {.state_dtype = DType::I32}); }, "state_dtype must be f32, f16 or bf16");
}

TEST_CASE("memory report: bytes a parameter for Adam with masters, f32 or bf16 moments, and Kahan") {
  struct Setup {
    const char* name;
    DType weights;
    std::optional<DType> moments;
    optim::UpdateRounding rounding;
    double bytes;
  };
  for (const Setup& s :
       {Setup{"mixed_bfloat16: f32 weights and moments", DType::F32, std::nullopt, optim::UpdateRounding::Nearest,
              16.0},
        Setup{"bf16 weights, f32 moments", DType::BF16, DType::F32, optim::UpdateRounding::Stochastic, 12.0},
        Setup{"... and Kahan's compensation", DType::BF16, DType::F32, optim::UpdateRounding::Kahan, 14.0},
        Setup{"all bf16", DType::BF16, std::nullopt, optim::UpdateRounding::Nearest, 8.0}}) {
    INFO(s.name);
    Tensor w = uniform_in({10, 30}, s.weights, 1).set_requires_grad(true);
    optim::Adam adam({w}, {.update_rounding = s.rounding, .state_dtype = s.moments});
    w.set_grad(uniform_in({10, 30}, s.weights, 2));
    adam.step();
    const amp::MemoryReport report = amp::memory_report(adam);
    CHECK(report.parameter_count == 300);
    CHECK(report.bytes_per_parameter() == s.bytes);
    CHECK(report.describe().find(fmt::format("{} bytes a parameter", s.bytes)) != std::string::npos);
  }
}

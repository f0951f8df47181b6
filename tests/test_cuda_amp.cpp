// The fused AMP kernels: unscale, update_scale, sgd, adam and adagrad with their lost-update counts, and
// the fused step of an f32 master and its f16 copy (kernels/amp.h, kernels/optim.h). Both backends round every
// intermediate the same way (kernels/optim_functors.h), so the GPU is compared with the CPU bit for
// bit (any NaN matching any NaN: the two make NaNs with different payloads).
//
// CPU cases run everywhere: update_scale by hand-computed values; the fused master pass against
// the unfused sequence (unscale into f32, update, cast), bit for bit; a set found_inf changes no bit.
// GPU cases (in builds with the CUDA backend) skip with a message when no device is visible. How often
// a step makes the host wait: test_cuda_host_waits.cpp; the stochastic and Kahan update roundings on the
// CPU: test_update_rounding.cpp; Adam's and Adagrad's step counts on the CPU:
// test_optim.cpp, test_optim_adagrad.cpp.
// Add an optimizer configuration: one line in update_cases() (tests/optim_update_cases.h); every GPU
// and fused case runs it.
#include <limits>

#include "kernels/amp.h"
#include "kernels/copy.h"
#include "kernels/optim.h"
#include "tests/optim_update_cases.h"
#include "tests/testing.h"

using namespace mg;
using namespace mg::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("update_scale (CPU): PyTorch's rule, by hand") {
  Tensor scale = full({1}, 65536.0), tracker = zeros({1}, {.dtype = DType::I32});
  Tensor no_streak;  // hysteresis 1 needs none
  const Tensor clean = zeros({1}), overflow = ones({1});
  struct Row {
    bool found_inf;
    double scale;
    double tracker;
  };
  // growth_interval 3: the third clean step in a row doubles the scale; an overflow halves it.
  const std::vector<Row> rows{{false, 65536, 1}, {false, 65536, 2}, {false, 131072, 0},
                              {true, 65536, 0},  {false, 65536, 1}, {true, 32768, 0},
                              {false, 32768, 1}, {false, 32768, 2}, {false, 65536, 0}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("step " << i);
    kernels::update_scale(scale, tracker, no_streak, rows[i].found_inf ? overflow : clean, {.growth_interval = 3});
    CHECK(scale.item() == rows[i].scale);
    CHECK(tracker.item() == rows[i].tracker);
  }
  // Factors that are not powers of two: the product in f64, rounded once to f32.
  kernels::update_scale(scale, tracker, no_streak, overflow, {.backoff_factor = 0.3, .growth_interval = 3});
  CHECK(scale.item() == static_cast<double>(static_cast<float>(65536.0 * 0.3)));
  // Growth that would overflow f32 keeps the scale and still resets the tracker.
  Tensor huge = full({1}, 0x1p127);
  kernels::update_scale(huge, tracker, no_streak, clean, {.growth_interval = 1});
  CHECK(huge.item() == 0x1p127);
  CHECK(tracker.item() == 0);
  check_error([&] { kernels::update_scale(scale, scale, no_streak, clean, {.growth_interval = 3}); },
              "kernel update_scale");
}

TEST_CASE("fused master (CPU): one pass equals unscale, update and cast, bit for bit") {
  for (const UpdateCase& c : update_cases()) {
    for (DType model_dtype : {DType::F16, DType::BF16}) {
      INFO(c.name << ", model in " << dtype_name(model_dtype));
      const Tensor master = uniform_in({1001}, DType::F32, 1, -2.0, 2.0);
      Tensor master_a = master.clone(), master_b = master.clone();
      Tensor model_a = master.to(model_dtype), model_b = master.to(model_dtype);
      std::vector<Tensor> state_a = fresh_state(c.states, master), state_b = fresh_state(c.states, master);
      Tensor found_a = zeros({}), found_b = zeros({});
      UpdateCount count_a, count_b;
      for (int step = 0; step < 3; ++step) {
        const Tensor scaled_grad = uniform_in({1001}, model_dtype, 100 + step, -1000.0, 1000.0);
        Tensor grad = Tensor::empty({1001});
        const Tensor inv_scale = factor(kInverseScale);
        kernels::cpu::unscale({scaled_grad}, {grad}, inv_scale, found_a);
        c.run(false, step, master_a, grad, state_a, count_a, {});
        kernels::cpu::cast(master_a, model_a);
        c.run(false, step, master_b, scaled_grad, state_b, count_b,
              {.scaling = {.inv_scale = &inv_scale, .found_inf = &found_b}, .model_copy = &model_b});
        check_identical(master_b, master_a, "master");
        check_identical(model_b, model_a, "model copy");
        for (int k = 0; k < c.states; ++k) check_identical(state_b[k], state_a[k], "state");
        CHECK(count_b.nonzero == count_a.nonzero);
        CHECK(count_b.lost == count_a.lost);
      }
      CHECK(found_b.item() == 0.0);
    }
  }
}

TEST_CASE("fused master (CPU): a set found_inf leaves parameter, state and model copy bit-identical") {
  for (const UpdateCase& c : update_cases()) {
    INFO(c.name);
    Tensor master = uniform_in({257}, DType::F32, 2, -2.0, 2.0), model = master.to(DType::F16);
    std::vector<Tensor> state = fresh_state(c.states, master);
    UpdateCount count;
    Tensor found_inf = zeros({});
    c.run(false, 0, master, uniform_in({257}, DType::F16, 3, -1.0, 1.0), state, count,
          {.scaling = {.found_inf = &found_inf}, .model_copy = &model});  // a clean step: the state is not zero
    const Tensor master_before = master.clone(), model_before = model.clone();
    const std::vector<Tensor> state_before = clones(state);
    const UpdateCount count_before = count;
    found_inf = ones({});
    const Tensor overflowed = with_value(uniform_in({257}, DType::F16, 4, -1.0, 1.0), 7, kInf);
    const Tensor half = factor(0.5);
    c.run(false, 1, master, overflowed, state, count,
          {.scaling = {.inv_scale = &half, .found_inf = &found_inf}, .model_copy = &model});
    check_identical(master, master_before, "master");
    check_identical(model, model_before, "model copy");
    for (int k = 0; k < c.states; ++k) check_identical(state[k], state_before[k], "state");
    CHECK(count.nonzero == count_before.nonzero);
  }
  Tensor w = zeros({3}), g = zeros({3}), bad_flag = zeros({2}), short_copy = zeros({2}, {.dtype = DType::F16});
  UpdateCount count;
  check_error([&] { kernels::sgd(w, g, nullptr, {.lr = 0.1}, count, {.scaling = {.found_inf = &bad_flag}}); },
              "kernel sgd");
  check_error([&] { kernels::sgd(w, g, nullptr, {.lr = 0.1}, count, {.scaling = {}, .model_copy = &short_copy}); },
              "kernel sgd");
  check_error([&] { kernels::sgd(w, g, nullptr, {.lr = 0.1}, count, {.scaling = {.inv_scale = &bad_flag}}); },
              "inv_scale");
  Tensor m = zeros({3}), v = zeros({3}), f32_steps = zeros({});
  check_error([&] { kernels::adam(w, g, m, v, f32_steps, {.lr = 0.1}, count); }, "the step count must be one i32");
}

#ifdef MG_WITH_CUDA

namespace {

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

// Runs `steps` updates of one configuration on both backends from the same values; checks the
// parameter, state and model copy bit for bit, and the update counts, after every step. With a
// model dtype, the update is the fused master pass (gradients scaled by 1 / inv_scale, found_inf
// clear); F64 stands for none.
void check_update_on_gpu(const UpdateCase& c, DType param_dtype, DType grad_dtype, std::int64_t numel, int steps,
                         DType model_dtype = DType::F64, double inv_scale = 1.0) {
  INFO(c.name << ": parameter " << dtype_name(param_dtype) << ", gradient " << dtype_name(grad_dtype) << ", " << numel
              << " elements");
  const bool fused_master = model_dtype != DType::F64;
  Tensor p_cpu = uniform_in({numel}, param_dtype, 5, 0.5, 1.5), p_gpu = gpu(p_cpu);
  Tensor model_cpu = fused_master ? p_cpu.to(model_dtype) : Tensor();
  Tensor model_gpu = fused_master ? gpu(model_cpu) : Tensor();
  std::vector<Tensor> s_cpu = fresh_state(c.states, p_cpu), s_gpu;
  for (const Tensor& s : s_cpu) s_gpu.push_back(gpu(s));
  Tensor found_cpu = zeros({}), found_gpu = gpu(found_cpu);
  const Tensor inv_cpu = factor(inv_scale), inv_gpu = gpu(inv_cpu);
  UpdateCount count_cpu, count_gpu;
  kernels::cuda::clear_update_count(Device::cuda());  // start from zero
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    const double range = 1.0 / inv_scale;
    const Tensor g_cpu = uniform_in({numel}, grad_dtype, 50 + step, -range, range), g_gpu = gpu(g_cpu);
    FusedStep fused_cpu{.scaling = {.inv_scale = &inv_cpu}}, fused_gpu{.scaling = {.inv_scale = &inv_gpu}};
    if (fused_master) {
      fused_cpu = {.scaling = {.inv_scale = &inv_cpu, .found_inf = &found_cpu}, .model_copy = &model_cpu};
      fused_gpu = {.scaling = {.inv_scale = &inv_gpu, .found_inf = &found_gpu}, .model_copy = &model_gpu};
    }
    c.run(false, step, p_cpu, g_cpu, s_cpu, count_cpu, fused_cpu);
    c.run(true, step, p_gpu, g_gpu, s_gpu, count_gpu, fused_gpu);
    kernels::cuda::read_update_count(Device::cuda(), count_gpu);
    kernels::cuda::clear_update_count(Device::cuda());
    check_identical(p_gpu, p_cpu, "parameter");
    for (int k = 0; k < c.states; ++k) check_identical(s_gpu[k], s_cpu[k], "state");
    if (fused_master) {
      check_identical(model_gpu, model_cpu, "model copy");
      check_identical(model_gpu, p_cpu.to(model_dtype), "model copy = the master rounded");
    }
    CHECK(count_gpu.nonzero == count_cpu.nonzero);
    CHECK(count_gpu.lost == count_cpu.lost);
  }
  if (param_dtype == DType::F16 && numel > 1000 && std::string(c.name).find("small lr") != std::string::npos)
    CHECK((count_cpu.lost > 0 && count_cpu.lost < count_cpu.nonzero));  // the comparison saw both kinds
}

}  // namespace

TEST_CASE("unscale (GPU): one pass over many tensors of odd sizes and mixed dtypes, bit for bit the CPU's") {
  if (!have_gpu()) return;
  const std::vector<std::pair<DType, DType>> pairs{{DType::F32, DType::F32},   {DType::F16, DType::F32},
                                                   {DType::BF16, DType::F32},  {DType::F16, DType::F16},
                                                   {DType::BF16, DType::BF16}, {DType::F32, DType::F16}};
  const std::vector<std::int64_t> sizes{1, 3, 4, 5, 17, 1000, 4097, 16383, 16384, 16385, 40001};
  for (double value : {0x1p-10, 1.0 / 3.0}) {
    INFO("factor " << value);
    std::vector<Tensor> src_cpu, dst_cpu, src_gpu, dst_gpu;
    for (std::size_t i = 0; i < 150; ++i) {  // more than one launch's table (120 tensors)
      const auto [from, to] = pairs[i % pairs.size()];
      const std::int64_t n = sizes[i % sizes.size()];
      const bool in_place = from == to, misaligned = i % 7 == 3;
      Tensor src = uniform_in({n + misaligned}, from, 7 + i, -2000.0, 2000.0);
      Tensor on_gpu = gpu(src);
      if (misaligned) {  // one element past a pack boundary: the element-by-element path
        src = src.slice(1, n + 1);
        on_gpu = on_gpu.slice(1, n + 1);
      }
      src_cpu.push_back(src);
      src_gpu.push_back(on_gpu);
      dst_cpu.push_back(in_place ? src : Tensor::empty({n}, {.dtype = to}));
      dst_gpu.push_back(in_place ? on_gpu : Tensor::empty({n}, {.dtype = to, .device = Device::cuda()}));
    }
    Tensor found_cpu = zeros({}), found_gpu = gpu(found_cpu);
    kernels::cpu::unscale(src_cpu, dst_cpu, factor(value), found_cpu);
    kernels::cuda::unscale(src_gpu, dst_gpu, factor(value, Device::cuda()), found_gpu);
    for (std::size_t i = 0; i < dst_cpu.size(); ++i)
      check_identical(dst_gpu[i], dst_cpu[i], "tensor " + std::to_string(i));
    CHECK(found_gpu.to(Device::cpu()).item() == 0.0);
  }
}

TEST_CASE("unscale (GPU): inf, NaN and f16 overflow on store set found_inf, which clean passes never clear") {
  if (!have_gpu()) return;
  struct Poison {
    std::size_t tensor, index;
    double value;
  };
  // The big tensor's element 20000 lies in its second chunk; 1e5 / 1 overflows f16 only on store.
  for (const Poison& poison : {Poison{0, 0, kInf}, Poison{1, 20000, kNaN}, Poison{2, 4, -kInf}, Poison{3, 1, 1e5}}) {
    INFO("tensor " << poison.tensor << ", element " << poison.index << " = " << poison.value);
    std::vector<Tensor> src{uniform_in({5}, DType::F16, 1, -1, 1), uniform_in({40000}, DType::F32, 2, -1, 1),
                            uniform_in({9}, DType::BF16, 3, -1, 1), uniform_in({3}, DType::F32, 4, -1, 1)};
    src[poison.tensor] = with_value(src[poison.tensor], poison.index, poison.value);
    std::vector<Tensor> dst_cpu{Tensor::empty({5}), Tensor::empty({40000}), Tensor::empty({9}),
                                Tensor::empty({3}, {.dtype = DType::F16})};
    std::vector<Tensor> src_gpu, dst_gpu;
    for (std::size_t i = 0; i < src.size(); ++i) {
      src_gpu.push_back(gpu(src[i]));
      dst_gpu.push_back(Tensor::empty(dst_cpu[i].shape(), {.dtype = dst_cpu[i].dtype(), .device = Device::cuda()}));
    }
    Tensor found_cpu = zeros({}), found_gpu = gpu(found_cpu);
    kernels::cpu::unscale(src, dst_cpu, factor(1.0), found_cpu);
    kernels::cuda::unscale(src_gpu, dst_gpu, factor(1.0, Device::cuda()), found_gpu);
    CHECK(found_cpu.item() == 1.0);
    CHECK(found_gpu.to(Device::cpu()).item() == 1.0);
    for (std::size_t i = 0; i < src.size(); ++i) check_identical(dst_gpu[i], dst_cpu[i], "tensor " + std::to_string(i));
    // A clean pass afterwards (another optimizer's gradients) accumulates into the flag: it stays 1.
    const std::vector<Tensor> clean{gpu(uniform_in({100}, DType::F32, 9, -1, 1))};
    kernels::cuda::unscale(clean, clean, factor(0.5, Device::cuda()), found_gpu);
    CHECK(found_gpu.to(Device::cpu()).item() == 1.0);
  }
}

TEST_CASE("update_scale (GPU): the CPU's scale and tracker after every step") {
  if (!have_gpu()) return;
  for (const auto& [growth, backoff] : {std::pair{2.0, 0.5}, std::pair{3.7, 0.37}}) {
    Tensor scale_cpu = full({1}, 65536.0), tracker_cpu = zeros({1}, {.dtype = DType::I32});
    Tensor scale_gpu = gpu(scale_cpu), tracker_gpu = gpu(tracker_cpu);
    const std::string script = "ccciccccniccc";  // c: clean, i: inf, n: NaN gradients
    for (std::size_t step = 0; step < script.size(); ++step) {
      INFO("growth " << growth << ", backoff " << backoff << ", step " << step);
      const Tensor found_cpu = full({1}, script[step] == 'c' ? 0.0 : 1.0), found_gpu = gpu(found_cpu);
      Tensor no_streak;
      kernels::update_scale(scale_cpu, tracker_cpu, no_streak, found_cpu,
                            {.growth_factor = growth, .backoff_factor = backoff, .growth_interval = 3});
      kernels::cuda::update_scale(scale_gpu, tracker_gpu, no_streak, found_gpu,
                                  {.growth_factor = growth, .backoff_factor = backoff, .growth_interval = 3});
      check_identical(scale_gpu, scale_cpu, "scale");
      check_identical(tracker_gpu, tracker_cpu, "growth tracker");
    }
  }
  Tensor huge = gpu(full({1}, 0x1p127)), tracker = gpu(zeros({1}, {.dtype = DType::I32}));
  Tensor no_streak;
  kernels::cuda::update_scale(huge, tracker, no_streak, gpu(zeros({1})), {.growth_interval = 1});
  CHECK(huge.to(Device::cpu()).item() == 0x1p127);  // inf would be the next scale: kept instead
  CHECK(tracker.to(Device::cpu()).item() == 0.0);
}

// The limits amp::ScaleMonitor sets (hysteresis 2, a floor, a cap), on both devices, step by step.
TEST_CASE("update_scale with limits (GPU): the CPU's scale, tracker and streak after every step") {
  if (!have_gpu()) return;
  const kernels::ScaleRule rule{.growth_factor = 2.0,
                                .backoff_factor = 0.5,
                                .growth_interval = 2,
                                .hysteresis = 2,
                                .min_scale = 4096.0,
                                .max_scale = 65536.0};
  Tensor scale_cpu = full({1}, 16384.0), tracker_cpu = zeros({1}, {.dtype = DType::I32});
  Tensor streak_cpu = zeros({1}, {.dtype = DType::I32});
  Tensor scale_gpu = gpu(scale_cpu), tracker_gpu = gpu(tracker_cpu), streak_gpu = gpu(streak_cpu);
  const std::string script = "cccccciiciiiiiiii";  // grows to the cap, then backs off every second overflow
  for (std::size_t step = 0; step < script.size(); ++step) {
    INFO("step " << step);
    const Tensor found_cpu = full({1}, script[step] == 'c' ? 0.0 : 1.0), found_gpu = gpu(found_cpu);
    kernels::update_scale(scale_cpu, tracker_cpu, streak_cpu, found_cpu, rule);
    kernels::cuda::update_scale(scale_gpu, tracker_gpu, streak_gpu, found_gpu, rule);
    check_identical(scale_gpu, scale_cpu, "scale");
    check_identical(tracker_gpu, tracker_cpu, "growth tracker");
    check_identical(streak_gpu, streak_cpu, "overflow streak");
  }
  CHECK(scale_cpu.item() == 4096.0);  // the floor, after the backoffs
}

TEST_CASE("sgd, adam and adagrad (GPU): bit for bit the CPU's, lost-update counts included") {
  if (!have_gpu()) return;
  const std::vector<std::pair<DType, DType>> dtypes{{DType::F32, DType::F32},
                                                    {DType::F16, DType::F16},
                                                    {DType::BF16, DType::BF16},
                                                    {DType::F32, DType::F16},
                                                    {DType::F16, DType::F32}};
  for (const UpdateCase& c : update_cases())
    for (const auto& [param_dtype, grad_dtype] : dtypes)
      for (std::int64_t numel : {std::int64_t{5}, std::int64_t{4099}})
        check_update_on_gpu(c, param_dtype, grad_dtype, numel, 3);
  // Several passes of the grid-stride loop (the grid is what the GPU holds at once: on an H100 at
  // most 132 * 8 blocks of 256 threads, 4 elements each, about 2^20 elements a pass), plus a tail.
  check_update_on_gpu(update_cases()[5], DType::F16, DType::F16, 3 * (std::int64_t{1} << 20) + 3, 2);
}

TEST_CASE("fused master (GPU): the CPU's fused pass bit for bit; a set found_inf skips everything") {
  if (!have_gpu()) return;
  for (const UpdateCase& c : update_cases()) {
    for (DType model_dtype : {DType::F16, DType::BF16}) {
      check_update_on_gpu(c, DType::F32, model_dtype, 4099, 3, model_dtype, kInverseScale);
      INFO(c.name << ": skipped step, model in " << dtype_name(model_dtype));
      const Tensor master_before = uniform_in({4099}, DType::F32, 8, -2.0, 2.0);
      const Tensor model_before = master_before.to(model_dtype);
      Tensor master = gpu(master_before), model = gpu(model_before);
      std::vector<Tensor> state_before, state;
      for (int k = 0; k < c.states; ++k) {
        state_before.push_back(uniform_in({4099}, DType::F32, 20 + k, 0.0, 1.0));
        state.push_back(gpu(state_before.back()));
      }
      Tensor found_inf = gpu(ones({}));
      const Tensor overflowed = gpu(with_value(uniform_in({4099}, model_dtype, 9, -1, 1), 11, kNaN));
      UpdateCount count;
      kernels::cuda::clear_update_count(Device::cuda());
      const Tensor half = factor(0.5, Device::cuda());
      c.run(true, 1, master, overflowed, state, count,
            {.scaling = {.inv_scale = &half, .found_inf = &found_inf}, .model_copy = &model});
      kernels::cuda::read_update_count(Device::cuda(), count);
      check_identical(master, master_before, "master");
      check_identical(model, model_before, "model copy");
      for (int k = 0; k < c.states; ++k) check_identical(state[k], state_before[k], "state");
      CHECK(count.nonzero == 0);
    }
  }
}

TEST_CASE("stochastic and Kahan update rounding, f32 state (GPU): the CPU's bits, compensation included") {
  if (!have_gpu()) return;
  const std::vector<UpdateCase> cases = update_cases();
  for (const UpdateCase& c : {cases[1], cases[2], cases[6]})  // small-lr sgd, momentum, adamw
    for (DType dtype : {DType::F16, DType::BF16})
      for (kernels::UpdateRounding rounding : {kernels::UpdateRounding::Stochastic, kernels::UpdateRounding::Kahan})
        for (std::int64_t numel : {std::int64_t{7}, std::int64_t{4099}}) {
          const DType state_dtype = numel == 7 && c.states > 0 ? DType::F32 : dtype;  // Adam's state_dtype
          INFO(c.name << ", " << dtype_name(dtype) << ", rounding " << static_cast<int>(rounding) << ", " << numel
                      << ", state " << dtype_name(state_dtype));
          Tensor p_cpu = uniform_in({numel}, dtype, 5, 0.5, 1.5), p_gpu = gpu(p_cpu);
          Tensor c_cpu = zeros({numel}, {.dtype = dtype}), c_gpu = gpu(c_cpu);
          std::vector<Tensor> s_cpu = fresh_state(c.states, p_cpu.to(state_dtype)), s_gpu;
          for (const Tensor& s : s_cpu) s_gpu.push_back(gpu(s));
          UpdateCount count_cpu, count_gpu;
          for (int step = 0; step < 3; ++step) {
            const Tensor g_cpu = uniform_in({numel}, dtype, 70 + step, -1.0, 1.0), g_gpu = gpu(g_cpu);
            const stochastic::RoundingStream stream{.seed = 9, .step = static_cast<std::uint32_t>(step), .tensor = 2};
            const bool kahan = rounding == kernels::UpdateRounding::Kahan;
            c.run(false, step, p_cpu, g_cpu, s_cpu, count_cpu,
                  {.scaling = {}, .rounding = rounding, .stream = stream, .compensation = kahan ? &c_cpu : nullptr});
            c.run(true, step, p_gpu, g_gpu, s_gpu, count_gpu,
                  {.scaling = {}, .rounding = rounding, .stream = stream, .compensation = kahan ? &c_gpu : nullptr});
            check_identical(p_gpu, p_cpu, "parameter");
            check_identical(c_gpu, c_cpu, "compensation");
            for (int k = 0; k < c.states; ++k) check_identical(s_gpu[k], s_cpu[k], "state");
          }
        }
}

#endif  // MG_WITH_CUDA

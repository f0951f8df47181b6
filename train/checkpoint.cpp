#include "train/checkpoint.h"

#include <cmath>

#include "autograd/tape.h"
#include "core/factory.h"
#include "core/generator.h"
#include "data/safetensors.h"

namespace mg::train {

namespace {

constexpr const char* kFormat = "mixgrad-checkpoint";
constexpr const char* kVersion = "1";

// (seed, offset) as four i32 words, since a 64-bit seed does not fit a double exactly.
Tensor generator_state(const Generator& generator) {
  Tensor words = Tensor::empty({4}, {.dtype = DType::I32});
  std::int32_t* w = words.data<std::int32_t>();
  const std::uint64_t parts[2] = {generator.seed(), generator.offset()};
  for (int i = 0; i < 2; ++i) {
    w[2 * i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(parts[i]));
    w[2 * i + 1] = static_cast<std::int32_t>(static_cast<std::uint32_t>(parts[i] >> 32));
  }
  return words;
}

void set_generator_state(Generator& generator, const Tensor& words) {
  const std::int32_t* w = words.data<std::int32_t>();
  auto word64 = [&](int i) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(w[2 * i])) |
           static_cast<std::uint64_t>(static_cast<std::uint32_t>(w[2 * i + 1])) << 32;
  };
  generator.set_state(word64(0), word64(1));
}

StateDict copy_of(const StateDict& state) {
  NoGradGuard no_grad;
  StateDict copy;
  for (const auto& [key, value] : state) copy[key] = value.detach().clone();
  return copy;
}

// The first parameter or optimizer entry holding NaN or inf, as "name (NaN)"; empty when all are finite.
// Buffers are not looked at: an FP8 recipe's amax history may hold the NaN of a skipped step.
std::string first_non_finite(const StateDict& state, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const Tensor& value = state.at(name);
    if (!is_floating(value.dtype()) || is_coded(value.dtype())) continue;
    const Tensor wide = value.to(DType::F64);
    const double* x = wide.data<double>();
    for (std::int64_t i = 0; i < wide.numel(); ++i)
      if (!std::isfinite(x[i])) return fmt::format("{} ({} at element {})", name, x[i], i);
  }
  return {};
}

// A monitor watches the scaler it is given with: its state dict holds that scaler's.
void check_monitor(const TrainingObjects& objects, const std::string& path) {
  MG_CHECK(!objects.monitor || &objects.monitor->scaler() == objects.scaler,
           "train: checkpoint {}: the ScaleMonitor given watches another GradScaler than the one given; pass the "
           "scaler it watches (or no monitor)",
           path);
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainingObjects& objects, const StateDict& extra,
                     const std::map<std::string, std::string>& metadata) {
  MG_CHECK(objects.model != nullptr, "train::save_checkpoint: {}: no model given", path);
  StateDict state;
  state_insert(state, "model.", objects.model->state_dict());
  if (objects.optimizer) state_insert(state, "optimizer.", objects.optimizer->state_dict());
  check_monitor(objects, path);
  // One state dict for the scaler and its monitor: the monitor's holds the scaler's (amp/scale_state.h).
  if (objects.monitor)
    state_insert(state, "scaler.", objects.monitor->state_dict());
  else if (objects.scaler)
    state_insert(state, "scaler.", objects.scaler->state_dict());
  state["rng.default"] = generator_state(default_generator());
  state_insert(state, "extra.", extra);
  for (auto& [key, value] : state)
    if (!value.device().is_cpu()) value = value.to(Device::cpu());  // one copy per tensor, written from the host
  std::vector<std::string> checked;
  for (const auto& [name, parameter] : objects.model->named_parameters()) checked.push_back("model." + name);
  for (const auto& [key, value] : state)
    if (key.starts_with("optimizer.")) checked.push_back(key);
  const std::string non_finite = first_non_finite(state, checked);
  MG_CHECK(non_finite.empty(),
           "train::save_checkpoint: {}: not written, since {} is not finite: the run diverged and its state is not "
           "worth keeping; the file there (if any) is unchanged",
           path, non_finite);
  std::map<std::string, std::string> meta = metadata;
  meta.insert_or_assign("format", std::string(kFormat));
  meta.insert_or_assign("version", std::string(kVersion));
  data::save_safetensors(path, state, meta);
}

LoadedCheckpoint load_checkpoint(const std::string& path, const TrainingObjects& objects,
                                 const std::map<std::string, std::string>& required) {
  MG_CHECK(objects.model != nullptr, "train::load_checkpoint: {}: no model given", path);
  return load_checkpoint(path, data::load_safetensors(path), objects, required);
}

LoadedCheckpoint load_checkpoint(const std::string& path, data::SafetensorsFile file, const TrainingObjects& objects,
                                 const std::map<std::string, std::string>& required) {
  const char* op = "train::load_checkpoint";
  MG_CHECK(objects.model != nullptr, "{}: {}: no model given", op, path);
  auto format = file.metadata.find("format");
  MG_CHECK(format != file.metadata.end() && format->second == kFormat,
           "{}: {} is a safetensors file but not a mixgrad checkpoint (no metadata format = {}); to read its "
           "tensors use data::load_safetensors",
           op, path, kFormat);
  MG_CHECK(file.metadata["version"] == kVersion, "{}: {} is checkpoint version '{}'; this build reads version {}", op,
           path, file.metadata["version"], kVersion);
  for (const auto& [key, value] : required)
    MG_CHECK(file.metadata[key] == value, "{}: {} was saved with {} '{}', not '{}'", op, path, key, file.metadata[key],
             value);
  const StateDict model_state = state_subset(file.tensors, "model.");
  const StateDict optimizer_state = state_subset(file.tensors, "optimizer.");
  check_monitor(objects, path);
  // The scaler's state, with its monitor's counters when it was saved with a monitor.
  const StateDict scale_state = state_subset(file.tensors, "scaler.");
  const bool has_counters = scale_state.contains("steps");
  StateDict scaler_state;  // without the counters
  for (const auto& [key, value] : scale_state)
    if (!amp::scale_counter_keys().contains(key)) scaler_state.emplace(key, value);
  auto rng = file.tensors.find("rng.default");
  MG_CHECK(rng != file.tensors.end() && rng->second.dtype() == DType::I32 && rng->second.numel() == 4,
           "{}: {}: the entry rng.default (four i32 words) is missing or malformed", op, path);
  MG_CHECK(!objects.optimizer || !optimizer_state.empty(),
           "{}: {} holds no optimizer state; it was saved without "
           "one (load it with a null optimizer to restore the model alone)",
           op, path);
  MG_CHECK(!objects.scaler || !scaler_state.empty(), "{}: {} holds no GradScaler state; it was saved without one", op,
           path);

  // Each load_state_dict checks before it writes; if a later part is refused, the model (and the
  // optimizer, harmlessly when it was the one refused) are put back, so a file that does not fit
  // changes nothing. A module's state_dict holds its live tensors, so the model's is copied; an
  // optimizer's state_dict is already a snapshot.
  // A monitor is restored from the file's counters where it has them; a file saved without a monitor
  // leaves it as it is (its counters start where this run does).
  const StateDict model_backup = copy_of(objects.model->state_dict());
  const StateDict optimizer_backup = objects.optimizer ? objects.optimizer->state_dict() : StateDict{};
  const StateDict scaler_backup = objects.scaler ? objects.scaler->state_dict() : StateDict{};
  objects.model->load_state_dict(model_state);
  try {
    if (objects.optimizer) objects.optimizer->load_state_dict(optimizer_state);
    if (objects.monitor && has_counters)
      objects.monitor->load_state_dict(scale_state);
    else if (objects.scaler)
      objects.scaler->load_state_dict(scaler_state);
  } catch (...) {
    objects.model->load_state_dict(model_backup);
    if (objects.optimizer) objects.optimizer->load_state_dict(optimizer_backup);
    if (objects.scaler) objects.scaler->load_state_dict(scaler_backup);
    throw;
  }
  set_generator_state(default_generator(), rng->second);
  return {state_subset(file.tensors, "extra."), file.metadata, path};
}

}  // namespace mg::train

#include "autograd/autocast.h"

#include <map>
#include <tuple>
#include <utility>

#include "autograd/ops.h"

namespace mg {

namespace {

struct CacheEntry {
  Tensor source;  // kept alive so its id cannot be reused while the entry exists
  std::weak_ptr<Storage> storage;  // the data the cast was made from (weak: no address reuse)...
  std::uint64_t version;  // ...and its version then
  std::uint64_t generation;  // the tape the cast's node lives on
  Tensor cast;
};
// key: source id, target dtype, grad mode at the time of the cast
using CacheKey = std::tuple<std::uint64_t, DType, bool>;

struct State {
  bool enabled = false;
  DType dtype = DType::F16;
  DType last_region = DType::F16;  // the dtype of the most recent enabled region
  int depth = 0;  // guards alive, enabled or not; the outermost one clears the cache
  std::map<CacheKey, CacheEntry> cache;
  CastCacheStats stats;
};
thread_local State state;

bool castable(DType dtype) { return dtype == DType::F32 || is_low_precision(dtype); }

// A parameter (an f32 leaf that requires grad) cast to the region's dtype, once per region.
Tensor cached_cast(const Tensor& x, DType dtype) {
  const bool grad_mode = grad_enabled();
  CacheKey key{x.id(), dtype, grad_mode};
  auto found = state.cache.find(key);
  if (found != state.cache.end()) {
    const CacheEntry& entry = found->second;
    const bool same_data = entry.storage.lock() == x.impl().storage && entry.version == x.impl().storage->version();
    const bool same_tape = !grad_mode || entry.generation == tape_generation();
    if (same_data && same_tape) {
      ++state.stats.hits;
      return entry.cast;
    }
  }
  ++state.stats.misses;
  Tensor cast_x = cast(x, dtype);
  state.cache[key] = {x, x.impl().storage, x.impl().storage->version(), tape_generation(), cast_x};
  return cast_x;
}

Tensor cast_to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  const bool parameter = x.dtype() == DType::F32 && is_low_precision(dtype) && x.is_leaf() && x.requires_grad();
  return parameter ? cached_cast(x, dtype) : cast(x, dtype);
}

}  // namespace

Autocast::Autocast(DType dtype, bool enabled, std::optional<Fp8Options> fp8)
    : previous_enabled_(state.enabled), previous_dtype_(state.dtype), fp8_(std::move(fp8)) {
  MG_CHECK(!enabled || is_low_precision(dtype),
           "mg::Autocast: the region's dtype must be f16 or bf16, got {}; for f32 training use no region "
           "(or Autocast(dtype, /*enabled=*/false))",
           dtype);
  state.enabled = enabled;
  if (enabled) state.dtype = state.last_region = dtype;
  ++state.depth;
  previous_fp8_ = detail::exchange_fp8_region(enabled && fp8_ ? &*fp8_ : nullptr);
}

Autocast::~Autocast() {
  detail::exchange_fp8_region(previous_fp8_);
  state.enabled = previous_enabled_;
  state.dtype = previous_dtype_;
  if (--state.depth == 0) state.cache.clear();
}

bool autocast_enabled() { return state.enabled; }
DType autocast_dtype() { return state.dtype; }
DType last_autocast_dtype() { return state.last_region; }

namespace {

// The dtype a region casts an op's castable inputs to, after checking them (no banned op, no f16 and
// bf16 mixed). Only called inside an enabled region, for a policy other than InputDtype.
DType cast_target(CastPolicy policy, const char* op_name, const std::vector<Tensor>& inputs) {
  using enum CastPolicy;
  MG_CHECK(policy != Banned,
           "{} is banned under mg::Autocast. (If its inputs are known to be safe, run it inside "
           "mg::Autocast(dtype, /*enabled=*/false).)",
           op_name);
  const DType region = state.dtype;
  DType widest = region;
  for (const Tensor& x : inputs) {
    if (!x.defined() || !castable(x.dtype())) continue;
    MG_CHECK(x.dtype() == DType::F32 || x.dtype() == region,
             "{} under mg::Autocast({}): an input is {}; f16 and bf16 do not mix. Cast it with mg::cast, or "
             "use a {} region",
             op_name, region, x.dtype(), x.dtype());
    if (x.dtype() == DType::F32) widest = DType::F32;
  }
  if (policy == Float32) return DType::F32;
  if (policy == Promote) return widest;
  return region;
}

void check_not_banned(Op op) {
  MG_CHECK(cast_policy(op) != CastPolicy::Banned,
           "{} is banned under mg::Autocast: {}. (If its inputs are "
           "known to be safe, run it inside mg::Autocast(dtype, /*enabled=*/false).)",
           op, op_row(op).reason);
}

}  // namespace

void autocast_inputs(CastPolicy policy, const char* op_name, std::vector<Tensor>& inputs) {
  if (!state.enabled || policy == CastPolicy::InputDtype) return;
  const DType target = cast_target(policy, op_name, inputs);
  for (Tensor& x : inputs) {
    if (x.defined() && castable(x.dtype())) x = cast_to(x, target);
  }
}

void autocast_inputs(Op op, std::vector<Tensor>& inputs) {
  if (!state.enabled) return;
  check_not_banned(op);
  autocast_inputs(cast_policy(op), qualified_name(op), inputs);
}

DType autocast_input_dtype(Op op, const Tensor& x) {
  if (!state.enabled || !castable(x.dtype()) || cast_policy(op) == CastPolicy::InputDtype) return x.dtype();
  check_not_banned(op);
  return cast_target(cast_policy(op), qualified_name(op), {x});
}

Tensor autocast_input(Op op, const Tensor& x) {
  if (!state.enabled) return x;
  std::vector<Tensor> inputs{x};
  autocast_inputs(op, inputs);
  return inputs[0];
}

CastCacheStats cast_cache_stats() {
  CastCacheStats stats = state.stats;
  stats.entries = state.cache.size();
  return stats;
}

}  // namespace mg

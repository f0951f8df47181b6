#include "optim/adamw.h"

namespace mg::optim {

namespace {

AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .master_weights = o.master_weights,
          .update_rounding = o.update_rounding,
          .rounding_seed = o.rounding_seed,
          .state_dtype = o.state_dtype};
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> parameters, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{{.parameters = std::move(parameters)}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), as_adam(options), true, "optim::AdamW") {}

}  // namespace mg::optim

#include "nn/conv.h"

#include <cmath>

#include "core/factory.h"

namespace mg::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, Conv2dOptions options,
               bool with_bias, Generator& generator)
    : options_(options) {
  MG_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && options.stride > 0 && options.padding >= 0,
           "nn::Conv2d: needs positive channels, kernel and stride and padding >= 0; got in {}, out {}, kernel {}, "
           "stride {}, padding {}",
           in_channels, out_channels, kernel, options.stride, options.padding);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel * kernel));
  weight = register_parameter("weight", uniform({out_channels, in_channels, kernel, kernel}, -bound, bound, generator));
  if (with_bias) bias = register_parameter("bias", uniform({out_channels}, -bound, bound, generator));
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options_); }

std::string Conv2d::type_name() const {
  return fmt::format("Conv2d({}, {}, kernel={}, stride={}, padding={}{})", weight.size(1), weight.size(0),
                     weight.size(2), options_.stride, options_.padding, bias.defined() ? "" : ", bias=false");
}

std::string MaxPool2d::type_name() const {
  return fmt::format("MaxPool2d(kernel={}, stride={}, padding={})", options_.kernel,
                     options_.stride == 0 ? options_.kernel : options_.stride, options_.padding);
}

std::string AvgPool2d::type_name() const {
  return fmt::format("AvgPool2d(kernel={}, stride={}, padding={})", options_.kernel,
                     options_.stride == 0 ? options_.kernel : options_.stride, options_.padding);
}

}  // namespace mg::nn

#include <tapegrad/layers/flatten.h>

#include <algorithm>

#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad::nn {

Tensor Flatten::forward(const Tensor& input) {
  input.check_defined("Flatten");
  const std::int64_t ndim = std::max<std::int64_t>(input.dim(), 1);
  const std::int64_t start = start_dim_ < 0 ? start_dim_ + ndim : start_dim_;
  const std::int64_t end = end_dim_ < 0 ? end_dim_ + ndim : end_dim_;
  if (start < 0 || start >= ndim || end < 0 || end >= ndim || start > end)
    fail("Flatten: cannot flatten dims {}..{} of an input of shape {}", start_dim_, end_dim_,
         shape_string(input.shape()));
  return flatten(input, start_dim_, end_dim_);
}

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_); }

std::shared_ptr<Module> Flatten::clone() const { return clone_into(std::make_shared<Flatten>(start_dim_, end_dim_)); }

}  // namespace tapegrad::nn

#pragma once
/// nn::Flatten: merges dims start_dim..end_dim into one (default: everything but the batch dim).
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// [N, C, H, W] -> [N, C*H*W] with the defaults; shares storage with the input (a reshape).
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::int64_t start_dim_, end_dim_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END

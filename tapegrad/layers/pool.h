#pragma once
/// Pooling layers over [N, C, H, W]: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d. They hold no parameters.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/pool.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for MaxPool2d (PyTorch's names and defaults; stride defaults to kernel_size).
struct MaxPool2dOptions {
  IntPair kernel_size = 1;
  std::optional<IntPair> stride = std::nullopt;
  IntPair padding = 0;
  IntPair dilation = 1;
  bool ceil_mode = false;
  /// PyTorch's return_indices: forward() also keeps the indices of its output, for last_indices().
  /// forward_with_indices() returns them whatever this says.
  bool return_indices = false;
  MaxPool2dOptions& with_stride(IntPair s) { stride = s; return *this; }
  MaxPool2dOptions& with_padding(IntPair p) { padding = p; return *this; }
  MaxPool2dOptions& with_dilation(IntPair d) { dilation = d; return *this; }
  MaxPool2dOptions& with_ceil_mode(bool on) { ceil_mode = on; return *this; }
  MaxPool2dOptions& with_return_indices(bool on) { return_indices = on; return *this; }
};

/// The maximum of each window; the gradient goes to the first maximum.
/// Note: Module::forward returns one tensor, so PyTorch's MaxPool2d(return_indices=True), which returns a
/// pair, is spelled forward_with_indices() here (libtorch's name); with the return_indices option set,
/// forward() also keeps the indices of its last output for last_indices() (e.g. inside a Sequential).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(MaxPool2dOptions options);
  explicit MaxPool2d(IntPair kernel_size) : MaxPool2d(MaxPool2dOptions{kernel_size}) {}
  Tensor forward(const Tensor& input) override;
  /// The output and the int64 index of each output element's maximum within its input H x W plane (PyTorch's
  /// flattened-per-plane convention: h * W + w, in the unpadded input), the output's shape.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& input);
  /// With return_indices: the indices of the last forward()'s output (undefined before the first); without,
  /// always undefined.
  const Tensor& last_indices() const { return last_indices_; }
  /// "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false".
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const MaxPool2dOptions& options() const { return options_; }

 private:
  MaxPool2dOptions options_;
  Tensor last_indices_;
};

/// Options for AvgPool2d (PyTorch's names and defaults; stride defaults to kernel_size).
struct AvgPool2dOptions {
  IntPair kernel_size = 1;
  std::optional<IntPair> stride = std::nullopt;
  IntPair padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<std::int64_t> divisor_override = std::nullopt;
  AvgPool2dOptions& with_stride(IntPair s) { stride = s; return *this; }
  AvgPool2dOptions& with_padding(IntPair p) { padding = p; return *this; }
  AvgPool2dOptions& with_ceil_mode(bool on) { ceil_mode = on; return *this; }
  AvgPool2dOptions& with_count_include_pad(bool on) { count_include_pad = on; return *this; }
  AvgPool2dOptions& with_divisor_override(std::int64_t d) { divisor_override = d; return *this; }
};

/// The mean of each window.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(AvgPool2dOptions options);
  explicit AvgPool2d(IntPair kernel_size) : AvgPool2d(AvgPool2dOptions{kernel_size}) {}
  Tensor forward(const Tensor& input) override;
  /// "kernel_size=2, stride=2, padding=0".
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const AvgPool2dOptions& options() const { return options_; }

 private:
  AvgPool2dOptions options_;
};

/// Options for AdaptiveAvgPool2d: the output's H x W.
struct AdaptiveAvgPool2dOptions {
  IntPair output_size = 1;
};

/// The mean over windows sized to produce a fixed output_size, whatever the input's H x W.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions options);
  explicit AdaptiveAvgPool2d(IntPair output_size) : AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions{output_size}) {}
  Tensor forward(const Tensor& input) override;
  /// "output_size=(5, 7)", or "output_size=5" when both extents agree.
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const AdaptiveAvgPool2dOptions& options() const { return options_; }

 private:
  AdaptiveAvgPool2dOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END

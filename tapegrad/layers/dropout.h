#pragma once
/// nn::Dropout: inverted dropout in training mode, the identity in eval mode, with its own random stream.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for Dropout: drop probability p (PyTorch's default 0.5) and, optionally, the seed of the layer's
/// random stream (by default one draw from the default generator at construction, so manual_seed decides).
struct DropoutOptions {
  double p = 0.5;
  std::optional<std::uint64_t> seed;
  DropoutOptions& with_p(double value) {
    p = value;
    return *this;
  }
  DropoutOptions& with_seed(std::uint64_t value) {
    seed = value;
    return *this;
  }
};

/// Note: each Dropout has its own random stream: the k-th training-mode forward draws its mask from a
/// generator seeded with a mix of (seed, k). The seed is drawn from the default generator when the layer is
/// built (unless given in the options), so manual_seed(s) before building a model decides every mask, and two
/// layers of one model draw different masks. Seed and k are the persistent buffers mask_seed and
/// num_masks_drawn (0-dim int64; the seed's 64 bits stored as int64), so the stream is part of state(): a
/// checkpoint loaded into a fresh model resumes the same masks, and clone() continues the same stream. A
/// saved engine state would be 2.5 KB of text per layer; the two counters are portable integers.
class Dropout : public Module {
 public:
  explicit Dropout(DropoutOptions options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions{}.with_p(p)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return options_.p; }
  /// The seed of the layer's random stream (the mask_seed buffer).
  std::uint64_t seed() const;
  /// The seed of the layer's random stream, as int64 bits.
  Tensor mask_seed;
  /// Training-mode forwards so far: the position in the layer's random stream.
  Tensor num_masks_drawn;

 protected:
  /// For a subclass (Dropout2d): the same stream and buffers under another module name.
  Dropout(DropoutOptions options, const char* name);
  /// Calls `op` with the generator of the next training-mode mask, then advances the stream (only when `op`
  /// returned: a rejected input does not move it).
  Tensor with_next_generator(const std::function<Tensor(Generator&)>& op);
  const DropoutOptions& dropout_options() const { return options_; }
  /// Version 2 added num_masks_drawn (version 1 did not save the stream's position); version 3 added
  /// mask_seed (until then every layer's seed was the option's, 5489 unless given).
  int state_version() const override { return 3; }
  /// A version-1 state gets num_masks_drawn = 0: the stream starts again from the seed, as it did then.
  /// A state before version 3 gets this layer's own seed: the one its options gave, as it was then.
  void upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const override;

 private:
  DropoutOptions options_;
};

/// nn::Dropout2d: channel-wise dropout (dropout2d) over [N, C, H, W] or [C, H, W]: in training mode each feature
/// map is zeroed as a whole with probability p and the kept ones scaled by 1 / (1 - p); the identity in eval mode.
/// Its random stream and state (mask_seed, num_masks_drawn) work exactly as Dropout's.
class Dropout2d : public Dropout {
 public:
  explicit Dropout2d(DropoutOptions options = {});
  explicit Dropout2d(double p) : Dropout2d(DropoutOptions{}.with_p(p)) {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END

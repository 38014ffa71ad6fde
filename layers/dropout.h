#pragma once
/// nn::Dropout: inverted dropout in training mode, the identity in eval mode, with its own random stream.
#include <cstdint>
#include <memory>
#include <string>

#include "framework/module.h"

namespace tapegrad::nn {

/// Options for Dropout: drop probability p (PyTorch's default 0.5) and the seed of the layer's random stream.
struct DropoutOptions {
  double p = 0.5;
  std::uint64_t seed = 5489u;
  DropoutOptions& with_p(double value) {
    p = value;
    return *this;
  }
  DropoutOptions& with_seed(std::uint64_t value) {
    seed = value;
    return *this;
  }
};

/// Note: each Dropout has its own random stream, independent of every other one (initialisation, data
/// shuffling): the k-th training-mode forward draws its mask from a generator seeded with a mix of (seed, k).
/// k is the persistent buffer num_masks_drawn (0-dim int64), so the stream's position is part of state():
/// a checkpoint resumes the same masks, and clone() continues the same stream. A saved engine state would
/// be 2.5 KB of standard-library-specific text per layer; the counter is one portable integer.
class Dropout : public Module {
 public:
  explicit Dropout(DropoutOptions options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions{}.with_p(p)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return options_.p; }
  std::uint64_t seed() const { return options_.seed; }
  /// Training-mode forwards so far: the position in the layer's random stream.
  Tensor num_masks_drawn;

 protected:
  /// Version 2 added num_masks_drawn (version 1 did not save the stream's position).
  int state_version() const override { return 2; }
  /// A version-1 state gets num_masks_drawn = 0: the stream starts again from the seed, as it did then.
  void upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const override;

 private:
  DropoutOptions options_;
};

}  // namespace tapegrad::nn

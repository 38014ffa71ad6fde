#pragma once
// What the committed format-version-1 files in tests/data/ hold, shared by the program that wrote them
// (make_v1_checkpoint.cpp) and the test that loads them (tests/test_checkpoint_compat.cpp).
//
// Note: every value is a closed formula of (entry number, element index), so the test checks each loaded
// value bit-exactly without regenerating anything. Entry numbers come from the fixed name list below, not
// from a model's state() order, so a layer that gains a state entry later (through a state-version upgrade)
// does not shift the numbers of the entries the old file holds.
#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include <tapegrad/tapegrad.h>

namespace tapegrad::v1_checkpoint {

/// The architecture: one of each layer whose state a checkpoint must carry. It is never run forward, so
/// the shapes need not chain.
inline std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3),
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{2, 3, 3}), std::make_shared<nn::BatchNorm2d>(3),
      std::make_shared<nn::LayerNorm>(Shape{3})});
}

struct EntrySpec {
  std::string_view name;
  bool parameter;
};

/// The model's state entries as the format-version-1 files list them (Module::state() order at that time).
inline constexpr std::array<EntrySpec, 16> kEntries{{
    {"0.weight", true},
    {"0.bias", true},
    {"1.weight", true},
    {"1.bias", true},
    {"2.weight", true},
    {"2.bias", true},
    {"3.weight", true},
    {"3.bias", true},
    {"4.weight", true},
    {"4.bias", true},
    {"1.running_mean", false},
    {"1.running_var", false},
    {"1.num_batches_tracked", false},
    {"3.running_mean", false},
    {"3.running_var", false},
    {"3.num_batches_tracked", false},
}};

/// A value in [-0.5, 0.5) that is not a short decimal (so the text archive's float round trip is exercised).
/// Note: one correctly rounded division and one exact subtraction in double, then one rounding to float:
/// the same bits on every IEEE machine.
inline double wave(std::int64_t entry, std::int64_t element) {
  return static_cast<double>((entry * 131 + element * 17 + 7) % 1009) / 1009.0 - 0.5;
}

/// Element `element` of model entry `entry` (kEntries order): running_var is kept positive, a
/// num_batches_tracked counter is 1000 + 17 * entry, everything else is wave() rounded to float32.
inline double model_value(std::size_t entry, std::int64_t element) {
  const std::string_view name = kEntries[entry].name;
  const auto e = static_cast<std::int64_t>(entry);
  if (name.ends_with("num_batches_tracked")) return static_cast<double>(1000 + 17 * e);
  if (name.ends_with("running_var")) return static_cast<double>(static_cast<float>(wave(e, element) + 1.0));
  return static_cast<double>(static_cast<float>(wave(e, element)));
}

/// The run file's optimizer: Adam(lr 0.01) over model.parameters(), whose per-parameter state was set to
/// step = 3, exp_avg = wave(100 + p, k), exp_avg_sq = wave(200 + p, k) + 0.5 (all float32) for parameter p.
inline constexpr double kAdamLr = 0.01;
inline constexpr std::int64_t kAdamStep = 3;
inline double exp_avg_value(std::size_t param, std::int64_t element) {
  return static_cast<double>(static_cast<float>(wave(100 + static_cast<std::int64_t>(param), element)));
}
inline double exp_avg_sq_value(std::size_t param, std::int64_t element) {
  return static_cast<double>(static_cast<float>(wave(200 + static_cast<std::int64_t>(param), element) + 0.5));
}

/// The run file's scheduler: StepLR(step_size 3, gamma 0.5) stepped 5 times, so the lr is 0.01 * 0.5.
inline constexpr std::int64_t kStepSize = 3;
inline constexpr double kGamma = 0.5;
inline constexpr std::int64_t kSchedulerSteps = 5;

/// The run file's progress and its "default" generator: Generator(kSeed) after kDraws engine() draws.
inline constexpr std::int64_t kEpoch = 2;
inline constexpr std::int64_t kStep = 5;
inline constexpr std::uint64_t kSeed = 1234;
inline constexpr int kDraws = 10;

}  // namespace tapegrad::v1_checkpoint

// Writes the committed format-version-1 files of tests/data/ (see v1_checkpoint_spec.h for their contents):
//   v1_model.binary.tg, v1_model.text.tg  save(model) in each archive kind
//   v1_run.binary.tg, v1_run.text.tg      a Checkpoint: model, Adam state, StepLR state, progress, a
//                                         generator state and metadata
// Build and run (a manual target, never part of `all`):
//   cmake --build build --target make_v1_checkpoint && build/tools/make_v1_checkpoint tests/data
// Note: the committed files are meant to stay OLD. Do not regenerate them when the format changes; they are
// what tests/test_checkpoint_compat.cpp loads through the upgrade path. This program documents how they
// were made (at format version 1) and reproduces them only while the format is still version 1.
#include <cstdio>
#include <string>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>
#include "v1_checkpoint_spec.h"

using namespace tapegrad;
namespace spec = tapegrad::v1_checkpoint;

namespace {

/// A tensor shaped and typed like `like` whose element k is value(k) (exact: every value is a float32 or an
/// integer, both exactly doubles).
template <class F>
Tensor formula_tensor(const Tensor& like, F value) {
  std::vector<double> values(static_cast<std::size_t>(like.numel()));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = value(static_cast<std::int64_t>(k));
  return from_vector(values, like.shape(), TensorOptions{}.with_dtype(DType::Float64)).to(like.dtype());
}

void set_model_values(nn::Module& model) {
  const auto state = model.state();
  if (state.size() != spec::kEntries.size()) fail("make_v1_checkpoint: the model has {} state entries", state.size());
  NoGradGuard no_grad;
  for (std::size_t e = 0; e < state.size(); ++e) {
    if (state[e].first != spec::kEntries[e].name)
      fail("make_v1_checkpoint: entry {} is {}, the spec says {}", e, state[e].first, spec::kEntries[e].name);
    Tensor target = state[e].second;
    target.copy_(formula_tensor(target, [&](std::int64_t k) { return spec::model_value(e, k); }));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_v1_checkpoint DIR\n");
    return 2;
  }
  if (kCheckpointFormatVersion != 1) fail("make_v1_checkpoint: this build writes format version {}, not 1", kCheckpointFormatVersion);
  const std::string dir = argv[1];
  auto model = spec::make_model();
  set_model_values(*model);
  save(*model, dir + "/v1_model.binary.tg", ArchiveKind::Binary);
  save(*model, dir + "/v1_model.text.tg", ArchiveKind::Text);

  optim::Adam adam(model->parameters(), optim::AdamOptions{.lr = spec::kAdamLr});
  optim::StepLR schedule(adam, spec::kStepSize, spec::kGamma);
  nn::NamedTensors optimizer_state = adam.state();  // hyperparameters and counts; per-parameter state follows
  const auto params = model->parameters();
  for (std::size_t p = 0; p < params.size(); ++p) {
    optimizer_state.emplace_back(fmt::format("group0.param{}.step", p),
                                 full({}, static_cast<double>(spec::kAdamStep), TensorOptions{}.with_dtype(DType::Int64)));
    optimizer_state.emplace_back(fmt::format("group0.param{}.exp_avg", p),
                                 formula_tensor(params[p], [&](std::int64_t k) { return spec::exp_avg_value(p, k); }));
    optimizer_state.emplace_back(fmt::format("group0.param{}.exp_avg_sq", p),
                                 formula_tensor(params[p], [&](std::int64_t k) { return spec::exp_avg_sq_value(p, k); }));
  }
  adam.load_state(optimizer_state);
  for (std::int64_t i = 0; i < spec::kSchedulerSteps; ++i) schedule.step();

  Checkpoint run;
  run.set_model(*model);
  run.optimizer = Checkpoint::from_named(adam.state(), EntryKind::Optimizer);
  run.scheduler = Checkpoint::from_named(schedule.state(), EntryKind::Scheduler);
  run.epoch = spec::kEpoch;
  run.step = spec::kStep;
  Generator generator(spec::kSeed);
  for (int i = 0; i < spec::kDraws; ++i) (void)generator.engine()();
  run.rng_states["default"] = generator.state();
  run.metadata["made_by"] = "tests/data/make_v1_checkpoint.cpp";
  run.metadata["note"] = "format version 1 reference file\nkeep it: tests/test_checkpoint_compat.cpp loads it";
  save_checkpoint(run, dir + "/v1_run.binary.tg", ArchiveKind::Binary);
  save_checkpoint(run, dir + "/v1_run.text.tg", ArchiveKind::Text);
  std::printf("wrote %s/v1_model.{binary,text}.tg and %s/v1_run.{binary,text}.tg\n", dir.c_str(), dir.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "make_v1_checkpoint: %s\n", e.what());
  return 1;
}

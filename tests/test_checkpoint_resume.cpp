// Resuming a training run from a Checkpoint file repeats the uninterrupted run bit for bit: a model with
// Conv2d, Linear, BatchNorm (running statistics) and Dropout (its mask stream), an optimizer with per-parameter
// state, a schedule, and a data stream shuffled by a seeded generator.
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include <tapegrad/framework/serialize/checkpoint.h>
#include "support/doc_snippet.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

enum class Recipe { SgdMomentumStepLR, AdamWOneCycle };

constexpr std::int64_t kSamples = 48, kBatch = 8, kClasses = 3;

// A fixed toy dataset: [48, 1, 6, 6] images and labels in [0, 3).
data::TensorDataset make_dataset() {
  Generator g(3);
  return data::TensorDataset(randn({kSamples, 1, 6, 6}, g), randint(0, kClasses, {kSamples}, g));
}

struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> schedule;
  Generator data{42};  // draws each step's batch
};

// `init_seed` sets the initial weights: a resumed run starts from different ones, the checkpoint must fix them.
// The Dropout seeds are options of the architecture, like the widths, so they are the same in every instance.
Run make_run(Recipe recipe, std::int64_t total_steps, std::uint64_t init_seed) {
  Generator init(init_seed);
  Run run;
  run.model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 4, 3}.with_padding(1).with_generator(init)),
      std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dropout>(nn::DropoutOptions{}.with_p(0.25).with_seed(11)),
      std::make_shared<nn::Linear>(nn::LinearOptions{4 * 6 * 6, 16}.with_generator(init)),
      std::make_shared<nn::BatchNorm1d>(16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(nn::DropoutOptions{}.with_p(0.5).with_seed(12)),
      std::make_shared<nn::Linear>(nn::LinearOptions{16, kClasses}.with_generator(init))});
  if (recipe == Recipe::SgdMomentumStepLR) {
    run.optimizer = std::make_unique<optim::SGD>(
        run.model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
    run.schedule = std::make_unique<optim::StepLR>(*run.optimizer, /*step_size=*/3, /*gamma=*/0.5);
  } else {
    auto* adamw = new optim::AdamW(run.model->parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
    run.optimizer.reset(adamw);
    run.schedule = std::make_unique<optim::OneCycleLR>(*adamw, /*max_lr=*/0.02,
                                                       optim::OneCycleOptions{.total_steps = total_steps});
  }
  return run;
}

// One step on a batch of distinct samples picked by a partial Fisher-Yates shuffle; returns the loss.
double train_step(Run& run, const data::TensorDataset& dataset) {
  std::vector<std::int64_t> order(kSamples);
  std::iota(order.begin(), order.end(), 0);
  for (std::int64_t i = 0; i < kBatch; ++i) {
    const auto j = i + static_cast<std::int64_t>(run.data.engine()() % static_cast<std::uint64_t>(kSamples - i));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  const data::Batch batch = dataset.get_batch(order.data(), kBatch);
  Tensor loss = cross_entropy((*run.model)(batch.images), batch.labels);
  run.optimizer->zero_grad();
  loss.backward();
  run.optimizer->step();
  run.schedule->step();
  return loss.item();
}

// DOC-BEGIN resume
// Everything the run's future depends on: model (parameters and buffers, Dropout's stream position among
// them), optimizer, schedule, progress and the data generator.
Checkpoint checkpoint_of(const Run& run, std::int64_t step) {
  Checkpoint saved;
  saved.set_model(*run.model);
  saved.optimizer = Checkpoint::from_named(run.optimizer->state(), EntryKind::Optimizer);
  saved.scheduler = Checkpoint::from_named(run.schedule->state(), EntryKind::Scheduler);
  saved.step = step;
  saved.rng_states["data"] = run.data.state();
  return saved;
}

void restore(Run& run, const Checkpoint& saved) {
  run.model->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  run.optimizer->load_state(Checkpoint::as_named(saved.optimizer));
  run.schedule->load_state(Checkpoint::as_named(saved.scheduler));
  run.data.set_state(saved.rng_states.at("data"));
}
// DOC-END resume

void expect_identical(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(identical(a[i].second, b[i].second));
  }
}

std::string temporary_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("tapegrad-resume-{}-{}", ::getpid(), name)).string();
}

}  // namespace

TEST_CASE("a run resumed from a checkpoint file into fresh objects repeats the straight run bit for bit") {
  const data::TensorDataset dataset = make_dataset();
  const std::int64_t half = 5, total = 2 * half;
  for (Recipe recipe : {Recipe::SgdMomentumStepLR, Recipe::AdamWOneCycle}) {
    const ArchiveKind kind = recipe == Recipe::SgdMomentumStepLR ? ArchiveKind::Binary : ArchiveKind::Text;
    INFO((recipe == Recipe::SgdMomentumStepLR ? "SGD-Nesterov + StepLR, binary" : "AdamW + OneCycleLR, text"));

    Run straight = make_run(recipe, total, /*init_seed=*/1);
    std::vector<double> straight_losses;
    for (std::int64_t step = 0; step < total; ++step) straight_losses.push_back(train_step(straight, dataset));

    const std::string path = temporary_path("run.tg");
    std::vector<double> resumed_losses;
    {
      Run first = make_run(recipe, total, /*init_seed=*/1);
      for (std::int64_t step = 0; step < half; ++step) resumed_losses.push_back(train_step(first, dataset));
      save_checkpoint(checkpoint_of(first, half), path, kind);
    }
    Run resumed = make_run(recipe, total, /*init_seed=*/99);  // other weights, a fresh optimizer and schedule
    resumed.data.manual_seed(7);                                // and the data stream somewhere else
    const Checkpoint saved = load_checkpoint(path);
    std::filesystem::remove(path);
    restore(resumed, saved);
    CHECK(resumed.model->at_as<nn::Dropout>(4)->num_masks_drawn.item() == static_cast<double>(half));
    for (std::int64_t step = saved.step; step < total; ++step) resumed_losses.push_back(train_step(resumed, dataset));

    CHECK(resumed_losses == straight_losses);
    expect_identical(resumed.model->state(), straight.model->state());  // parameters and every buffer
    expect_identical(resumed.optimizer->state(), straight.optimizer->state());
    expect_identical(resumed.schedule->state(), straight.schedule->state());
    CHECK(resumed.data.state() == straight.data.state());
  }
}

TEST_CASE("the Dropout stream position matters: resuming it at 0 changes the losses") {
  // Note: a control for the test above. Were the masks' position lost, the resumed run would differ here.
  const data::TensorDataset dataset = make_dataset();
  Run straight = make_run(Recipe::SgdMomentumStepLR, 4, 1), resumed = make_run(Recipe::SgdMomentumStepLR, 4, 1);
  std::vector<double> straight_losses, resumed_losses;
  for (int step = 0; step < 4; ++step) straight_losses.push_back(train_step(straight, dataset));
  for (int step = 0; step < 2; ++step) resumed_losses.push_back(train_step(resumed, dataset));
  const Checkpoint saved = checkpoint_of(resumed, 2);
  Run fresh = make_run(Recipe::SgdMomentumStepLR, 4, 1);
  restore(fresh, saved);
  {
    NoGradGuard no_grad;
    for (std::size_t index : {std::size_t{4}, std::size_t{8}}) fresh.model->at_as<nn::Dropout>(index)->num_masks_drawn.zero_();
  }
  for (int step = 2; step < 4; ++step) resumed_losses.push_back(train_step(fresh, dataset));
  CHECK(resumed_losses[0] == straight_losses[0]);
  CHECK(resumed_losses[1] == straight_losses[1]);
  CHECK(resumed_losses[2] != straight_losses[2]);
}

TEST_CASE("docs/serialization.md quotes this file's checkpoint and restore functions") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_checkpoint_resume.cpp", "docs/serialization.md", "resume");
}

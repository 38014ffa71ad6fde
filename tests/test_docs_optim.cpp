// docs/optim.md's example, compiled and run: the code between the DOC markers is exactly the page's snippet
// (the last test case checks that), and the other test cases assert what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/serialize/checkpoint.h>
using namespace tapegrad;

// A regression MLP with BatchNorm, trained with AdamW, a one-cycle schedule and gradient clipping.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::OneCycleLR> schedule;
};

Run make_run(std::int64_t total_steps) {
  manual_seed(0);  // the same initial weights every time
  Run run;
  run.model = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Linear(4, 32), nn::BatchNorm1d(32), nn::ReLU(),
      nn::Linear(32, 1)});
  // Weight decay on weight matrices only: biases and BatchNorm's weight and bias go to a group without it.
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : run.model->named_parameters())
    (p.dim() < 2 || name.ends_with("bias") ? no_decay : decay).push_back(p);
  run.optimizer = std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{decay, {}}, {no_decay, {{"weight_decay", 0.0}}}},
      optim::AdamWOptions{.weight_decay = 0.05});
  run.schedule = std::make_unique<optim::OneCycleLR>(*run.optimizer, /*max_lr=*/0.05,
                                                     optim::OneCycleOptions{.total_steps = total_steps});
  return run;
}

// One step on a fresh batch drawn from `data`; returns the batch loss.
double train_step(Run& run, Generator& data) {
  Tensor x = randn({32, 4}, data);
  Tensor target = sum(x, {1}, true) * 0.5;
  Tensor loss = mse_loss((*run.model)(x), target);
  run.optimizer->zero_grad();
  loss.backward();
  optim::clip_grad_norm_(run.model->parameters(), /*max_norm=*/1.0);
  run.optimizer->step();  // parameters only; BatchNorm's running statistics are buffers it never sees
  run.schedule->step();   // after optimizer.step(); OneCycleLR steps once per batch
  return loss.item();
}

// Everything a run needs to resume exactly: model, optimizer and schedule state, the data stream's position.
Checkpoint checkpoint(const Run& run, const Generator& data, std::int64_t step) {
  Checkpoint saved;
  saved.set_model(*run.model);
  saved.optimizer = Checkpoint::from_named(run.optimizer->state(), EntryKind::Optimizer);
  saved.scheduler = Checkpoint::from_named(run.schedule->state(), EntryKind::Scheduler);
  saved.step = step;
  saved.rng_states["data"] = data.state();
  return saved;
}

void restore(Run& run, Generator& data, const Checkpoint& saved) {
  run.model->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  run.optimizer->load_state(Checkpoint::as_named(saved.optimizer));
  run.schedule->load_state(Checkpoint::as_named(saved.scheduler));
  data.set_state(saved.rng_states.at("data"));
}
// DOC-END

TEST_CASE("the optim page's training loop learns, and a resumed run repeats the uninterrupted one exactly") {
  const int steps = 150, split = 60;
  std::vector<double> straight;
  {
    Run run = make_run(steps);
    Generator data(42);
    for (int step = 0; step < steps; ++step) straight.push_back(train_step(run, data));
  }
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += straight[i], last += straight[steps - 1 - i];
  CHECK(last < 0.1 * first);

  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_test_docs_optim.tg").string();
  std::vector<double> resumed;
  {
    Run run = make_run(steps);
    Generator data(42);
    for (int step = 0; step < split; ++step) resumed.push_back(train_step(run, data));
    save_checkpoint(checkpoint(run, data, split), path);
  }
  {
    Run run = make_run(steps);  // fresh weights, fresh optimizer and schedule
    Generator data(7);          // and a data stream at the wrong place: the checkpoint fixes all of it
    const Checkpoint saved = load_checkpoint(path);
    restore(run, data, saved);
    for (std::int64_t step = saved.step; step < steps; ++step) resumed.push_back(train_step(run, data));
  }
  std::filesystem::remove(path);
  CHECK(resumed == straight);
}

TEST_CASE("the groups of the optim page's example split decay as the page says") {
  Run run = make_run(10);
  const auto& groups = run.optimizer->param_groups();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params.size() == 2);  // the two Linear weight matrices
  CHECK(groups[1].params.size() == 4);  // two Linear biases, BatchNorm's weight and bias
  CHECK(groups[0].get("weight_decay") == 0.05);
  CHECK(groups[1].get("weight_decay") == 0.0);
  for (const Tensor& p : groups[0].params) CHECK(p.dim() == 2);
}

TEST_CASE("docs/optim.md contains this file's example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_optim.cpp", "docs/optim.md");
}

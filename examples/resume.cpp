// Interrupt and resume: trains 2N steps straight, then N steps, saves a checkpoint, loads it into freshly
// built objects (initialised from a different seed, so nothing survives by accident), trains N more, and
// requires the two runs to agree bit for bit: every step's loss, every parameter and buffer, every optimizer
// state tensor. Exits 1 and names the first difference when they do not.
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "common/training.h"

using namespace tapegrad;

namespace {

struct Run {
  std::shared_ptr<nn::Module> model;
  examples::Training training;
  data::DataLoader loader;
};

Run make_run(const std::string& model_name, const examples::Options& options, const data::TensorDataset& train_set,
             std::uint64_t init_seed, std::int64_t total_steps) {
  manual_seed(init_seed);
  std::shared_ptr<nn::Module> model = model_name == "mlp" ? std::shared_ptr<nn::Module>(examples::make_mlp())
                                                          : std::shared_ptr<nn::Module>(examples::make_cnn());
  examples::Training training = model_name == "mlp" ? examples::make_adamw_one_cycle(*model, options.lr, total_steps)
                                                    : examples::make_sgd_one_cycle(*model, options.lr, total_steps);
  data::DataLoader loader(train_set, data::DataLoaderOptions{}
                                         .with_batch_size(options.batch_size)
                                         .with_shuffle()
                                         .with_drop_last()
                                         .with_seed(options.seed));
  return Run{std::move(model), std::move(training), std::move(loader)};
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * element_size(a.dtype())) == 0;
}

/// The first entry that differs between two named states, or "" when they are bit-identical.
std::string first_difference(const std::string& what, const nn::NamedTensors& a, const nn::NamedTensors& b) {
  if (a.size() != b.size()) return fmt::format("{}: {} entries vs {}", what, a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return fmt::format("{}: entry {} is '{}' vs '{}'", what, i, a[i].first, b[i].first);
    if (!bit_identical(a[i].second, b[i].second)) return fmt::format("{} '{}' differs", what, a[i].first);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) try {
  examples::Options options;
  options.batch_size = 64;
  options.lr = 0.05;
  options.subset = 0;
  std::string model_name = "cnn";
  std::int64_t steps = 100;
  CLI::App app{"Train 2N steps straight vs N steps + checkpoint + reload into fresh objects + N steps; "
               "require bit-identical results"};
  examples::add_options(app, options);
  app.add_option("--model", model_name, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}))->capture_default_str();
  app.add_option("--steps", steps, "N: steps before and after the interruption")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  examples::apply(options, "resume");

  data::FashionMnistOptions data_options;
  data_options.dir = options.data_dir;
  const data::FashionMNIST full_train(data::Split::Train, data_options);
  const data::TensorDataset train_set = examples::take(full_train, options.subset);
  const std::int64_t total_steps = 2 * steps;

  // Note: each half is one loader "epoch" cut at N steps, so the interruption falls on an epoch boundary and
  // the loader's position is its epoch number (a checkpoint records loader.epoch()).
  fmt::print("straight: {} steps of the {} (batch {})\n", total_steps, model_name, options.batch_size);
  Run straight = make_run(model_name, options, train_set, options.seed, total_steps);
  std::vector<double> straight_losses;
  for (int half = 0; half < 2; ++half) {
    auto result = examples::train_epoch(*straight.model, straight.loader, *straight.training.optimizer,
                                        straight.training.schedule.get(), steps);
    if (result.steps != steps) throw Error(fmt::format("the data gives only {} batches, fewer than --steps", result.steps));
    straight_losses.insert(straight_losses.end(), result.step_losses.begin(), result.step_losses.end());
  }

  std::vector<double> resumed_losses;
  {
    Run first = make_run(model_name, options, train_set, options.seed, total_steps);
    auto result = examples::train_epoch(*first.model, first.loader, *first.training.optimizer,
                                        first.training.schedule.get(), steps);
    resumed_losses = result.step_losses;
    save_checkpoint(examples::make_checkpoint(*first.model, *first.training.optimizer, first.training.schedule.get(),
                                              first.loader, 1, steps),
                    options.checkpoint);
    fmt::print("interrupted after {} steps: saved {}\n", steps, options.checkpoint);
  }  // the first run's objects are gone: only the file carries the run on
  Run second = make_run(model_name, options, train_set, options.seed + 1, total_steps);
  examples::restore_checkpoint(load_checkpoint(options.checkpoint), *second.model, *second.training.optimizer,
                               second.training.schedule.get(), second.loader);
  auto result = examples::train_epoch(*second.model, second.loader, *second.training.optimizer,
                                      second.training.schedule.get(), steps);
  resumed_losses.insert(resumed_losses.end(), result.step_losses.begin(), result.step_losses.end());
  fmt::print("resumed into fresh objects: {} more steps\n", steps);

  std::string difference;
  for (std::size_t i = 0; i < straight_losses.size() && difference.empty(); ++i)
    if (std::memcmp(&straight_losses[i], &resumed_losses[i], sizeof(double)) != 0)
      difference = fmt::format("loss of step {}: {:.17g} vs {:.17g}", i + 1, straight_losses[i], resumed_losses[i]);
  if (difference.empty()) difference = first_difference("model", straight.model->state(), second.model->state());
  if (difference.empty())
    difference = first_difference("optimizer", straight.training.optimizer->state(), second.training.optimizer->state());
  if (difference.empty())
    difference = first_difference("schedule", straight.training.schedule->state(), second.training.schedule->state());
  if (!difference.empty()) {
    std::cerr << "resume: the resumed run differs from the straight one: " << difference << "\n";
    return 1;
  }
  fmt::print("identical: {} step losses (last {:.6f}), {} model entries, {} optimizer entries, bit for bit\n",
             straight_losses.size(), straight_losses.back(), straight.model->state().size(),
             straight.training.optimizer->state().size());
  return 0;
} catch (const std::exception& error) {
  std::cerr << "resume: " << error.what() << "\n";
  return 1;
}

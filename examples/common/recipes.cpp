#include "common/recipes.h"

#include <string>

namespace examples {

using namespace tapegrad;

std::shared_ptr<nn::Sequential> make_cnn() {
  // Braces build the layers left to right (initial weights come from the default generator in that order).
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Conv2d(nn::Conv2dOptions{1, 32, 3}.with_padding(1)), nn::BatchNorm2d(32),
      nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions{32, 64, 3}.with_padding(1)), nn::BatchNorm2d(64),
      nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Dropout(0.25),
      nn::Linear(128, 10)});
}

std::shared_ptr<nn::Sequential> make_mlp(std::int64_t hidden) {
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Flatten(),
      nn::Linear(28 * 28, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
      nn::Linear(hidden, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
      nn::Linear(hidden, 10)});
}

namespace {
class RowLSTM : public nn::Module {
 public:
  explicit RowLSTM(std::int64_t hidden) : Module("RowLSTM") {
    lstm_ = register_module("lstm", nn::LSTM(nn::LSTMOptions(28, hidden).with_num_layers(2).with_bidirectional(true)
                                                 .with_batch_first(true)));
    head_ = register_module("head", nn::Linear(2 * hidden, 10));
  }
  // [B, 1, 28, 28] -> [B, 28 rows, 28 features] -> h_n [2 layers * 2 directions, B, hidden] -> [B, 10].
  Tensor forward(const Tensor& images) override {
    const Tensor h_n = lstm_->forward_with_state(images.reshape({images.size(0), 28, 28})).h_n;
    return head_->forward(cat({h_n.select(0, 2), h_n.select(0, 3)}, 1));
  }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};
}  // namespace

std::shared_ptr<nn::Module> make_lstm(std::int64_t hidden) { return std::make_shared<RowLSTM>(hidden); }

Training make_adam_one_cycle(nn::Module& model, double lr, std::int64_t total_steps) {
  Training training;
  auto optimizer = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = lr});
  training.schedule =
      std::make_unique<optim::OneCycleLR>(*optimizer, lr, optim::OneCycleOptions{.total_steps = total_steps});
  training.optimizer = std::move(optimizer);
  return training;
}

Training make_sgd_one_cycle(nn::Module& model, double lr, std::int64_t total_steps) {
  Training training;
  auto optimizer = std::make_unique<optim::SGD>(
      model.parameters(), optim::SGDOptions{.lr = lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  training.schedule =
      std::make_unique<optim::OneCycleLR>(*optimizer, lr, optim::OneCycleOptions{.total_steps = total_steps});
  training.optimizer = std::move(optimizer);
  return training;
}

Training make_adamw_one_cycle(nn::Module& model, double lr, std::int64_t total_steps) {
  Training training;
  // Note: weight decay on the weight matrices only; decaying biases and BatchNorm's affine parameters
  // fights the normalisation.
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) (p.dim() < 2 ? no_decay : decay).push_back(p);
  auto optimizer = std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{decay, {}}, {no_decay, {{"weight_decay", 0.0}}}},
      optim::AdamWOptions{.lr = lr, .weight_decay = 0.05});
  training.schedule =
      std::make_unique<optim::OneCycleLR>(*optimizer, lr, optim::OneCycleOptions{.total_steps = total_steps});
  training.optimizer = std::move(optimizer);
  return training;
}

namespace {
std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  return static_cast<std::int64_t>(sum(eq(argmax(logits, 1), labels).to(DType::Float64)).item());
}
}  // namespace

Score evaluate(nn::Module& model, const data::TensorDataset& dataset, std::int64_t batch_size) {
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(dataset, data::DataLoaderOptions{}.with_batch_size(batch_size));
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (auto& batch : loader) {
    Tensor logits = model(batch.images);
    loss_sum += cross_entropy(logits, batch.labels).item() * static_cast<double>(batch.labels.numel());
    correct += count_correct(logits, batch.labels);
  }
  const double n = static_cast<double>(dataset.size());
  return {loss_sum / n, static_cast<double>(correct) / n};
}

EpochResult train_epoch(nn::Module& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                        optim::LRScheduler* schedule, std::int64_t max_steps,
                        const std::function<void(std::int64_t)>& after_step) {
  model.train();
  EpochResult result;
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (auto& batch : loader) {
    if (max_steps > 0 && result.steps >= max_steps) break;
    Tensor logits = model(batch.images);
    Tensor loss = cross_entropy(logits, batch.labels);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (schedule != nullptr) schedule->step();
    NoGradGuard no_grad;
    const std::int64_t n = batch.labels.numel();
    result.step_losses.push_back(loss.item());
    loss_sum += result.step_losses.back() * static_cast<double>(n);
    correct += count_correct(logits, batch.labels);
    result.samples += n;
    ++result.steps;
    if (after_step) after_step(n);
  }
  if (result.samples > 0) {
    result.loss = loss_sum / static_cast<double>(result.samples);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  }
  return result;
}

Checkpoint make_checkpoint(const nn::Module& model, const optim::Optimizer& optimizer,
                           const optim::LRScheduler* schedule, const data::DataLoader& loader, std::int64_t epoch,
                           std::int64_t step) {
  Checkpoint saved;
  saved.set_model(model);
  saved.optimizer = Checkpoint::from_named(optimizer.state(), EntryKind::Optimizer);
  if (schedule != nullptr) saved.scheduler = Checkpoint::from_named(schedule->state(), EntryKind::Scheduler);
  saved.epoch = epoch;
  saved.step = step;
  saved.rng_states["default"] = default_generator().state();
  saved.metadata["loader_epoch"] = std::to_string(loader.epoch());
  return saved;
}

void restore_checkpoint(const Checkpoint& saved, nn::Module& model, optim::Optimizer& optimizer,
                        optim::LRScheduler* schedule, data::DataLoader& loader) {
  const auto loader_epoch = saved.metadata.find("loader_epoch");
  const auto generator = saved.rng_states.find("default");
  if (loader_epoch == saved.metadata.end() || generator == saved.rng_states.end())
    throw Error("restore_checkpoint: the checkpoint has no " +
                std::string(loader_epoch == saved.metadata.end() ? "metadata 'loader_epoch'" : "rng state 'default'") +
                " (was it written by make_checkpoint?)");
  model.load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  optimizer.load_state(Checkpoint::as_named(saved.optimizer));
  if (schedule != nullptr) schedule->load_state(Checkpoint::as_named(saved.scheduler));
  default_generator().set_state(generator->second);
  loader.set_epoch(std::stoull(loader_epoch->second));
}

}  // namespace examples

#include "common/recipes.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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

// ---- char_transformer ----

std::vector<std::int64_t> encode_text(const std::string& text) {
  std::vector<std::int64_t> symbols;
  symbols.reserve(text.size());
  for (char c : text) {
    if (c == '\t') c = ' ';
    if (c == '\n') symbols.push_back(0);
    else if (c >= ' ' && c <= '~') symbols.push_back(c - ' ' + 1);
  }
  return symbols;
}

std::string decode_symbols(const std::vector<std::int64_t>& symbols) {
  std::string text;
  for (std::int64_t s : symbols) text.push_back(s == 0 ? '\n' : static_cast<char>(' ' + s - 1));
  return text;
}

CharCorpus load_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() != ".dat")
        files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  CharCorpus corpus;
  auto add_fortune = [&](const std::string& text) {
    if (text.empty()) return;
    ++corpus.fortunes;
    const bool held_out = corpus.fortunes % 10 == 0;
    corpus.held_out_fortunes += held_out;
    std::vector<std::int64_t>& out = held_out ? corpus.held_out : corpus.train;
    const std::vector<std::int64_t> symbols = encode_text(text + "%\n");
    out.insert(out.end(), symbols.begin(), symbols.end());
  };
  for (const fs::path& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::string line, fortune;
    ++corpus.files;
    while (std::getline(in, line)) {
      if (line == "%") {
        add_fortune(fortune);
        fortune.clear();
      } else {
        fortune += line + "\n";
      }
    }
    add_fortune(fortune);
  }
  if (corpus.held_out.empty())
    throw std::runtime_error("no fortunes found in " + dir + " (apt-get install fortunes)");
  return corpus;
}

namespace {
class CharTransformer : public nn::Module {
 public:
  explicit CharTransformer(const CharTransformerOptions& options) : Module("CharTransformer"), context_(options.context) {
    embed_ = register_module("embed", nn::Embedding(kCharVocabulary, options.d_model));
    position_ = register_module("position", nn::Embedding(options.context, options.d_model));
    const nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(options.d_model, options.heads)
                                                .with_dim_feedforward(options.feed_forward)
                                                .with_dropout(options.dropout));
    encoder_ = register_module("encoder", nn::TransformerEncoder(layer, options.layers));
    head_ = register_module("head", nn::Linear(options.d_model, kCharVocabulary));
  }
  Tensor forward(const Tensor& tokens) override {
    const std::int64_t length = tokens.size(0);
    if (length > context_) tapegrad::fail("CharTransformer: {} tokens, more than the context of {}", length, context_);
    // Note: the causal mask and the positions depend on the length only; sampling grows it one step at a time.
    if (mask_.size(0) != length) {
      mask_ = nn::generate_square_subsequent_mask(length);
      positions_ = arange(length).unsqueeze(1);
    }
    const Tensor x = add(embed_->forward(tokens), position_->forward(positions_));
    return head_->forward(encoder_->forward(x, mask_));
  }

 private:
  std::int64_t context_;
  std::shared_ptr<nn::Embedding> embed_, position_;
  std::shared_ptr<nn::TransformerEncoder> encoder_;
  std::shared_ptr<nn::Linear> head_;
  Tensor mask_ = zeros({0, 0}), positions_;
};

// Windows [batch] x (context + 1) starting at `starts`, as inputs [context, batch] and targets [context * batch].
CharBatch windows_at(const std::vector<std::int64_t>& symbols, const std::vector<std::int64_t>& starts,
                     std::int64_t context) {
  const std::int64_t batch = static_cast<std::int64_t>(starts.size());
  std::vector<std::int64_t> inputs(static_cast<std::size_t>(context * batch)), targets(inputs.size());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < context; ++t) {
      const auto at = static_cast<std::size_t>(starts[static_cast<std::size_t>(b)] + t);
      inputs[static_cast<std::size_t>(t * batch + b)] = symbols[at];
      targets[static_cast<std::size_t>(t * batch + b)] = symbols[at + 1];
    }
  return {from_vector(inputs, {context, batch}), from_vector(targets, {context * batch})};
}
}  // namespace

std::shared_ptr<nn::Module> make_char_transformer(const CharTransformerOptions& options) {
  return std::make_shared<CharTransformer>(options);
}

CharBatch sample_windows(const std::vector<std::int64_t>& symbols, std::int64_t context, std::int64_t batch) {
  const auto n = static_cast<std::int64_t>(symbols.size());
  if (n < context + 2) tapegrad::fail("sample_windows: {} symbols, fewer than a window of {}", n, context + 1);
  const Tensor drawn = randint(0, n - context - 1, {batch});
  const std::int64_t* values = drawn.data<std::int64_t>();
  return windows_at(symbols, std::vector<std::int64_t>(values, values + batch), context);
}

std::vector<double> train_char_lm(nn::Module& model, const std::vector<std::int64_t>& symbols, std::int64_t context,
                                  std::int64_t batch, std::int64_t steps, Training& training,
                                  const std::function<void(std::int64_t, double)>& after_step) {
  model.train();
  std::vector<double> losses;
  for (std::int64_t step = 0; step < steps; ++step) {
    const CharBatch data = sample_windows(symbols, context, batch);
    Tensor loss = cross_entropy(model(data.inputs).reshape({context * batch, kCharVocabulary}), data.targets);
    training.optimizer->zero_grad();
    loss.backward();
    training.optimizer->step();
    if (training.schedule) training.schedule->step();
    losses.push_back(loss.item());
    if (after_step) after_step(step + 1, losses.back());
  }
  return losses;
}

double model_bits_per_char(nn::Module& model, const std::vector<std::int64_t>& symbols, std::int64_t context,
                           std::int64_t batch) {
  model.eval();
  NoGradGuard no_grad;
  const auto n = static_cast<std::int64_t>(symbols.size());
  double nats = 0;
  std::int64_t counted = 0;
  std::vector<std::int64_t> starts;
  // Every window but the last has `context` predictions; the last, shorter one is scored on its own.
  auto flush = [&](std::int64_t length) {
    if (starts.empty()) return;
    const CharBatch data = windows_at(symbols, starts, length);
    const auto predicted = static_cast<std::int64_t>(starts.size()) * length;
    nats += cross_entropy(model(data.inputs).reshape({predicted, kCharVocabulary}), data.targets).item() *
            static_cast<double>(predicted);
    counted += predicted;
    starts.clear();
  };
  std::int64_t start = 0;
  for (; start + context < n; start += context) {
    starts.push_back(start);
    if (static_cast<std::int64_t>(starts.size()) == batch) flush(context);
  }
  flush(context);
  if (n - 1 - start > 0) {
    starts.push_back(start);
    flush(n - 1 - start);
  }
  return nats / static_cast<double>(counted) / std::log(2.0);
}

double bigram_bits_per_char(const std::vector<std::int64_t>& train, const std::vector<std::int64_t>& symbols) {
  std::vector<double> pairs(static_cast<std::size_t>(kCharVocabulary * kCharVocabulary), 0.0),
      firsts(static_cast<std::size_t>(kCharVocabulary), 0.0);
  for (std::size_t i = 1; i < train.size(); ++i) {
    pairs[static_cast<std::size_t>(train[i - 1] * kCharVocabulary + train[i])] += 1;
    firsts[static_cast<std::size_t>(train[i - 1])] += 1;
  }
  double bits = 0;
  for (std::size_t i = 1; i < symbols.size(); ++i) {
    const double pair = pairs[static_cast<std::size_t>(symbols[i - 1] * kCharVocabulary + symbols[i])];
    bits -= std::log2((pair + 1) / (firsts[static_cast<std::size_t>(symbols[i - 1])] + kCharVocabulary));
  }
  return bits / static_cast<double>(symbols.size() - 1);
}

std::string sample_text(nn::Module& model, const std::string& prompt, std::int64_t length, std::int64_t context,
                        double temperature, std::uint64_t seed) {
  model.eval();
  NoGradGuard no_grad;
  Generator generator(seed);
  std::vector<std::int64_t> symbols = encode_text(prompt);
  if (symbols.empty()) symbols.push_back(0);
  const std::size_t prompt_length = symbols.size();
  for (std::int64_t i = 0; i < length; ++i) {
    const auto seen = std::min<std::int64_t>(context, static_cast<std::int64_t>(symbols.size()));
    const std::vector<std::int64_t> window(symbols.end() - seen, symbols.end());
    const Tensor logits = model(from_vector(window, {seen, 1})).select(0, seen - 1).reshape({kCharVocabulary});
    const float* values = logits.contiguous().data<float>();
    std::int64_t next = std::max_element(values, values + kCharVocabulary) - values;
    if (temperature > 0) {
      // Note: the softmax in double on the host, so that the draw depends on the logits' bits alone.
      std::vector<double> weights(static_cast<std::size_t>(kCharVocabulary));
      double total = 0;
      for (std::size_t s = 0; s < weights.size(); ++s)
        total += weights[s] = std::exp((values[s] - values[next]) / temperature);
      double u = generator.uniform01() * total;
      for (next = 0; next + 1 < kCharVocabulary && u >= weights[static_cast<std::size_t>(next)]; ++next)
        u -= weights[static_cast<std::size_t>(next)];
    }
    symbols.push_back(next);
  }
  return decode_symbols(std::vector<std::int64_t>(symbols.begin() + static_cast<std::ptrdiff_t>(prompt_length),
                                                  symbols.end()));
}

}  // namespace examples

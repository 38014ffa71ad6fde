#pragma once
/// The examples' models and training loop, without the command line: the examples and the example smoke
/// test (tests/test_examples_smoke.cpp) build exactly these, so the test checks what the examples run.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/serialize/checkpoint.h>

namespace examples {

/// (Conv3x3-BN-ReLU-MaxPool2) x 2 with 32 and 64 channels, then Linear(3136,128)-ReLU-Dropout(0.25)-Linear(128,10).
std::shared_ptr<tapegrad::nn::Sequential> make_cnn();
/// Flatten, then (Linear-BN1d-ReLU) x 2 with `hidden` units, then Linear(hidden,10).
std::shared_ptr<tapegrad::nn::Sequential> make_mlp(std::int64_t hidden = 256);
/// A bidirectional 2-layer LSTM over an image's 28 rows (28 features each, batch first), then Linear(2 * hidden, 10)
/// on the last layer's final hidden states of both directions, concatenated.
std::shared_ptr<tapegrad::nn::Module> make_lstm(std::int64_t hidden = 128);

/// The optimizer and schedule an example trains with.
struct Training {
  std::unique_ptr<tapegrad::optim::Optimizer> optimizer;
  std::unique_ptr<tapegrad::optim::LRScheduler> schedule;  ///< stepped once per batch; may be null
};

/// The CNN's recipe: SGD, Nesterov momentum 0.9, weight decay 5e-4, one-cycle schedule peaking at `lr`.
Training make_sgd_one_cycle(tapegrad::nn::Module& model, double lr, std::int64_t total_steps);
/// The MLP's recipe: AdamW (weight decay 0.05 on weight matrices only), one-cycle schedule peaking at `lr`.
Training make_adamw_one_cycle(tapegrad::nn::Module& model, double lr, std::int64_t total_steps);
/// The LSTM's recipe: Adam, one-cycle schedule peaking at `lr`.
Training make_adam_one_cycle(tapegrad::nn::Module& model, double lr, std::int64_t total_steps);

/// Mean loss and accuracy over a pass.
struct Score {
  double loss = 0;
  double accuracy = 0;
};

/// Eval mode and NoGradGuard: the model's accuracy and mean cross-entropy on `dataset`, in batches.
Score evaluate(tapegrad::nn::Module& model, const tapegrad::data::TensorDataset& dataset,
               std::int64_t batch_size = 1000);

/// What one training epoch saw.
struct EpochResult {
  double loss = 0;      ///< mean training loss over the epoch's samples (with the weights of each step)
  double accuracy = 0;  ///< training accuracy, same convention
  std::int64_t samples = 0;
  std::int64_t steps = 0;
  std::vector<double> step_losses;  ///< the loss of every step, in order
};

/// Train mode, then one pass over `loader` (at most max_steps batches when max_steps > 0): forward,
/// cross-entropy, zero_grad, backward, optimizer step, schedule step (when given). `after_step(samples)`
/// is called after each step (a progress bar).
EpochResult train_epoch(tapegrad::nn::Module& model, tapegrad::data::DataLoader& loader,
                        tapegrad::optim::Optimizer& optimizer, tapegrad::optim::LRScheduler* schedule,
                        std::int64_t max_steps = 0, const std::function<void(std::int64_t)>& after_step = {});

/// A whole run in one Checkpoint: model, optimizer, schedule, progress, the default generator and the
/// data loader's next epoch (metadata "loader_epoch").
tapegrad::Checkpoint make_checkpoint(const tapegrad::nn::Module& model, const tapegrad::optim::Optimizer& optimizer,
                                     const tapegrad::optim::LRScheduler* schedule,
                                     const tapegrad::data::DataLoader& loader, std::int64_t epoch, std::int64_t step);

/// Restores what make_checkpoint() saved into freshly built objects of the same architecture; each part is
/// checked before anything is changed (load_state's contract), model first.
void restore_checkpoint(const tapegrad::Checkpoint& saved, tapegrad::nn::Module& model,
                        tapegrad::optim::Optimizer& optimizer, tapegrad::optim::LRScheduler* schedule,
                        tapegrad::data::DataLoader& loader);

// ---- char_transformer: a character-level causal Transformer language model ----

/// The vocabulary: '\n' (symbol 0) and the 95 printable ASCII characters ' '..'~' (symbols 1..95).
constexpr std::int64_t kCharVocabulary = 96;
/// Text as symbols: a tab reads as a space; every other byte outside the vocabulary (UTF-8 sequences,
/// backspaces) is dropped.
std::vector<std::int64_t> encode_text(const std::string& text);
std::string decode_symbols(const std::vector<std::int64_t>& symbols);

/// A text corpus split by document, as symbols (each fortune followed by "%\n", as in the files).
struct CharCorpus {
  std::vector<std::int64_t> train, held_out;
  std::int64_t files = 0, fortunes = 0, held_out_fortunes = 0;
};
/// Debian's fortunes (package `fortunes`): every regular file in `dir` except the .dat indexes (the .u8 names
/// are links to the same files and are skipped), in name order, cut into fortunes at its "%" lines; every 10th
/// fortune (the 10th, 20th, ... in that order) is held out. Throws when the directory has no fortune.
CharCorpus load_fortunes(const std::string& dir = "/usr/share/games/fortunes");

/// The language model's shape.
struct CharTransformerOptions {
  std::int64_t d_model = 128, heads = 4, layers = 2, feed_forward = 512;
  std::int64_t context = 64;  ///< the longest input, the size of the positional embedding
  double dropout = 0.1;
};
/// Embedding(96, d_model) + learned positional Embedding(context, d_model), a causal post-norm
/// TransformerEncoder, Linear(d_model, 96): forward(tokens [T, B] int64, T <= context) -> logits [T, B, 96].
std::shared_ptr<tapegrad::nn::Module> make_char_transformer(const CharTransformerOptions& options);

/// `batch` windows of context + 1 symbols starting at positions drawn from the default generator:
/// inputs [context, batch], targets [context * batch] (each input's next symbol, time-major like the logits).
struct CharBatch {
  tapegrad::Tensor inputs, targets;
};
CharBatch sample_windows(const std::vector<std::int64_t>& symbols, std::int64_t context, std::int64_t batch);

/// Train mode, then `steps` steps on random windows of `symbols`; returns each step's loss (nats per char).
std::vector<double> train_char_lm(tapegrad::nn::Module& model, const std::vector<std::int64_t>& symbols,
                                  std::int64_t context, std::int64_t batch, std::int64_t steps, Training& training,
                                  const std::function<void(std::int64_t step, double loss)>& after_step = {});

/// Eval mode, no grad: the model's mean -log2 p(next symbol) over every symbol of `symbols` but the first, read
/// in consecutive windows of `context` (a window's first prediction sees one symbol, its last `context`).
double model_bits_per_char(tapegrad::nn::Module& model, const std::vector<std::int64_t>& symbols,
                           std::int64_t context, std::int64_t batch = 64);
/// The bigram baseline on the same symbols: p(b | a) = (count(a, b) + 1) / (count(a) + 96), counted on `train`.
double bigram_bits_per_char(const std::vector<std::int64_t>& train, const std::vector<std::int64_t>& symbols);

/// Eval mode, no grad: `length` characters continuing `prompt` (its characters outside the vocabulary dropped),
/// each drawn from softmax(logits / temperature) with a generator seeded by `seed` (temperature 0: argmax), the
/// model seeing at most its last `context` symbols.
std::string sample_text(tapegrad::nn::Module& model, const std::string& prompt, std::int64_t length,
                        std::int64_t context, double temperature, std::uint64_t seed);

}  // namespace examples

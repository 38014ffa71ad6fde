#pragma once
/// Shared pieces of the examples: command-line options, the epoch loop's progress bar, evaluation, metrics.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tapegrad/tapegrad.h>

#include "common/recipes.h"

namespace examples {

/// The options every training example takes.
struct Options {
  int epochs = 4;
  std::int64_t batch_size = 128;
  double lr = 0.05;
  int threads = 0;  ///< 0 keeps tapegrad's default (the hardware concurrency)
  std::uint64_t seed = 0;
  std::string data_dir;  ///< "" means the Debian location (or $TAPEGRAD_FASHION_MNIST)
  std::string output_dir = "out";
  std::string checkpoint;  ///< where to save after training ("" = <output_dir>/<name>.ckpt)
  std::string evaluate;    ///< a checkpoint to load into a fresh model and evaluate instead of training
  std::string export_path;  ///< also write the model for PyTorch: .pt/.pth (torch.save) or .safetensors
  std::int64_t max_steps = 0;  ///< stop each epoch after this many batches (0 = all); for smoke runs
  std::int64_t subset = 0;     ///< train on the first this-many images only (0 = all)
  bool channels_last = false;  ///< model->to(MemoryFormat::ChannelsLast) (convolutions run NHWC)
  bool autocast = false;  ///< run training and evaluation under AutocastGuard (bfloat16 products)
};

/// Adds the shared options to `app` (defaults taken from `options`).
void add_options(CLI::App& app, Options& options);
/// Applies --threads and --seed, creates the output directory, fills in the default checkpoint path, and checks
/// that an --export path has a known extension (before any training).
void apply(Options& options, const std::string& name);

/// The first `count` examples of a dataset (all of it when count is 0 or larger than the dataset).
tapegrad::data::TensorDataset take(const tapegrad::data::TensorDataset& dataset, std::int64_t count);

/// Epoch progress. On a terminal, a bar redrawn in place: "epoch 2/4 [=====>    ] 23040/60000  4100 samples/s
/// ETA 9s"; elsewhere (a log file, a pipe) whole lines only, one per 10% of an epoch that runs over 10 s.
class Progress {
 public:
  Progress(std::string label, std::int64_t total, std::ostream& out, bool interactive);
  /// Records `samples` more samples done and redraws (at most ~10 times a second).
  void advance(std::int64_t samples);
  /// Clears the bar's line (on a terminal).
  void finish();
  double elapsed_seconds() const;

 private:
  std::string label_;
  std::int64_t total_, done_ = 0;
  double start_, last_draw_ = -1;
  std::ostream* out_;
  bool interactive_;
  int last_tenth_ = 0;
};

/// True when stderr is a terminal (the progress bar's redraws are for terminals only).
bool stderr_is_terminal();
/// The path of `program` found on $PATH, or "" (no shell involved).
std::string find_on_path(const std::string& program);
/// `text` as a gnuplot single-quoted string (quotes doubled).
std::string gnuplot_string(const std::string& text);

/// One row of the metrics CSV.
struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, seconds = 0, samples_per_second = 0;
};

/// Appends to <output_dir>/<name>_metrics.csv (rewritten from `rows`) and, when gnuplot is on PATH,
/// draws <output_dir>/<name>_curves.png (loss and accuracy by epoch).
void write_metrics(const std::string& output_dir, const std::string& name, const std::vector<EpochMetrics>& rows);

/// True when `gnuplot` is found on PATH.
bool have_gnuplot();
/// Runs gnuplot on a script file, in the script's directory and without a shell; returns false (and says why
/// on stderr) when it fails or is absent. Scripts name their files relative to their own directory.
bool run_gnuplot(const std::string& script_path);

/// What distinguishes one classification example from another; run_example() does the rest.
struct ExampleSpec {
  std::string name;         ///< file stem of its outputs: <output_dir>/<name>.ckpt, <name>_metrics.csv
  std::string description;  ///< the --help title
  Options defaults;
  std::function<std::shared_ptr<tapegrad::nn::Module>()> make_model;
  std::function<Training(tapegrad::nn::Module& model, const Options& options, std::int64_t total_steps)> make_training;
  tapegrad::data::Augmentation augmentation{};
};

/// The whole life of a Fashion-MNIST classifier example: parse the command line; with --evaluate CHECKPOINT,
/// load it into a fresh model and evaluate (exit 1 if the accuracy differs from the one recorded at save time);
/// otherwise train with a progress bar and a summary line per epoch, write the metrics CSV and curves, and save
/// the run as a checkpoint. Returns the process exit code.
int run_example(int argc, char** argv, const ExampleSpec& spec);

/// Seconds on a monotonic clock.
double now_seconds();

}  // namespace examples

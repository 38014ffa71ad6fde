#include "common/training.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

#include <fmt/format.h>

namespace examples {

using namespace tapegrad;

void add_options(CLI::App& app, Options& options) {
  app.add_option("--epochs", options.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "mini-batch size")->capture_default_str();
  app.add_option("--lr", options.lr, "(peak) learning rate")->capture_default_str();
  app.add_option("--threads", options.threads, "kernel threads (0: hardware concurrency)")->capture_default_str();
  app.add_option("--seed", options.seed, "seed of initialisation, shuffling and dropout")->capture_default_str();
  app.add_option("--data-dir", options.data_dir, "Fashion-MNIST directory (default: Debian's package)");
  app.add_option("--output-dir", options.output_dir, "metrics CSV, curves and checkpoint go here")->capture_default_str();
  app.add_option("--checkpoint", options.checkpoint, "checkpoint path (default: <output-dir>/<example>.ckpt)");
  app.add_option("--evaluate", options.evaluate, "load CHECKPOINT into a fresh model and evaluate; no training");
  app.add_option("--max-steps", options.max_steps, "at most this many batches per epoch (smoke runs)");
  app.add_option("--subset", options.subset, "train on the first N training images only (smoke runs)");
}

void apply(Options& options, const std::string& name) {
  if (options.threads > 0) set_num_threads(options.threads);
  manual_seed(options.seed);
  std::filesystem::create_directories(options.output_dir);
  if (options.checkpoint.empty()) options.checkpoint = options.output_dir + "/" + name + ".ckpt";
}

data::TensorDataset take(const data::TensorDataset& dataset, std::int64_t count) {
  if (count <= 0 || count >= dataset.size()) return dataset;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(count));
  std::iota(indices.begin(), indices.end(), 0);
  data::Batch batch = dataset.get_batch(indices);
  return data::TensorDataset(batch.images, batch.labels);
}

Score evaluate(nn::Module& model, const data::TensorDataset& dataset, std::int64_t batch_size) {
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(dataset, data::DataLoaderOptions{}.with_batch_size(batch_size));
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (auto& batch : loader) {
    Tensor logits = model(batch.images);
    loss_sum += cross_entropy(logits, batch.labels).item() * static_cast<double>(batch.labels.numel());
    correct += static_cast<std::int64_t>(sum(eq(argmax(logits, 1), batch.labels).to(DType::Float64)).item());
  }
  const double n = static_cast<double>(dataset.size());
  return {loss_sum / n, static_cast<double>(correct) / n};
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

Progress::Progress(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(total), start_(now_seconds()) {}

double Progress::elapsed_seconds() const { return now_seconds() - start_; }

void Progress::advance(std::int64_t samples) {
  done_ += samples;
  const double t = elapsed_seconds();
  if (t - last_draw_ < 0.1 && done_ < total_) return;
  last_draw_ = t;
  const int width = 30;
  const int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
  const double rate = t > 0 ? static_cast<double>(done_) / t : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
  std::cerr << fmt::format("\r{} [{}] {}/{}  {:.0f} samples/s  ETA {:.0f}s   ", label_, bar, done_, total_, rate, eta)
            << std::flush;
}

void Progress::finish() { std::cerr << "\r" << std::string(100, ' ') << "\r" << std::flush; }

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

bool run_gnuplot(const std::string& script_path) {
  if (!have_gnuplot()) {
    std::cerr << "gnuplot not found on PATH (Debian: gnuplot-nox): no PNG, the CSV is written\n";
    return false;
  }
  const int status = std::system(fmt::format("gnuplot '{}'", script_path).c_str());
  if (status != 0) std::cerr << fmt::format("gnuplot {} failed (status {})\n", script_path, status);
  return status == 0;
}

void write_metrics(const std::string& output_dir, const std::string& name, const std::vector<EpochMetrics>& rows) {
  const std::string csv = output_dir + "/" + name + "_metrics.csv";
  {
    std::ofstream out(csv);
    out << "epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,samples_per_second\n";
    for (const auto& r : rows)
      out << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6f},{:.3f},{:.1f}\n", r.epoch, r.train_loss, r.train_accuracy,
                         r.test_loss, r.test_accuracy, r.seconds, r.samples_per_second);
  }
  if (!have_gnuplot()) return;
  const std::string script = output_dir + "/" + name + "_curves.gp";
  {
    std::ofstream out(script);
    out << "set datafile separator ','\nset terminal pngcairo size 1000,400 noenhanced\n"
        << fmt::format("set output '{}/{}_curves.png'\n", output_dir, name)
        << "set multiplot layout 1,2 title '" << name << "'\nset key autotitle columnhead\nset xlabel 'epoch'\n"
        << "set title 'loss'\n"
        << fmt::format("plot '{0}' using 1:2 with linespoints title 'train', '{0}' using 1:4 with linespoints title 'test'\n", csv)
        << "set title 'accuracy'\n"
        << fmt::format("plot '{0}' using 1:3 with linespoints title 'train', '{0}' using 1:5 with linespoints title 'test'\n", csv)
        << "unset multiplot\n";
  }
  run_gnuplot(script);
}

}  // namespace examples

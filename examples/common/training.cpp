#include "common/training.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include <tapegrad/framework/serialize/checkpoint.h>

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
  app.add_option("--export", options.export_path,
                 "also write the model for PyTorch: PATH.pt or .pth (torch.save state dict), or PATH.safetensors");
  app.add_option("--max-steps", options.max_steps, "at most this many batches per epoch (smoke runs)");
  app.add_option("--subset", options.subset, "train on the first N training images only (smoke runs)");
  // Note: the images need no conversion: a 1-channel batch is channels-last already (PyTorch's size-1 rule). So
  // is the CNN's first weight [32, 1, 3, 3], so, as in PyTorch, its first block runs row-major and the model turns
  // channels-last at the second convolution.
  app.add_flag("--channels-last", options.channels_last, "run the model channels-last (model->to(ChannelsLast))");
  app.add_flag("--autocast", options.autocast,
               "bfloat16 mixed precision: forward (and evaluation) under AutocastGuard (docs/autocast.md)");
}

void apply(Options& options, const std::string& name) {
  if (options.threads > 0) set_num_threads(options.threads);
  manual_seed(options.seed);
  const std::string extension = std::filesystem::path(options.export_path).extension().string();
  if (!options.export_path.empty() && extension != ".pt" && extension != ".pth" && extension != ".safetensors")
    throw Error(fmt::format("--export {}: the extension must be .pt, .pth or .safetensors", options.export_path));
  std::filesystem::create_directories(options.output_dir);
  if (options.checkpoint.empty()) options.checkpoint = options.output_dir + "/" + name + ".ckpt";
}

namespace {
// --export: the PyTorch-visible state in the format the extension names (docs/interop.md).
void export_model(const nn::Module& model, const std::string& path) {
  if (path.empty()) return;
  std::filesystem::path(path).extension() == ".safetensors" ? save_safetensors(model, path) : save_pytorch(model, path);
  fmt::print("exported {} for PyTorch\n", path);
}
}  // namespace

data::TensorDataset take(const data::TensorDataset& dataset, std::int64_t count) {
  return count <= 0 || count >= dataset.size() ? dataset : dataset.head(count);
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double Progress::elapsed_seconds() const { return now_seconds() - start_; }

Progress::Progress(std::string label, std::int64_t total, std::ostream& out, bool interactive)
    : label_(std::move(label)), total_(total), start_(now_seconds()), out_(&out), interactive_(interactive) {}

void Progress::advance(std::int64_t samples) {
  done_ += samples;
  const double t = elapsed_seconds();
  const double rate = t > 0 ? static_cast<double>(done_) / t : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
  if (!interactive_) {
    // Note: a file or a pipe gets whole lines only: one per 10% once the epoch has run for 10 s (a short epoch
    // prints nothing here; its summary line follows), never a carriage-return redraw.
    const int tenth = total_ > 0 ? static_cast<int>(10 * done_ / total_) : 10;
    if (tenth > last_tenth_ && tenth < 10 && t >= 10.0)
      *out_ << fmt::format("{} {}% {}/{}  {:.0f} samples/s  ETA {:.0f}s\n", label_, 10 * tenth, done_, total_, rate,
                           eta)
            << std::flush;
    last_tenth_ = std::max(last_tenth_, tenth);
    return;
  }
  if (t - last_draw_ < 0.1 && done_ < total_) return;
  last_draw_ = t;
  const int width = 30;
  const int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
  *out_ << fmt::format("\r{} [{}] {}/{}  {:.0f} samples/s  ETA {:.0f}s   ", label_, bar, done_, total_, rate, eta)
        << std::flush;
}

void Progress::finish() {
  if (interactive_) *out_ << "\r" << std::string(100, ' ') << "\r" << std::flush;
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    rest.remove_prefix(colon + 1);
  }
}

bool have_gnuplot() { return !find_on_path("gnuplot").empty(); }

std::string gnuplot_string(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

// Note: gnuplot runs from an argument vector, never through a shell, in the script's own directory, and the
// scripts name their files relative to it: an output directory holding a quote, a '$' or a backtick is then
// neither shell nor gnuplot syntax.
bool run_gnuplot(const std::string& script_path) {
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    std::cerr << "gnuplot not found on PATH (Debian: gnuplot-nox): no PNG, the CSV is written\n";
    return false;
  }
  const std::filesystem::path script(script_path);
  const std::string dir = script.has_parent_path() ? script.parent_path().string() : ".";
  const std::string name = script.filename().string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  std::vector<char*> argv{const_cast<char*>(gnuplot.c_str()), const_cast<char*>(name.c_str()), nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    std::cerr << fmt::format("gnuplot could not be started: {}\n", std::strerror(spawned));
    return false;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) std::cerr << fmt::format("gnuplot {} failed (status {})\n", script_path, status);
  return ok;
}

void write_metrics(const std::string& output_dir, const std::string& name, const std::vector<EpochMetrics>& rows) {
  const std::string csv_name = name + "_metrics.csv", csv = gnuplot_string(csv_name);
  {
    std::ofstream out(output_dir + "/" + csv_name);
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
        << fmt::format("set output {}\n", gnuplot_string(name + "_curves.png"))
        << "set multiplot layout 1,2 title '" << name << "'\nset key autotitle columnhead\nset xlabel 'epoch'\n"
        << "set title 'loss'\n"
        << fmt::format("plot {0} using 1:2 with linespoints title 'train', {0} using 1:4 with linespoints title 'test'\n", csv)
        << "set title 'accuracy'\n"
        << fmt::format("plot {0} using 1:3 with linespoints title 'train', {0} using 1:5 with linespoints title 'test'\n", csv)
        << "unset multiplot\n";
  }
  run_gnuplot(script);
}

int run_example(int argc, char** argv, const ExampleSpec& spec) try {
  Options options = spec.defaults;
  CLI::App app{spec.description};
  add_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  apply(options, spec.name);
  // Note: thread-local, so it covers this thread's forward and backward passes (the DataLoader's workers compute
  // no products); evaluation runs under it too, so a checkpoint's recorded accuracy is re-checked the same way.
  const AutocastGuard autocast(DType::BFloat16, options.autocast);

  data::FashionMnistOptions data_options;
  data_options.dir = options.data_dir;
  const data::FashionMNIST test_set(data::Split::Test, data_options);

  if (!options.evaluate.empty()) {
    auto model = spec.make_model();  // fresh weights; the checkpoint replaces every parameter and buffer
    if (options.channels_last) model->to(MemoryFormat::ChannelsLast);
    const Checkpoint saved = load_checkpoint(options.evaluate);
    model->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
    const Score score = evaluate(*model, test_set);
    const auto recorded = saved.metadata.find("test_accuracy");
    fmt::print("reloaded {} (epoch {}): test accuracy {:.4f} (recorded at save time: {}), test loss {:.4f}\n",
               options.evaluate, saved.epoch, score.accuracy,
               recorded == saved.metadata.end() ? "n/a" : recorded->second, score.loss);
    if (recorded != saved.metadata.end() && fmt::format("{:.6f}", score.accuracy) != recorded->second) {
      std::cerr << spec.name << ": the reloaded model's accuracy differs from the saved one\n";
      return 1;
    }
    export_model(*model, options.export_path);
    return 0;
  }

  const data::FashionMNIST full_train(data::Split::Train, data_options);
  const data::TensorDataset train_set = take(full_train, options.subset);
  data::DataLoader loader(train_set, data::DataLoaderOptions{}
                                         .with_batch_size(options.batch_size)
                                         .with_shuffle()
                                         .with_drop_last()
                                         .with_seed(options.seed)
                                         .with_augmentation(spec.augmentation));
  const std::int64_t steps_per_epoch =
      options.max_steps > 0 ? std::min(options.max_steps, loader.size()) : loader.size();

  auto model = spec.make_model();
  if (options.channels_last) model->to(MemoryFormat::ChannelsLast);
  Training training = spec.make_training(*model, options, steps_per_epoch * options.epochs);
  fmt::print("{}\n{} training images, {} test images, {} steps per epoch, {} threads\n", model->repr(),
             train_set.size(), test_set.size(), steps_per_epoch, get_num_threads());

  std::vector<EpochMetrics> rows;
  Score test_score;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    Progress progress(fmt::format("epoch {}/{}", epoch, options.epochs), steps_per_epoch * options.batch_size,
                      std::cerr, stderr_is_terminal());
    const EpochResult trained = train_epoch(*model, loader, *training.optimizer, training.schedule.get(),
                                            steps_per_epoch, [&](std::int64_t n) { progress.advance(n); });
    const double seconds = progress.elapsed_seconds();
    progress.finish();
    test_score = evaluate(*model, test_set);
    const EpochMetrics row{epoch, trained.loss, trained.accuracy, test_score.loss, test_score.accuracy, seconds,
                           static_cast<double>(trained.samples) / seconds};
    rows.push_back(row);
    fmt::print("epoch {}/{}: loss {:.4f}  train acc {:.4f}  test loss {:.4f}  test acc {:.4f}  {:.1f}s  {:.0f} samples/s\n",
               epoch, options.epochs, row.train_loss, row.train_accuracy, row.test_loss, row.test_accuracy, seconds,
               row.samples_per_second);
    std::fflush(stdout);
    write_metrics(options.output_dir, spec.name, rows);
  }

  Checkpoint saved = make_checkpoint(*model, *training.optimizer, training.schedule.get(), loader, options.epochs,
                                     steps_per_epoch * options.epochs);
  saved.metadata["example"] = spec.name;
  saved.metadata["test_accuracy"] = fmt::format("{:.6f}", test_score.accuracy);
  save_checkpoint(saved, options.checkpoint);
  fmt::print("saved {} (test accuracy {:.4f})\n", options.checkpoint, test_score.accuracy);
  export_model(*model, options.export_path);
  return 0;
} catch (const std::exception& error) {
  std::cerr << spec.name << ": " << error.what() << "\n";
  return 1;
}

}  // namespace examples

// Fashion-MNIST from an image folder on disk, through the streaming loader: on first run, writes the first N
// training and M test images as PNG files (<folder>/{train,test}/<label>/<index>.png), then trains the CNN of
// fashion_mnist_cnn from those files: each batch is read, decoded (libpng), cropped, flipped and normalised by
// worker threads while the model trains. --loader-only times the loader alone (no model) at 1 and 2 workers.
// Each epoch prints samples/s, the time the training loop waited for batches, and the process's RSS.
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/png.h"
#include "common/training.h"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// The resident set size of this process, from /proc/self/status (MiB; 0 when unavailable).
double rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib / 1024.0;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

// CPU seconds this process has used, all threads: divided into the work done, a cost that does not depend on
// how loaded the machine is (wall-clock rates do).
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Writes images [0, count) of `split` as <dir>/<label>/<index>.png, unless a previous run finished doing so
// (its ".complete" marker, written last, records the count).
void write_split(const std::string& dir, data::Split split, std::int64_t count, const std::string& data_dir) {
  const fs::path marker = fs::path(dir) / ".complete";
  std::int64_t written = -1;
  std::ifstream{marker} >> written;
  if (written == count) return;
  data::FashionMnistOptions options;
  options.dir = data_dir;
  options.normalize = false;  // pixels in [0, 1]
  const data::FashionMNIST source(split, options);
  const std::int64_t available = std::min(count, source.size());
  fmt::print("writing {} PNG files to {} (first run)\n", available, dir);
  for (int label = 0; label < 10; ++label) fs::create_directories(fs::path(dir) / std::to_string(label));
  const float* pixels = source.images().data<float>();
  const std::int64_t* labels = source.labels().data<std::int64_t>();
  std::vector<std::uint8_t> image(28 * 28);
  for (std::int64_t i = 0; i < available; ++i) {
    for (std::size_t p = 0; p < image.size(); ++p)
      image[p] = static_cast<std::uint8_t>(std::lround(pixels[i * 784 + static_cast<std::int64_t>(p)] * 255.0f));
    examples::write_png_gray8((fs::path(dir) / std::to_string(labels[i]) / fmt::format("{:05}.png", i)).string(), 28,
                              28, image);
  }
  std::ofstream(marker) << count;
}

// ToTensor, then (training only) a random 28x28 crop of the image padded by 2 and a random flip, then
// normalisation with Fashion-MNIST's statistics. Crop fill 0 is black, before normalisation.
data::MapDataset pipeline(const data::ImageFolder& folder, bool augment) {
  using namespace data::transforms;
  const Normalize normalize(data::kFashionMnistMean, data::kFashionMnistStd);
  if (!augment) return folder.map(ToTensor()).map(normalize);
  return folder.map(ToTensor()).map(RandomCrop(28, 2, 0.0)).map(RandomHorizontalFlip()).map(normalize);
}

// Accuracy of `model` over a loader's epoch (eval mode, no gradients).
double accuracy(nn::Module& model, data::StreamingDataLoader& loader) {
  model.eval();
  NoGradGuard no_grad;
  std::int64_t correct = 0, total = 0;
  for (data::Example& batch : loader) {
    correct += static_cast<std::int64_t>(sum(eq(argmax(model(batch.data), 1), batch.target).to(DType::Float64)).item());
    total += batch.target.numel();
  }
  return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace

int main(int argc, char** argv) try {
  examples::Options options;
  options.epochs = 2;
  options.batch_size = 128;
  options.lr = 0.1;
  std::string folder;
  std::int64_t train_images = 6000, test_images = 1000;
  int workers = 2;
  bool loader_only = false;
  CLI::App app{"Train the Fashion-MNIST CNN from a folder of PNG files through the streaming loader"};
  examples::add_options(app, options);
  app.add_option("--folder", folder, "where the PNG files are (default: <output-dir>/fashion_mnist_png)");
  app.add_option("--train-images", train_images, "training images written on first run")->capture_default_str();
  app.add_option("--test-images", test_images, "test images written on first run")->capture_default_str();
  app.add_option("--workers", workers, "loader worker threads")->capture_default_str();
  app.add_flag("--loader-only", loader_only, "time one epoch of the training loader at 1 and 2 workers, no model");
  CLI11_PARSE(app, argc, argv);
  examples::apply(options, "fashion_mnist_folder");
  if (folder.empty()) folder = (fs::path(options.output_dir) / "fashion_mnist_png").string();
  write_split(folder + "/train", data::Split::Train, train_images, options.data_dir);
  write_split(folder + "/test", data::Split::Test, test_images, options.data_dir);

  const data::ImageFolder train_folder(folder + "/train", {/*channels=*/1, {}});
  const data::ImageFolder test_folder(folder + "/test", {/*channels=*/1, {}});
  auto loader_options = data::StreamingLoaderOptions{}
                            .with_batch_size(options.batch_size)
                            .with_shuffle()
                            .with_drop_last()
                            .with_seed(options.seed)
                            .with_workers(workers);

  if (loader_only) {
    for (int w : {1, 2}) {
      auto loader = data::make_data_loader(pipeline(train_folder, true), data::StreamingLoaderOptions(loader_options).with_workers(w));
      const double rss_before = rss_mib(), start = examples::now_seconds(), cpu_start = cpu_seconds();
      std::int64_t samples = 0;
      for (data::Example& batch : *loader) samples += batch.target.numel();
      const double seconds = examples::now_seconds() - start, cpu = cpu_seconds() - cpu_start;
      fmt::print("loader only, {} worker{}: {} images read, decoded and augmented in {:.2f}s = {:.0f} samples/s "
                 "({:.2f} CPU s = {:.0f} samples per CPU second); RSS {:.1f} -> {:.1f} MiB\n",
                 w, w == 1 ? "" : "s", samples, seconds, samples / seconds, cpu, samples / cpu, rss_before, rss_mib());
    }
    return 0;
  }

  auto train_loader = data::make_data_loader(pipeline(train_folder, true), loader_options);
  auto test_loader = data::make_data_loader(pipeline(test_folder, false),
                                            data::StreamingLoaderOptions{}.with_batch_size(500).with_workers(workers));
  const std::int64_t steps_per_epoch =
      options.max_steps > 0 ? std::min(options.max_steps, train_loader->size()) : train_loader->size();
  auto model = examples::make_cnn();
  examples::Training training = examples::make_sgd_one_cycle(*model, options.lr, steps_per_epoch * options.epochs);
  fmt::print("{} training images in {} classes, {} test images, {} steps per epoch, {} loader workers, {} threads\n",
             train_folder.size(), train_folder.classes().size(), test_folder.size(), steps_per_epoch, workers,
             get_num_threads());

  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    model->train();
    const double start = examples::now_seconds(), rss_before = rss_mib(), cpu_start = cpu_seconds();
    double waited = 0, loss_sum = 0;
    std::int64_t samples = 0, steps = 0;
    double wait_start = examples::now_seconds();
    for (data::Example& batch : *train_loader) {
      waited += examples::now_seconds() - wait_start;
      Tensor loss = cross_entropy((*model)(batch.data), batch.target);
      training.optimizer->zero_grad();
      loss.backward();
      training.optimizer->step();
      training.schedule->step();
      loss_sum += loss.item() * static_cast<double>(batch.target.numel());
      samples += batch.target.numel();
      if (++steps == steps_per_epoch) break;
      wait_start = examples::now_seconds();
    }
    const double seconds = examples::now_seconds() - start, cpu = cpu_seconds() - cpu_start;
    const double rss_after = rss_mib();
    fmt::print("epoch {}/{}: loss {:.4f}  test acc {:.4f}  {:.1f}s  {:.0f} samples/s ({:.0f} per CPU second)  "
               "waited for batches {:.2f}s  RSS {:.1f} -> {:.1f} MiB\n",
               epoch, options.epochs, loss_sum / static_cast<double>(std::max<std::int64_t>(samples, 1)),
               accuracy(*model, *test_loader), seconds, samples / seconds, samples / cpu, waited, rss_before, rss_after);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& error) {
  fmt::print(stderr, "fashion_mnist_folder: {}\n", error.what());
  return 1;
}

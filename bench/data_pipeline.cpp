// Fashion-MNIST input pipeline throughput: how long loading takes and how many batches per second a
// DataLoader delivers, plain, shuffled and with augmentation. A model step takes milliseconds; these
// numbers show the pipeline is far from the bottleneck.
// Usage: data_pipeline [DIR] [BATCH_SIZE]   (DIR defaults to fashion_mnist_dir())
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::data;

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void time_epoch(const char* name, const TensorDataset& dataset, const DataLoaderOptions& options) {
  DataLoader loader(dataset, options);
  loader.begin();  // warm-up epoch start (allocations, page faults)
  for (int epoch = 0; epoch < 3; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    std::int64_t batches = 0, samples = 0;
    for (auto& batch : loader) {
      ++batches;
      samples += batch.labels.numel();
    }
    const double elapsed = seconds_since(start);
    std::printf("%-28s epoch %d: %lld batches in %.3f s = %.0f batches/s, %.0f samples/s\n", name, epoch,
                static_cast<long long>(batches), elapsed, batches / elapsed, samples / elapsed);
  }
}
}  // namespace

int main(int argc, char** argv) {
  FashionMnistOptions options;
  if (argc > 1) options.dir = argv[1];
  const std::int64_t batch_size = argc > 2 ? std::atoll(argv[2]) : 64;
  try {
    auto start = std::chrono::steady_clock::now();
    FashionMNIST train(Split::Train, options);
    std::printf("load train (60000, gzip + decode + normalise): %.3f s\n", seconds_since(start));
    start = std::chrono::steady_clock::now();
    FashionMNIST test(Split::Test, options);
    std::printf("load test  (10000): %.3f s\n", seconds_since(start));

    const auto base = DataLoaderOptions{}.with_batch_size(batch_size).with_seed(1);
    time_epoch("sequential", train, base);
    time_epoch("shuffle", train, DataLoaderOptions(base).with_shuffle());
    Augmentation augmentation;
    augmentation.crop_padding = 2;
    augmentation.horizontal_flip = true;
    augmentation.fill = train.background();
    time_epoch("shuffle + crop(2) + flip", train, DataLoaderOptions(base).with_shuffle().with_augmentation(augmentation));
  } catch (const Error& e) {
    std::fprintf(stderr, "data_pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}

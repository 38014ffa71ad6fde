// A long training loop's resident memory: a Conv-BatchNorm-ReLU-Pool-Linear model trained with Adam for
// --steps steps on random batches. Each step records a graph, runs backward and updates; the tape must be
// empty after every backward and the resident set must stay flat (the tape releases saved tensors, the
// caching allocator reuses blocks instead of growing). Prints RSS at intervals; exits 1 if it grew by more
// than --max-growth-mb after warm-up or if a record outlived its backward.
//   training_memory [--steps N] [--max-growth-mb M] [--smoke]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "resident_memory.h"
#include <tapegrad/tapegrad.h>

using tapegrad::bench::resident_mib;

int main(int argc, char** argv) {
  using namespace tapegrad;
  long steps = 3000;
  double max_growth_mib = 4.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--max-growth-mb") == 0 && i + 1 < argc) {
      max_growth_mib = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--smoke") == 0) {
      steps = 40;
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--max-growth-mb M] [--smoke]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 20) steps = 20;

  set_num_threads(1);
  Generator generator(3);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 16, 3}.with_padding(1)));
  model->push_back(std::make_shared<nn::BatchNorm2d>(16));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Flatten>());
  model->push_back(std::make_shared<nn::Linear>(16 * 14 * 14, 10));
  model->train();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});

  // Note: a few distinct batches in turn, so the data is not one cached tensor but nothing new is allocated
  // for it inside the loop.
  std::vector<Tensor> images, labels;
  for (int b = 0; b < 4; ++b) {
    images.push_back(randn({32, 1, 28, 28}, generator));
    labels.push_back(randint(0, 10, {32}, generator));
  }

  const long warmup = steps / 10;
  double baseline = 0, peak = 0, last_loss = 0;
  std::size_t worst_tape = 0;
  const auto start = std::chrono::steady_clock::now();
  std::printf("%10s %12s %12s\n", "steps", "rss_mib", "growth_mib");
  for (long step = 1; step <= steps; ++step) {
    optimizer.zero_grad();
    const std::size_t b = static_cast<std::size_t>(step % 4);
    Tensor loss = cross_entropy(model->forward(images[b]), labels[b]);
    loss.backward();
    optimizer.step();
    last_loss = loss.item();
    worst_tape = std::max(worst_tape, tape_size());
    if (step == warmup) baseline = resident_mib();
    if (step % (steps / 10) == 0 || step == warmup) {
      const double rss = resident_mib();
      if (step > warmup && rss > peak) peak = rss;
      std::printf("%10ld %12.2f %12.2f\n", step, rss, step >= warmup ? rss - baseline : 0.0);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double growth = peak - baseline;
  std::printf(
      "training_memory: %ld steps of batch 32 in %.2f s, RSS after warm-up %.2f MiB, peak %.2f MiB, "
      "growth %.2f MiB (limit %.1f), largest tape after a step %zu records, last loss %.4f\n",
      steps, seconds, baseline, peak, growth, max_growth_mib, worst_tape, last_loss);
  if (worst_tape != 0) {
    std::printf("training_memory: FAIL: %zu tape records outlived their backward\n", worst_tape);
    return 1;
  }
  if (growth > max_growth_mib) {
    std::printf("training_memory: FAIL: resident memory grew by %.2f MiB over %ld training steps\n", growth,
                steps - warmup);
    return 1;
  }
  std::printf("training_memory: OK: resident memory stayed flat and the tape empty\n");
  return 0;
}

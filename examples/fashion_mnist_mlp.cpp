// Fashion-MNIST MLP: Flatten, (Linear-BN1d-ReLU) x 2, Linear, trained with AdamW under a one-cycle schedule.
// Saves a checkpoint; --evaluate CHECKPOINT loads it into a fresh model.
#include "common/training.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  examples::ExampleSpec spec;
  spec.name = "fashion_mnist_mlp";
  spec.description = "Train a BatchNorm MLP on Fashion-MNIST (or evaluate a saved checkpoint)";
  spec.defaults.epochs = 8;
  spec.defaults.batch_size = 128;
  spec.defaults.lr = 3e-3;
  spec.make_model = [] { return examples::make_mlp(); };
  spec.make_training = [](nn::Module& model, const examples::Options& options, std::int64_t total_steps) {
    return examples::make_adamw_one_cycle(model, options.lr, total_steps);
  };
  return examples::run_example(argc, argv, spec);
}

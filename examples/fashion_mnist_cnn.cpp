// Fashion-MNIST CNN: (Conv-BN-ReLU-MaxPool) x 2, then Linear-ReLU-Dropout-Linear, trained with SGD + Nesterov
// momentum under a one-cycle schedule. Saves a checkpoint; --evaluate CHECKPOINT loads it into a fresh model.
#include "common/training.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  examples::ExampleSpec spec;
  spec.name = "fashion_mnist_cnn";
  spec.description = "Train a BatchNorm CNN on Fashion-MNIST (or evaluate a saved checkpoint)";
  spec.defaults.epochs = 4;
  spec.defaults.batch_size = 128;
  spec.defaults.lr = 0.1;
  spec.make_model = [] { return examples::make_cnn(); };
  spec.make_training = [](nn::Module& model, const examples::Options& options, std::int64_t total_steps) {
    examples::Training training;
    auto optimizer = std::make_unique<optim::SGD>(
        model.parameters(), optim::SGDOptions{.lr = options.lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    training.schedule = std::make_unique<optim::OneCycleLR>(*optimizer, options.lr,
                                                            optim::OneCycleOptions{.total_steps = total_steps});
    training.optimizer = std::move(optimizer);
    return training;
  };
  return examples::run_example(argc, argv, spec);
}

// Fashion-MNIST LSTM: each image read as a sequence of 28 rows of 28 pixels by a bidirectional 2-layer LSTM,
// Linear on the final hidden states of both directions, trained with Adam under a one-cycle schedule. Saves a
// checkpoint; --evaluate CHECKPOINT loads it into a fresh model.
#include "common/training.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  examples::ExampleSpec spec;
  spec.name = "fashion_mnist_lstm";
  spec.description = "Train a bidirectional LSTM on Fashion-MNIST rows (or evaluate a saved checkpoint)";
  spec.defaults.epochs = 4;
  spec.defaults.batch_size = 128;
  spec.defaults.lr = 3e-3;
  spec.make_model = [] { return examples::make_lstm(128); };
  spec.make_training = [](nn::Module& model, const examples::Options& options, std::int64_t total_steps) {
    return examples::make_adam_one_cycle(model, options.lr, total_steps);
  };
  return examples::run_example(argc, argv, spec);
}

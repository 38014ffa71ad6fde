// Fashion-MNIST CNN: (Conv-BN-ReLU-MaxPool) x 2, then Linear-ReLU-Dropout-Linear, trained with SGD + Nesterov
// momentum under a one-cycle schedule. Saves a checkpoint; --evaluate CHECKPOINT loads it into a fresh model;
// --export model.pt (or .safetensors) also writes the weights for PyTorch (docs/interop.md); --channels-last runs
// the model channels-last (model->to(MemoryFormat::ChannelsLast), docs/channels_last.md).
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
    return examples::make_sgd_one_cycle(model, options.lr, total_steps);
  };
  return examples::run_example(argc, argv, spec);
}

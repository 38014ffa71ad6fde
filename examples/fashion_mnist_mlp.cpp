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
    examples::Training training;
    // Note: weight decay on the weight matrices only; decaying biases and BatchNorm's affine parameters
    // fights the normalisation.
    std::vector<Tensor> decay, no_decay;
    for (const auto& [name, p] : model.named_parameters()) (p.dim() < 2 ? no_decay : decay).push_back(p);
    auto optimizer = std::make_unique<optim::AdamW>(
        std::vector<optim::ParamGroup>{{decay, {}}, {no_decay, {{"weight_decay", 0.0}}}},
        optim::AdamWOptions{.lr = options.lr, .weight_decay = 0.05});
    training.schedule = std::make_unique<optim::OneCycleLR>(*optimizer, options.lr,
                                                            optim::OneCycleOptions{.total_steps = total_steps});
    training.optimizer = std::move(optimizer);
    return training;
  };
  return examples::run_example(argc, argv, spec);
}

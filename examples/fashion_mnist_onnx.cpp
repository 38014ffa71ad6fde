// The main job's last step (issue 41): the trained Fashion-MNIST CNN leaves tapegrad as an ONNX file, and ONNX
// Runtime (npm onnxruntime-node, through tests/onnx/run_model.js) classifies the 10,000 test images with it.
// Prints both test accuracies, how many predictions agree and the largest logit difference; exit 1 when the
// two accuracies differ.
//   fashion_mnist_onnx --checkpoint out/main_job/fashion_mnist_cnn.ckpt --onnx out/main_job/fashion_mnist_cnn.onnx
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

#include "common/recipes.h"
#include "support/onnx_runtime.h"

using namespace tapegrad;

namespace {

// The predicted class of each row of logits [N, 10].
std::vector<std::int64_t> predictions(const Tensor& logits) {
  const Tensor best = argmax(logits, 1);
  const std::int64_t* p = best.data<std::int64_t>();
  return {p, p + best.numel()};
}

double accuracy(const std::vector<std::int64_t>& predicted, const Tensor& labels) {
  const std::int64_t* l = labels.data<std::int64_t>();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == l[i];
  return static_cast<double>(correct) / static_cast<double>(predicted.size());
}

}  // namespace

int main(int argc, char** argv) try {
  std::string checkpoint, onnx_path, data_dir;
  int threads = 0;
  std::int64_t images = 0;
  CLI::App app{"Export the trained Fashion-MNIST CNN to ONNX and compare ONNX Runtime's test accuracy with tapegrad's"};
  app.add_option("--checkpoint", checkpoint, "the CNN's checkpoint (fashion_mnist_cnn's output)")->required();
  app.add_option("--onnx", onnx_path, "where to write the ONNX model (default: the checkpoint's path, .onnx)");
  app.add_option("--threads", threads, "threads of both runtimes (0: tapegrad's default)")->capture_default_str();
  app.add_option("--data-dir", data_dir, "Fashion-MNIST directory (default: Debian's package)");
  app.add_option("--images", images, "use the first N test images only (0: all 10,000; for smoke runs)");
  CLI11_PARSE(app, argc, argv);
  if (onnx_path.empty()) onnx_path = std::filesystem::path(checkpoint).replace_extension(".onnx").string();
  if (threads > 0) set_num_threads(threads);

  auto model = examples::make_cnn();
  const Checkpoint saved = load_checkpoint(checkpoint);
  model->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  model->eval();
  data::FashionMnistOptions data_options;
  data_options.dir = data_dir;
  const data::TensorDataset test_set = [&] {
    const data::FashionMNIST all(data::Split::Test, data_options);
    return images > 0 && images < all.size() ? all.head(images) : data::TensorDataset(all);
  }();

  // tapegrad's logits, in the batches of 1,000 the examples evaluate with.
  std::vector<Tensor> parts;
  {
    NoGradGuard no_grad;
    for (std::int64_t start = 0; start < test_set.size(); start += 1000)
      parts.push_back((*model)(test_set.images().narrow(0, start, std::min<std::int64_t>(1000, test_set.size() - start))));
  }
  const Tensor ours = cat(parts, 0);

  onnx::ExportOptions options;
  options.input_names = {"images"};
  options.output_names = {"logits"};
  options.dynamic_axes = {{"images", {0}}, {"logits", {0}}};
  onnx::export_onnx(*model, {test_set.images().narrow(0, 0, 1)}, onnx_path, options);
  fmt::print("exported {} (ONNX, opset {}, dynamic batch axis)\n", onnx_path, options.opset);
  std::fflush(stdout);

  // Note: ONNX Runtime gets every test image in one file and runs them in slices of 1,000 (the same batches).
  const std::vector<Tensor> outputs = testing::run_in_onnx_runtime(
      onnx_path, {{"images", test_set.images()}},
      testing::OnnxRuntimeOptions{.threads = threads > 0 ? threads : get_num_threads(),
                                  .batches = static_cast<int>((test_set.size() + 999) / 1000)});
  const Tensor& theirs = outputs.at(0);
  if (theirs.shape() != ours.shape())
    throw Error(fmt::format("ONNX Runtime's logits are {}, tapegrad's {}", shape_string(theirs.shape()),
                            shape_string(ours.shape())));

  const std::vector<std::int64_t> ours_predicted = predictions(ours), theirs_predicted = predictions(theirs);
  std::int64_t agree = 0;
  for (std::size_t i = 0; i < ours_predicted.size(); ++i) agree += ours_predicted[i] == theirs_predicted[i];
  const double largest = max(abs(sub(ours, theirs))).item();
  const double ours_accuracy = accuracy(ours_predicted, test_set.labels());
  const double theirs_accuracy = accuracy(theirs_predicted, test_set.labels());
  fmt::print("test accuracy: tapegrad {:.4f}, ONNX Runtime {:.4f} ({} of {} predictions identical; largest |logit "
             "difference| {:.3g})\n",
             ours_accuracy, theirs_accuracy, agree, ours_predicted.size(), largest);
  if (ours_accuracy != theirs_accuracy) {
    std::cerr << "fashion_mnist_onnx: ONNX Runtime's test accuracy differs from tapegrad's\n";
    return 1;
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "fashion_mnist_onnx: " << error.what() << "\n";
  return 1;
}

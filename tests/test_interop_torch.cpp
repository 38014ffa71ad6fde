// tapegrad against real PyTorch (Debian's python3-torch 1.13). ctest runs tests/interop/torch_side.py write
// first (fixture interop_torch_files: PyTorch writes torch.save and safetensors files with reference outputs),
// then this test (tapegrad loads them, compares, and writes its own), then torch_side.py check (PyTorch loads
// tapegrad's files with load_state_dict(strict=True) and compares). Missing files fail here; they are never skipped.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>

#include "common/recipes.h"
#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/interop.h>

using namespace tapegrad;

namespace {

const std::string kDir = TAPEGRAD_INTEROP_DIR;
// Note: max |difference| / max |reference|. float64 meets the 1e-6 with nine digits to spare (~1e-15).
// float32 outputs differ by up to ~1.1e-6 (measured: the MLP's 784-term dot products), about nine float32 ulps
// of the largest output: PyTorch's and tapegrad's GEMMs sum in different orders. The loaded weights themselves
// are bit-identical (checked below), so float32 is held to 4e-6.
double tolerance(DType dtype) { return dtype == DType::Float64 ? 1e-6 : 4e-6; }

std::shared_ptr<nn::Sequential> make(const std::string& arch, DType dtype) {
  auto model = arch == "cnn" ? examples::make_cnn() : examples::make_mlp();
  model->to(dtype);
  return model;
}

std::map<std::string, Tensor> read_io(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (ForeignTensor& t : read_safetensors(foreign::read_whole_file(path, "test"), path)) out[t.name] = t.value;
  REQUIRE(out.count("input") == 1);
  REQUIRE(out.count("output") == 1);
  return out;
}

// max |a - b| / max |b|, as torch_side.py computes it.
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double difference = 0, scale = 1e-30;
  for (std::size_t i = 0; i < x.size(); ++i) {
    difference = std::max(difference, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return difference / scale;
}

Tensor eval_output(nn::Module& model, const Tensor& input) {
  model.eval();
  NoGradGuard no_grad;
  return model(input);
}

std::int64_t buffer_value(const nn::Module& model, const std::string& name) {
  for (const auto& [key, t] : model.state())
    if (key == name) return static_cast<std::int64_t>(t.item());
  FAIL("no state entry " << name);
  return -1;
}

// The test subset torch_side.py evaluated its model on, exactly as it saw it.
data::TensorDataset test_subset() {
  const std::string images = foreign::read_whole_file(kDir + "/test_images.f32", "test");
  const std::string labels = foreign::read_whole_file(kDir + "/test_labels.i64", "test");
  const auto n = static_cast<std::int64_t>(labels.size() / 8);
  REQUIRE(images.size() == static_cast<std::size_t>(n) * 784 * 4);
  std::vector<float> pixels(static_cast<std::size_t>(n) * 784);
  std::vector<std::int64_t> classes(static_cast<std::size_t>(n));
  std::memcpy(pixels.data(), images.data(), images.size());
  std::memcpy(classes.data(), labels.data(), labels.size());
  return data::TensorDataset(from_vector(pixels, {n, 1, 28, 28}), from_vector(classes, {n}));
}

std::int64_t correct_on(nn::Module& model, const data::TensorDataset& set) {
  return std::llround(examples::evaluate(model, set).accuracy * static_cast<double>(set.size()));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A module holding an input and an output as buffers, so a reference pair is one safetensors file.
struct Reference : nn::Module {
  Reference(const Tensor& input, const Tensor& output) {
    register_buffer("input", input);
    register_buffer("output", output);
  }
};

}  // namespace

TEST_CASE("models PyTorch saved load into tapegrad and give PyTorch's eval outputs", "[interop][torch]") {
  for (const std::string arch : {"cnn", "mlp"})
    for (const DType dtype : {DType::Float32, DType::Float64})
      for (const std::string ext : {"pt", "safetensors"}) {
        const std::string stem = kDir + "/torch_" + arch + "_" + std::string(dtype_name(dtype));
        const std::string path = stem + "." + ext;
        INFO(path);
        manual_seed(99);
        auto model = make(arch, dtype);
        const nn::LoadResult result = ext == "pt" ? load_pytorch(*model, path) : load(*model, path);
        CHECK(result.missing_keys.empty());
        CHECK(result.unexpected_keys.empty());
        // num_batches_tracked is 1000 + the seed torch_side.py randomised with.
        for (const char* layer : {arch == "cnn" ? "1" : "2", "5"})
          CHECK(buffer_value(*model, std::string(layer) + ".num_batches_tracked") == (arch == "cnn" ? 1007 : 1011));
        const auto io = read_io(stem + "_io.safetensors");
        const double error = relative_error(eval_output(*model, io.at("input")), io.at("output"));
        INFO("relative difference " << error);
        CHECK(error <= tolerance(dtype));
        // Both formats hold the same numbers, and tapegrad reads them to the same bits.
        if (ext == "safetensors") {
          auto from_pt = make(arch, dtype);
          load_pytorch(*from_pt, stem + ".pt");
          const nn::NamedTensors a = pytorch_state(*from_pt), b = pytorch_state(*model);
          for (std::size_t i = 0; i < a.size(); ++i) CHECK(relative_error(a[i].second, b[i].second) == 0);
        }
      }
}

TEST_CASE("strided views of shared storages load as PyTorch sees them", "[interop][torch]") {
  auto model = make("cnn", DType::Float32);
  load_pytorch(*model, kDir + "/torch_cnn_strided.pt");
  const auto io = read_io(kDir + "/torch_cnn_float32_io.safetensors");
  CHECK(relative_error(eval_output(*model, io.at("input")), io.at("output")) <= tolerance(DType::Float32));
}

TEST_CASE("float16 and bfloat16 files load into a float32 model", "[interop][torch]") {
  for (const std::string low : {"float16", "bfloat16"})
    for (const std::string ext : {"pt", "safetensors"}) {
      INFO(low << " " << ext);
      auto model = make("mlp", DType::Float32);
      load(*model, kDir + "/torch_mlp_" + low + "." + ext);
      const auto io = read_io(kDir + "/torch_mlp_" + low + "_io.safetensors");
      CHECK(relative_error(eval_output(*model, io.at("input")), io.at("output")) <= tolerance(DType::Float32));
    }
}

TEST_CASE("a float32 file loads into a float64 model as load_state_dict converts it", "[interop][torch]") {
  auto model = make("mlp", DType::Float64);
  load_pytorch(*model, kDir + "/torch_mlp_float32.pt");
  CHECK(model->parameters()[0].dtype() == DType::Float64);
  const auto io = read_io(kDir + "/torch_mlp_float32_io.safetensors");
  // Note: the weights are the same numbers; the reference was computed in float32, this in float64.
  CHECK(relative_error(eval_output(*model, io.at("input").to(DType::Float64)), io.at("output")) <= 1e-5);
}

TEST_CASE("a pickle that would run code and the pre-1.6 format are refused by name", "[interop][torch]") {
  auto model = make("mlp", DType::Float32);
  const auto before = model->clone();
  CHECK_THROWS_WITH(load(*model, kDir + "/exploit.pt"), Catch::Contains("global 'posix.system' is not allowed"));
  CHECK_THROWS_WITH(load_pytorch(*model, kDir + "/legacy.pt"), Catch::Contains("legacy torch.save format"));
  const auto a = model->state(), b = before->state();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(relative_error(a[i].second, b[i].second) == 0);
}

TEST_CASE("a model trained in PyTorch scores the same in tapegrad, then fine-tunes", "[interop][torch]") {
  const data::TensorDataset test_set = test_subset();
  std::ifstream expected_file(kDir + "/torch_trained.json");
  std::string json((std::istreambuf_iterator<char>(expected_file)), {});
  const std::size_t at = json.find("\"correct\": ");
  REQUIRE(at != std::string::npos);
  const std::int64_t torch_correct = std::stoll(json.substr(at + 11));

  auto model = make("mlp", DType::Float32);
  load(*model, kDir + "/torch_trained_mlp.pt");
  const std::int64_t before = correct_on(*model, test_set);
  INFO("PyTorch " << torch_correct << ", tapegrad " << before << " of " << test_set.size());
  CHECK(before == torch_correct);

  // Fine-tune on the next 3000 training images (PyTorch trained on the first 3000).
  const data::FashionMNIST full_train(data::Split::Train);
  std::vector<std::int64_t> rows(3000);
  std::iota(rows.begin(), rows.end(), 3000);
  data::Batch batch = full_train.get_batch(rows);
  const data::TensorDataset fine_tune_set(batch.images, batch.labels);
  const double loss_before = examples::evaluate(*model, fine_tune_set).loss;
  manual_seed(5);
  data::DataLoader loader(fine_tune_set, data::DataLoaderOptions{}.with_batch_size(50).with_shuffle());
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 0.02, .momentum = 0.9});
  examples::train_epoch(*model, loader, sgd, nullptr);
  const double loss_after = examples::evaluate(*model, fine_tune_set).loss;
  const std::int64_t after = correct_on(*model, test_set);
  INFO("fine-tune loss " << loss_before << " -> " << loss_after << ", test " << before << " -> " << after);
  CHECK(loss_after < loss_before);
  CHECK(after >= before - 20);  // one epoch on other images must not undo the PyTorch training
  save_safetensors(*model, kDir + "/tg_finetuned_mlp.safetensors");
  write_text(kDir + "/tg_finetuned_mlp.correct", std::to_string(after));
}

TEST_CASE("a model trained by tapegrad is written for PyTorch to evaluate", "[interop][torch]") {
  const data::TensorDataset test_set = test_subset();
  const data::FashionMNIST full_train(data::Split::Train);
  const data::TensorDataset train_set = full_train.head(3000);
  manual_seed(1);
  auto model = make("mlp", DType::Float32);
  data::DataLoader loader(train_set, data::DataLoaderOptions{}.with_batch_size(50).with_shuffle());
  examples::Training training = examples::make_adamw_one_cycle(*model, 3e-3, 60);
  examples::train_epoch(*model, loader, *training.optimizer, training.schedule.get());
  const std::int64_t correct = correct_on(*model, test_set);
  INFO("tapegrad-trained MLP: " << correct << " of " << test_set.size());
  CHECK(correct > 700);  // chance is 100
  save_pytorch(*model, kDir + "/tg_trained_mlp.pt");
  write_text(kDir + "/tg_trained_mlp.correct", std::to_string(correct));
}

TEST_CASE("tapegrad writes both formats with reference outputs for PyTorch", "[interop][torch]") {
  constexpr std::int64_t kBatchesTracked = 4321;
  for (const std::string arch : {"cnn", "mlp"})
    for (const DType dtype : {DType::Float32, DType::Float64}) {
      manual_seed(arch == "cnn" ? 21 : 22);
      auto model = make(arch, dtype);
      {
        NoGradGuard no_grad;
        const TensorOptions like = TensorOptions{}.with_dtype(dtype);
        for (auto& [name, t] : model->state()) {
          Tensor target = t;
          if (name.ends_with("num_batches_tracked"))
            target.fill_(static_cast<double>(kBatchesTracked));
          else if (name.ends_with("running_mean"))
            target.copy_(randn(t.shape(), default_generator(), like).mul_(0.2));
          else if (name.ends_with("running_var"))
            target.copy_(rand(t.shape(), default_generator(), like).add_(0.5));
          else if (is_floating(t.dtype()))
            target.copy_(randn(t.shape(), default_generator(), like).mul_(0.1).add_(t.dim() == 1 && name.ends_with("weight") ? 1.0 : 0.0));
        }
      }
      const Tensor input = randn({3, 1, 28, 28}, default_generator(), TensorOptions{}.with_dtype(dtype));
      const Tensor output = eval_output(*model, input);
      const std::string stem = kDir + "/tg_" + arch + "_" + std::string(dtype_name(dtype));
      save_pytorch(*model, stem + ".pt");
      save_safetensors(*model, stem + ".safetensors");
      Reference reference(input, output);
      save_safetensors(reference, stem + "_io.safetensors");
      // And tapegrad reads its own files back to the same outputs.
      for (const std::string ext : {".pt", ".safetensors"}) {
        auto again = make(arch, dtype);
        load(*again, stem + ext);
        CHECK(relative_error(eval_output(*again, input), output) == 0);
      }
    }
  write_text(kDir + "/tg_expect.json", fmt::format("{{\"num_batches_tracked\": {}}}\n", kBatchesTracked));
}

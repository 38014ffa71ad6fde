// The data files and datasets: IDX files (gzip and plain, good and damaged), FashionMNIST and TensorDataset, and
// the installed Fashion-MNIST when present. (DataLoader batching, shuffling and augmentation: test_data_loader.cpp.)
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/error_of.h"
#include "support/numbered_dataset.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::data;
using Catch::Matchers::Contains;
using tapegrad::testing::error_of;
using tapegrad::testing::labels_of;
using tapegrad::testing::numbered_dataset;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

/// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / fmt::format("tapegrad_test_data_{}_{}", ::getpid(), counter++);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void put_u32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

/// An IDX file of unsigned bytes: magic, big-endian dims, then `values`.
Bytes idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const Bytes& values) {
  Bytes out;
  put_u32(out, magic);
  for (std::uint32_t d : dims) put_u32(out, d);
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

/// Writes `bytes` to `path`, gzip-compressed when `gzip` by the gzip program (independent of the reader).
// Note: not Boost's gzip_compressor: with GCC 12 its header raises a false -Wrestrict (GCC bug 105329)
// that no pragma in this file can silence, and the build is warning-clean.
void write_file(const std::string& path, const Bytes& bytes, bool gzip) {
  const std::string target = gzip ? path + ".raw" : path;
  {
    std::ofstream file(target, std::ios::binary);
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(file.good());
  }
  if (!gzip) return;
  const std::string command = fmt::format("gzip -n -c '{}' > '{}'", target, path);
  REQUIRE(std::system(command.c_str()) == 0);
  fs::remove(target);
}

Bytes read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

/// `count` pseudo-random pixel bytes that hit 0 and 255.
Bytes pixel_values(std::size_t count) {
  Bytes values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  values[0] = 0;
  values[count - 1] = 255;
  return values;
}

/// Writes a Fashion-MNIST-shaped split (28x28, labels i % 10 unless given) into `dir`.
void write_fake_split(const TempDir& dir, const char* prefix, std::uint32_t count, std::uint32_t label_count,
                      std::uint8_t bad_label = 0) {
  Bytes labels(label_count);
  for (std::uint32_t i = 0; i < label_count; ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
  if (bad_label != 0) labels.back() = bad_label;
  write_file(dir / fmt::format("{}-images-idx3-ubyte.gz", prefix),
             idx_bytes(0x803, {count, 28, 28}, pixel_values(count * 28 * 28)), true);
  write_file(dir / fmt::format("{}-labels-idx1-ubyte.gz", prefix), idx_bytes(0x801, {label_count}, labels), true);
}

}  // namespace

// ---------------------------------------------------------------- IDX files

TEST_CASE("IDX images and labels read back identically from gzip and plain files") {
  TempDir dir;
  const Bytes pixels = pixel_values(3 * 2 * 4);
  const Bytes labels = {7, 0, 9};
  for (bool gzip : {true, false}) {
    const std::string images_path = dir / (gzip ? "images.gz" : "images.idx");
    const std::string labels_path = dir / (gzip ? "labels.gz" : "labels.idx");
    write_file(images_path, idx_bytes(0x803, {3, 2, 4}, pixels), gzip);
    write_file(labels_path, idx_bytes(0x801, {3}, labels), gzip);

    Tensor raw = read_idx_images(images_path, /*scale_to_unit=*/false);
    CHECK(raw.shape() == Shape{3, 1, 2, 4});
    CHECK(raw.dtype() == DType::Float32);
    for (std::size_t i = 0; i < pixels.size(); ++i) CHECK(raw.data<float>()[i] == static_cast<float>(pixels[i]));

    Tensor unit = read_idx_images(images_path);
    for (std::size_t i = 0; i < pixels.size(); ++i) CHECK(unit.data<float>()[i] == static_cast<float>(pixels[i]) / 255.0f);
    CHECK(unit.data<float>()[0] == 0.0f);
    CHECK(unit.data<float>()[pixels.size() - 1] == 1.0f);

    Tensor read_labels = read_idx_labels(labels_path);
    CHECK(read_labels.shape() == Shape{3});
    CHECK(read_labels.dtype() == DType::Int64);
    CHECK(read_labels.to_vector() == std::vector<double>{7, 0, 9});
  }
}

TEST_CASE("gzip is recognised by content, not by the file name") {
  TempDir dir;
  write_file(dir / "plain-but-named.gz", idx_bytes(0x801, {2}, {3, 4}), false);
  write_file(dir / "gzip-but-named.idx", idx_bytes(0x801, {2}, {5, 6}), true);
  CHECK(read_idx_labels(dir / "plain-but-named.gz").to_vector() == std::vector<double>{3, 4});
  CHECK(read_idx_labels(dir / "gzip-but-named.idx").to_vector() == std::vector<double>{5, 6});
}

TEST_CASE("an IDX file with zero examples reads as an empty tensor") {
  TempDir dir;
  write_file(dir / "empty.gz", idx_bytes(0x803, {0, 28, 28}, {}), true);
  CHECK(read_idx_images(dir / "empty.gz").shape() == Shape{0, 1, 28, 28});
}

TEST_CASE("a truncated IDX payload is an error naming the file and both sizes") {
  TempDir dir;
  for (bool gzip : {true, false}) {
    const std::string path = dir / (gzip ? "short.gz" : "short.idx");
    write_file(path, idx_bytes(0x803, {3, 2, 2}, pixel_values(11)), gzip);
    CHECK_THAT(error_of([&] { read_idx_images(path); }),
               Contains(fmt::format("read_idx_images: {}: truncated: header [3, 2, 2] promises 12 data bytes, the file has 11", path)));
  }
  const std::string header_only = dir / "header.idx";
  write_file(header_only, {0, 0, 8, 3, 0, 0}, false);
  CHECK_THAT(error_of([&] { read_idx_images(header_only); }),
             Contains(fmt::format("{}: truncated: 6 bytes, the header needs 16", header_only)));
  const std::string tiny = dir / "tiny.idx";
  write_file(tiny, {0, 0}, false);
  CHECK_THAT(error_of([&] { read_idx_labels(tiny); }), Contains(fmt::format("{}: truncated: 2 bytes", tiny)));
}

TEST_CASE("a cut-off gzip stream is an error naming the file") {
  TempDir dir;
  const std::string whole = dir / "whole.gz", cut = dir / "cut.gz";
  write_file(whole, idx_bytes(0x803, {4, 28, 28}, pixel_values(4 * 28 * 28)), true);
  Bytes compressed = read_file(whole);
  compressed.resize(compressed.size() / 2);
  write_file(cut, compressed, false);
  const std::string message = error_of([&] { read_idx_images(cut); });
  CHECK_THAT(message, Contains(fmt::format("read_idx_images: {}: ", cut)));
  CHECK_THAT(message, Contains("truncated"));
}

TEST_CASE("a wrong magic number is an error naming the file and both magics") {
  TempDir dir;
  const std::string labels = dir / "labels.gz";
  write_file(labels, idx_bytes(0x801, {3}, {1, 2, 3}), true);
  CHECK_THAT(error_of([&] { read_idx_images(labels); }),
             Contains(fmt::format("read_idx_images: {}: wrong magic number 0x00000801 (expected 0x00000803", labels)));
  const std::string images = dir / "images.idx";
  write_file(images, idx_bytes(0x803, {1, 1, 1}, {0}), false);
  CHECK_THAT(error_of([&] { read_idx_labels(images); }),
             Contains(fmt::format("read_idx_labels: {}: wrong magic number 0x00000803 (expected 0x00000801", images)));
  const std::string text = dir / "notes.txt";
  write_file(text, {'h', 'e', 'l', 'l', 'o', '\n'}, false);
  CHECK_THAT(error_of([&] { read_idx_labels(text); }), Contains(fmt::format("{}: wrong magic number 0x68656c6c", text)));
}

TEST_CASE("bytes beyond the payload the header promises are an error") {
  TempDir dir;
  const std::string path = dir / "long.idx";
  write_file(path, idx_bytes(0x801, {2}, {1, 2, 3}), false);
  CHECK_THAT(error_of([&] { read_idx_labels(path); }),
             Contains(fmt::format("read_idx_labels: {}: 1 unexpected bytes after the 2 data bytes of header [2]", path)));
}

TEST_CASE("a missing file is an error naming it; in the Debian location it names the package") {
  TempDir dir;
  const std::string missing = dir / "nope.gz";
  const std::string message = error_of([&] { read_idx_labels(missing); });
  CHECK_THAT(message, Contains(fmt::format("read_idx_labels: cannot open {}: No such file or directory", missing)));
  CHECK_THAT(message, !Contains("apt-get"));
  const std::string in_default = fmt::format("{}/no-such-file-idx1-ubyte.gz", kDefaultFashionMnistDir);
  CHECK_THAT(error_of([&] { read_idx_labels(in_default); }),
             Contains(fmt::format("cannot open {}", in_default)) && Contains("apt-get install dataset-fashion-mnist"));
  CHECK_THAT(error_of([&] { read_idx_labels(dir.path.string()); }), Contains("is a directory"));
}

TEST_CASE("fashion_mnist_dir prefers an explicit path, then the environment, then the Debian location") {
  const char* saved = std::getenv(kFashionMnistDirEnv);
  const std::string saved_value = saved ? saved : "";
  ::unsetenv(kFashionMnistDirEnv);
  CHECK(fashion_mnist_dir() == kDefaultFashionMnistDir);
  ::setenv(kFashionMnistDirEnv, "", 1);
  CHECK(fashion_mnist_dir() == kDefaultFashionMnistDir);
  ::setenv(kFashionMnistDirEnv, "/from/env", 1);
  CHECK(fashion_mnist_dir() == "/from/env");
  CHECK(fashion_mnist_dir("/explicit") == "/explicit");
  if (saved) ::setenv(kFashionMnistDirEnv, saved_value.c_str(), 1); else ::unsetenv(kFashionMnistDirEnv);
}

// ---------------------------------------------------------------- datasets

TEST_CASE("FashionMNIST loads a split from a directory and normalises it") {
  TempDir dir;
  write_fake_split(dir, "t10k", 12, 12);
  FashionMnistOptions raw_options;
  raw_options.dir = dir.path.string();
  raw_options.normalize = false;
  FashionMNIST raw(Split::Test, raw_options);
  CHECK(raw.size() == 12);
  CHECK(raw.images().shape() == Shape{12, 1, 28, 28});
  CHECK(raw.labels().at({11}) == 1);
  CHECK(raw.background() == 0.0);

  FashionMnistOptions options;
  options.dir = dir.path.string();
  options.mean = 0.25;
  options.stddev = 0.5;
  FashionMNIST normalised(Split::Test, options);
  const Bytes pixels = pixel_values(12 * 28 * 28);
  for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{500}, pixels.size() - 1})
    CHECK(normalised.images().data<float>()[i] == Approx((pixels[i] / 255.0 - 0.25) / 0.5).margin(1e-6));
  CHECK(normalised.background() == -0.5);
  CHECK(FashionMNIST::class_names()[9] == "Ankle boot");
}

TEST_CASE("FashionMNIST rejects image and label files that disagree or hold bad labels") {
  TempDir dir;
  write_fake_split(dir, "train", 5, 4);
  FashionMnistOptions options;
  options.dir = dir.path.string();
  CHECK_THAT(error_of([&] { FashionMNIST(Split::Train, options); }),
             Contains("train-images-idx3-ubyte.gz holds 5 images but") &&
                 Contains("train-labels-idx1-ubyte.gz holds 4 labels"));
  write_fake_split(dir, "train", 5, 5, /*bad_label=*/10);
  CHECK_THAT(error_of([&] { FashionMNIST(Split::Train, options); }),
             Contains("label 10 at index 4 is not a class in 0..9"));
  write_file(dir / "train-images-idx3-ubyte.gz", idx_bytes(0x803, {1, 27, 28}, pixel_values(27 * 28)), true);
  CHECK_THAT(error_of([&] { FashionMNIST(Split::Train, options); }), Contains("images are 27x28, expected 28x28"));
  options.dir = (dir.path / "absent").string();
  CHECK_THAT(error_of([&] { FashionMNIST(Split::Test, options); }),
             Contains(fmt::format("cannot open {}", (dir.path / "absent" / "t10k-images-idx3-ubyte.gz").string())));
}

TEST_CASE("TensorDataset gathers the requested rows in order, repeats included") {
  TensorDataset dataset = numbered_dataset(5);
  Batch batch = dataset.get_batch({4, 0, 4, 2});
  CHECK(batch.images.shape() == Shape{4, 1, 3, 3});
  CHECK(labels_of(batch) == std::vector<std::int64_t>{4, 0, 4, 2});
  CHECK(batch.images.at({2, 0, 2, 1}) == 4);
  CHECK(batch.images.at({3, 0, 0, 0}) == 2);
  CHECK(dataset.get_batch(std::vector<std::int64_t>{}).images.shape() == Shape{0, 1, 3, 3});
  CHECK_THAT(error_of([&] { dataset.get_batch({1, 5}); }),
             Contains("TensorDataset::get_batch: index 5 is out of range for a dataset of 5 examples"));
  CHECK_THAT(error_of([&] { dataset.get_batch({-1}); }), Contains("index -1 is out of range"));
  CHECK_THAT(error_of([] { TensorDataset(zeros({3, 2}), arange(4)); }),
             Contains("TensorDataset: images [3, 2] and labels [4] hold different numbers of examples (3 != 4)"));
}

TEST_CASE("TensorDataset::head keeps the first examples, all of them past the end, and rejects a negative count") {
  const TensorDataset dataset = numbered_dataset(5);
  const TensorDataset first = dataset.head(3);
  CHECK(first.size() == 3);
  CHECK(first.images().shape() == Shape{3, 1, 3, 3});
  CHECK(first.labels().to_vector() == std::vector<double>{0, 1, 2});
  CHECK(first.images().at({2, 0, 1, 1}) == dataset.images().at({2, 0, 1, 1}));
  CHECK(dataset.head(99).size() == 5);
  CHECK(dataset.head(0).size() == 0);
  CHECK_THAT(error_of([&] { dataset.head(-1); }), Contains("TensorDataset::head: count must be >= 0, got -1"));
}

TEST_CASE("pixel_mean_std is the population mean and standard deviation") {
  auto [mean, stddev] = pixel_mean_std(tensor({1, 2, 3, 6}, {2, 2}));
  CHECK(mean == Approx(3.0));
  CHECK(stddev == Approx(std::sqrt(3.5)));
}

// ---------------------------------------------------------------- the real data, when installed

TEST_CASE("the installed Fashion-MNIST test set has 10,000 balanced images and labels") {
  const std::string dir = fashion_mnist_dir();
  if (!fs::exists(fs::path(dir) / "t10k-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed in " << dir << " (apt-get install dataset-fashion-mnist): real-data test NOT run");
    return;
  }
  FashionMNIST test(Split::Test);
  CHECK(test.size() == 10000);
  CHECK(test.images().shape() == Shape{10000, 1, 28, 28});
  std::vector<int> per_class(10, 0);
  for (std::int64_t i = 0; i < test.size(); ++i) {
    const std::int64_t label = test.labels().data<std::int64_t>()[i];
    REQUIRE(label >= 0);
    REQUIRE(label <= 9);
    per_class[static_cast<std::size_t>(label)]++;
  }
  CHECK(per_class == std::vector<int>(10, 1000));
  FashionMnistOptions raw_options;
  raw_options.normalize = false;
  FashionMNIST raw(Split::Test, raw_options);
  const auto [min, max] = std::minmax_element(raw.images().data<float>(), raw.images().data<float>() + raw.images().numel());
  CHECK(*min == 0.0f);
  CHECK(*max == 1.0f);
}

TEST_CASE("the default normalisation constants are the installed training set's pixel mean and std") {
  const std::string dir = fashion_mnist_dir();
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed in " << dir << " (apt-get install dataset-fashion-mnist): real-data test NOT run");
    return;
  }
  FashionMnistOptions options;
  options.normalize = false;
  FashionMNIST train(Split::Train, options);
  CHECK(train.size() == 60000);
  const auto [mean, stddev] = pixel_mean_std(train.images());
  CHECK(mean == Approx(kFashionMnistMean).margin(5e-5));
  CHECK(stddev == Approx(kFashionMnistStd).margin(5e-5));
  // Normalised with them, the training pixels have mean ~0 and std ~1.
  const auto [normalised_mean, normalised_std] = pixel_mean_std(FashionMNIST(Split::Train).images());
  CHECK(normalised_mean == Approx(0.0).margin(1e-3));
  CHECK(normalised_std == Approx(1.0).margin(1e-3));
}

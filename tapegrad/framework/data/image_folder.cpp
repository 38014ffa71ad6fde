#include <tapegrad/framework/data/image_folder.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {
namespace {

bool is_image_file(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options) : options_(options) {
  namespace fs = std::filesystem;
  if (options_.channels != 1 && options_.channels != 3)
    fail("ImageFolder: channels must be 1 or 3, got {}", options_.channels);
  std::error_code error;
  if (!fs::is_directory(root, error)) fail("ImageFolder: {} is not a directory", root);
  for (const auto& entry : fs::directory_iterator(root, error))
    if (entry.is_directory(error)) classes_.push_back(entry.path().filename().string());
  if (error) fail("ImageFolder: cannot list {}: {}", root, error.message());
  if (classes_.empty()) fail("ImageFolder: {} has no class subdirectories (expected root/<class>/<image>)", root);
  // Note: sorted bytewise, as Python's sorted() in torchvision, so class indices agree with a PyTorch run.
  std::sort(classes_.begin(), classes_.end());
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    const fs::path directory = fs::path(root) / classes_[c];
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(directory, fs::directory_options::follow_directory_symlink, error))
      if (entry.is_regular_file(error) && is_image_file(entry.path())) files.push_back(entry.path().string());
    if (error) fail("ImageFolder: cannot list {}: {}", directory.string(), error.message());
    if (files.empty()) fail("ImageFolder: class '{}' ({}) has no .png, .jpg or .jpeg file", classes_[c], directory.string());
    std::sort(files.begin(), files.end());
    for (auto& file : files) samples_.emplace_back(std::move(file), static_cast<std::int64_t>(c));
  }
}

Example ImageFolder::get(std::int64_t index) const {
  if (index < 0 || index >= size()) fail("ImageFolder: index {} out of range for {} images", index, size());
  const auto& [path, label] = samples_[static_cast<std::size_t>(index)];
  const Image image = read_image(path, options_.channels, options_.limits);
  Tensor data = empty({image.height, image.width, image.channels});
  float* values = data.data<float>();
  for (std::size_t i = 0; i < image.pixels.size(); ++i) values[i] = image.pixels[i];
  Tensor target = empty({}, DType::Int64);
  target.data<std::int64_t>()[0] = label;
  return {std::move(data), std::move(target)};
}

}  // namespace tapegrad::data

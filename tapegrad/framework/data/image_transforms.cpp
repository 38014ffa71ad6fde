#include <tapegrad/framework/data/image_transforms.h>

#include <algorithm>
#include <cmath>

#include <tapegrad/framework/data/sampler.h>
#include <tapegrad/framework/error.h>

namespace tapegrad::data::transforms {
namespace {

// The contiguous float32 [C, H, W] a transform works on, or a clear error naming it.
Tensor chw(const Tensor& data, const char* name) {
  if (!data.defined() || data.dtype() != DType::Float32 || data.dim() != 3)
    fail("{}: expected float32 [C, H, W] (ToTensor gives it), got {} {}", name,
         data.defined() ? dtype_name(data.dtype()) : "undefined", data.defined() ? shape_string(data.shape()) : "");
  return data.is_contiguous() ? data : data.contiguous();
}

}  // namespace

Tensor ToTensor::apply(Tensor data, Generator&) const {
  if (!data.defined() || data.dtype() != DType::Float32 || data.dim() != 3)
    fail("ToTensor: expected float32 pixels [H, W, C] valued 0..255, got {} {}",
         data.defined() ? dtype_name(data.dtype()) : "undefined", data.defined() ? shape_string(data.shape()) : "");
  const Tensor in = data.is_contiguous() ? data : data.contiguous();
  const std::int64_t height = in.size(0), width = in.size(1), channels = in.size(2);
  Tensor out = empty({channels, height, width});
  const float* source = in.data<float>();
  float* destination = out.data<float>();
  const std::int64_t plane = height * width;
  for (std::int64_t p = 0; p < plane; ++p)
    for (std::int64_t c = 0; c < channels; ++c) destination[c * plane + p] = source[p * channels + c] / 255.0f;
  return out;
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  if (mean_.empty() || mean_.size() != stddev_.size())
    fail("Normalize: expected as many means as standard deviations (at least one), got {} and {}", mean_.size(),
         stddev_.size());
  for (double s : stddev_)
    if (!(s > 0.0) || !std::isfinite(s)) fail("Normalize: standard deviations must be positive and finite, got {}", s);
}

Tensor Normalize::apply(Tensor data, Generator&) const {
  const Tensor in = chw(data, "Normalize");
  const std::int64_t channels = in.size(0), plane = in.size(1) * in.size(2);
  if (mean_.size() != 1 && static_cast<std::int64_t>(mean_.size()) != channels)
    fail("Normalize: {} means for an image of {} channels {}", mean_.size(), channels, shape_string(in.shape()));
  Tensor out = empty(in.shape());
  const float* source = in.data<float>();
  float* destination = out.data<float>();
  for (std::int64_t c = 0; c < channels; ++c) {
    const std::size_t k = mean_.size() == 1 ? 0 : static_cast<std::size_t>(c);
    const float mean = static_cast<float>(mean_[k]), scale = static_cast<float>(1.0 / stddev_[k]);
    for (std::int64_t p = 0; p < plane; ++p) destination[c * plane + p] = (source[c * plane + p] - mean) * scale;
  }
  return out;
}

RandomCrop::RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding, double fill)
    : height_(height), width_(width), padding_(padding), fill_(fill) {
  if (height <= 0 || width <= 0 || padding < 0)
    fail("RandomCrop: expected a positive size and non-negative padding, got {}x{} padding {}", height, width,
         padding);
}

Tensor RandomCrop::apply(Tensor data, Generator& generator) const {
  const Tensor in = chw(data, "RandomCrop");
  const std::int64_t channels = in.size(0), height = in.size(1), width = in.size(2);
  const std::int64_t padded_height = height + 2 * padding_, padded_width = width + 2 * padding_;
  if (padded_height < height_ || padded_width < width_)
    fail("RandomCrop: a {}x{} crop of {} padded by {} does not fit", height_, width_, shape_string(in.shape()),
         padding_);
  const std::int64_t top = random_below(generator, padded_height - height_ + 1) - padding_;
  const std::int64_t left = random_below(generator, padded_width - width_ + 1) - padding_;
  Tensor out = empty({channels, height_, width_});
  const float* source = in.data<float>();
  float* destination = out.data<float>();
  const float fill = static_cast<float>(fill_);
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t y = 0; y < height_; ++y) {
      const std::int64_t sy = top + y;
      float* row = destination + (c * height_ + y) * width_;
      for (std::int64_t x = 0; x < width_; ++x) {
        const std::int64_t sx = left + x;
        row[x] = (sy < 0 || sy >= height || sx < 0 || sx >= width) ? fill : source[(c * height + sy) * width + sx];
      }
    }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0)) fail("RandomHorizontalFlip: p must be in [0, 1], got {}", p);
}

Tensor RandomHorizontalFlip::apply(Tensor data, Generator& generator) const {
  const Tensor in = chw(data, "RandomHorizontalFlip");
  if (!(generator.uniform01() < p_)) return in;
  const std::int64_t rows = in.size(0) * in.size(1), width = in.size(2);
  Tensor out = empty(in.shape());
  const float* source = in.data<float>();
  float* destination = out.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t x = 0; x < width; ++x) destination[r * width + x] = source[r * width + width - 1 - x];
  return out;
}

Resize::Resize(std::int64_t height, std::int64_t width) : height_(height), width_(width) {
  if (height <= 0 || width <= 0) fail("Resize: expected a positive size, got {}x{}", height, width);
}

Resize::Resize(std::int64_t size) : height_(-1), width_(size) {
  if (size <= 0) fail("Resize: expected a positive size, got {}", size);
}

namespace {

// torch's align_corners=false source coordinate of output pixel `o`: its centre mapped back, clamped at 0.
struct Tap {
  std::int64_t low, high;
  float weight;  // of `high`
};

std::vector<Tap> taps(std::int64_t in, std::int64_t out) {
  std::vector<Tap> result(static_cast<std::size_t>(out));
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (std::int64_t o = 0; o < out; ++o) {
    const float source = std::max(0.0f, (static_cast<float>(o) + 0.5f) * scale - 0.5f);
    const std::int64_t low = std::min(static_cast<std::int64_t>(source), in - 1);
    result[static_cast<std::size_t>(o)] = {low, std::min(low + 1, in - 1), source - static_cast<float>(low)};
  }
  return result;
}

}  // namespace

Tensor Resize::apply(Tensor data, Generator&) const {
  const Tensor in = chw(data, "Resize");
  const std::int64_t channels = in.size(0), height = in.size(1), width = in.size(2);
  if (height == 0 || width == 0) fail("Resize: cannot resize an empty image {}", shape_string(in.shape()));
  std::int64_t out_height = height_, out_width = width_;
  if (height_ == -1) {
    // torchvision: the shorter side becomes `size`, the longer int(size * long / short).
    const std::int64_t size = width_;
    if (height <= width) {
      out_height = size;
      out_width = static_cast<std::int64_t>(static_cast<double>(size) * static_cast<double>(width) / height);
    } else {
      out_width = size;
      out_height = static_cast<std::int64_t>(static_cast<double>(size) * static_cast<double>(height) / width);
    }
  }
  const std::vector<Tap> ys = taps(height, out_height), xs = taps(width, out_width);
  Tensor out = empty({channels, out_height, out_width});
  const float* source = in.data<float>();
  float* destination = out.data<float>();
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* plane = source + c * height * width;
    for (std::int64_t y = 0; y < out_height; ++y) {
      const Tap ty = ys[static_cast<std::size_t>(y)];
      const float* top = plane + ty.low * width;
      const float* bottom = plane + ty.high * width;
      float* row = destination + (c * out_height + y) * out_width;
      for (std::int64_t x = 0; x < out_width; ++x) {
        const Tap tx = xs[static_cast<std::size_t>(x)];
        const float upper = top[tx.low] + (top[tx.high] - top[tx.low]) * tx.weight;
        const float lower = bottom[tx.low] + (bottom[tx.high] - bottom[tx.low]) * tx.weight;
        row[x] = upper + (lower - upper) * ty.weight;
      }
    }
  }
  return out;
}

}  // namespace tapegrad::data::transforms

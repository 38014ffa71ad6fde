// Tensor factories: constant fills, ranges, from host values, and random draws from a Generator.
#include <cmath>
#include <cstring>
#include <new>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (auto extent : shape)
    if (extent < 0) fail("{}: negative extent in shape {}", op, shape_string(shape));
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

template <class Draw>
Tensor fill_random(const Shape& shape, const TensorOptions& options, const char* op, Draw draw) {
  Tensor t = empty(shape, options.dtype);
  detail::dispatch_floating(options.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(draw());
  });
  return finish(t, options);
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype) {
  check_shape(shape, "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->numel = checked_numel(shape, "empty");
  impl->dtype = dtype;
  impl->is_inference = detail::inference_mode_enabled();
  const std::size_t bytes = checked_bytes(shape, element_size(dtype), "empty");
  try {
    impl->storage = std::make_shared<Storage>(bytes);
  } catch (const std::bad_alloc&) {
    fail("empty: cannot allocate {} bytes ({:.1f} GiB) for a {} tensor of shape {}: out of memory", bytes,
         static_cast<double>(bytes) / (1 << 30), dtype_name(dtype), shape_string(shape));
  }
  return Tensor(impl);
}

// Note: bfloat16 values are made in float32 and rounded once (a double value rounds through float, as torch's).
static Tensor to_bfloat16(const Tensor& wide, const TensorOptions& options) {
  return finish(wide.to(DType::BFloat16), options);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  if (options.dtype == DType::BFloat16) return to_bfloat16(full(shape, value), options);
  Tensor t = empty(shape, options.dtype);
  detail::dispatch_all(options.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = v;
  });
  return finish(t, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = empty(shape, options.dtype);
  std::memset(t.raw_data(), 0, static_cast<std::size_t>(t.numel()) * element_size(options.dtype));
  return finish(t, options);
}
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
// Note: the *_like factories keep a channels-last tensor's format, as libtorch's (MemoryFormat::Preserve, see
// empty_like); every element holds the same value, so the dense buffer is filled in memory order either way.
Tensor full_like(const Tensor& like, double value) {
  like.check_defined("full_like");
  if (like.dtype() == DType::BFloat16) return full(like.shape(), value, TensorOptions{}.with_dtype(like.dtype()));
  Tensor t = empty_like(like);
  const MemoryFormat format = t.is_contiguous() ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
  detail::dispatch_all(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>(format);
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = v;
  });
  return t;
}
Tensor zeros_like(const Tensor& like) {
  like.check_defined("zeros_like");
  if (!like.is_contiguous() && like.is_contiguous(MemoryFormat::ChannelsLast)) return full_like(like, 0.0);
  return zeros(like.shape(), TensorOptions{}.with_dtype(like.dtype()));
}
Tensor ones_like(const Tensor& like) { return full_like(like, 1.0); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, TensorOptions{}.with_dtype(dtype)); }

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0) fail("arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  // Note: converting a double beyond int64 is undefined behaviour, so the count is checked as a double first.
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) || count >= 0x1p63)
    fail("arange: start {}, end {} and step {} do not give a finite count that fits 64 bits", start, end, step);
  const std::int64_t n = count > 0 ? static_cast<std::int64_t>(count) : 0;
  if (dtype == DType::BFloat16) return arange(start, end, step).to(dtype);
  Tensor t = empty({n}, dtype);
  detail::dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}
Tensor arange(std::int64_t end, DType dtype) { return arange(0.0, static_cast<double>(end), 1.0, dtype); }

namespace {
template <class V>
Tensor from_values(const std::vector<V>& values, const Shape& shape, TensorOptions options) {
  check_shape(shape, "from_vector");
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape))
    fail("from_vector: {} values for shape {} ({} elements)", values.size(), shape_string(shape), shape_numel(shape));
  if (options.dtype == DType::BFloat16) return to_bfloat16(from_values(values, shape, TensorOptions{}), options);
  Tensor t = empty(shape, options.dtype);
  detail::dispatch_all(options.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return finish(t, options);
}
}  // namespace

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  return from_values(values, shape, options);
}
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions options) {
  return from_values(values, shape, options);
}
Tensor from_vector(const std::vector<std::int64_t>& values, const Shape& shape) {
  return from_values(values, shape, TensorOptions{}.with_dtype(DType::Int64));
}
Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options) {
  return from_values(std::vector<double>(values), shape, options);
}

Tensor rand(const Shape& shape, Generator& generator, TensorOptions options) {
  // Note: float32 takes 24 bits; 53 bits rounded to float could give exactly 1.
  if (options.dtype == DType::Float32)
    return fill_random(shape, options, "rand", [&] { return static_cast<double>(generator.uniform01_float()); });
  return fill_random(shape, options, "rand", [&] { return generator.uniform01(); });
}
Tensor randn(const Shape& shape, Generator& generator, TensorOptions options) {
  return normal(shape, 0.0, 1.0, generator, options);
}
Tensor uniform(const Shape& shape, double low, double high, Generator& generator, TensorOptions options) {
  if (!(low <= high)) fail("uniform: low {} must not exceed high {}", low, high);
  return fill_random(shape, options, "uniform", [&] { return low + (high - low) * generator.uniform01(); });
}
Tensor normal(const Shape& shape, double mean, double stddev, Generator& generator, TensorOptions options) {
  if (!(stddev >= 0)) fail("normal: stddev must be non-negative, got {}", stddev);
  return fill_random(shape, options, "normal", [&] { return mean + stddev * generator.standard_normal(); });
}
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator) {
  if (low >= high) fail("randint: low {} must be below high {}", low, high);
  Tensor t = empty(shape, DType::Int64);
  // Note: the width is computed in unsigned arithmetic, so [INT64_MIN, INT64_MAX) does not overflow.
  const std::uint64_t width = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  std::int64_t* p = t.data<std::int64_t>();
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i)
    p[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + generator.below(width));
  return t;
}

}  // namespace tapegrad

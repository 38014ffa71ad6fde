// split, split with sizes, chunk and unbind: each works out the pieces' extents and cuts them with narrow or
// select, so every piece is a view of the input and its backward is the slice's (see shape_ops.cpp).
#include <tapegrad/framework/ops/split.h>

#include <algorithm>

#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

namespace {

std::int64_t split_dim(const Tensor& x, std::int64_t dim, const char* op) {
  x.check_defined(op);
  if (x.dim() == 0) fail("{}: expects at least a 1-dimensional tensor, got a 0-dim tensor", op);
  return normalize_dim(dim, x.dim(), op);
}

std::vector<Tensor> cut(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  std::int64_t start = 0;
  for (const std::int64_t size : sizes) {
    pieces.push_back(narrow(x, dim, start, size));
    start += size;
  }
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  const std::int64_t d = split_dim(x, dim, "split");
  const std::int64_t size = x.size(d);
  if (split_size < 0) fail("split: expects split_size be non-negative, but got split_size={}", split_size);
  if (split_size == 0 && size != 0)
    fail("split: split_size can only be 0 if dimension size is 0, but got dimension size of {} (dim {} of {})", size,
         dim, shape_string(x.shape()));
  // One piece at least (PyTorch returns one empty piece for an empty dim).
  const std::int64_t count = split_size == 0 ? 1 : std::max<std::int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(count), split_size);
  sizes.back() = size - split_size * (count - 1);
  return cut(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& split_sizes, std::int64_t dim) {
  const std::int64_t d = split_dim(x, dim, "split_with_sizes");
  const std::int64_t size = x.size(d);
  std::int64_t total = 0;
  for (const std::int64_t s : split_sizes) {
    if (s < 0)
      fail("split_with_sizes: expects split_sizes have only non-negative entries, but got split_sizes={}",
           shape_string(split_sizes));
    total += s;
  }
  if (total != size)
    fail("split_with_sizes: expects split_sizes to sum exactly to {} (input tensor's size at dimension {}, shape {}), "
         "but got split_sizes={}",
         size, dim, shape_string(x.shape()), shape_string(split_sizes));
  return cut(x, split_sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim) {
  const std::int64_t d = split_dim(x, dim, "chunk");
  if (chunks <= 0) fail("chunk: expects `chunks` to be greater than 0, got: {}", chunks);
  const std::int64_t size = x.size(d);
  const std::int64_t chunk_size = (size + chunks - 1) / chunks;
  // Note: an empty dim gives `chunks` empty pieces, as in PyTorch (split would give one).
  if (size == 0) return cut(x, std::vector<std::int64_t>(static_cast<std::size_t>(chunks), 0), d);
  return split(x, chunk_size, d);
}

std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim) {
  x.check_defined("unbind");
  if (x.dim() == 0) fail("unbind: dimension specified as {} but tensor has no dimensions", dim);
  const std::int64_t d = normalize_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> pieces;
  pieces.reserve(static_cast<std::size_t>(x.size(d)));
  for (std::int64_t i = 0; i < x.size(d); ++i) pieces.push_back(select(x, d, i));
  return pieces;
}

}  // namespace tapegrad

#pragma once
/// Indexing with libtorch's spelling: `x.index({0, Slice(1, None, 2), None, Ellipsis})`, boolean masks and
/// int64 index tensors, and `x.index_put_({...}, values)`.
/// Note: integers, Slice, None and Ellipsis give views of x (basic indexing, as in PyTorch); a tensor
/// among the indices (advanced indexing) gives a copy. Both are differentiable.
#include <tapegrad/export.h>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {
namespace indexing {

/// `None`: in an index list, inserts a dim of extent 1 (numpy's newaxis); in a Slice, "no bound".
inline constexpr std::nullopt_t None = std::nullopt;

/// `Ellipsis`: as many full slices as the other indices leave dims (at most one per index list).
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};

/// Python's start:stop:step. A missing start is 0, a missing stop the dim's extent, a missing step 1;
/// negative start/stop count from the end and both are clamped to the dim, as in Python. Step must be > 0.
struct Slice {
  Slice(std::optional<std::int64_t> start = std::nullopt, std::optional<std::int64_t> stop = std::nullopt,
        std::optional<std::int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<std::int64_t> start, stop, step;
};

/// A boolean mask index. Note: tapegrad has no bool dtype; its comparisons (gt, eq, ...) return 0/1 tensors of
/// their input's dtype. So in an index list a floating tensor is a mask (its values must be 0 or 1) and an
/// int64 tensor holds indices; Mask(t) marks a tensor of any dtype (an int64 0/1 tensor, say) as a mask.
struct Mask {
  explicit Mask(Tensor mask) : mask(std::move(mask)) {}
  Tensor mask;
};

/// One entry of an index list: an integer, a Slice, None, Ellipsis, or a tensor (a mask or int64 indices).
class TensorIndex {
 public:
  enum class Kind { Integer, Slice, None, Ellipsis, Tensor };
  TensorIndex(int integer) : kind_(Kind::Integer), integer_(integer) {}
  TensorIndex(std::int64_t integer) : kind_(Kind::Integer), integer_(integer) {}
  TensorIndex(Slice slice) : kind_(Kind::Slice), slice_(slice) {}
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}
  TensorIndex(Tensor tensor) : kind_(Kind::Tensor), tensor_(std::move(tensor)), is_mask_(tensor_.defined() && is_floating(tensor_.dtype())) {}
  TensorIndex(Mask mask) : kind_(Kind::Tensor), tensor_(std::move(mask.mask)), is_mask_(true) {}

  Kind kind() const { return kind_; }
  std::int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }
  /// A tensor index that selects by mask (rather than by int64 indices).
  bool is_mask() const { return is_mask_; }

 private:
  Kind kind_;
  std::int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
  bool is_mask_ = false;
};

}  // namespace indexing

/// x[indices]: see Tensor::index.
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
/// x with x[indices] = values (values broadcast to the indexed shape), out of place and differentiable in x
/// and values. Where an advanced index repeats a position, one of the values lands there.
Tensor index_put(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values);
/// The positions of the true (non-zero) elements of `mask`: an int64 tensor [count, mask.dim()].
Tensor nonzero(const Tensor& mask);

}  // namespace tapegrad

TAPEGRAD_API_END

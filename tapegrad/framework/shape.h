#pragma once
/// Shapes, dims and NumPy broadcasting rules.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>
#include <vector>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// The extent of each dimension, outermost first (row-major).
using Shape = std::vector<std::int64_t>;

/// "[2, 3, 4]", the form every error message uses.
std::string shape_string(const Shape& shape);
/// Product of the extents (1 for a scalar shape []); throws when an extent is negative or the product overflows int64.
std::int64_t shape_numel(const Shape& shape);
/// Row-major strides, in elements.
Shape contiguous_strides(const Shape& shape);
/// The NumPy broadcast of two shapes; throws naming `op` and both shapes when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op);

}  // namespace tapegrad

TAPEGRAD_API_END

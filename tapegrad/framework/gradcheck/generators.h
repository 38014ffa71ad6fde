#pragma once
/// RapidCheck generators for tensors and broadcastable shapes, for gradient and invariance properties.
/// Header-only: include it from a test that links rapidcheck.
#include <tapegrad/export.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::gen {

/// A shape with between min_dims and max_dims dims, each extent in [min_extent, max_extent].
inline rc::Gen<Shape> shape(int min_dims = 0, int max_dims = 3, std::int64_t min_extent = 1,
                            std::int64_t max_extent = 4) {
  return rc::gen::mapcat(rc::gen::inRange(min_dims, max_dims + 1), [=](int ndim) {
    return rc::gen::container<Shape>(static_cast<std::size_t>(ndim),
                                     rc::gen::inRange<std::int64_t>(min_extent, max_extent + 1));
  });
}

/// Values in [low, high] on a grid of 1/1000 of the range, optionally at least `margin` away from each
/// of `kinks` (points where the function is not differentiable: 0 for relu and abs).
inline rc::Gen<double> value(double low = -2.0, double high = 2.0, std::vector<double> kinks = {},
                             double margin = 1e-3) {
  auto raw = rc::gen::map(rc::gen::inRange(0, 1001), [=](int k) { return low + (high - low) * k / 1000.0; });
  if (kinks.empty()) return raw;
  return rc::gen::suchThat(raw, [=](double v) {
    for (double kink : kinks)
      if (std::abs(v - kink) < margin) return false;
    return true;
  });
}

/// A float64 tensor of the given shape with values from value(low, high, kinks).
inline rc::Gen<Tensor> tensor_of_shape(Shape s, double low = -2.0, double high = 2.0, std::vector<double> kinks = {}) {
  const auto n = static_cast<std::size_t>(shape_numel(s));
  return rc::gen::map(rc::gen::container<std::vector<double>>(n, value(low, high, kinks)),
                      [s](const std::vector<double>& values) {
                        return from_vector(values, s, TensorOptions{}.with_dtype(DType::Float64));
                      });
}

/// A float64 tensor of a random shape (0 to max_dims dims, extents 1 to max_extent).
inline rc::Gen<Tensor> tensor(int max_dims = 3, std::int64_t max_extent = 4, double low = -2.0, double high = 2.0,
                              std::vector<double> kinks = {}) {
  return rc::gen::mapcat(shape(0, max_dims, 1, max_extent),
                         [=](const Shape& s) { return tensor_of_shape(s, low, high, kinks); });
}

/// Two shapes that broadcast together: a random full shape, each side then dropping leading dims and
/// turning some extents into 1, so size-1 dims and rank differences both occur.
inline rc::Gen<std::pair<Shape, Shape>> broadcast_pair(int max_dims = 3, std::int64_t max_extent = 4) {
  return rc::gen::mapcat(shape(0, max_dims, 1, max_extent), [](const Shape& full) {
    auto derive = [full]() {
      return rc::gen::map(
          rc::gen::pair(rc::gen::inRange<std::size_t>(0, full.size() + 1),
                        rc::gen::container<std::vector<bool>>(full.size(), rc::gen::arbitrary<bool>())),
          [full](const std::pair<std::size_t, std::vector<bool>>& choice) {
            Shape s(full.begin() + static_cast<std::ptrdiff_t>(choice.first), full.end());
            for (std::size_t i = 0; i < s.size(); ++i)
              if (choice.second[i + choice.first]) s[i] = 1;
            return s;
          });
    };
    return rc::gen::pair(derive(), derive());
  });
}

}  // namespace tapegrad::gen

TAPEGRAD_API_END

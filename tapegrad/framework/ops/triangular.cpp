// triu and tril: a mask of each matrix's upper or lower triangle. The mask is its own adjoint, so the
// backward of each op is the same op applied to the gradient (and double backward works through it).
#include <tapegrad/framework/ops/triangular.h>

#include <algorithm>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>

namespace tapegrad {

namespace {

enum class Triangle { Upper, Lower };

Tensor triangle(const Tensor& x_in, std::int64_t diagonal, Triangle which) {
  const char* op = which == Triangle::Upper ? "triu" : "tril";
  x_in.check_defined(op);
  if (x_in.dim() < 2)
    fail("{}: input tensor must have at least 2 dimensions, got shape {}", op, shape_string(x_in.shape()));
  const Tensor x = x_in.contiguous();
  const Shape& s = x.shape();
  const std::int64_t rows = s[s.size() - 2], cols = s.back();
  const std::int64_t matrices = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  Tensor out = empty(s, x.dtype());
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t m = 0; m < matrices; ++m)
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t at = (m * rows + i) * cols;
        // Row i keeps columns j >= i + diagonal (triu) or j <= i + diagonal (tril), clamped to [0, cols].
        const std::int64_t edge = std::clamp<std::int64_t>(
            which == Triangle::Upper ? i + diagonal : i + diagonal + 1, 0, cols);
        const std::int64_t keep_from = which == Triangle::Upper ? edge : 0;
        const std::int64_t keep_to = which == Triangle::Upper ? cols : edge;
        std::fill(dst + at, dst + at + keep_from, T{});  // +0 in every dtype; T(0) is not valid for BFloat16 in clang
        std::copy(src + at + keep_from, src + at + keep_to, dst + at + keep_from);
        std::fill(dst + at + keep_to, dst + at + cols, T{});  // +0 in every dtype
      }
  });
  return record_if_needed(op, out, {x}, [&] {
    return [diagonal, which](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{triangle(g, diagonal, which)};
    };
  });
}

}  // namespace

Tensor triu(const Tensor& x, std::int64_t diagonal) { return triangle(x, diagonal, Triangle::Upper); }

Tensor tril(const Tensor& x, std::int64_t diagonal) { return triangle(x, diagonal, Triangle::Lower); }

}  // namespace tapegrad

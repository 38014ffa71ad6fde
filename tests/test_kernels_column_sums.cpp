// The kernels layer's column sums (Linear's bias gradient): exactly the double sum in row order, rounded once,
// for any shape including empty ones and widths across the kernel's 512-column blocks; and a long batch that a
// float32 running sum would get visibly wrong.
#include <cmath>
#include <vector>

#include <tapegrad/framework/kernels/column_sums.h>
#include "support/properties.h"

namespace {

template <class T>
void check_column_sums() {
  const std::int64_t rows = *rc::gen::inRange<std::int64_t>(0, 40);
  const std::int64_t cols = *rc::gen::inRange<std::int64_t>(0, 1200);
  std::vector<T> a(static_cast<std::size_t>(rows * cols));
  for (auto& v : a) v = static_cast<T>(*rc::gen::inRange(-1000000, 1000001)) / T(4096);
  std::vector<T> out(static_cast<std::size_t>(cols), T(-7));
  tapegrad::kernels::column_sums(rows, cols, a.data(), out.data());
  for (std::int64_t j = 0; j < cols; ++j) {
    double total = 0;
    for (std::int64_t i = 0; i < rows; ++i) total += static_cast<double>(a[static_cast<std::size_t>(i * cols + j)]);
    RC_ASSERT(out[static_cast<std::size_t>(j)] == static_cast<T>(total));
  }
}

}  // namespace

TEST_CASE("column sums are the double sum of each column, rounded once") {
  rc::prop("float32", [] { check_column_sums<float>(); });
  rc::prop("float64", [] { check_column_sums<double>(); });
}

TEST_CASE("column sums of a long float32 batch do not drift") {
  // 200,000 rows of 0.1f: a float32 running sum ends at 19,959.5 instead of 20,000.
  const std::int64_t rows = 200000, cols = 3;
  std::vector<float> a(static_cast<std::size_t>(rows * cols), 0.1f);
  std::vector<float> out(cols);
  tapegrad::kernels::column_sums(rows, cols, a.data(), out.data());
  const float expected = static_cast<float>(static_cast<double>(0.1f) * rows);
  for (float v : out) CHECK(v == expected);
}

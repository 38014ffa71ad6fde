// Overflow-checked counts: the products that size memory refuse to wrap, and name what they were sizing.
#include <catch2/catch.hpp>

#include <cstdint>

#include <tapegrad/framework/checked_arithmetic.h>

using namespace tapegrad;

namespace {
constexpr std::int64_t kTwo40 = std::int64_t{1} << 40;
constexpr std::int64_t kTwo62 = std::int64_t{1} << 62;
}  // namespace

TEST_CASE("checked_numel multiplies shapes that fit") {
  CHECK(checked_numel({}, "t") == 1);
  CHECK(checked_numel({2, 3, 4}, "t") == 24);
  CHECK(checked_numel({kTwo62, 1}, "t") == kTwo62);
}

TEST_CASE("a zero extent makes any shape empty, however large the others") {
  CHECK(checked_numel({0, kTwo62, kTwo62}, "t") == 0);
  CHECK(checked_numel({kTwo62, kTwo62, 0}, "t") == 0);
  CHECK(checked_bytes({kTwo62, 0}, 8, "t") == 0);
}

TEST_CASE("checked_numel refuses a product beyond int64 and names the shape") {
  CHECK_THROWS_WITH(checked_numel({kTwo40, kTwo40}, "zeros"),
                    Catch::Contains("zeros") && Catch::Contains("[1099511627776, 1099511627776]"));
  CHECK_THROWS_AS(checked_numel({kTwo62, 4}, "t"), Error);
  CHECK_THROWS_AS(checked_numel({std::int64_t{1} << 31, std::int64_t{1} << 31, std::int64_t{1} << 31}, "t"), Error);
}

TEST_CASE("checked_numel refuses negative extents") {
  CHECK_THROWS_WITH(checked_numel({2, -1}, "reshape"), Catch::Contains("negative dimension -1"));
}

TEST_CASE("checked_bytes refuses a byte count beyond int64 though the element count fits") {
  CHECK(checked_bytes({kTwo40}, 4, "t") == std::size_t{4} << 40);
  CHECK_THROWS_WITH(checked_bytes({kTwo62}, 8, "zeros"), Catch::Contains("zeros") && Catch::Contains("bytes"));
}

TEST_CASE("checked_mul and checked_add refuse overflow and negatives") {
  CHECK(checked_mul(3, 4, "t") == 12);
  CHECK(checked_add(3, 4, "t") == 7);
  CHECK_THROWS_AS(checked_mul(kTwo62, 2, "t"), Error);
  CHECK_THROWS_AS(checked_add(INT64_MAX, 1, "t"), Error);
  CHECK_THROWS_AS(checked_mul(-1, 2, "t"), Error);
}

// float64 GEMM in the Goto / BLIS scheme: op(B) is packed kDepth rows at a time into panels of NR columns, op(A)
// a block of rows at a time into panels of MR rows, and a micro-kernel keeps an MR x NR tile of C in vector
// registers while it walks one pair of panels. Only the micro-kernel depends on the instruction set.
// Note: why not Eigen, which did this before: the default build targets x86-64-v2, so Eigen's GEMM ran its SSE2
// code, 18.6 GFLOP/s at 1024^3 on one thread against OpenBLAS dgemm's 78.3 (2026-12-06 comparison table). And
// Eigen cannot be compiled once per instruction set into one library: each copy would instantiate its templates
// under the same names, and the linker would keep one of them for every caller.
#include <tapegrad/framework/kernels/gemm_f64.h>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/error.h>

namespace tapegrad::kernels {

namespace {

constexpr std::int64_t kDepth = 384;      // k extent of a packed pair of blocks (A's block stays in L2)
constexpr std::int64_t kRowTarget = 128;  // rows of op(A) per packed block, about (even blocks of whole tiles)
constexpr std::int64_t kColTarget = 2048;  // columns of op(B) per packed block, rounded down to a multiple of NR
// Note: m * n * k from which threads share a product. Below it a second thread did not pay (2026-12-06,
// bench/gemm_f64_tiles, AVX-512 tile): 64^3 ran at 55-67 GFLOP/s on one thread and 27-30 on two, 128^3 at
// 68-76 either way; 256^3 at 82-89 on one, 108-117 on two.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 22;

// One operand as the product reads it: op(X)(i, j).
struct Operand {
  const double* data;
  std::int64_t ld;
  bool transposed;
  double operator()(std::int64_t i, std::int64_t j) const { return transposed ? data[j * ld + i] : data[i * ld + j]; }
};

// What one call of a micro-kernel walk computes: C's rows x cols block from packed panels of depth kc.
struct Block {
  const double* packed_a;  // panels of MR rows: panel r, depth p, row ii at [r * MR * kc + p * MR + ii]
  const double* packed_b;  // panels of NR columns: panel s, depth p, column jj at [s * NR * kc + p * NR + jj]
  std::int64_t kc, rows, cols;
  double alpha;
  double* c;  // C's element at the block's first row and column
  std::int64_t ldc;
};

// C's MR x NR tile (of which rows x cols are inside C) += alpha * (packed A panel) (packed B panel).
// Note: the accumulators are MR * NV vectors of V doubles (24 of the 32 AVX-512 registers at 8 x 24, 12 of the
// 16 AVX2 registers at 6 x 8), enough independent sums to keep both FMA units busy through their latency.
// Measured at 1024^3 (2026-12-06, five interleaved rounds): 8 x 24 with a depth of 384 ran 6% faster than 8 x 16
// with 256, on one thread and on two; 12 x 16 was no better than 8 x 16.
template <int MR, int NV, int V>
[[gnu::always_inline]] inline void micro_tile(std::int64_t kc, const double* pa, const double* pb, double alpha,
                                              double* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols) {
  typedef double Vec __attribute__((vector_size(V * sizeof(double))));
  constexpr int NR = NV * V;
  Vec acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = Vec{};
  for (std::int64_t p = 0; p < kc; ++p) {
    Vec b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], pb + p * NR + v * V, sizeof(Vec));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const double a = pa[p * MR + i];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
    }
  }
  if (rows == MR && cols == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        Vec out;
        std::memcpy(&out, c + i * ldc + v * V, sizeof(Vec));
        out += alpha * acc[i][v];
        std::memcpy(c + i * ldc + v * V, &out, sizeof(Vec));
      }
    return;
  }
  // A tile at C's edge: through memory, so that the loop above keeps its accumulators in registers.
  double tile[MR * NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(tile + i * NR + v * V, &acc[i][v], sizeof(Vec));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) c[i * ldc + j] += alpha * tile[i * NR + j];
}

// Every tile of a block: B's panel stays in L1 while A's panels (in L2) pass under it.
template <class T>
[[gnu::always_inline]] inline void block_tiles(const Block& block) {
  constexpr std::int64_t MR = T::rows, NR = T::vectors * T::lanes;
  for (std::int64_t j = 0; j < block.cols; j += NR)
    for (std::int64_t i = 0; i < block.rows; i += MR)
      micro_tile<T::rows, T::vectors, T::lanes>(
          block.kc, block.packed_a + i * block.kc, block.packed_b + j * block.kc, block.alpha,
          block.c + i * block.ldc + j, block.ldc, std::min(MR, block.rows - i), std::min(NR, block.cols - j));
}

// A tile of C: rows, and vectors of `lanes` doubles across its columns.
template <int Rows, int Vectors, int Lanes>
struct Tile {
  static constexpr int rows = Rows, vectors = Vectors, lanes = Lanes;
};
using Avx512Tile = Tile<8, 3, 8>;
using Avx2Tile = Tile<6, 2, 4>;
using Sse2Tile = Tile<4, 2, 2>;

struct Kernel {
  void (*tiles)(const Block&);
  std::int64_t mr, nr;
  const char* name;
};

template <class T>
Kernel kernel_of(void (*tiles)(const Block&), const char* name) {
  return {tiles, T::rows, T::vectors * T::lanes, name};
}

// Every kernel this CPU and build can run, best first.
// Note: the same condition as TAPEGRAD_DISPATCH (kernels/dispatch.h). A tile shape per instruction set needs
// three functions rather than three clones of one, and the CPU is checked once, at the first product.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TAPEGRAD_NO_DISPATCH)
__attribute__((target("arch=x86-64-v4"))) void tiles_avx512(const Block& block) { block_tiles<Avx512Tile>(block); }
__attribute__((target("arch=x86-64-v3"))) void tiles_avx2(const Block& block) { block_tiles<Avx2Tile>(block); }
void tiles_sse2(const Block& block) { block_tiles<Sse2Tile>(block); }

std::vector<Kernel> find_kernels() {
  __builtin_cpu_init();
  std::vector<Kernel> found;
  if (__builtin_cpu_supports("x86-64-v4")) found.push_back(kernel_of<Avx512Tile>(tiles_avx512, "AVX-512 8x24"));
  if (__builtin_cpu_supports("x86-64-v3")) found.push_back(kernel_of<Avx2Tile>(tiles_avx2, "AVX2 6x8"));
  found.push_back(kernel_of<Sse2Tile>(tiles_sse2, "SSE2 4x4"));
  return found;
}
#else
// One copy, for the instruction set the compiler targets (a native, sanitizer or fuzz build, or clang).
#if defined(__AVX512F__)
using BuiltTile = Avx512Tile;
constexpr const char* kBuiltName = "AVX-512 8x24";
#elif defined(__AVX2__) && defined(__FMA__)
using BuiltTile = Avx2Tile;
constexpr const char* kBuiltName = "AVX2 6x8";
#else
using BuiltTile = Sse2Tile;
constexpr const char* kBuiltName = "SSE2 4x4";
#endif
void tiles_built(const Block& block) { block_tiles<BuiltTile>(block); }
std::vector<Kernel> find_kernels() { return {kernel_of<BuiltTile>(tiles_built, kBuiltName)}; }
#endif

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> found = find_kernels();
  return found;
}

// Panel `s` of a packed block: lines [first + s * width, + width) of `x` (zero-padded past `lines` lines) over
// depth [p0, p0 + kc), line jj at depth p stored at out[s * width * kc + p * width + jj]. x(p, line) reads the
// operand along its depth: op(B) as it is (lines are columns), op(A) transposed (lines are rows).
void pack_panel(const Operand& x, std::int64_t p0, std::int64_t kc, std::int64_t first, std::int64_t lines,
                std::int64_t width, std::int64_t s, double* out) {
  double* panel = out + s * width * kc;
  const std::int64_t start = first + s * width, filled = std::min(width, first + lines - start);
  // Note: each branch reads along contiguous memory in its inner loop.
  if (x.transposed) {
    for (std::int64_t jj = 0; jj < filled; ++jj)
      for (std::int64_t p = 0; p < kc; ++p) panel[p * width + jj] = x(p0 + p, start + jj);
  } else {
    for (std::int64_t p = 0; p < kc; ++p)
      for (std::int64_t jj = 0; jj < filled; ++jj) panel[p * width + jj] = x(p0 + p, start + jj);
  }
  for (std::int64_t p = 0; p < kc; ++p)
    for (std::int64_t jj = filled; jj < width; ++jj) panel[p * width + jj] = 0.0;
}

// The calling thread's packing buffer, grown to at least `count` doubles. Note: bounded by the block sizes
// (kDepth x kColTarget for B, kDepth x about kRowTarget for A), and kept for the thread's next product.
double* thread_buffer(std::vector<double>& buffer, std::int64_t count) {
  if (buffer.size() < static_cast<std::size_t>(count)) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

thread_local std::vector<double> packed_a_buffer, packed_b_buffer;

// The product on one kernel.
void run(const Kernel& kern, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
         double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double* c,
         std::int64_t ldc) {
  // op(A) is read along its depth as op(A)^T, so that one packing routine serves both operands.
  const Operand a_by_depth{a, lda, !transpose_a}, op_b{b, ldb, transpose_b};
  const std::int64_t col_block = kColTarget / kern.nr * kern.nr;
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool threaded = detail::use_threads(static_cast<std::int64_t>(std::min(work, 1e18)), kParallelWork);
  const std::int64_t threads = threaded ? omp_get_max_threads() : 1;
  // Note: blocks of nearly equal height (whole tiles of MR rows, about kRowTarget rows at most), so that threads
  // get equal shares: 130 rows on the 8-row tile are 72 + 58, not 128 + 2.
  const std::int64_t row_blocks = (m + kRowTarget - 1) / kRowTarget;
  const std::int64_t row_block = ((m + row_blocks - 1) / row_blocks + kern.mr - 1) / kern.mr * kern.mr;
  for (std::int64_t j0 = 0; j0 < n; j0 += col_block) {
    const std::int64_t cols = std::min(col_block, n - j0), panels = (cols + kern.nr - 1) / kern.nr;
    // Note: with fewer row blocks than threads, each row block's columns are split too (A is packed once per
    // piece: kc x rows copies against kc x rows x columns multiply-adds).
    const std::int64_t pieces =
        threaded ? std::clamp((2 * threads + row_blocks - 1) / row_blocks, std::int64_t{1}, panels) : 1;
    const std::int64_t units = row_blocks * pieces;
    for (std::int64_t p0 = 0; p0 < k; p0 += kDepth) {
      const std::int64_t kc = std::min(kDepth, k - p0);
      double* packed_b = thread_buffer(packed_b_buffer, panels * kern.nr * kc);
      auto pack_b = [&](std::int64_t s) { pack_panel(op_b, p0, kc, j0, cols, kern.nr, s, packed_b); };
      auto compute = [&](std::int64_t unit) {
        const std::int64_t i0 = unit / pieces * row_block, rows = std::min(row_block, m - i0);
        const std::int64_t piece = unit % pieces;
        const std::int64_t first = piece * panels / pieces * kern.nr,
                           last = std::min(cols, (piece + 1) * panels / pieces * kern.nr);
        if (rows <= 0 || first >= last) return;  // rounding the blocks up to MR rows can leave the last one empty
        double* packed_a = thread_buffer(packed_a_buffer, (rows + kern.mr - 1) / kern.mr * kern.mr * kc);
        for (std::int64_t r = 0; r * kern.mr < rows; ++r)
          pack_panel(a_by_depth, p0, kc, i0, rows, kern.mr, r, packed_a);
        kern.tiles(Block{packed_a, packed_b + first * kc, kc, rows, last - first, alpha, c + i0 * ldc + j0 + first,
                         ldc});
      };
      detail::parallel_for(panels, threaded, pack_b);
      detail::parallel_for(units, threaded, compute);
    }
  }
}

}  // namespace

void gemm_f64(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
              const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double* c, std::int64_t ldc) {
  run(kernels().front(), transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

void gemm_f64_on(const std::string& kernel, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                 std::int64_t k, double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                 double* c, std::int64_t ldc) {
  for (const Kernel& candidate : kernels())
    if (candidate.name == kernel)
      return run(candidate, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
  fail("gemm_f64_on: no float64 kernel '{}' on this CPU and build", kernel);
}

const char* gemm_f64_kernel() { return kernels().front().name; }

std::vector<std::string> gemm_f64_kernels() {
  std::vector<std::string> names;
  for (const Kernel& kern : kernels()) names.emplace_back(kern.name);
  return names;
}

}  // namespace tapegrad::kernels

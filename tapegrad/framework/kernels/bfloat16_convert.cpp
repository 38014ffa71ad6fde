#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/bfloat16_convert.h>

// Note: the same condition as TAPEGRAD_DISPATCH (kernels/dispatch.h): GCC compiles each path below for its own
// instruction set and the CPU is checked once. Other builds (native, sanitizer, fuzz, clang) get the scalar loop,
// which their compiler vectorises for the instruction set it targets.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TAPEGRAD_NO_DISPATCH)
#define TAPEGRAD_BF16_SIMD 1
#include <immintrin.h>
#endif

namespace tapegrad::kernels {
namespace {

using ToBf16 = void (*)(const float*, std::uint16_t*, std::int64_t);
using FromBf16 = void (*)(const std::uint16_t*, float*, std::int64_t);

struct Path {
  const char* name;
  ToBf16 to_bf16;
  FromBf16 from_bf16;
};

void to_bf16_scalar(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bfloat16_from_float(in[i]).bits;
}

void from_bf16_scalar(const std::uint16_t* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(BFloat16{in[i]});
}

#ifdef TAPEGRAD_BF16_SIMD
// Note: GCC 12's AVX-512 shift and convert intrinsics start from _mm512_undefined_epi32() and then warn that it
// "may be used uninitialized" at -O3 (a known false positive of its headers); only this section is exempt.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Integer round to nearest even of 16 floats' bits, NaN lanes made (bits >> 16) | 0x40: the scalar function's
// result in each 32-bit lane's low half.
__attribute__((target("arch=x86-64-v4"))) inline __m512i round_avx512(__m512i bits) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

__attribute__((target("arch=x86-64-v4"))) void to_bf16_avx512(const float* in, std::uint16_t* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(in + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(round_avx512(bits)));
  }
  to_bf16_scalar(in + i, out + i, n - i);
}

__attribute__((target("arch=x86-64-v4"))) void from_bf16_avx512(const std::uint16_t* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
  from_bf16_scalar(in + i, out + i, n - i);
}

// Note: vcvtneps2bf16 rounds to nearest even and quiets NaN exactly as the scalar function, but treats subnormal
// inputs as zero; those lanes (exponent field 0, zeros included, which the integer rounding keeps) take the
// integer result, so this path gives the scalar bits on every input.
__attribute__((target("arch=x86-64-v4,avx512bf16"))) void to_bf16_avx512bf16(const float* in, std::uint16_t* out,
                                                                             std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 value = _mm512_loadu_ps(in + i);
    const __m512i bits = _mm512_castps_si512(value);
    const __m256i hardware = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(value));
    const __mmask16 tiny = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7f800000));
    const __m256i integer = _mm512_cvtepi32_epi16(round_avx512(bits));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_mask_blend_epi16(tiny, hardware, integer));
  }
  to_bf16_scalar(in + i, out + i, n - i);
}

__attribute__((target("arch=x86-64-v3"))) inline __m256i round_avx2(__m256i bits) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  // Note: AVX2 has only a signed compare; the magnitude is below 2^31, so signed is right.
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

__attribute__((target("arch=x86-64-v3"))) void to_bf16_avx2(const float* in, std::uint16_t* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i low = round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    const __m256i high = round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
    // Note: packus packs within 128-bit halves (lanes 0-3, 8-11, 4-7, 12-15); the permute puts them in order.
    // Every lane is at most 0xffff, so its unsigned saturation never changes a value.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(low, high), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  to_bf16_scalar(in + i, out + i, n - i);
}

__attribute__((target("arch=x86-64-v3"))) void from_bf16_avx2(const std::uint16_t* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
  from_bf16_scalar(in + i, out + i, n - i);
}

std::vector<Path> find_paths() {
  __builtin_cpu_init();
  std::vector<Path> found;
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
  if (v4 && __builtin_cpu_supports("avx512bf16"))
    found.push_back({"AVX512-BF16", to_bf16_avx512bf16, from_bf16_avx512});
  if (v4) found.push_back({"AVX-512", to_bf16_avx512, from_bf16_avx512});
  if (__builtin_cpu_supports("x86-64-v3")) found.push_back({"AVX2", to_bf16_avx2, from_bf16_avx2});
  found.push_back({"scalar", to_bf16_scalar, from_bf16_scalar});
  return found;
}
#pragma GCC diagnostic pop
#else
std::vector<Path> find_paths() { return {{"scalar", to_bf16_scalar, from_bf16_scalar}}; }
#endif

const std::vector<Path>& paths() {
  static const std::vector<Path> found = find_paths();
  return found;
}

const Path& path_named(const std::string& kernel) {
  for (const Path& path : paths())
    if (kernel == path.name) return path;
  fail("bfloat16_convert: no path named '{}' on this CPU and build", kernel);
}

}  // namespace

void float_to_bfloat16(const float* in, std::uint16_t* out, std::int64_t n) { paths().front().to_bf16(in, out, n); }

void bfloat16_to_float(const std::uint16_t* in, float* out, std::int64_t n) { paths().front().from_bf16(in, out, n); }

const char* bfloat16_convert_kernel() { return paths().front().name; }

std::vector<std::string> bfloat16_convert_kernels() {
  std::vector<std::string> names;
  for (const Path& path : paths()) names.emplace_back(path.name);
  return names;
}

void float_to_bfloat16_on(const std::string& kernel, const float* in, std::uint16_t* out, std::int64_t n) {
  path_named(kernel).to_bf16(in, out, n);
}

void bfloat16_to_float_on(const std::string& kernel, const std::uint16_t* in, float* out, std::int64_t n) {
  path_named(kernel).from_bf16(in, out, n);
}

}  // namespace tapegrad::kernels

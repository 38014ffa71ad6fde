// The physical and library anchors that bench/compare.sh prints beside its ratios, so that a ratio is also a
// fraction of what the machine can do:
//   - the FMA peak per core: independent fused multiply-adds in registers, the widest vectors the CPU has
//     (AVX-512, else AVX2+FMA), measured on 1..N threads;
//   - raw 1024^3 float32 GEMM of oneDNN (dnnl_sgemm, what tapegrad's kernels call) and of OpenBLAS
//     (cblas_sgemm from Debian's openblas-openmp, loaded at run time; the library libtorch uses here);
//   - float64 GEMM of OpenBLAS (cblas_dgemm) and of tapegrad (its own kernel, kernels/gemm_f64), for the float64
//     matmul row;
//   - where the CPU has AVX512-BF16: the bfloat16 dot-product peak (vdpbf16ps: 32 bfloat16 products summed into
//     16 float32 lanes) and oneDNN's 1024^3 matmul with bfloat16 inputs and a float32 result, the figures that
//     set what mixed-precision training could gain (issue 42) before any of it is built.
//   anchors [--threads N] [--seconds S] [--smoke]
// Prints `anchor=<name> threads=<n> gflops=<g>` lines (and `openblas_core=<name>`).
// Note: run it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (compare.sh does), or OpenBLAS's anchor is
// its pinned old kernel, not its best.
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Repeats `run` (which does `flops` floating-point operations) for `seconds` after one warm-up; GFLOP/s.
double rate(double seconds, double flops, const std::function<void()>& run) {
  run();
  const double start = now();
  long count = 0;
  do {
    run();
    ++count;
  } while (now() - start < seconds);
  return flops * static_cast<double>(count) / (now() - start) * 1e-9;
}

// 12 independent accumulator chains: enough to cover an FMA latency of 4 cycles on two pipes (8 in flight)
// with margin. Flops per call: iterations * chains * lanes * 2.
constexpr int kChains = 12;
constexpr long kIterations = 1 << 20;

__attribute__((target("avx512f"))) float fma_probe_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kIterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  // Note: stored and summed by hand; GCC 12 warns falsely inside _mm512_reduce_add_ps's header code.
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_probe_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kIterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  float lanes[8];
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  _mm256_storeu_ps(lanes, total);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

// vdpbf16ps: each lane adds two bfloat16 products to its float32 accumulator, 64 flops per instruction.
__attribute__((target("avx512f,avx512bf16"))) float bf16_probe_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(3e-4f));
  for (long i = 0; i < kIterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

volatile float sink;

double bf16_peak(int threads, double seconds) {
  const double flops = static_cast<double>(kIterations) * kChains * 64 * threads;
  return rate(seconds, flops, [&] {
#pragma omp parallel num_threads(threads)
    sink = bf16_probe_avx512();
  });
}

// oneDNN's matmul primitive, A and B in bfloat16 (converted once, outside the timing), C in float32: the GEMM an
// autocast linear layer would run. Returns 0 when oneDNN has no such implementation on this CPU.
double onednn_bf16_matmul(int n, double seconds) {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return 0;
  dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
  const dnnl_dims_t dims = {n, n};
  dnnl_memory_desc_t a_md, b_md, c_md, a_f32_md;
  dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dnnl_bf16, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&b_md, 2, dims, dnnl_bf16, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&a_f32_md, 2, dims, dnnl_f32, dnnl_ab);
  dnnl_matmul_desc_t desc;
  dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md);
  dnnl_primitive_desc_t pd;
  double gflops = 0;
  if (dnnl_primitive_desc_create(&pd, &desc, nullptr, engine, nullptr) == dnnl_success) {
    const char* impl = nullptr;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    std::printf("onednn_bf16_matmul_impl=%s\n", impl ? impl : "unknown");
    std::vector<float> f32(static_cast<std::size_t>(n) * n, 0.5f), c(static_cast<std::size_t>(n) * n);
    dnnl_memory_t src_f32, a, b, cm;
    dnnl_memory_create(&src_f32, &a_f32_md, engine, f32.data());
    dnnl_memory_create(&a, &a_md, engine, DNNL_MEMORY_ALLOCATE);
    dnnl_memory_create(&b, &b_md, engine, DNNL_MEMORY_ALLOCATE);
    dnnl_memory_create(&cm, &c_md, engine, c.data());
    for (dnnl_memory_t target : {a, b}) {  // float32 -> bfloat16 by oneDNN's reorder (round to nearest even)
      dnnl_primitive_desc_t reorder_pd;
      dnnl_reorder_primitive_desc_create(&reorder_pd, &a_f32_md, engine, &a_md, engine, nullptr);
      dnnl_primitive_t reorder;
      dnnl_primitive_create(&reorder, reorder_pd);
      dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src_f32}, {DNNL_ARG_TO, target}};
      dnnl_primitive_execute(reorder, stream, 2, args);
      dnnl_stream_wait(stream);
      dnnl_primitive_destroy(reorder);
      dnnl_primitive_desc_destroy(reorder_pd);
    }
    dnnl_primitive_t matmul;
    dnnl_primitive_create(&matmul, pd);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, cm}};
    gflops = rate(seconds, 2.0 * n * n * n, [&] {
      dnnl_primitive_execute(matmul, stream, 3, args);
      dnnl_stream_wait(stream);
    });
    dnnl_primitive_destroy(matmul);
    dnnl_primitive_desc_destroy(pd);
    for (dnnl_memory_t m : {src_f32, a, b, cm}) dnnl_memory_destroy(m);
  }
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(engine);
  return gflops;
}

// The peak of `threads` cores together, each running the probe.
double fma_peak(int threads, double seconds, bool avx512) {
  const double lanes = avx512 ? 16 : 8;
  const double flops = static_cast<double>(kIterations) * kChains * lanes * 2 * threads;
  return rate(seconds, flops, [&] {
#pragma omp parallel num_threads(threads)
    sink = avx512 ? fma_probe_avx512() : fma_probe_avx2();
  });
}

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using CblasDgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                            double*, int);

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  double seconds = 2.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--smoke") == 0) {
      seconds = 0.01;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--smoke]\n", argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  tapegrad::set_num_threads(threads);
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 || __builtin_cpu_supports("fma"))
    std::printf("anchor=fma_peak_%s threads=%d gflops=%.6g\n", avx512 ? "avx512" : "avx2", threads,
                fma_peak(threads, seconds, avx512));

  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (bf16) std::printf("anchor=bf16_dot_peak_avx512 threads=%d gflops=%.6g\n", threads, bf16_peak(threads, seconds));

  const int n = 1024;
  const double flops = 2.0 * n * n * n;
  if (bf16) std::printf("anchor=onednn_bf16_matmul threads=%d gflops=%.6g\n", threads, onednn_bf16_matmul(n, seconds));
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::printf("anchor=onednn_sgemm threads=%d gflops=%.6g\n", threads, rate(seconds, flops, [&] {
                dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
              }));

  // Note: loaded at run time so that the library itself never depends on OpenBLAS.
  void* openblas = dlopen("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (openblas == nullptr) {
    std::printf("openblas_core=absent (apt-get install libopenblas0-openmp)\n");
  } else {
    auto corename = reinterpret_cast<char* (*)()>(dlsym(openblas, "openblas_get_corename"));
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(openblas, "openblas_set_num_threads"));
    auto sgemm = reinterpret_cast<CblasSgemm>(dlsym(openblas, "cblas_sgemm"));
    auto dgemm = reinterpret_cast<CblasDgemm>(dlsym(openblas, "cblas_dgemm"));
    if (set_threads) set_threads(threads);
    std::printf("openblas_core=%s\n", corename ? corename() : "unknown");
    constexpr int kRowMajor = 101, kNoTrans = 111;
    if (sgemm)
      std::printf("anchor=openblas_sgemm threads=%d gflops=%.6g\n", threads, rate(seconds, flops, [&] {
                    sgemm(kRowMajor, kNoTrans, kNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
                  }));
    std::vector<double> ad(n * n, 0.5), bd(n * n, 0.25), cd(n * n);
    if (dgemm)
      std::printf("anchor=openblas_dgemm threads=%d gflops=%.6g\n", threads, rate(seconds, flops, [&] {
                    dgemm(kRowMajor, kNoTrans, kNoTrans, n, n, n, 1.0, ad.data(), n, bd.data(), n, 0.0, cd.data(), n);
                  }));
  }
  // tapegrad's float64 matmul (kernels/gemm_f64), through the public op
  const tapegrad::Tensor x = tapegrad::ones({n, n}, tapegrad::TensorOptions{}.with_dtype(tapegrad::DType::Float64));
  tapegrad::Tensor y;
  std::printf("anchor=tapegrad_matmul_f64 threads=%d gflops=%.6g\n", threads,
              rate(seconds, flops, [&] { y = tapegrad::matmul(x, x); }));
  return 0;
}

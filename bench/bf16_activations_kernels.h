// bench/bf16_activations.cpp's elementwise kernels (BatchNorm training forward/backward, ReLU, add) on NHWC rows,
// for float32 and bfloat16 activations from one template each, and their check; included by that program inside
// its anonymous namespace after its includes and aliases (i64, bf16).
#pragma once

// ---- Elementwise kernels on NHWC rows ([rows][C]), templated on the activation type; float arithmetic.
[[gnu::always_inline]] inline float load(float v) { return v; }
[[gnu::always_inline]] inline float load(bf16 v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }
[[gnu::always_inline]] inline void store(float& out, float v) { out = v; }
// Round to nearest even, NaN kept quiet (tapegrad::bfloat16_from_float's rule), branch-free so it vectorises.
[[gnu::always_inline]] inline void store(bf16& out, float v) {
  const auto b = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16, nan = (b >> 16) | 0x40u;
  out = static_cast<bf16>((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Note: each block of 64 rows sums into per-channel float partials, which are added into double totals, so the
// float accumulation never runs over more than 64 values (a batch holds up to 65536 rows) and the statistics of A
// and B differ by the activations' rounding only.
constexpr i64 kRowBlock = 64;

template <class T>
[[gnu::always_inline]] inline void moments_body(const T* __restrict x, i64 rows, i64 C, const float* __restrict pivot,
                                                double* sum, double* sumsq) {
  std::vector<float> s_(static_cast<std::size_t>(C)), q_(static_cast<std::size_t>(C));
  float* __restrict s = s_.data();
  float* __restrict q = q_.data();
  for (i64 r0 = 0; r0 < rows; r0 += kRowBlock) {
    std::fill(s, s + C, 0.0f), std::fill(q, q + C, 0.0f);
    for (i64 r = r0; r < std::min(rows, r0 + kRowBlock); ++r)
      for (i64 c = 0; c < C; ++c) {
        const float d = load(x[r * C + c]) - pivot[c];  // shifted by a sample: no cancellation in the variance
        s[c] += d, q[c] += d * d;
      }
    for (i64 c = 0; c < C; ++c) sum[c] += s[c], sumsq[c] += q[c];
  }
}

template <class T>
[[gnu::always_inline]] inline void affine_body(const T* __restrict x, T* __restrict y, i64 rows, i64 C,
                                               const float* __restrict scale, const float* __restrict shift) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < C; ++c) store(y[r * C + c], load(x[r * C + c]) * scale[c] + shift[c]);
}

template <class T>
[[gnu::always_inline]] inline void grad_sums_body(const T* __restrict dy, const T* __restrict x, i64 rows, i64 C,
                                                  const float* __restrict mean, double* sum_dy, double* sum_dy_xmu) {
  std::vector<float> s_(static_cast<std::size_t>(C)), q_(static_cast<std::size_t>(C));
  float* __restrict s = s_.data();
  float* __restrict q = q_.data();
  for (i64 r0 = 0; r0 < rows; r0 += kRowBlock) {
    std::fill(s, s + C, 0.0f), std::fill(q, q + C, 0.0f);
    for (i64 r = r0; r < std::min(rows, r0 + kRowBlock); ++r)
      for (i64 c = 0; c < C; ++c) {
        const float g = load(dy[r * C + c]);
        s[c] += g, q[c] += g * (load(x[r * C + c]) - mean[c]);
      }
    for (i64 c = 0; c < C; ++c) sum_dy[c] += s[c], sum_dy_xmu[c] += q[c];
  }
}

// dx = a dy + b x + k per channel (BatchNorm's training input gradient with its sums folded in).
template <class T>
[[gnu::always_inline]] inline void grad_input_body(const T* __restrict dy, const T* __restrict x, T* __restrict dx, i64 rows,
                                                   i64 C, const float* __restrict a, const float* __restrict b,
                                                   const float* __restrict k) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < C; ++c) store(dx[r * C + c], a[c] * load(dy[r * C + c]) + b[c] * load(x[r * C + c]) + k[c]);
}

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// One non-template entry point per kernel and type (target_clones needs a plain function; the bodies inline).
#define DEFINE_KERNELS(T)                                                                                        \
  CLONES void moments(const T* x, i64 rows, i64 C, const float* pivot, double* sum, double* sumsq) {            \
    moments_body(x, rows, C, pivot, sum, sumsq);                                                                 \
  }                                                                                                              \
  CLONES void affine(const T* x, T* y, i64 rows, i64 C, const float* scale, const float* shift) {               \
    affine_body(x, y, rows, C, scale, shift);                                                                    \
  }                                                                                                              \
  CLONES void grad_sums(const T* dy, const T* x, i64 rows, i64 C, const float* mean, double* s, double* q) {    \
    grad_sums_body(dy, x, rows, C, mean, s, q);                                                                  \
  }                                                                                                              \
  CLONES void grad_input(const T* dy, const T* x, T* dx, i64 rows, i64 C, const float* a, const float* b,        \
                         const float* k) {                                                                       \
    grad_input_body(dy, x, dx, rows, C, a, b, k);                                                                \
  }                                                                                                              \
  CLONES void relu(const T* __restrict x, T* __restrict y, i64 n) {                                              \
    for (i64 i = 0; i < n; ++i) store(y[i], std::max(load(x[i]), 0.0f));                                        \
  }                                                                                                              \
  CLONES void relu_backward(const T* __restrict dy, const T* __restrict y, T* __restrict dx, i64 n) {           \
    for (i64 i = 0; i < n; ++i) store(dx[i], load(y[i]) > 0.0f ? load(dy[i]) : 0.0f);                          \
  }                                                                                                              \
  CLONES void add(const T* __restrict a, const T* __restrict b, T* __restrict out, i64 n) {                     \
    for (i64 i = 0; i < n; ++i) store(out[i], load(a[i]) + load(b[i]));                                          \
  }
DEFINE_KERNELS(float)
DEFINE_KERNELS(bf16)
#undef DEFINE_KERNELS

// Deterministic values in [-1, 1) rounded to bfloat16 (so A's float input equals B's bfloat16 input exactly).
std::vector<float> values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float f = scale * (static_cast<float>((i * 2654435761u + seed * 40503u) % 2003) / 1001.5f - 1.0f);
    v[i] = tapegrad::bfloat16_to_float(tapegrad::bfloat16_from_float(f));
  }
  return v;
}

// ---- BatchNorm (training, batch statistics) on top of the kernels.
struct BatchNorm {
  i64 C;
  std::vector<float> gamma, beta, mean, invstd, scale, shift, a, b, k, dgamma, dbeta;
  std::vector<double> s, q;
  BatchNorm(i64 channels, unsigned seed)
      : C(channels), gamma(values(C, seed, 0.5f)), beta(values(C, seed + 1, 0.5f)), mean(C), invstd(C), scale(C),
        shift(C), a(C), b(C), k(C), dgamma(C), dbeta(C), s(C), q(C) {
    for (float& g : gamma) g += 1.0f;
  }
  template <class T> void forward(const T* x, T* y, i64 rows) {
    for (i64 c = 0; c < C; ++c) mean[c] = load(x[c]);  // the first row as the shift
    std::fill(s.begin(), s.end(), 0.0), std::fill(q.begin(), q.end(), 0.0);
    moments(x, rows, C, mean.data(), s.data(), q.data());
    for (i64 c = 0; c < C; ++c) {
      const double m = s[c] / rows, var = std::max(q[c] / rows - m * m, 0.0);
      mean[c] = static_cast<float>(mean[c] + m), invstd[c] = static_cast<float>(1.0 / std::sqrt(var + 1e-5));
      scale[c] = gamma[c] * invstd[c], shift[c] = beta[c] - mean[c] * scale[c];
    }
    affine(x, y, rows, C, scale.data(), shift.data());
  }
  template <class T> void backward(const T* dy, const T* x, T* dx, i64 rows) {
    std::fill(s.begin(), s.end(), 0.0), std::fill(q.begin(), q.end(), 0.0);
    grad_sums(dy, x, rows, C, mean.data(), s.data(), q.data());
    for (i64 c = 0; c < C; ++c) {
      const double n = static_cast<double>(rows), is = invstd[c], g = gamma[c] * is;
      const double bc = -g * is * is * q[c] / n;
      dgamma[c] = static_cast<float>(q[c] * is), dbeta[c] = static_cast<float>(s[c]);
      a[c] = static_cast<float>(g), b[c] = static_cast<float>(bc), k[c] = static_cast<float>(-g * s[c] / n - bc * mean[c]);
    }
    grad_input(dy, x, dx, rows, C, a.data(), b.data(), k.data());
  }
};

// Each elementwise kernel on the same bfloat16-exact inputs as float and as bfloat16: the bfloat16 result must be
// the float one rounded once (at most 2^-8 relative: bfloat16 keeps 8 significant bits), the float sums of the statistics equal up to 1e-6.
bool check_kernels() {
  const i64 rows = 300, C = 48, n = rows * C;  // rows not a multiple of kRowBlock: the tail block is covered
  const std::vector<float> x = values(n, 21), dy = values(n, 23, 0.01f), p = values(C, 25);
  std::vector<bf16> xb(n), dyb(n), ob(n);
  for (i64 i = 0; i < n; ++i) store(xb[i], x[i]), store(dyb[i], dy[i]);
  std::vector<float> of(n);
  bool ok = true;
  auto compare = [&](const char* name) {
    double worst = 0;
    for (i64 i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(load(ob[i]) - of[i]) / std::max(std::fabs(of[i]), 1e-30f)));
    const bool good = worst <= 1.0 / 256;
    std::printf("check kernel=%s bf16_vs_float=%.3g %s\n", name, worst, good ? "ok" : "MISMATCH");
    if (!good) std::fprintf(stderr, "bf16_activations: MISMATCH in kernel %s: %.3g (limit 2^-8, one rounding)\n", name, worst), ok = false;
  };
  relu(x.data(), of.data(), n), relu(xb.data(), ob.data(), n), compare("relu");
  relu_backward(dy.data(), x.data(), of.data(), n), relu_backward(dyb.data(), xb.data(), ob.data(), n);
  compare("relu_backward");
  add(x.data(), dy.data(), of.data(), n), add(xb.data(), dyb.data(), ob.data(), n), compare("add");
  affine(x.data(), of.data(), rows, C, p.data(), dy.data()), affine(xb.data(), ob.data(), rows, C, p.data(), dy.data());
  compare("bn_affine");
  grad_input(dy.data(), x.data(), of.data(), rows, C, p.data(), dy.data(), x.data());
  grad_input(dyb.data(), xb.data(), ob.data(), rows, C, p.data(), dy.data(), x.data());
  compare("bn_grad_input");
  const std::vector<double> zero(static_cast<std::size_t>(C));
  std::vector<double> s[2] = {zero, zero}, q[2] = {zero, zero}, s2[2] = {zero, zero}, q2[2] = {zero, zero};
  moments(x.data(), rows, C, p.data(), s[0].data(), q[0].data());
  moments(xb.data(), rows, C, p.data(), s[1].data(), q[1].data());
  grad_sums(dy.data(), x.data(), rows, C, p.data(), s2[0].data(), q2[0].data());
  grad_sums(dyb.data(), xb.data(), rows, C, p.data(), s2[1].data(), q2[1].data());
  double worst = 0, direct = 0;  // and the sums against a plain double loop
  for (i64 c = 0; c < C; ++c) {
    double sd = 0, qd = 0;
    for (i64 r = 0; r < rows; ++r) sd += x[r * C + c] - p[c], qd += (x[r * C + c] - p[c]) * (x[r * C + c] - p[c]);
    direct = std::max({direct, std::fabs(s[0][c] - sd) / (std::fabs(sd) + 1e-3 * rows), std::fabs(q[0][c] - qd) / qd});
    for (const auto* v : {s, q, s2, q2}) worst = std::max(worst, std::fabs(v[1][c] - v[0][c]) / std::max(std::fabs(v[0][c]), 1e-30));
  }
  const bool good = worst <= 1e-6 && direct <= 1e-5;
  std::printf("check kernel=bn_sums bf16_vs_float=%.3g float_vs_double=%.3g %s\n", worst, direct, good ? "ok" : "MISMATCH");
  if (!good) std::fprintf(stderr, "bf16_activations: MISMATCH in the BatchNorm sums: %.3g, %.3g\n", worst, direct), ok = false;
  return ok;
}

// What bfloat16 ACTIVATIONS between layers would buy tapegrad's ResNet autocast step (issue 42's missed
// resnet_bf16 target), measured before any library change: one ResNet basic block of bench/compare's resnet
// (conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU; the identity block, and the stride-2 entry block with the 1x1
// conv-BN shortcut) at the workload's four stage shapes, batch 64, NHWC, training forward + backward, as
//   A     float32 activations, every conv input rounded to bfloat16 before its conv (tapegrad's library kernel
//         kernels::float_to_bfloat16, once per conv call as autocast does), conv dst / diff_src float32: the
//         contract of docs/autocast.md today;
//   B     bfloat16 activations end to end (libtorch's autocast): oneDNN bf16 src/dst/diff_dst/diff_src, and
//         BatchNorm / ReLU / add read and write bfloat16, accumulating in float;
//   lib   tapegrad's own layers (nn::Conv2d, nn::BatchNorm2d, relu, add) on channels-last tensors under
//         AutocastGuard, forward + backward through the tape: anchors A to the product.
// A and B share every kernel (the same oneDNN primitives but for the dst/diff_src type, the same BN/ReLU/add
// templates instantiated for float and bfloat16) and weights (bfloat16, reordered once into oneDNN's layout in
// both: the per-step weight rounding is the same in both and not the question); weight gradients float32.
// Elementwise kernels are plain loops over NHWC rows, one thread, compiled for x86-64-v4 (AVX-512) / v3 (AVX2) / baseline and
// picked at run time (GCC target_clones), so the portable build runs them everywhere.
//   bf16_activations [--threads N] [--rounds R] [--calls K] [--ours S] [--torch S] [--smoke]
// First a correctness check (always; it exits 1 with MISMATCH on stderr): B against A within bfloat16
// tolerance, and A against lib (an independent implementation of the same contract) within float rounding.
// Then R rounds (default 7) interleave A, B, lib per block, each timing K calls (default 5) of forward +
// backward; medians are printed, wall and process CPU time. The whole-ResNet line weights the blocks as the
// resnet workload holds them (2 identity blocks at 32@32x32; an entry and an identity block at each other stage)
// and projects the step from --ours / --torch samples/s (defaults: last session's quiet resnet_bf16_cl, 291 and
// 303). The stem (3->32 conv, its BN/ReLU) and the head are outside the blocks and left as they are.
// --smoke (CI's bench_smoke): the check and one round of one call at batch 4 (about 1 s of CPU).
#include <omp.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/kernels/bfloat16_convert.h>  // the library's rounding (links tapegrad_internal)
#include <tapegrad/tapegrad.h>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;
using i64 = std::int64_t;
using bf16 = std::uint16_t;  // bfloat16 bits

dnnl::engine engine(dnnl::engine::kind::cpu, 0);
dnnl::stream stream(engine);

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

#include "bf16_activations_kernels.h"  // NOLINT: the elementwise kernels, BatchNorm and their check (inside this namespace)

template <class T> T* ptr(const memory& m) { return static_cast<T*>(m.get_data_handle()); }
i64 numel(const memory& m) { const auto d = m.get_desc().dims(); i64 n = 1; for (auto v : d) n *= v; return n; }

// ---- One convolution (no bias): bfloat16 src/weights/diff_dst, `act` dst/diff_src, float32 diff_weights.
struct Conv {
  memory::dims src, wei, dst;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  memory wei_fwd, wei_bwd, diff_wei;
  Conv(i64 n, i64 ci, i64 size, i64 co, i64 kernel, i64 stride, DT act, const std::vector<float>& weights_oihw) {
    const i64 pad = kernel / 2, out = (size + 2 * pad - kernel) / stride + 1;
    src = {n, ci, size, size}, wei = {co, ci, kernel, kernel}, dst = {n, co, out, out};
    const memory::dims strides{stride, stride}, padding{pad, pad};
    const memory::desc src_bf(src, DT::bf16, Tag::nhwc), dst_bf(dst, DT::bf16, Tag::nhwc);
    const memory::desc src_act(src, act, Tag::nhwc), dst_act(dst, act, Tag::nhwc);
    const auto alg = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::primitive_desc fpd(
        {dnnl::prop_kind::forward_training, alg, src_bf, {wei, DT::bf16, Tag::any}, dst_act, strides, padding, padding},
        engine);
    const dnnl::convolution_backward_data::primitive_desc dpd(
        {alg, src_act, {wei, DT::bf16, Tag::any}, dst_bf, strides, padding, padding}, engine, fpd);
    const dnnl::convolution_backward_weights::primitive_desc wpd(
        {alg, src_bf, {wei, DT::f32, Tag::any}, dst_bf, strides, padding, padding}, engine, fpd);
    fwd = dnnl::convolution_forward(fpd), bwd_data = dnnl::convolution_backward_data(dpd);
    bwd_weights = dnnl::convolution_backward_weights(wpd);
    memory plain({wei, DT::bf16, Tag::oihw}, engine);
    tapegrad::kernels::float_to_bfloat16(weights_oihw.data(), ptr<bf16>(plain), static_cast<i64>(weights_oihw.size()));
    wei_fwd = memory(fpd.weights_desc(), engine), wei_bwd = memory(dpd.weights_desc(), engine);
    dnnl::reorder(plain, wei_fwd).execute(stream, plain, wei_fwd);
    dnnl::reorder(plain, wei_bwd).execute(stream, plain, wei_bwd);
    diff_wei = memory(wpd.diff_weights_desc(), engine);
    stream.wait();
  }
  void forward(const memory& x, const memory& y) {
    fwd.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wei_fwd}, {DNNL_ARG_DST, y}});
  }
  void backward(const memory& x, const memory& dy, const memory& dx) {
    bwd_data.execute(stream, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wei_bwd}, {DNNL_ARG_DIFF_SRC, dx}});
    bwd_weights.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, diff_wei}});
  }
  std::vector<float> weight_grad() {  // row-major OIHW
    memory plain({wei, DT::f32, Tag::oihw}, engine);
    dnnl::reorder(diff_wei, plain).execute(stream, diff_wei, plain);
    stream.wait();
    return {ptr<float>(plain), ptr<float>(plain) + numel(plain)};
  }
};

// The block's shape and its float32 parameters (shared by A, B and lib).
struct Shape {
  i64 n, in, size, out, stride;
  bool entry() const { return stride != 1 || in != out; }
  i64 out_size() const { return size / stride; }
};
struct Parameters {
  std::vector<float> w1, w2, ws;  // OIHW
};

// ---- Variant A (kBf16 = false) and B (true): the block forward + backward on oneDNN and the kernels above.
template <bool kBf16> struct Block {
  using T = std::conditional_t<kBf16, bf16, float>;
  static constexpr DT act = kBf16 ? DT::bf16 : DT::f32;
  Shape sh;
  i64 in_rows, out_rows;
  Conv conv1, conv2;
  std::unique_ptr<Conv> convs;
  BatchNorm bn1, bn2, bns;
  memory x, xb, c1, y1, r1, r1b, c2, y2, cs, ys, s, out, dout, ds, dc2, dc2b, dr1, dy1, dc1, dc1b, dx1, dcs, dcsb, dxs, dx;
  memory a_in(DT t) const { return memory({{sh.n, sh.in, sh.size, sh.size}, t, Tag::nhwc}, engine); }
  memory a_out(DT t) const { return memory({{sh.n, sh.out, sh.out_size(), sh.out_size()}, t, Tag::nhwc}, engine); }
  Block(const Shape& s_, const Parameters& p)
      : sh(s_), in_rows(sh.n * sh.size * sh.size), out_rows(sh.n * sh.out_size() * sh.out_size()),
        conv1(sh.n, sh.in, sh.size, sh.out, 3, sh.stride, act, p.w1),
        conv2(sh.n, sh.out, sh.out_size(), sh.out, 3, 1, act, p.w2), bn1(sh.out, 11), bn2(sh.out, 13), bns(sh.out, 17) {
    if (sh.entry()) convs = std::make_unique<Conv>(sh.n, sh.in, sh.size, sh.out, 1, sh.stride, act, p.ws);
    for (memory* m : {&x, &dx1, &dxs, &dx}) *m = a_in(act);
    for (memory* m : {&c1, &y1, &r1, &c2, &y2, &cs, &ys, &s, &out, &dout, &ds, &dc2, &dr1, &dy1, &dc1, &dcs})
      *m = a_out(act);
    xb = a_in(DT::bf16);
    for (memory* m : {&r1b, &dc2b, &dc1b, &dcsb}) *m = a_out(DT::bf16);
  }
  // A conv's bfloat16 operand: B's activation itself; A rounds its float32 one (autocast's per-call rounding).
  const memory& rounded(const memory& a, const memory& scratch) {
    if constexpr (kBf16) return a;
    tapegrad::kernels::float_to_bfloat16(ptr<float>(a), ptr<bf16>(scratch), numel(a));
    return scratch;
  }
  // Thread CPU seconds spent in oneDNN's convolutions (1 thread: they run on this one), to split a block's time
  // into convolutions and everything else.
  double conv_seconds = 0;
  template <class F> void timed(F run) {
    const double start = thread_cpu_seconds();
    run();
    stream.wait();
    conv_seconds += thread_cpu_seconds() - start;
  }
  void set(memory& m, const std::vector<float>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) store(ptr<T>(m)[i], v[i]);
  }
  void step() {
    const i64 no = out_rows * sh.out;
    const memory& x1 = rounded(x, xb);
    timed([&] { conv1.forward(x1, c1); });
    bn1.forward(ptr<T>(c1), ptr<T>(y1), out_rows);
    relu(ptr<T>(y1), ptr<T>(r1), no);
    const memory& r1c = rounded(r1, r1b);
    timed([&] { conv2.forward(r1c, c2); });
    bn2.forward(ptr<T>(c2), ptr<T>(y2), out_rows);
    const memory* shortcut = &x;
    if (convs) {
      const memory& xs = rounded(x, xb);  // autocast rounds x again for this call
      timed([&] { convs->forward(xs, cs); });
      bns.forward(ptr<T>(cs), ptr<T>(ys), out_rows);
      shortcut = &ys;
    }
    add(ptr<T>(y2), ptr<T>(*shortcut), ptr<T>(s), no);
    relu(ptr<T>(s), ptr<T>(out), no);
    // Backward from dout.
    relu_backward(ptr<T>(dout), ptr<T>(out), ptr<T>(ds), no);
    bn2.backward(ptr<T>(ds), ptr<T>(c2), ptr<T>(dc2), out_rows);
    const memory& dc2c = rounded(dc2, dc2b);
    timed([&] { conv2.backward(kBf16 ? r1 : r1b, dc2c, dr1); });
    relu_backward(ptr<T>(dr1), ptr<T>(r1), ptr<T>(dy1), no);
    bn1.backward(ptr<T>(dy1), ptr<T>(c1), ptr<T>(dc1), out_rows);
    const memory& dc1c = rounded(dc1, dc1b);
    timed([&] { conv1.backward(kBf16 ? x : xb, dc1c, dx1); });
    const memory* dshortcut = &ds;
    if (convs) {
      bns.backward(ptr<T>(ds), ptr<T>(cs), ptr<T>(dcs), out_rows);
      const memory& dcsc = rounded(dcs, dcsb);
      timed([&] { convs->backward(kBf16 ? x : xb, dcsc, dxs); });
      dshortcut = &dxs;
    }
    add(ptr<T>(dx1), ptr<T>(*dshortcut), ptr<T>(dx), in_rows * sh.in);  // x's two uses: the tape's accumulation
  }
  std::vector<float> get(const memory& m) const {
    std::vector<float> v(static_cast<std::size_t>(numel(m)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = load(ptr<T>(m)[i]);
    return v;
  }
};

// ---- lib: tapegrad's layers on channels-last tensors under AutocastGuard (bench/compare's BasicBlock).
struct LibraryBlock {
  Shape sh;
  std::shared_ptr<tapegrad::nn::Conv2d> conv1, conv2, convs;
  std::shared_ptr<tapegrad::nn::BatchNorm2d> bn1, bn2, bns;
  tapegrad::Tensor x, dout, leaf;
  std::vector<tapegrad::nn::Module*> modules;
  explicit LibraryBlock(const Shape& s) : sh(s) {
    using namespace tapegrad;
    conv1 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{sh.in, sh.out, 3}.with_stride(sh.stride).with_padding(1).with_bias(false));
    conv2 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{sh.out, sh.out, 3}.with_padding(1).with_bias(false));
    bn1 = std::make_shared<nn::BatchNorm2d>(sh.out), bn2 = std::make_shared<nn::BatchNorm2d>(sh.out);
    modules = {conv1.get(), conv2.get(), bn1.get(), bn2.get()};
    if (sh.entry()) {
      convs = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{sh.in, sh.out, 1}.with_stride(sh.stride).with_bias(false));
      bns = std::make_shared<nn::BatchNorm2d>(sh.out);
      modules.push_back(convs.get()), modules.push_back(bns.get());
    }
    for (auto* m : modules) m->to(MemoryFormat::ChannelsLast);
  }
  static std::vector<float> oihw(const tapegrad::Tensor& w) {
    const tapegrad::Tensor c = w.contiguous(tapegrad::MemoryFormat::Contiguous);
    return {c.data<float>(), c.data<float>() + c.numel()};
  }
  static tapegrad::Tensor nhwc(const std::vector<float>& v, i64 n, i64 c, i64 size) {
    tapegrad::Tensor t = tapegrad::empty({n, c, size, size}, tapegrad::DType::Float32, tapegrad::MemoryFormat::ChannelsLast);
    std::copy(v.begin(), v.end(), t.data<float>(tapegrad::MemoryFormat::ChannelsLast));
    return t;
  }
  static std::vector<float> nhwc_values(const tapegrad::Tensor& t) {
    const tapegrad::Tensor c = t.contiguous(tapegrad::MemoryFormat::ChannelsLast);
    const float* p = c.data<float>(tapegrad::MemoryFormat::ChannelsLast);
    return {p, p + c.numel()};
  }
  Parameters parameters() const { return {oihw(conv1->weight), oihw(conv2->weight), convs ? oihw(convs->weight) : std::vector<float>{}}; }
  static void set_affine(tapegrad::nn::BatchNorm2d& bn, const BatchNorm& from) {
    std::copy(from.gamma.begin(), from.gamma.end(), bn.weight.data<float>());
    std::copy(from.beta.begin(), from.beta.end(), bn.bias.data<float>());
  }
  tapegrad::Tensor out;
  void step() {
    using namespace tapegrad;
    for (auto* m : modules) m->zero_grad();
    leaf = x.detach().requires_grad_();
    {
      AutocastGuard guard;
      const Tensor y = bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(leaf)))));
      out = relu(add(y, convs ? bns->forward(convs->forward(leaf)) : leaf));
    }
    out.backward(dout);
  }
};

// ||a - b|| / ||b|| (Euclidean): the error relative to the reference's size. Note: not the largest element's
// error: where a sum lands within rounding of 0, ReLU's mask may flip between A and B (or A and lib), which moves
// that one gradient element by its whole value, a legitimate difference that a max norm would call a mismatch.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, size = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    size += static_cast<double>(b[i]) * b[i];
  }
  return size > 0 ? std::sqrt(difference / size) : std::sqrt(difference);
}

struct Case {
  Shape shape;
  int count;  // how many such blocks the resnet workload holds
  const char* name;
  std::unique_ptr<Block<false>> a;
  std::unique_ptr<Block<true>> b;
  std::unique_ptr<LibraryBlock> lib;
};

// Builds the three with the same parameters and inputs, runs each once and compares; false on a mismatch.
bool build_and_check(Case& k) {
  const Shape& s = k.shape;
  k.lib = std::make_unique<LibraryBlock>(s);
  const Parameters p = k.lib->parameters();
  k.a = std::make_unique<Block<false>>(s, p), k.b = std::make_unique<Block<true>>(s, p);
  LibraryBlock::set_affine(*k.lib->bn1, k.a->bn1), LibraryBlock::set_affine(*k.lib->bn2, k.a->bn2);
  if (k.lib->bns) LibraryBlock::set_affine(*k.lib->bns, k.a->bns);
  const std::vector<float> x = values(static_cast<std::size_t>(s.n * s.in * s.size * s.size), 3);
  const std::vector<float> dout = values(static_cast<std::size_t>(s.n * s.out * s.out_size() * s.out_size()), 5, 1e-2f);
  k.a->set(k.a->x, x), k.a->set(k.a->dout, dout), k.b->set(k.b->x, x), k.b->set(k.b->dout, dout);
  k.lib->x = LibraryBlock::nhwc(x, s.n, s.in, s.size), k.lib->dout = LibraryBlock::nhwc(dout, s.n, s.out, s.out_size());
  k.a->step(), k.b->step(), k.lib->step();
  struct Pair { const char* what; std::vector<float> a, b, lib; };
  std::vector<Pair> pairs = {
      {"out", k.a->get(k.a->out), k.b->get(k.b->out), LibraryBlock::nhwc_values(k.lib->out)},
      {"dx", k.a->get(k.a->dx), k.b->get(k.b->dx), LibraryBlock::nhwc_values(k.lib->leaf.grad())},
      {"dw1", k.a->conv1.weight_grad(), k.b->conv1.weight_grad(), LibraryBlock::oihw(k.lib->conv1->weight.grad())},
      {"dw2", k.a->conv2.weight_grad(), k.b->conv2.weight_grad(), LibraryBlock::oihw(k.lib->conv2->weight.grad())},
      {"dgamma1", k.a->bn1.dgamma, k.b->bn1.dgamma, LibraryBlock::oihw(k.lib->bn1->weight.grad())},
      {"dbeta2", k.a->bn2.dbeta, k.b->bn2.dbeta, LibraryBlock::oihw(k.lib->bn2->bias.grad())}};
  if (k.lib->convs)
    pairs.push_back({"dws", k.a->convs->weight_grad(), k.b->convs->weight_grad(), LibraryBlock::oihw(k.lib->convs->weight.grad())});
  bool ok = true;
  for (const Pair& q : pairs) {
    // Note: B against A is loose on purpose: a ReLU mask flips where a sum lands within bfloat16 rounding of 0,
    // and the per-channel sums of a zero-mean gradient cancel, so legitimate differences reach several percent
    // (2-8 % measured); a wrong buffer, layout or dtype gives errors of order 1. The kernels themselves are held
    // to one rounding by check_kernels. A and lib implement the same contract and differ by float sum orders, which
    // can flip a mask too (measured up to 3e-3 at batch 64, usually 1e-4).
    const double ab = relative_error(q.b, q.a), al = relative_error(q.a, q.lib);
    const bool good = q.a.size() == q.b.size() && q.a.size() == q.lib.size() && ab < 0.2 && al < 1e-2;
    std::printf("check block=%s tensor=%s b_vs_a=%.3g a_vs_lib=%.3g %s\n", k.name, q.what, ab, al, good ? "ok" : "MISMATCH");
    if (!good) {
      std::fprintf(stderr, "bf16_activations: MISMATCH in block %s, tensor %s: B vs A %.3g (limit 0.2), A vs lib %.3g (limit 1e-2)\n",
                   k.name, q.what, ab, al);
      ok = false;
    }
  }
  return ok;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Time {
  double wall_ms, cpu_ms;
};

// `calls` calls of step after one warm-up call: ms per call, wall and process CPU.
Time time_calls(const std::function<void()>& step, int calls) {
  step();
  const double cpu = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) step();
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return {wall / calls, (cpu_seconds() - cpu) * 1e3 / calls};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 7, calls = 5;
  double ours = 291, torch = 303;  // samples/s of resnet_bf16_cl, last session's quiet run (docs/performance.md)
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool value = i + 1 < argc;
    if (arg == "--threads" && value) threads = std::atoi(argv[++i]);
    else if (arg == "--rounds" && value) rounds = std::atoi(argv[++i]);
    else if (arg == "--calls" && value) calls = std::atoi(argv[++i]);
    else if (arg == "--ours" && value) ours = std::atof(argv[++i]);
    else if (arg == "--torch" && value) torch = std::atof(argv[++i]);
    else if (arg == "--smoke") smoke = true;
    else {
      std::fprintf(stderr, "usage: bf16_activations [--threads N] [--rounds R] [--calls K] [--ours S] [--torch S] [--smoke]\n");
      return 2;
    }
  }
  if (threads < 1 || rounds < 1 || calls < 1 || ours <= 0 || torch <= 0) {
    std::fprintf(stderr, "bf16_activations: --threads, --rounds, --calls must be at least 1, --ours and --torch positive\n");
    return 2;
  }
  if (smoke) rounds = 1, calls = 1;
  omp_set_num_threads(threads);
  tapegrad::set_num_threads(threads);
  tapegrad::manual_seed(0);
  const i64 n = smoke ? 4 : 64;
  Case cases[] = {{{n, 32, 32, 32, 1}, 2, "identity_32x32x32", {}, {}, {}},
                  {{n, 32, 32, 64, 2}, 1, "entry_64x16x16", {}, {}, {}},
                  {{n, 64, 16, 64, 1}, 1, "identity_64x16x16", {}, {}, {}},
                  {{n, 64, 16, 128, 2}, 1, "entry_128x8x8", {}, {}, {}},
                  {{n, 128, 8, 128, 1}, 1, "identity_128x8x8", {}, {}, {}},
                  {{n, 128, 8, 256, 2}, 1, "entry_256x4x4", {}, {}, {}},
                  {{n, 256, 4, 256, 1}, 1, "identity_256x4x4", {}, {}, {}}};
  bool ok = check_kernels();
  try {
    for (Case& k : cases) ok = build_and_check(k) && ok;
  } catch (const dnnl::error& e) {
    // Note: oneDNN 2.6 has bfloat16 convolutions on AVX-512 CPUs only (docs/autocast.md); elsewhere the
    // question does not arise, and the kernels above were still checked on this CPU's clone.
    if (e.status != dnnl_unimplemented) throw;
    std::printf("skipped: no oneDNN bfloat16 convolution on this CPU (%s)\n", e.what());
    return ok ? 0 : 1;
  }
  if (!ok) return 1;
  std::printf("elementwise kernels: target_clones x86-64-v4 (AVX-512) / v3 (AVX2) / baseline (picked at run time); rounding kernel %s\n",
              tapegrad::kernels::bfloat16_convert_kernel());
  double total[2][3] = {}, conv_total[2] = {};  // [wall, cpu][A, B, lib], weighted by the workload's block counts
  for (Case& k : cases) {
    std::vector<double> t[2][3], conv[2];
    const std::function<void()> steps[3] = {[&] { k.a->step(); }, [&] { k.b->step(); }, [&] { k.lib->step(); }};
    for (int r = 0; r < rounds; ++r)
      for (int v = 0; v < 3; ++v) {
        const int variant = (v + r) % 3;  // the order rotates between rounds
        double* conv_seconds = variant == 0 ? &k.a->conv_seconds : variant == 1 ? &k.b->conv_seconds : nullptr;
        if (conv_seconds) *conv_seconds = 0;
        const Time time = time_calls(steps[variant], calls);
        t[0][variant].push_back(time.wall_ms), t[1][variant].push_back(time.cpu_ms);
        if (conv_seconds) conv[variant].push_back(*conv_seconds * 1e3 / (calls + 1));  // + the warm-up call
      }
    double m[2][3], c[2];
    for (int w = 0; w < 2; ++w) {
      c[w] = median(conv[w]), conv_total[w] += k.count * c[w];
      for (int v = 0; v < 3; ++v) m[w][v] = median(t[w][v]), total[w][v] += k.count * m[w][v];
    }
    std::printf("block=%s batch=%lld threads=%d count=%d A_ms=%.4g B_ms=%.4g lib_ms=%.4g A_cpu_ms=%.4g B_cpu_ms=%.4g "
                "lib_cpu_ms=%.4g A_conv_cpu_ms=%.4g B_conv_cpu_ms=%.4g B_over_A=%.3f B_over_A_cpu=%.3f "
                "lib_over_A_cpu=%.3f\n",
                k.name, static_cast<long long>(n), threads, k.count, m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2],
                c[0], c[1], m[0][1] / m[0][0], m[1][1] / m[1][0], m[1][2] / m[1][0]);
    std::fflush(stdout);
  }
  std::printf("resnet_blocks batch=%lld A_ms=%.4g B_ms=%.4g lib_ms=%.4g A_cpu_ms=%.4g B_cpu_ms=%.4g lib_cpu_ms=%.4g "
              "A_conv_cpu_ms=%.4g B_conv_cpu_ms=%.4g A_other_cpu_ms=%.4g B_other_cpu_ms=%.4g B_over_A_cpu=%.3f\n",
              static_cast<long long>(n), total[0][0], total[0][1], total[0][2], total[1][0], total[1][1], total[1][2],
              conv_total[0], conv_total[1], total[1][0] - conv_total[0], total[1][1] - conv_total[1],
              total[1][1] / total[1][0]);
  // The projection: the library's blocks take total[.][2] of a step of 64/ours s; B saves the fraction
  // 1 - B/A of them (CPU time, the figure that load disturbs least).
  if (smoke) return 0;  // a batch of 4 projects nothing
  const double step_ms = 1e3 * static_cast<double>(n) / ours, saving = 1.0 - total[1][1] / total[1][0];
  const double projected_ms = step_ms - saving * total[1][2];
  std::printf("projection ours_samples_per_s=%.4g step_ms=%.4g lib_blocks_cpu_ms=%.4g blocks_share=%.3f saving=%.3f "
              "projected_step_ms=%.4g projected_samples_per_s=%.4g vs_torch=%.3f (torch %.4g samples/s; now %.3f; 1.3x "
              "needs a step of %.4g ms)\n",
              ours, step_ms, total[1][2], total[1][2] / step_ms, saving, projected_ms, 1e3 * n / projected_ms,
              1e3 * n / projected_ms / torch, torch, ours / torch, 1e3 * n / (1.3 * torch));
  return 0;
}

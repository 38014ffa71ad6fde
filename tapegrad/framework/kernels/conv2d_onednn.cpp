// The float32 convolution on oneDNN's convolution primitives (forward, backward-data, backward-weights), which
// pick their AVX2 / AVX-512 / AMX code from the CPU at run time.
//
// Note: for NCHW tensors the primitives are created with format_tag::any, so oneDNN chooses its blocked layouts
// (nChw16c and OIhw16i16o on AVX-512); tapegrad's tensors stay plain NCHW, so each call reorders its operands into
// those layouts and the result back. For channels-last tensors (ConvGeometry::channels_last) the activations are
// described as NHWC, oneDNN's own format_tag::nhwc, so its NHWC kernels read and write the tensors' buffers with
// no reorder; only the weights (small) are still reordered into the layout the primitive picks. The exception is
// backward-weights on the layers where nhwc_weight_grad (below) measured oneDNN's NHWC kernel slower than the
// blocked one with its reorders. Measured (bench/conv_layers), the direct blocked kernels with the reorders still
// beat both im2col + GEMM and oneDNN's own plain-layout (im2col) convolution on most layers; kernels/conv2d.cpp
// holds the rule for the rest.
#include <tapegrad/framework/kernels/conv2d_onednn.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/onednn_support.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad::kernels::onednn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Note: the thread count is part of the key (see primitive_threads).
struct Key {
  ConvDirection direction;
  ConvGeometry g;
  bool bias;
  int threads;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    const ConvGeometry& g = key.g;
    std::size_t hash = static_cast<std::size_t>(key.direction) * 4 + (key.bias ? 1 : 0) + (g.channels_last ? 2 : 0);
    for (std::int64_t field : {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride_h, g.stride_w, g.padding_h, g.padding_w,
                               g.dilation_h, g.dilation_w, g.groups, std::int64_t{key.threads}})
      hash = hash * 1000003u ^ static_cast<std::size_t>(field);
    return hash;
  }
};

// One primitive argument: the plain layout tapegrad holds, the layout the primitive wants, and the reorder
// between them when they differ (into the primitive for an input, out of it for an output).
struct Operand {
  int argument;
  memory::desc user, inner;
  std::optional<dnnl::reorder> reorder;
  bool output;
};

// An immutable cache entry: the primitive and how to feed it.
struct Entry {
  dnnl::primitive primitive;
  std::vector<Operand> operands;
  memory::desc scratchpad;
};

memory::dims dims(std::initializer_list<std::int64_t> values) { return memory::dims(values); }

memory::desc plain(const memory::dims& shape, Tag tag) { return memory::desc(shape, memory::data_type::f32, tag); }
memory::desc any(const memory::dims& shape) { return memory::desc(shape, memory::data_type::f32, Tag::any); }

// Whether backward-weights of a channels-last convolution runs oneDNN's NHWC kernel (else the blocked one, with
// the activations reordered in). See the measurement above nhwc_weight_grad's definition.
bool nhwc_weight_grad(const ConvGeometry& g);

// The descriptions every direction shares: the plain user layouts and the convolution's parameters.
struct Shapes {
  memory::dims src, weights, bias, dst, strides, dilates, padding_l, padding_r;
  Tag weights_tag, activation_tag;
  explicit Shapes(const ConvGeometry& g)
      : src(dims({g.n, g.c, g.h, g.w})),
        weights(g.groups == 1 ? dims({g.o, g.c, g.kh, g.kw}) : dims({g.groups, g.og(), g.cg(), g.kh, g.kw})),
        bias(dims({g.o})),
        dst(dims({g.n, g.o, g.oh, g.ow})),
        strides(dims({g.stride_h, g.stride_w})),
        // Note: oneDNN counts the dilation from 0 (dense is 0), PyTorch from 1.
        dilates(dims({g.dilation_h - 1, g.dilation_w - 1})),
        padding_l(dims({g.padding_h, g.padding_w})),
        // Note: the right padding may exceed what the last window reads (floor mode); oneDNN accepts that as
        // long as its output-size formula gives the same extent, which it does with equal padding.
        padding_r(dims({g.padding_h, g.padding_w})),
        weights_tag(g.groups == 1 ? Tag::oihw : Tag::goihw),
        activation_tag(g.channels_last ? Tag::nhwc : Tag::nchw) {}
  // The primitive's activation layout: the user's own NHWC when channels-last (no reorder), else oneDNN's pick.
  memory::desc inner(const memory::dims& shape, bool nhwc) const {
    return nhwc ? plain(shape, Tag::nhwc) : any(shape);
  }
};

Operand operand(int argument, const memory::desc& user, const memory::desc& inner, bool output) {
  Operand result{argument, user, inner, std::nullopt, output};
  if (user != inner) {
    const dnnl::engine& engine = cpu_engine();
    result.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, inner, engine, user))
                            : dnnl::reorder(dnnl::reorder::primitive_desc(engine, user, engine, inner));
  }
  return result;
}

dnnl::convolution_forward::primitive_desc forward_desc(const Shapes& s, bool bias, bool nhwc) {
  const memory::desc src = s.inner(s.src, nhwc), dst = s.inner(s.dst, nhwc);
  const auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             src, any(s.weights), plain(s.bias, Tag::x), dst, s.strides, s.dilates,
                                             s.padding_l, s.padding_r)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             src, any(s.weights), dst, s.strides, s.dilates, s.padding_l,
                                             s.padding_r);
  return {desc, user_scratchpad(), cpu_engine()};
}

std::shared_ptr<const Entry> build(const Key& key) {
  const Shapes s(key.g);
  const memory::desc src = plain(s.src, s.activation_tag), weights = plain(s.weights, s.weights_tag),
                     dst = plain(s.dst, s.activation_tag), bias = plain(s.bias, Tag::x);
  const bool nhwc = key.g.channels_last;
  // This direction's activation layout: NHWC as given, except backward-weights where measured slower.
  const bool nhwc_here = nhwc && (key.direction != ConvDirection::weight_grad || nhwc_weight_grad(key.g));
  auto entry = std::make_shared<Entry>();
  // Note: the backward primitives take the forward one as a hint (oneDNN picks matching layouts and kernels).
  const auto forward_pd = forward_desc(s, key.bias, nhwc_here);
  switch (key.direction) {
    case ConvDirection::forward: {
      entry->primitive = dnnl::convolution_forward(forward_pd);
      entry->operands = {operand(DNNL_ARG_SRC, src, forward_pd.src_desc(), false),
                         operand(DNNL_ARG_WEIGHTS, weights, forward_pd.weights_desc(), false),
                         operand(DNNL_ARG_DST, dst, forward_pd.dst_desc(), true)};
      if (key.bias) entry->operands.push_back(operand(DNNL_ARG_BIAS, bias, bias, false));
      entry->scratchpad = forward_pd.scratchpad_desc();
      break;
    }
    case ConvDirection::input_grad: {
      const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, s.inner(s.src, nhwc_here),
                                                       any(s.weights), s.inner(s.dst, nhwc_here), s.strides,
                                                       s.dilates, s.padding_l, s.padding_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), cpu_engine(), forward_pd);
      entry->primitive = dnnl::convolution_backward_data(pd);
      entry->operands = {operand(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false),
                         operand(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false),
                         operand(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true)};
      entry->scratchpad = pd.scratchpad_desc();
      break;
    }
    case ConvDirection::weight_grad: {
      const memory::desc inner_src = s.inner(s.src, nhwc_here), inner_dst = s.inner(s.dst, nhwc_here);
      const auto desc =
          key.bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, inner_src,
                                                              any(s.weights), plain(s.bias, Tag::x), inner_dst,
                                                              s.strides, s.dilates, s.padding_l, s.padding_r)
                   : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, inner_src,
                                                              any(s.weights), inner_dst, s.strides, s.dilates,
                                                              s.padding_l, s.padding_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), cpu_engine(), forward_pd);
      entry->primitive = dnnl::convolution_backward_weights(pd);
      entry->operands = {operand(DNNL_ARG_SRC, src, pd.src_desc(), false),
                         operand(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false),
                         operand(DNNL_ARG_DIFF_WEIGHTS, weights, pd.diff_weights_desc(), true)};
      if (key.bias) entry->operands.push_back(operand(DNNL_ARG_DIFF_BIAS, bias, bias, true));
      entry->scratchpad = pd.scratchpad_desc();
      break;
    }
  }
  return entry;
}

// Note: bench/conv_layouts times oneDNN's NHWC kernels against its blocked ones with tapegrad's reorders, per
// direction. NHWC forward and backward-data were faster or level on every 3x3 layer of bench/compare's cnn and
// resnet; backward-weights was slower on the strided 32->64 layer in every run (1 thread: 5.19 against 4.08 ms
// quiet, docs/performance.md; 9.96 against 6.99 ms at load ~4, 2026-12-07 14:58, `conv_layouts --threads 1
// --rounds 3`), and mixed on the stride-1 layers (faster on resnet_s3/s4 and on cnn_conv2 at 2 threads, up to
// 14% slower on cnn_conv2 and resnet_s2 at 1 thread under load). The blocked kernel here also pays grad_output's
// reorder (which backward-data, NHWC, no longer shares), so only the strided case clearly favours it.
bool nhwc_weight_grad(const ConvGeometry& g) { return g.stride_h == 1 && g.stride_w == 1; }

// Note: 128 covers a ResNet's distinct (shape, direction) pairs several times.
using Cache = LruCache<Key, Entry, KeyHash>;

Cache& cache() {
  static Cache instance(128);
  return instance;
}

// Inputs already reordered into a primitive's layout, for the next primitive of the same call that reads the
// same buffer in the same layout (backward-data and backward-weights both read grad_output).
// Note: valid only while the user's buffers are unchanged, so it lives for one kernels call, never longer.
class ReorderedInputs {
 public:
  // The reordered copy of `user` in layout `inner`, or null.
  void* find(const void* user, const memory::desc& inner) const {
    for (const Copy& copy : copies_)
      if (copy.user == user && copy.inner == inner) return copy.data;
    return nullptr;
  }
  void* add(const void* user, const memory::desc& inner) {
    buffers_.emplace_back(inner.get_size());
    copies_.push_back({user, inner, buffers_.back().data()});
    return copies_.back().data;
  }

 private:
  struct Copy {
    const void* user;
    memory::desc inner;
    void* data;
  };
  std::vector<Copy> copies_;
  std::deque<Storage> buffers_;  // a deque: Storage does not move
};

// Runs the primitive of `key` on the user's plain buffers, given per argument in `pointers` (matching the
// entry's operands by argument id): inputs reordered in (or taken from `reordered`, where an earlier run of the
// same call left them), the primitive, outputs reordered out.
void run(const Key& key, const std::vector<std::pair<int, void*>>& pointers, ReorderedInputs* reordered = nullptr) {
  const std::shared_ptr<const Entry> entry = cache().get(key, build);
  const dnnl::engine& engine = cpu_engine();
  dnnl::stream& stream = thread_stream();
  std::deque<Storage> buffers;  // a deque: Storage does not move
  const auto buffer = [&](const memory::desc& desc) {
    buffers.emplace_back(desc.get_size());
    return buffers.back().data();
  };
  ReorderedInputs own;  // this run's reordered inputs, when the caller keeps none across runs
  ReorderedInputs& inputs = reordered ? *reordered : own;
  std::unordered_map<int, memory> arguments;
  std::vector<std::pair<memory, memory>> outputs;  // (inner, user) pairs to reorder after the primitive
  for (const Operand& op : entry->operands) {
    void* pointer = nullptr;
    for (const auto& [argument, given] : pointers)
      if (argument == op.argument) pointer = given;
    memory user(op.user, engine, pointer);
    if (!op.reorder) {
      arguments.emplace(op.argument, user);
      continue;
    }
    if (op.output) {
      memory inner(op.inner, engine, buffer(op.inner));
      arguments.emplace(op.argument, inner);
      outputs.emplace_back(inner, user);
      continue;
    }
    void* done = inputs.find(pointer, op.inner);
    memory inner(op.inner, engine, done ? done : inputs.add(pointer, op.inner));
    arguments.emplace(op.argument, inner);
    if (!done) op.reorder->execute(stream, user, inner);
  }
  if (entry->scratchpad.get_size() > 0)
    arguments.emplace(DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, buffer(entry->scratchpad)));
  entry->primitive.execute(stream, arguments);
  std::size_t next = 0;
  for (const Operand& op : entry->operands)
    if (op.reorder && op.output) {
      auto& [inner, user] = outputs[next++];
      op.reorder->execute(stream, inner, user);
    }
  stream.wait();
}

// Note: oneDNN reports failures as exceptions (an unsupported configuration, out of memory); the ops' shape
// checks rule out invalid arguments, so one reaching here is reported with the geometry.
template <class F>
void guarded(const char* op, const ConvGeometry& g, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    fail("{}: oneDNN failed ({}, status {}) for input [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride ({}, {}), "
         "padding ({}, {}), dilation ({}, {}), groups {}",
         op, e.what(), static_cast<int>(e.status), g.n, g.c, g.h, g.w, g.o, g.cg(), g.kh, g.kw, g.stride_h,
         g.stride_w, g.padding_h, g.padding_w, g.dilation_h, g.dilation_w, g.groups);
  }
}

Key key(ConvDirection direction, const ConvGeometry& g, bool bias) {
  return Key{direction, g, bias, primitive_threads()};
}

}  // namespace

void forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g) {
  if (g.n == 0) return;  // an empty batch has nothing to compute (and oneDNN rejects some zero extents)
  guarded("conv2d", g, [&] {
    run(key(ConvDirection::forward, g, bias != nullptr),
        {{DNNL_ARG_SRC, const_cast<float*>(x)},
         {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
         {DNNL_ARG_BIAS, const_cast<float*>(bias)},
         {DNNL_ARG_DST, out}});
  });
}

void input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g) {
  if (g.n == 0) return;
  guarded("conv2d_input_grad", g, [&] {
    run(key(ConvDirection::input_grad, g, false), {{DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)},
                                                   {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
                                                   {DNNL_ARG_DIFF_SRC, dx}});
  });
}

namespace {

void weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g,
                 ReorderedInputs* reordered) {
  if (g.n == 0) {  // an empty sum
    std::fill(dw, dw + g.o * g.cg() * g.kh * g.kw, 0.0f);
    if (db) std::fill(db, db + g.o, 0.0f);
    return;
  }
  guarded("conv2d_weight_grad", g, [&] {
    run(key(ConvDirection::weight_grad, g, db != nullptr),
        {{DNNL_ARG_SRC, const_cast<float*>(x)},
         {DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)},
         {DNNL_ARG_DIFF_WEIGHTS, dw},
         {DNNL_ARG_DIFF_BIAS, db}},
        reordered);
  });
}

}  // namespace

void weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g) {
  weight_grad(x, grad_output, dw, db, g, nullptr);
}

void backward(const float* x, const float* grad_output, const float* w, float* dx, float* dw, float* db,
              const ConvGeometry& g) {
  if (g.n == 0) return weight_grad(x, grad_output, dw, db, g, nullptr);
  // Note: grad_output is reordered into the blocked layout once for both primitives (when they want the same
  // layout): that reorder was 1.9% of a 1-thread cnn training step per convolution.
  ReorderedInputs reordered;
  guarded("conv2d_input_grad", g, [&] {
    run(key(ConvDirection::input_grad, g, false),
        {{DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)}, {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
         {DNNL_ARG_DIFF_SRC, dx}},
        &reordered);
  });
  weight_grad(x, grad_output, dw, db, g, &reordered);
}

std::size_t cache_size() { return cache().size(); }
std::size_t cache_capacity() { return cache().capacity(); }

}  // namespace tapegrad::kernels::onednn

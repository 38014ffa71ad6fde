// The oneDNN convolution primitives of both precisions: built per key, cached, run on tapegrad's plain buffers.
#include <tapegrad/framework/kernels/detail/onednn_conv.h>

#include <memory>
#include <optional>
#include <unordered_map>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/onednn_support.h>

namespace tapegrad::kernels::onednn::conv {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

// Note: the thread count is part of the key (see primitive_threads).
struct Key {
  Precision precision;
  ConvDirection direction;
  ConvGeometry g;
  bool bias;
  int threads;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    const ConvGeometry& g = key.g;
    std::size_t hash = static_cast<std::size_t>(key.direction) * 8 + (key.bias ? 1 : 0) + (g.channels_last ? 2 : 0) +
                       (key.precision == Precision::bf16 ? 4 : 0);
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

// An immutable cache entry: the primitive and how to feed it; no primitive where oneDNN has no bfloat16
// implementation (the caller's fallback runs).
struct Entry {
  std::optional<dnnl::primitive> primitive;
  std::vector<Operand> operands;
  memory::desc scratchpad;
};

memory::dims dims(std::initializer_list<std::int64_t> values) { return memory::dims(values); }

// Whether backward-weights of a channels-last convolution runs oneDNN's NHWC kernel (else the blocked one, with
// the activations reordered in). See the measurement above its definition.
bool nhwc_weight_grad(const ConvGeometry& g);

// The descriptions every direction shares: the plain user layouts, the data types and the convolution's
// parameters.
struct Shapes {
  memory::dims src, weights, bias, dst, strides, dilates, padding_l, padding_r;
  Tag weights_tag, activation_tag;
  Type multiplied;  // src, weights and diff_dst: what the products read
  Shapes(const ConvGeometry& g, Precision precision)
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
        activation_tag(g.channels_last ? Tag::nhwc : Tag::nchw),
        multiplied(precision == Precision::bf16 ? Type::bf16 : Type::f32) {}
  // The user's activation buffer of type `type`.
  memory::desc user(const memory::dims& shape, Type type) const { return {shape, type, activation_tag}; }
  // The primitive's activation layout: the user's own NHWC when channels-last (no reorder), else oneDNN's pick.
  memory::desc inner(const memory::dims& shape, Type type, bool nhwc) const {
    return {shape, type, nhwc ? Tag::nhwc : Tag::any};
  }
  memory::desc user_weights(Type type) const { return {weights, type, weights_tag}; }
  memory::desc any_weights(Type type) const { return {weights, type, Tag::any}; }
  memory::desc bias_desc() const { return {bias, Type::f32, Tag::x}; }
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
  const memory::desc src = s.inner(s.src, s.multiplied, nhwc), dst = s.inner(s.dst, Type::f32, nhwc),
                     weights = s.any_weights(s.multiplied);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto direct = dnnl::algorithm::convolution_direct;
  const auto desc = bias ? dnnl::convolution_forward::desc(kind, direct, src, weights, s.bias_desc(), dst, s.strides,
                                                           s.dilates, s.padding_l, s.padding_r)
                         : dnnl::convolution_forward::desc(kind, direct, src, weights, dst, s.strides, s.dilates,
                                                           s.padding_l, s.padding_r);
  return {desc, user_scratchpad(), cpu_engine()};
}

void describe(const Key& key, Entry& entry) {
  const Shapes s(key.g, key.precision);
  const Type in = s.multiplied;
  const bool nhwc = key.g.channels_last;
  // This direction's activation layout: NHWC as given, except backward-weights where measured slower.
  const bool nhwc_here = nhwc && (key.direction != ConvDirection::weight_grad || nhwc_weight_grad(key.g));
  // Note: the backward primitives take the forward one as a hint (oneDNN picks matching layouts and kernels).
  const auto forward_pd = forward_desc(s, key.bias, nhwc_here);
  const auto direct = dnnl::algorithm::convolution_direct;
  switch (key.direction) {
    case ConvDirection::forward: {
      entry.primitive = dnnl::convolution_forward(forward_pd);
      entry.operands = {operand(DNNL_ARG_SRC, s.user(s.src, in), forward_pd.src_desc(), false),
                        operand(DNNL_ARG_WEIGHTS, s.user_weights(in), forward_pd.weights_desc(), false),
                        operand(DNNL_ARG_DST, s.user(s.dst, Type::f32), forward_pd.dst_desc(), true)};
      if (key.bias) entry.operands.push_back(operand(DNNL_ARG_BIAS, s.bias_desc(), s.bias_desc(), false));
      entry.scratchpad = forward_pd.scratchpad_desc();
      break;
    }
    case ConvDirection::input_grad: {
      const dnnl::convolution_backward_data::desc desc(direct, s.inner(s.src, Type::f32, nhwc_here),
                                                       s.any_weights(in), s.inner(s.dst, in, nhwc_here), s.strides,
                                                       s.dilates, s.padding_l, s.padding_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), cpu_engine(), forward_pd);
      entry.primitive = dnnl::convolution_backward_data(pd);
      entry.operands = {operand(DNNL_ARG_DIFF_DST, s.user(s.dst, in), pd.diff_dst_desc(), false),
                        operand(DNNL_ARG_WEIGHTS, s.user_weights(in), pd.weights_desc(), false),
                        operand(DNNL_ARG_DIFF_SRC, s.user(s.src, Type::f32), pd.diff_src_desc(), true)};
      entry.scratchpad = pd.scratchpad_desc();
      break;
    }
    case ConvDirection::weight_grad: {
      const memory::desc src = s.inner(s.src, in, nhwc_here), dst = s.inner(s.dst, in, nhwc_here),
                         weights = s.any_weights(Type::f32);
      const auto desc = key.bias ? dnnl::convolution_backward_weights::desc(direct, src, weights, s.bias_desc(), dst,
                                                                             s.strides, s.dilates, s.padding_l,
                                                                             s.padding_r)
                                 : dnnl::convolution_backward_weights::desc(direct, src, weights, dst, s.strides,
                                                                             s.dilates, s.padding_l, s.padding_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), cpu_engine(), forward_pd);
      entry.primitive = dnnl::convolution_backward_weights(pd);
      entry.operands = {operand(DNNL_ARG_SRC, s.user(s.src, in), pd.src_desc(), false),
                        operand(DNNL_ARG_DIFF_DST, s.user(s.dst, in), pd.diff_dst_desc(), false),
                        operand(DNNL_ARG_DIFF_WEIGHTS, s.user_weights(Type::f32), pd.diff_weights_desc(), true)};
      if (key.bias) entry.operands.push_back(operand(DNNL_ARG_DIFF_BIAS, s.bias_desc(), s.bias_desc(), true));
      entry.scratchpad = pd.scratchpad_desc();
      break;
    }
  }
}

std::shared_ptr<const Entry> build(const Key& key) {
  auto entry = std::make_shared<Entry>();
  try {
    describe(key, *entry);
  } catch (const dnnl::error&) {
    // Note: float32 has an implementation on every x86-64 CPU, so its failure is an error for the caller; a
    // bfloat16 one is missing below AVX-512 and remembered as such, so the fallback costs no second attempt.
    if (key.precision == Precision::f32) throw;
    *entry = Entry{};
  }
  return entry;
}

// Note: bench/conv_layouts times oneDNN's NHWC kernels against its blocked ones with tapegrad's reorders, per
// direction, in float32. NHWC forward and backward-data were faster or level on every 3x3 layer of bench/compare's
// cnn and resnet; backward-weights was slower on the strided 32->64 layer in every run (1 thread: 5.19 against
// 4.08 ms quiet, docs/performance.md; 9.96 against 6.99 ms at load ~4, 2026-12-07 14:58, `conv_layouts --threads 1
// --rounds 3`), and mixed on the stride-1 layers (faster on resnet_s3/s4 and on cnn_conv2 at 2 threads, up to
// 14% slower on cnn_conv2 and resnet_s2 at 1 thread under load). The blocked kernel here also pays grad_output's
// reorder (which backward-data, NHWC, no longer shares), so only the strided case clearly favours it.
// The bfloat16 primitives follow the same rule, though there it is a wash: a standalone oneDNN timing (process
// CPU ms per call, 1 thread, 64 images, NHWC kernel against reorders + blocked kernel, 2 runs of 10 interleaved
// calls at load ~16, 2026-12-07) gave strided 32->64 on 32x32 3.1-3.3 against 3.9-4.4, 64->128 on 16x16 3.7
// against 3.9, 128->256 on 8x8 5.6 against 5.1-5.4, and stride 1: 32->32 on 32x32 5.1-5.6 against 9.1-10.7,
// 256->256 on 4x4 5.4-6.0 against 5.1-5.7.
bool nhwc_weight_grad(const ConvGeometry& g) { return g.stride_h == 1 && g.stride_w == 1; }

// Note: 128 per precision covers a ResNet's distinct (shape, direction) pairs several times.
using Cache = LruCache<Key, Entry, KeyHash>;

Cache& cache(Precision precision) {
  static Cache f32(128), bf16(128);
  return precision == Precision::bf16 ? bf16 : f32;
}

}  // namespace

void* ReorderedInputs::find(const void* user, const memory::desc& inner) const {
  for (const Copy& copy : copies_)
    if (copy.user == user && copy.inner == inner) return copy.data;
  return nullptr;
}

void* ReorderedInputs::add(const void* user, const memory::desc& inner) {
  buffers_.emplace_back(inner.get_size());
  copies_.push_back({user, inner, buffers_.back().data()});
  return copies_.back().data;
}

bool run(Precision precision, ConvDirection direction, const ConvGeometry& g, bool bias, const Pointers& pointers,
         ReorderedInputs* reordered) {
  const std::shared_ptr<const Entry> entry =
      cache(precision).get(Key{precision, direction, g, bias, primitive_threads()}, build);
  if (!entry->primitive) return false;
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
  entry->primitive->execute(stream, arguments);
  std::size_t next = 0;
  for (const Operand& op : entry->operands)
    if (op.reorder && op.output) {
      auto& [inner, user] = outputs[next++];
      op.reorder->execute(stream, inner, user);
    }
  stream.wait();
  return true;
}

void guarded(const char* op, const ConvGeometry& g, void (*f)(void*), void* context) {
  try {
    f(context);
  } catch (const dnnl::error& e) {
    fail("{}: oneDNN failed ({}, status {}) for input [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride ({}, {}), "
         "padding ({}, {}), dilation ({}, {}), groups {}",
         op, e.what(), static_cast<int>(e.status), g.n, g.c, g.h, g.w, g.o, g.cg(), g.kh, g.kw, g.stride_h,
         g.stride_w, g.padding_h, g.padding_w, g.dilation_h, g.dilation_w, g.groups);
  }
}

std::size_t cache_size(Precision precision) { return cache(precision).size(); }
std::size_t cache_capacity(Precision precision) { return cache(precision).capacity(); }

}  // namespace tapegrad::kernels::onednn::conv

// Autocast's convolution: oneDNN's bfloat16 convolution primitives (bfloat16 src, weights and diff_dst; float32
// dst, bias, diff_src, diff_weights and diff_bias, accumulated in float32), or the float32 fallback.
//
// Note: like the float32 primitives (kernels/conv2d_onednn.cpp) these are created with format_tag::any, so oneDNN
// picks its blocked layouts, and each call reorders the plain NCHW operands in and the float32 results out; a
// primitive per (direction, geometry, bias, thread count), kept in a bounded cache of its own.
#include <tapegrad/framework/kernels/conv2d_bf16.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/autocast_path.h>
#include <tapegrad/framework/kernels/onednn_support.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad::kernels {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;
using onednn::cpu_engine;
using onednn::user_scratchpad;

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
    std::size_t hash = static_cast<std::size_t>(key.direction) * 2 + (key.bias ? 1 : 0);
    for (std::int64_t field : {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride_h, g.stride_w, g.padding_h, g.padding_w,
                               g.dilation_h, g.dilation_w, g.groups, std::int64_t{key.threads}})
      hash = hash * 1000003u ^ static_cast<std::size_t>(field);
    return hash;
  }
};

// One argument: the plain layout the caller holds, the primitive's layout, the reorder between them if they differ.
struct Operand {
  int argument;
  memory::desc user, inner;
  std::optional<dnnl::reorder> reorder;
  bool output;
};

// A primitive and how to feed it; no primitive where oneDNN has no bfloat16 implementation (the fallback runs).
struct Entry {
  std::optional<dnnl::primitive> primitive;
  std::vector<Operand> operands;
  memory::desc scratchpad;
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

std::shared_ptr<const Entry> build(const Key& key) {
  const ConvGeometry& g = key.g;
  const memory::dims src{g.n, g.c, g.h, g.w}, dst{g.n, g.o, g.oh, g.ow}, bias{g.o},
      weights = g.groups == 1 ? memory::dims{g.o, g.c, g.kh, g.kw} : memory::dims{g.groups, g.og(), g.cg(), g.kh, g.kw},
      strides{g.stride_h, g.stride_w}, dilates{g.dilation_h - 1, g.dilation_w - 1},  // oneDNN counts from 0
      padding{g.padding_h, g.padding_w};
  const Tag weights_tag = g.groups == 1 ? Tag::oihw : Tag::goihw;
  const auto any = [](const memory::dims& shape, Type type) { return memory::desc(shape, type, Tag::any); };
  const memory::desc bias_desc(bias, Type::f32, Tag::x);
  const auto direct = dnnl::algorithm::convolution_direct;
  auto entry = std::make_shared<Entry>();
  try {
    const auto forward_pd = dnnl::convolution_forward::primitive_desc(
        key.bias && key.direction == ConvDirection::forward
            ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, any(src, Type::bf16),
                                              any(weights, Type::bf16), bias_desc, any(dst, Type::f32), strides,
                                              dilates, padding, padding)
            : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, any(src, Type::bf16),
                                              any(weights, Type::bf16), any(dst, Type::f32), strides, dilates,
                                              padding, padding),
        user_scratchpad(), cpu_engine());
    const memory::desc src_bf16(src, Type::bf16, Tag::nchw), src_f32(src, Type::f32, Tag::nchw),
        weights_bf16(weights, Type::bf16, weights_tag), weights_f32(weights, Type::f32, weights_tag),
        dst_bf16(dst, Type::bf16, Tag::nchw), dst_f32(dst, Type::f32, Tag::nchw);
    switch (key.direction) {
      case ConvDirection::forward:
        entry->primitive = dnnl::convolution_forward(forward_pd);
        entry->operands = {operand(DNNL_ARG_SRC, src_bf16, forward_pd.src_desc(), false),
                           operand(DNNL_ARG_WEIGHTS, weights_bf16, forward_pd.weights_desc(), false),
                           operand(DNNL_ARG_DST, dst_f32, forward_pd.dst_desc(), true)};
        if (key.bias) entry->operands.push_back(operand(DNNL_ARG_BIAS, bias_desc, bias_desc, false));
        entry->scratchpad = forward_pd.scratchpad_desc();
        break;
      case ConvDirection::input_grad: {
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(direct, any(src, Type::f32), any(weights, Type::bf16),
                                                  any(dst, Type::bf16), strides, dilates, padding, padding),
            user_scratchpad(), cpu_engine(), forward_pd);
        entry->primitive = dnnl::convolution_backward_data(pd);
        entry->operands = {operand(DNNL_ARG_DIFF_DST, dst_bf16, pd.diff_dst_desc(), false),
                           operand(DNNL_ARG_WEIGHTS, weights_bf16, pd.weights_desc(), false),
                           operand(DNNL_ARG_DIFF_SRC, src_f32, pd.diff_src_desc(), true)};
        entry->scratchpad = pd.scratchpad_desc();
        break;
      }
      case ConvDirection::weight_grad: {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            key.bias ? dnnl::convolution_backward_weights::desc(direct, any(src, Type::bf16), any(weights, Type::f32),
                                                                bias_desc, any(dst, Type::bf16), strides, dilates,
                                                                padding, padding)
                     : dnnl::convolution_backward_weights::desc(direct, any(src, Type::bf16), any(weights, Type::f32),
                                                                any(dst, Type::bf16), strides, dilates, padding,
                                                                padding),
            user_scratchpad(), cpu_engine(), forward_pd);
        entry->primitive = dnnl::convolution_backward_weights(pd);
        entry->operands = {operand(DNNL_ARG_SRC, src_bf16, pd.src_desc(), false),
                           operand(DNNL_ARG_DIFF_DST, dst_bf16, pd.diff_dst_desc(), false),
                           operand(DNNL_ARG_DIFF_WEIGHTS, weights_f32, pd.diff_weights_desc(), true)};
        if (key.bias) entry->operands.push_back(operand(DNNL_ARG_DIFF_BIAS, bias_desc, bias_desc, true));
        entry->scratchpad = pd.scratchpad_desc();
        break;
      }
    }
  } catch (const dnnl::error&) {
    // Note: unimplemented (no AVX-512): remembered, so the fallback costs no second attempt.
    entry->primitive.reset();
  }
  return entry;
}

using Cache = onednn::LruCache<Key, Entry, KeyHash>;

Cache& cache() {
  static Cache instance(128);
  return instance;
}

// Inputs already reordered into a primitive's layout during one kernels call (grad_output, read by both backward
// primitives). Valid while the caller's buffers are unchanged: it lives for one call.
struct Reordered {
  struct Copy {
    const void* user;
    memory::desc inner;
    void* data;
  };
  std::vector<Copy> copies;
  std::deque<Storage> buffers;  // a deque: Storage does not move
};

// Runs the primitive of `key` on the caller's plain buffers; false (nothing computed) when there is none.
bool run(const Key& key, const std::vector<std::pair<int, void*>>& pointers, Reordered& reordered) {
  if (autocast::fallback_forced()) return false;
  const std::shared_ptr<const Entry> entry = cache().get(key, build);
  if (!entry->primitive) return false;
  const dnnl::engine& engine = onednn::cpu_engine();
  dnnl::stream& stream = onednn::thread_stream();
  std::deque<Storage> buffers;
  std::unordered_map<int, memory> arguments;
  std::vector<std::pair<memory, memory>> outputs;  // (inner, user), reordered after the primitive
  for (const Operand& op : entry->operands) {
    void* pointer = nullptr;
    for (const auto& [argument, given] : pointers)
      if (argument == op.argument) pointer = given;
    memory user(op.user, engine, pointer);
    if (!op.reorder) {
      arguments.emplace(op.argument, user);
    } else if (op.output) {
      buffers.emplace_back(op.inner.get_size());
      memory inner(op.inner, engine, buffers.back().data());
      arguments.emplace(op.argument, inner);
      outputs.emplace_back(inner, user);
    } else {
      void* done = nullptr;
      for (const Reordered::Copy& copy : reordered.copies)
        if (copy.user == pointer && copy.inner == op.inner) done = copy.data;
      if (!done) {
        reordered.buffers.emplace_back(op.inner.get_size());
        done = reordered.buffers.back().data();
        reordered.copies.push_back({pointer, op.inner, done});
        memory inner(op.inner, engine, done);
        op.reorder->execute(stream, user, inner);
      }
      arguments.emplace(op.argument, memory(op.inner, engine, done));
    }
  }
  if (entry->scratchpad.get_size() > 0) {
    buffers.emplace_back(entry->scratchpad.get_size());
    arguments.emplace(DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, buffers.back().data()));
  }
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

Key key(ConvDirection direction, const ConvGeometry& g, bool bias) {
  return Key{direction, g, bias, onednn::primitive_threads()};
}

// A bfloat16 operand widened to float32 for the fallback.
std::vector<float> widened(const std::uint16_t* x, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  autocast::widen_bf16(x, out.data(), n);
  return out;
}

std::int64_t input_numel(const ConvGeometry& g) { return g.n * g.c * g.h * g.w; }
std::int64_t output_numel(const ConvGeometry& g) { return g.n * g.o * g.oh * g.ow; }
std::int64_t weight_numel(const ConvGeometry& g) { return g.o * g.cg() * g.kh * g.kw; }

void* mutable_pointer(const void* p) { return const_cast<void*>(p); }

}  // namespace

void conv2d_bf16_forward(const std::uint16_t* x, const std::uint16_t* w, const float* bias, float* out,
                         const ConvGeometry& g) {
  if (g.n == 0) return;
  Reordered reordered;
  if (run(key(ConvDirection::forward, g, bias != nullptr),
          {{DNNL_ARG_SRC, mutable_pointer(x)}, {DNNL_ARG_WEIGHTS, mutable_pointer(w)},
           {DNNL_ARG_BIAS, mutable_pointer(bias)}, {DNNL_ARG_DST, out}},
          reordered))
    return;
  conv2d_forward(widened(x, input_numel(g)).data(), widened(w, weight_numel(g)).data(), bias, out, g);
}

void conv2d_bf16_input_grad(const std::uint16_t* grad_output, const std::uint16_t* w, float* dx,
                            const ConvGeometry& g) {
  if (g.n == 0) return;
  Reordered reordered;
  if (run(key(ConvDirection::input_grad, g, false),
          {{DNNL_ARG_DIFF_DST, mutable_pointer(grad_output)}, {DNNL_ARG_WEIGHTS, mutable_pointer(w)},
           {DNNL_ARG_DIFF_SRC, dx}},
          reordered))
    return;
  conv2d_input_grad(widened(grad_output, output_numel(g)).data(), widened(w, weight_numel(g)).data(), dx, g);
}

namespace {

void weight_grad(const std::uint16_t* x, const std::uint16_t* grad_output, float* dw, float* db, const ConvGeometry& g,
                 Reordered& reordered) {
  if (g.n == 0) {  // an empty sum
    std::fill(dw, dw + weight_numel(g), 0.0f);
    if (db) std::fill(db, db + g.o, 0.0f);
    return;
  }
  if (run(key(ConvDirection::weight_grad, g, db != nullptr),
          {{DNNL_ARG_SRC, mutable_pointer(x)}, {DNNL_ARG_DIFF_DST, mutable_pointer(grad_output)},
           {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}},
          reordered))
    return;
  conv2d_weight_grad(widened(x, input_numel(g)).data(), widened(grad_output, output_numel(g)).data(), dw, db, g);
}

}  // namespace

void conv2d_bf16_weight_grad(const std::uint16_t* x, const std::uint16_t* grad_output, float* dw, float* db,
                             const ConvGeometry& g) {
  Reordered reordered;
  weight_grad(x, grad_output, dw, db, g, reordered);
}

void conv2d_bf16_backward(const std::uint16_t* x, const std::uint16_t* grad_output, const std::uint16_t* w,
                          float* dx, float* dw, float* db, const ConvGeometry& g) {
  Reordered reordered;
  if (g.n == 0) return weight_grad(x, grad_output, dw, db, g, reordered);
  // Note: grad_output is reordered into the blocked layout once for both primitives when they want the same one.
  if (!run(key(ConvDirection::input_grad, g, false),
           {{DNNL_ARG_DIFF_DST, mutable_pointer(grad_output)}, {DNNL_ARG_WEIGHTS, mutable_pointer(w)},
            {DNNL_ARG_DIFF_SRC, dx}},
           reordered))
    conv2d_input_grad(widened(grad_output, output_numel(g)).data(), widened(w, weight_numel(g)).data(), dx, g);
  weight_grad(x, grad_output, dw, db, g, reordered);
}

std::size_t conv2d_bf16_cache_size() { return cache().size(); }
std::size_t conv2d_bf16_cache_capacity() { return cache().capacity(); }

}  // namespace tapegrad::kernels

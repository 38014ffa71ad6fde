#pragma once
// Internal: the oneDNN convolution machinery that the float32 convolution (kernels/conv2d_onednn.cpp) and autocast's
// bfloat16 one (kernels/conv2d_bf16.cpp) share: one primitive per (precision, direction, geometry, bias, thread
// count) in a bounded cache per precision, the reorders between tapegrad's plain layouts (NCHW or NHWC
// activations, OIHW weights) and the layouts the primitive picks, and the call that runs one.
//
// Note: for NCHW tensors the primitives are created with format_tag::any, so oneDNN chooses its blocked layouts
// (nChw16c and OIhw16i16o on AVX-512) and each call reorders its operands in and the results out. For channels-last
// tensors (ConvGeometry::channels_last) the activations are described as NHWC, oneDNN's format_tag::nhwc, so its
// NHWC kernels read and write the tensors' buffers with no reorder; only the weights (small) are reordered. The
// exception is backward-weights on the layers where nhwc_weight_grad (onednn_conv.cpp) measured oneDNN's NHWC
// kernel slower than the blocked one with its reorders.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include <tapegrad/framework/kernels/conv2d.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad::kernels::onednn::conv {

/// What a primitive reads and writes. f32: everything float32. bf16 (autocast): bfloat16 src, weights and
/// diff_dst (raw bits, rounded by the caller); float32 dst, bias, diff_src, diff_weights and diff_bias, all
/// accumulated in float32.
enum class Precision { f32, bf16 };

/// Inputs already reordered into a primitive's layout, for the next primitive of the same call that reads the
/// same buffer in the same layout (backward-data and backward-weights both read grad_output).
/// Note: valid only while the user's buffers are unchanged, so it lives for one kernels call, never longer.
class ReorderedInputs {
 public:
  /// The reordered copy of `user` in layout `inner`, or null.
  void* find(const void* user, const dnnl::memory::desc& inner) const;
  /// A fresh buffer for `user` in layout `inner`, remembered for find().
  void* add(const void* user, const dnnl::memory::desc& inner);

 private:
  struct Copy {
    const void* user;
    dnnl::memory::desc inner;
    void* data;
  };
  std::vector<Copy> copies_;
  std::deque<Storage> buffers_;  // a deque: Storage does not move
};

/// One argument id of a primitive and the caller's buffer for it (null where the primitive takes none, e.g. the
/// bias of a convolution without one).
using Pointers = std::vector<std::pair<int, void*>>;

/// Runs the `precision` primitive of (direction, g, bias) on the caller's plain buffers, given per argument id:
/// inputs reordered in (or taken from `reordered`, where an earlier run of the same call left them), the
/// primitive, outputs reordered out. Returns false, having computed nothing, when oneDNN has no bfloat16
/// implementation on this CPU (remembered: the next call costs a cache look-up); float32 always runs.
/// Throws dnnl::error when oneDNN fails (see guarded).
bool run(Precision precision, ConvDirection direction, const ConvGeometry& g, bool bias, const Pointers& pointers,
         ReorderedInputs* reordered = nullptr);

/// f() with a dnnl::error turned into tapegrad's error naming `op` and the geometry.
/// Note: the ops' shape checks rule out invalid arguments, so a failure reaching here is an unsupported
/// configuration or out of memory.
void guarded(const char* op, const ConvGeometry& g, void (*f)(void*), void* context);
template <class F>
void guarded(const char* op, const ConvGeometry& g, F f) {
  guarded(op, g, [](void* context) { (*static_cast<F*>(context))(); }, &f);
}

/// The cache of `precision`: its current number of entries and its bound.
std::size_t cache_size(Precision precision);
std::size_t cache_capacity(Precision precision);

}  // namespace tapegrad::kernels::onednn::conv

// conv2d under autocast: bfloat16 input and weight, float32 accumulation, bias and output, NCHW or channels-last as
// the float32 conv2d would be; the backward rounds the output gradient and runs oneDNN's bfloat16 backward-data and backward-weights (ops/detail/autocast.h).
#include <tapegrad/framework/ops/detail/autocast.h>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/kernels/conv2d_bf16.h>

namespace tapegrad::detail {

Tensor autocast_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const kernels::ConvGeometry& g) {
  // Note: channels-last activations are rounded and saved in NHWC order, so oneDNN's NHWC kernels read them in
  // place, and the output and input gradient come back channels-last, as the float32 convolution's do.
  const MemoryFormat format = g.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  const Bf16Values vx(input, format), vw(weight);
  const Tensor dense_bias = bias.defined() ? bias.contiguous() : Tensor();
  Tensor out = empty({g.n, g.o, g.oh, g.ow}, DType::Float32, format);
  kernels::conv2d_bf16_forward(vx.data(), vw.data(), dense_bias.defined() ? dense_bias.data<float>() : nullptr,
                               out.data<float>(format), g);
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  return first_order_only(record_if_needed("conv2d", out, inputs, [&] {
    return [vx, vw, g, format, has_bias = bias.defined()](const Tensor& grad, NeedsGrad needs) {
      if (is_grad_enabled()) fail("{}", autocast_create_graph_refusal("conv2d"));
      std::vector<Tensor> grads(has_bias ? 3 : 2);
      const Bf16Values vg(grad, format);
      const bool want_bias = has_bias && needs[2];
      if (needs[0]) grads[0] = empty(vx.shape(), DType::Float32, format);
      if (needs[1] || want_bias) grads[1] = empty(vw.shape(), DType::Float32);
      if (want_bias) grads[2] = empty({g.o}, DType::Float32);
      float* db = want_bias ? grads[2].data<float>() : nullptr;
      if (needs[0] && (needs[1] || want_bias))
        kernels::conv2d_bf16_backward(vx.data(), vg.data(), vw.data(), grads[0].data<float>(format),
                                      grads[1].data<float>(), db, g);
      else if (needs[0])
        kernels::conv2d_bf16_input_grad(vg.data(), vw.data(), grads[0].data<float>(format), g);
      else if (needs[1] || want_bias)
        kernels::conv2d_bf16_weight_grad(vx.data(), vg.data(), grads[1].data<float>(), db, g);
      // Note: the bias gradient comes with the weight's from one oneDNN pass; a weight that wants none drops it.
      if (!needs[1]) grads[1] = Tensor();
      return grads;
    };
  }), "conv2d");
}

}  // namespace tapegrad::detail

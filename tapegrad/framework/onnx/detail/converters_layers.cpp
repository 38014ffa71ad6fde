// ONNX forms of the layers' ops: linear, convolutions, pools, the normalisations, softmax, embedding.
#include <tapegrad/framework/onnx/detail/graph.h>

namespace tapegrad::onnx::detail {

namespace {

using Ints = std::vector<std::int64_t>;

// [h, w] -> ONNX's pads [h_begin, w_begin, h_end, w_end].
Ints pads_of(const Ints& padding) { return {padding[0], padding[1], padding[0], padding[1]}; }

void linear(Context& c) {
  const Value& x = c.input_value(0);
  std::vector<std::string> in{c.input(0), c.input(1)};
  if (x.shape.size() == 2) {
    if (c.has_input(2)) in.push_back(c.input(2));
    c.emit("Gemm", in, {{"transB", std::int64_t{1}}}, {c.output()});
    return;
  }
  // Note: Gemm takes matrices only; [*, in] input goes through MatMul with the transposed weight.
  const std::string wt = c.emit("Transpose", {c.input(1)}, {{"perm", Ints{1, 0}}});
  if (!c.has_input(2)) {
    c.emit("MatMul", {c.input(0), wt}, {}, {c.output()});
    return;
  }
  const std::string product = c.emit("MatMul", {c.input(0), wt});
  c.emit("Add", {product, c.input(2)}, {}, {c.output()});
}

void conv2d(Context& c) {
  if (c.input_value(0).shape.size() != 4) c.unsupported("an unbatched (3-d) input; export with a batch dim");
  const Shape& w = c.input_value(1).shape;
  std::vector<std::string> in{c.input(0), c.input(1)};
  if (c.has_input(2)) in.push_back(c.input(2));
  c.emit("Conv", in,
         {{"kernel_shape", Ints{w[2], w[3]}},
          {"strides", c.ints("stride")},
          {"pads", pads_of(c.ints("padding"))},
          {"dilations", c.ints("dilation")},
          {"group", c.i("groups")}},
         {c.output()});
}

void conv_transpose2d(Context& c) {
  if (c.input_value(0).shape.size() != 4) c.unsupported("an unbatched (3-d) input; export with a batch dim");
  const Shape& w = c.input_value(1).shape;
  std::vector<std::string> in{c.input(0), c.input(1)};
  if (c.has_input(2)) in.push_back(c.input(2));
  c.emit("ConvTranspose", in,
         {{"kernel_shape", Ints{w[2], w[3]}},
          {"strides", c.ints("stride")},
          {"pads", pads_of(c.ints("padding"))},
          {"dilations", c.ints("dilation")},
          {"group", c.i("groups")},
          {"output_padding", c.ints("output_padding")}},
         {c.output()});
}

// Note: with ceil_mode PyTorch drops a last window that would start in the right padding; ONNX's formula
// (ceil((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1) keeps it, one row or column more. The windows
// before it are the same in both, so the pool is emitted as ONNX sizes it and the extra row or column is sliced
// off. Without ceil_mode the two formulas agree.
void pool2d(Context& c, const char* onnx_op, const std::vector<Attr>& attributes, const Ints& dilation) {
  const Value& x = c.input_value(0);
  const Value& y = c.output_value(0);
  const Ints kernel = c.ints("kernel"), stride = c.ints("stride"), padding = c.ints("padding");
  const std::size_t rank = x.shape.size();
  Ints axes, ends;
  if (c.i("ceil_mode") != 0) {
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t d = rank - 2 + i;
      const std::int64_t span = x.shape[d] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1;
      const std::int64_t onnx_extent = (span + stride[i] - 1) / stride[i] + 1;
      if (onnx_extent == y.shape[d]) continue;
      if (x.dynamic(d) || onnx_extent != y.shape[d] + 1)
        c.unsupported(fmt::format("ceil_mode output extent {} (ONNX's formula gives {}) on an axis that is dynamic or "
                                  "that ONNX sizes otherwise", y.shape[d], onnx_extent));
      axes.push_back(static_cast<std::int64_t>(d));
      ends.push_back(y.shape[d]);
    }
  }
  if (axes.empty()) {
    c.emit(onnx_op, {c.input(0)}, attributes, {c.output()});
    return;
  }
  const std::string pooled = c.emit(onnx_op, {c.input(0)}, attributes);
  c.emit("Slice", {pooled, c.int64s(Ints(axes.size(), 0)), c.int64s(ends), c.int64s(axes)}, {}, {c.output()});
}

void max_pool2d(Context& c) {
  const Ints dilation = c.ints("dilation");
  pool2d(c, "MaxPool",
         {{"kernel_shape", c.ints("kernel")},
          {"strides", c.ints("stride")},
          {"pads", pads_of(c.ints("padding"))},
          {"dilations", dilation},
          {"ceil_mode", c.i("ceil_mode")}},
         dilation);
}

void avg_pool2d(Context& c) {
  if (c.i("divisor_override") != 0) c.unsupported("divisor_override has no ONNX AveragePool form");
  pool2d(c, "AveragePool",
         {{"kernel_shape", c.ints("kernel")},
          {"strides", c.ints("stride")},
          {"pads", pads_of(c.ints("padding"))},
          {"ceil_mode", c.i("ceil_mode")},
          {"count_include_pad", c.i("count_include_pad")}},
         Ints{1, 1});
}

// Note: ONNX has no adaptive pool. A 1 x 1 output is GlobalAveragePool; an output that divides the input evenly
// is AveragePool with kernel = stride = input / output, the same windows adaptive pooling takes then.
void adaptive_avg_pool2d(Context& c) {
  const Value& x = c.input_value(0);
  const Value& y = c.output_value(0);
  if (x.shape.size() != 4) c.unsupported("an unbatched (3-d) input; export with a batch dim");
  const std::int64_t h = x.shape[2], w = x.shape[3], oh = y.shape[2], ow = y.shape[3];
  if (oh == 1 && ow == 1 && !y.dynamic(2) && !y.dynamic(3)) {
    c.emit("GlobalAveragePool", {c.input(0)}, {}, {c.output()});
    return;
  }
  if (x.dynamic(2) || x.dynamic(3) || h % oh != 0 || w % ow != 0)
    c.unsupported(fmt::format("output {} x {} does not divide input {} x {} evenly (ONNX has no adaptive pooling)", oh,
                              ow, h, w));
  c.emit("AveragePool", {c.input(0)}, {{"kernel_shape", Ints{h / oh, w / ow}}, {"strides", Ints{h / oh, w / ow}}},
         {c.output()});
}

// The per-channel scale and shift, or ones and zeros for a BatchNorm without affine parameters.
std::string channel_tensor(Context& c, const char* name, std::int64_t channels, double fill) {
  if (c.has_tensor(name)) return c.tensor(name);
  return c.reals(std::vector<double>(static_cast<std::size_t>(channels), fill), c.dtype());
}

void batch_norm_eval(Context& c) {
  const std::int64_t channels = c.tensor_value("running_mean").shape.at(0);
  const std::vector<std::string> in{c.input(0), channel_tensor(c, "weight", channels, 1.0),
                                    channel_tensor(c, "bias", channels, 0.0), c.tensor("running_mean"),
                                    c.tensor("running_var")};
  const bool relu = c.op() == "batch_norm_eval_relu";
  const std::string y = c.emit("BatchNormalization", in, {{"epsilon", c.f("eps")}},
                               relu ? std::vector<std::string>{} : std::vector<std::string>{c.output()});
  if (relu) c.emit("Relu", {y}, {}, {c.output()});
}

// (x - mean) / sqrt(var + eps) over `axes` (biased variance), as ReduceMean nodes; the mean and variance of
// batch_norm_train (batch statistics, here: an InstanceNorm or a BatchNorm without running statistics) and of
// layer_norm before opset 17.
std::string normalise(Context& c, const std::string& x, const Ints& axes, double eps) {
  const std::string mean = c.emit("ReduceMean", {x}, {{"axes", axes}, {"keepdims", std::int64_t{1}}});
  const std::string centred = c.emit("Sub", {x, mean});
  const std::string var =
      c.emit("ReduceMean", {c.emit("Mul", {centred, centred})}, {{"axes", axes}, {"keepdims", std::int64_t{1}}});
  const std::string stddev = c.emit("Sqrt", {c.emit("Add", {var, c.scalar(eps, c.dtype())})});
  return c.emit("Div", {centred, stddev});
}

void batch_norm_train(Context& c) {
  const Value& x = c.input_value(0);
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  Ints axes{0};
  for (std::int64_t d = 2; d < rank; ++d) axes.push_back(d);
  std::string y = normalise(c, c.input(0), axes, c.f("eps"));
  Ints channel(static_cast<std::size_t>(rank), 1);
  channel[1] = x.shape[1];
  if (c.has_tensor("weight")) {
    const std::string w = c.emit("Reshape", {c.tensor("weight"), c.int64s(channel)});
    y = c.emit("Mul", {y, w});
  }
  if (c.has_tensor("bias")) {
    const std::string b = c.emit("Reshape", {c.tensor("bias"), c.int64s(channel)});
    y = c.emit("Add", {y, b});
  }
  if (c.op() == "batch_norm_train_relu") y = c.emit("Relu", {y});
  c.emit("Identity", {y}, {}, {c.output()});
}

void layer_norm(Context& c) {
  const Value& x = c.input_value(0);
  const std::int64_t axis = c.i("axis");
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  if (c.opset() >= 17) {
    Shape normalized(x.shape.end() + axis, x.shape.end());
    std::string scale;
    if (c.has_tensor("weight")) {
      scale = c.tensor("weight");
    } else {
      std::int64_t count = 1;
      for (std::int64_t e : normalized) count *= e;
      scale = c.emit("Reshape", {c.reals(std::vector<double>(static_cast<std::size_t>(count), 1.0), c.dtype()),
                                 c.int64s(Ints(normalized.begin(), normalized.end()))});
    }
    std::vector<std::string> in{c.input(0), scale};
    if (c.has_tensor("bias")) in.push_back(c.tensor("bias"));
    c.emit("LayerNormalization", in, {{"axis", axis}, {"epsilon", c.f("eps")}}, {c.output()});
    return;
  }
  Ints axes;
  for (std::int64_t d = rank + axis; d < rank; ++d) axes.push_back(d);
  std::string y = normalise(c, c.input(0), axes, c.f("eps"));
  if (c.has_tensor("weight")) y = c.emit("Mul", {y, c.tensor("weight")});
  if (c.has_tensor("bias")) y = c.emit("Add", {y, c.tensor("bias")});
  c.emit("Identity", {y}, {}, {c.output()});
}

Converter softmax(const char* onnx_op) {
  return [onnx_op](Context& c) { c.emit(onnx_op, {c.input(0)}, {{"axis", c.i("dim")}}, {c.output()}); };
}

void embedding(Context& c) {
  c.emit("Gather", {c.input(0), c.tensor("indices")}, {{"axis", std::int64_t{0}}}, {c.output()});
}

}  // namespace

void add_layer_converters(std::map<std::string, Converter>& table) {
  table["linear"] = linear;
  table["conv2d"] = conv2d;
  table["conv_transpose2d"] = conv_transpose2d;
  table["max_pool2d"] = max_pool2d;
  table["avg_pool2d"] = avg_pool2d;
  table["adaptive_avg_pool2d"] = adaptive_avg_pool2d;
  table["batch_norm_eval"] = batch_norm_eval;
  table["batch_norm_eval_relu"] = batch_norm_eval;
  table["batch_norm_train"] = batch_norm_train;
  table["batch_norm_train_relu"] = batch_norm_train;
  table["layer_norm"] = layer_norm;
  table["softmax"] = softmax("Softmax");
  table["log_softmax"] = softmax("LogSoftmax");
  table["embedding"] = embedding;
}

}  // namespace tapegrad::onnx::detail

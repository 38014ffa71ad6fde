// ONNX forms of the elementwise ops and activations: arithmetic (with broadcasting, scalars, in place),
// unary maths, ReLU and friends, GELU, casts and copies, where / masked_fill, matmul.
#include <cmath>
#include <numbers>

#include <tapegrad/framework/onnx/detail/graph.h>

namespace tapegrad::onnx::detail {

namespace {

Converter unary(const char* onnx_op) {
  return [onnx_op](Context& c) { c.emit(onnx_op, {c.input(0)}, {}, {c.output()}); };
}

// a (op) b for two tensors, or a (op) scalar when the op reported a "scalar" attribute.
Converter binary(const char* onnx_op) {
  return [onnx_op](Context& c) {
    if (c.has_input(1)) {
      c.emit(onnx_op, {c.input(0), c.input(1)}, {}, {c.output()});
      return;
    }
    if (!c.has("scalar")) c.unsupported("a scalar operand that the op did not report");
    c.emit(onnx_op, {c.input(0), c.scalar(c.f("scalar"), c.dtype())}, {}, {c.output()});
  };
}

// scalar (op) a: rsub, rdiv.
Converter reversed(const char* onnx_op) {
  return [onnx_op](Context& c) { c.emit(onnx_op, {c.scalar(c.f("scalar"), c.dtype()), c.input(0)}, {}, {c.output()}); };
}

// target += alpha * other (sub_ reports alpha negated); multiplications and divisions in place.
void add_in_place(Context& c) {
  if (!c.has_input(1))
    c.unsupported("an in-place update by a scalar is not traced with its scalar; use the out-of-place op (x + 1.0)");
  const double alpha = c.has("alpha") ? c.f("alpha") : 1.0;
  std::string other = c.input(1);
  if (alpha != 1.0) other = c.emit("Mul", {other, c.scalar(alpha, c.dtype())});
  c.emit("Add", {c.input(0), other}, {}, {c.output()});
}
Converter binary_in_place(const char* onnx_op) {
  return [onnx_op](Context& c) {
    if (!c.has_input(1))
      c.unsupported("an in-place update by a scalar is not traced with its scalar; use the out-of-place op");
    c.emit(onnx_op, {c.input(0), c.input(1)}, {}, {c.output()});
  };
}

void clip(Context& c) {
  const double lo = c.f("min"), hi = c.f("max");
  // Note: Clip's bounds are optional inputs (opset 11+); an absent one is the empty name.
  const std::string min = std::isinf(lo) ? "" : c.scalar(lo, c.dtype());
  const std::string max = std::isinf(hi) ? "" : c.scalar(hi, c.dtype());
  c.emit("Clip", {c.input(0), min, max}, {}, {c.output()});
}

void leaky_relu(Context& c) { c.emit("LeakyRelu", {c.input(0)}, {{"alpha", c.f("negative_slope")}}, {c.output()}); }

// Note: PyTorch's softplus is the identity where beta * x > threshold; ONNX's Softplus has no threshold, so a Where
// switches. At the default threshold 20 the two differ by less than exp(-20) / beta, but a small threshold (1.0)
// moves the output by up to log(2) / beta.
void softplus(Context& c) {
  const double beta = c.f("beta");
  const std::string x = c.input(0);
  const std::string scaled = beta == 1.0 ? x : c.emit("Mul", {x, c.scalar(beta, c.dtype())});
  std::string soft = c.emit("Softplus", {scaled});
  if (beta != 1.0) soft = c.emit("Div", {soft, c.scalar(beta, c.dtype())});
  const std::string linear = c.emit("Greater", {scaled, c.scalar(c.f("threshold"), c.dtype())});
  c.emit("Where", {linear, x, soft}, {}, {c.output()});
}
// GELU: ONNX has no Gelu before opset 20, so its formula: 0.5 x (1 + erf(x / sqrt 2)), or the tanh form.
void gelu(Context& c) {
  const DType t = c.dtype();
  const std::string x = c.input(0);
  std::string inner;
  if (c.has("approximate") && c.s("approximate") == "tanh") {
    const std::string cube = c.emit("Mul", {x, c.emit("Mul", {x, x})});
    const std::string sum = c.emit("Add", {x, c.emit("Mul", {cube, c.scalar(0.044715, t)})});
    inner = c.emit("Tanh", {c.emit("Mul", {sum, c.scalar(std::sqrt(2.0 / std::numbers::pi), t)})});
  } else {
    inner = c.emit("Erf", {c.emit("Div", {x, c.scalar(std::numbers::sqrt2, t)})});
  }
  const std::string one_plus = c.emit("Add", {inner, c.scalar(1.0, t)});
  c.emit("Mul", {c.emit("Mul", {x, one_plus}), c.scalar(0.5, t)}, {}, {c.output()});
}

void square(Context& c) { c.emit("Mul", {c.input(0), c.input(0)}, {}, {c.output()}); }

void power(Context& c) { c.emit("Pow", {c.input(0), c.scalar(c.f("exponent"), c.dtype())}, {}, {c.output()}); }

void cast(Context& c) {
  if (c.input_value(0).dtype == c.dtype()) {
    c.emit("Identity", {c.input(0)}, {}, {c.output()});
    return;
  }
  c.emit("Cast", {c.input(0)}, {{"to", static_cast<std::int64_t>(onnx_type(c.dtype()))}}, {c.output()});
}

std::string as_bool(Context& c, const std::string& name) {
  return c.emit("Cast", {name}, {{"to", static_cast<std::int64_t>(::onnx::TensorProto_DataType_BOOL)}});
}

void where(Context& c) {
  c.emit("Where", {as_bool(c, c.tensor("condition")), c.input(0), c.input(1)}, {}, {c.output()});
}

void masked_fill(Context& c) {
  c.emit("Where", {as_bool(c, c.tensor("mask")), c.scalar(c.f("value"), c.dtype()), c.input(0)}, {}, {c.output()});
}

// Comparisons give 1/0 in the input's dtype, ONNX's give bool: a Cast follows.
Converter comparison(const char* onnx_op, bool negate = false) {
  return [onnx_op, negate](Context& c) {
    const DType t = c.input_value(0).dtype;
    std::string rhs;
    if (c.has_input(1)) {
      rhs = c.input(1);
    } else {
      const double b = c.f("scalar");
      if (t == DType::Int64 && b != std::floor(b)) c.unsupported("an int64 tensor compared with a fractional number");
      rhs = c.scalar(b, t);
    }
    std::string result = c.emit(onnx_op, {c.input(0), rhs});
    if (negate) result = c.emit("Not", {result});
    c.emit("Cast", {result}, {{"to", static_cast<std::int64_t>(onnx_type(c.dtype()))}}, {c.output()});
  };
}

}  // namespace

void add_elementwise_converters(std::map<std::string, Converter>& table) {
  table["add"] = binary("Add");
  table["sub"] = binary("Sub");
  table["mul"] = binary("Mul");
  table["div"] = binary("Div");
  table["rsub"] = reversed("Sub");
  table["rdiv"] = reversed("Div");
  table["add_"] = add_in_place;
  table["sub_"] = add_in_place;
  table["mul_"] = binary_in_place("Mul");
  table["div_"] = binary_in_place("Div");
  table["neg"] = unary("Neg");
  table["exp"] = unary("Exp");
  table["log"] = unary("Log");
  table["sqrt"] = unary("Sqrt");
  table["abs"] = unary("Abs");
  table["erf"] = unary("Erf");
  table["sigmoid"] = unary("Sigmoid");
  table["tanh"] = unary("Tanh");
  table["relu"] = unary("Relu");
  table["relu_"] = unary("Relu");
  table["leaky_relu"] = leaky_relu;
  table["leaky_relu_"] = leaky_relu;
  table["softplus"] = softplus;
  table["gelu"] = gelu;
  table["square"] = square;
  table["pow"] = power;
  table["clamp"] = clip;
  table["clamp_"] = clip;
  table["clamp_min_"] = clip;
  table["clamp_max_"] = clip;
  table["to"] = cast;
  table["contiguous"] = unary("Identity");
  table["clone"] = unary("Identity");
  table["detach"] = unary("Identity");
  table["where"] = where;
  table["masked_fill"] = masked_fill;
  table["eq"] = comparison("Equal");
  table["ne"] = comparison("Equal", true);
  table["lt"] = comparison("Less");
  table["le"] = comparison("LessOrEqual");
  table["gt"] = comparison("Greater");
  table["ge"] = comparison("GreaterOrEqual");
  table["matmul"] = [](Context& c) { c.emit("MatMul", {c.input(0), c.input(1)}, {}, {c.output()}); };
}

}  // namespace tapegrad::onnx::detail

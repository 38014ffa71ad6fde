// Losses. cross_entropy and nll_loss are one fused record each (reduction included); their first-order
// backward is a raw kernel, and under create_graph it is rebuilt from recorded ops so that it is itself
// differentiable. binary_cross_entropy and binary_cross_entropy_with_logits are one fused elementwise record each,
// followed by the weight and the reduction.
#include <tapegrad/framework/ops/loss.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/ops/activation.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/softmax.h>

namespace tapegrad {

namespace {

Tensor reduce(const Tensor& per_element, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return per_element;
    case Reduction::Mean:
      return mean(per_element);
    case Reduction::Sum:
      return sum(per_element);
  }
  fail("loss: unknown reduction");
}

// ---- shared by cross_entropy and nll_loss ----

// Validated row-wise classification inputs: N rows of C scores, labels checked against C.
struct RowLossInputs {
  std::int64_t rows = 0, classes = 0;
  std::vector<std::int64_t> labels;  // -1 marks an ignored row
  std::int64_t valid = 0;
};

RowLossInputs check_row_loss(const char* op, const Tensor& scores, const Tensor& labels,
                             const CrossEntropyOptions& options) {
  scores.check_defined(op);
  labels.check_defined(op);
  if (scores.dim() != 2)
    fail("{}: expected input [N, C] and labels [N], got {} and {}", op, shape_string(scores.shape()),
         shape_string(labels.shape()));
  if (labels.dtype() != DType::Int64)
    fail("{}: labels must be int64 class indices, got {}", op, dtype_name(labels.dtype()));
  if (labels.dim() != 1 || labels.size(0) != scores.size(0))
    fail("{}: expected labels [{}] for input {}, got {}", op, scores.size(0), shape_string(scores.shape()),
         shape_string(labels.shape()));
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0))
    fail("{}: label_smoothing must be in [0, 1], got {}", op, options.label_smoothing);
  RowLossInputs in;
  in.rows = scores.size(0);
  in.classes = scores.size(1);
  if (in.classes == 0) fail("{}: input {} has no classes", op, shape_string(scores.shape()));
  const std::int64_t* pl = labels.data<std::int64_t>();
  in.labels.resize(static_cast<std::size_t>(in.rows));
  for (std::int64_t i = 0; i < in.rows; ++i) {
    const std::int64_t y = pl[i];
    if (y == options.ignore_index) {
      in.labels[static_cast<std::size_t>(i)] = -1;
      continue;
    }
    if (y < 0 || y >= in.classes) fail("{}: label {} at row {} is out of range for {} classes", op, y, i, in.classes);
    in.labels[static_cast<std::size_t>(i)] = y;
    ++in.valid;
  }
  return in;
}

// The factor each row's loss enters the output with: 0 for ignored rows, 1/valid under Mean, 1 otherwise.
std::vector<double> row_weights(const RowLossInputs& in, Reduction reduction) {
  std::vector<double> w(static_cast<std::size_t>(in.rows), 0.0);
  // Note: PyTorch divides by the number of non-ignored rows; with none left that is 0/0 = NaN, kept here.
  const double mean_factor = 1.0 / static_cast<double>(in.valid);
  for (std::int64_t i = 0; i < in.rows; ++i)
    if (in.labels[static_cast<std::size_t>(i)] >= 0)
      w[static_cast<std::size_t>(i)] = reduction == Reduction::Mean ? mean_factor : 1.0;
  return w;
}

// Per-row losses folded by the reduction into a [N] or 0-dim tensor of dtype T.
template <class T> Tensor fold_rows(const std::vector<double>& row_loss, const std::vector<double>& weights,
                                    const RowLossInputs& in, Reduction reduction) {
  if (reduction == Reduction::None) {
    Tensor out = empty({static_cast<std::int64_t>(row_loss.size())}, dtype_of<T>());
    T* po = out.data<T>();
    for (std::size_t i = 0; i < row_loss.size(); ++i) po[i] = static_cast<T>(row_loss[i]);
    return out;
  }
  double total = 0.0;
  for (std::size_t i = 0; i < row_loss.size(); ++i)
    if (weights[i] != 0.0) total += row_loss[i] * weights[i];
  if (reduction == Reduction::Mean && in.valid == 0) total = std::numeric_limits<double>::quiet_NaN();
  return scalar_tensor(total, dtype_of<T>());
}

// The upstream gradient spread over rows, as a [N, 1] tensor: g[i] (None) or g (Mean, Sum), times the row weight.
// Built with ops so that it stays differentiable in g under create_graph.
Tensor row_scale(const Tensor& g, const std::vector<double>& weights, Reduction reduction) {
  const auto n = static_cast<std::int64_t>(weights.size());
  Tensor w = from_vector(weights, {n, 1}, TensorOptions{}.with_dtype(DType::Float64)).to(g.dtype());
  if (reduction == Reduction::None) return mul(g.reshape({n, 1}), w);
  return mul(w, g);
}

// g's value as the per-row factor, for the raw kernels.
std::vector<double> row_scale_values(const Tensor& g, const std::vector<double>& weights, Reduction reduction) {
  std::vector<double> s(weights.size());
  const std::vector<double> gv = g.to_vector();
  for (std::size_t i = 0; i < weights.size(); ++i)
    s[i] = weights[i] == 0.0 ? 0.0 : weights[i] * (reduction == Reduction::None ? gv[i] : gv[0]);
  return s;
}

// The constant per-row target distribution, zero rows for ignored labels: (1 - eps) onehot + eps / C.
Tensor target_distribution(const RowLossInputs& in, double smoothing, DType dtype) {
  std::vector<double> t(static_cast<std::size_t>(in.rows * in.classes), 0.0);
  for (std::int64_t i = 0; i < in.rows; ++i) {
    const std::int64_t y = in.labels[static_cast<std::size_t>(i)];
    if (y < 0) continue;
    for (std::int64_t c = 0; c < in.classes; ++c)
      t[static_cast<std::size_t>(i * in.classes + c)] = smoothing / static_cast<double>(in.classes);
    t[static_cast<std::size_t>(i * in.classes + y)] += 1.0 - smoothing;
  }
  return from_vector(t, {in.rows, in.classes}, TensorOptions{}.with_dtype(DType::Float64)).to(dtype);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in, const CrossEntropyOptions& options) {
  const Tensor logits = logits_in.contiguous(), labels = labels_in.contiguous();
  const RowLossInputs in = check_row_loss("cross_entropy", logits, labels, options);
  const double eps = options.label_smoothing;
  const std::vector<double> weights = row_weights(in, options.reduction);
  // Note: the row maximum and the log of the shifted sum are kept apart for the backward's softmax,
  // exp((x - max) - log_total). Their sum, rounded to T, would lose the shift invariance: at logits of 1e4
  // in float32 it is off by up to half an ulp of 1e4, and every probability by that factor of e.
  Tensor row_max = empty({in.rows}, logits.dtype()), row_log_total = empty({in.rows}, logits.dtype());
  Tensor out = detail::dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data<T>();
    T* pm = row_max.data<T>();
    T* pl = row_log_total.data<T>();
    std::vector<double> row_loss(static_cast<std::size_t>(in.rows), 0.0);
    for (std::int64_t i = 0; i < in.rows; ++i) {
      const T* row = px + i * in.classes;
      // Note: subtracting the row maximum keeps every exp in (0, 1], so logits of 1e30 do not overflow.
      const T mt = *std::max_element(row, row + in.classes);
      const double m = static_cast<double>(mt);
      // exp in the element type (vectorisable), sums accumulated in double
      double total = 0.0, row_sum = 0.0;
      for (std::int64_t c = 0; c < in.classes; ++c) {
        const T shifted = row[c] - mt;
        total += static_cast<double>(std::exp(shifted));
        row_sum += static_cast<double>(shifted);
      }
      const double log_total = std::log(total);
      pm[i] = mt;
      pl[i] = static_cast<T>(log_total);
      const std::int64_t y = in.labels[static_cast<std::size_t>(i)];
      if (y < 0) continue;
      // Work with shifted logits: log p_c = (x_c - m) - log_total.
      const double nll = log_total - (static_cast<double>(row[y]) - m);
      const double smooth = eps > 0.0 ? log_total - row_sum / static_cast<double>(in.classes) : 0.0;
      row_loss[static_cast<std::size_t>(i)] = (1.0 - eps) * nll + eps * smooth;
    }
    return fold_rows<T>(row_loss, weights, in, options.reduction);
  });
  return record_if_needed("cross_entropy", out, {logits}, [&] {
    return [sx = SavedTensor(logits, "cross_entropy"), smax = SavedTensor(row_max, "cross_entropy"),
            slog = SavedTensor(row_log_total, "cross_entropy"), in, weights, eps,
            reduction = options.reduction](const Tensor& g, NeedsGrad) {
      const Tensor& x = sx.get();
      if (is_grad_enabled()) {
        // create_graph: (softmax(x) - target) * scale from recorded ops, differentiable in x and g.
        Tensor target = target_distribution(in, eps, x.dtype());
        return std::vector<Tensor>{mul(sub(softmax(x, 1), target), row_scale(g, weights, reduction))};
      }
      const std::vector<double> scale = row_scale_values(g, weights, reduction);
      Tensor dx = empty(x.shape(), x.dtype());
      detail::dispatch_floating(x.dtype(), "cross_entropy", [&](auto tag) {
        using T = decltype(tag);
        const T* px = x.data<T>();
        const T* pm = smax.get().template data<T>();
        const T* pl = slog.get().template data<T>();
        T* pd = dx.data<T>();
        const T off_target = static_cast<T>(eps / static_cast<double>(in.classes));
        for (std::int64_t i = 0; i < in.rows; ++i) {
          const std::int64_t y = in.labels[static_cast<std::size_t>(i)];
          const T s = static_cast<T>(scale[static_cast<std::size_t>(i)]);
          T* drow = pd + i * in.classes;
          if (y < 0 || s == T(0)) {
            std::fill(drow, drow + in.classes, T(0));
            continue;
          }
          const T* row = px + i * in.classes;
          for (std::int64_t c = 0; c < in.classes; ++c)
            drow[c] = s * (std::exp((row[c] - pm[i]) - pl[i]) - off_target);
          drow[y] -= s * static_cast<T>(1.0 - eps);
        }
      });
      return std::vector<Tensor>{dx};
    };
  });
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& labels_in, const CrossEntropyOptions& options) {
  const Tensor log_probs = log_probs_in.contiguous(), labels = labels_in.contiguous();
  if (options.label_smoothing != 0.0) fail("nll_loss: label_smoothing is not supported (use cross_entropy)");
  const RowLossInputs in = check_row_loss("nll_loss", log_probs, labels, options);
  const std::vector<double> weights = row_weights(in, options.reduction);
  Tensor out = detail::dispatch_floating(log_probs.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* px = log_probs.data<T>();
    std::vector<double> row_loss(static_cast<std::size_t>(in.rows), 0.0);
    for (std::int64_t i = 0; i < in.rows; ++i) {
      const std::int64_t y = in.labels[static_cast<std::size_t>(i)];
      if (y >= 0) row_loss[static_cast<std::size_t>(i)] = -static_cast<double>(px[i * in.classes + y]);
    }
    return fold_rows<T>(row_loss, weights, in, options.reduction);
  });
  return record_if_needed("nll_loss", out, {log_probs}, [&] {
    return [in, weights, reduction = options.reduction, dtype = log_probs.dtype()](const Tensor& g, NeedsGrad) {
      // The loss is linear in the input: the gradient is -scale at each row's label, whatever the mode.
      Tensor onehot = target_distribution(in, 0.0, dtype);
      if (is_grad_enabled()) return std::vector<Tensor>{neg(mul(onehot, row_scale(g, weights, reduction)))};
      const std::vector<double> scale = row_scale_values(g, weights, reduction);
      detail::dispatch_floating(dtype, "nll_loss", [&](auto tag) {
        using T = decltype(tag);
        T* pd = onehot.data<T>();
        for (std::int64_t i = 0; i < in.rows; ++i)
          for (std::int64_t c = 0; c < in.classes; ++c)
            pd[i * in.classes + c] *= static_cast<T>(-scale[static_cast<std::size_t>(i)]);
      });
      return std::vector<Tensor>{onehot};
    };
  });
}

// Note: PyTorch broadcasts mismatched shapes in mse_loss and l1_loss (with a warning); so does tapegrad,
// but the error for incompatible shapes or dtypes names the loss.
void check_pointwise(const char* op, const Tensor& input, const Tensor& target) {
  input.check_defined(op);
  target.check_defined(op);
  if (input.dtype() != target.dtype())
    fail("{}: input is {} but target is {}", op, dtype_name(input.dtype()), dtype_name(target.dtype()));
  broadcast_shapes(input.shape(), target.shape(), op);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pointwise("mse_loss", input, target);
  return reduce(square(sub(input, target)), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pointwise("l1_loss", input, target);
  return reduce(abs(sub(input, target)), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in,
                                        const BceWithLogitsOptions& options) {
  const Tensor input = input_in.contiguous(), target = target_in.contiguous();
  const char* op = "binary_cross_entropy_with_logits";
  input.check_defined(op);
  target.check_defined(op);
  if (input.dtype() != target.dtype())
    fail("{}: input is {} but target is {}", op, dtype_name(input.dtype()), dtype_name(target.dtype()));
  if (input.shape() != target.shape())
    fail("{}: target size {} must be the same as input size {}", op, shape_string(target.shape()),
         shape_string(input.shape()));
  const Tensor& pos_weight = options.pos_weight;
  const bool has_pos_weight = pos_weight.defined();
  Tensor pw;  // pos_weight broadcast to the input's shape, values only
  if (has_pos_weight) {
    if (pos_weight.dtype() != input.dtype())
      fail("{}: pos_weight is {} but input is {}", op, dtype_name(pos_weight.dtype()), dtype_name(input.dtype()));
    if (broadcast_shapes(pos_weight.shape(), input.shape(), op) != input.shape())
      fail("{}: pos_weight {} does not broadcast to input {}", op, shape_string(pos_weight.shape()),
           shape_string(input.shape()));
    NoGradGuard no_grad;
    pw = broadcast_to(pos_weight.detach(), input.shape());
  }
  Tensor out = empty(input.shape(), input.dtype());
  detail::dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = input.data<T>();
    const T* pt = target.data<T>();
    const T* pp = has_pos_weight ? pw.data<T>() : nullptr;
    T* po = out.data<T>();
    for (std::int64_t i = 0; i < input.numel(); ++i) {
      const T x = px[i], t = pt[i];
      // softplus(-x) = log(1 + exp(-x)), written so that exp only sees non-positive arguments
      const T softplus_neg = std::log1p(std::exp(-std::abs(x))) + std::max(-x, T(0));
      const T log_weight = pp ? T(1) + (pp[i] - T(1)) * t : T(1);
      po[i] = (T(1) - t) * x + log_weight * softplus_neg;
    }
  });
  std::vector<Tensor> inputs{input, target};
  if (has_pos_weight) inputs.push_back(pos_weight);
  out = record_if_needed(op, out, inputs, [&] {
    return [sx = SavedTensor(input, op), st = SavedTensor(target, op),
            sp = has_pos_weight ? SavedTensor(pos_weight, op) : SavedTensor(),
            has_pos_weight](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sx.get();
      const Tensor& t = st.get();
      std::vector<Tensor> grads(has_pos_weight ? 3 : 2);
      if (is_grad_enabled()) {
        // create_graph: d/dx = (1 - t) - lw sigmoid(-x), d/dt = -x + (pw - 1) softplus(-x),
        // d/dpw = t softplus(-x). Note: softplus's linear cut-off at 30 changes values by < 1e-13.
        Tensor neg_x = neg(x);
        Tensor log_weight = has_pos_weight ? add(mul(sub(sp.get(), 1.0), t), 1.0) : Tensor();
        Tensor sig = sigmoid(neg_x);
        if (needs[0]) grads[0] = mul(g, sub(rsub(t, 1.0), has_pos_weight ? mul(log_weight, sig) : sig));
        if (needs[1] || (has_pos_weight && needs[2])) {
          Tensor spn = softplus(neg_x, 1.0, 30.0);
          if (needs[1]) grads[1] = mul(g, has_pos_weight ? add(neg_x, mul(sub(sp.get(), 1.0), spn)) : neg_x);
          if (has_pos_weight && needs[2]) grads[2] = sum_to(mul(mul(g, t), spn), sp.get().shape());
        }
        return grads;
      }
      Tensor pwb;
      if (has_pos_weight) pwb = broadcast_to(sp.get(), x.shape());
      Tensor dx = empty(x.shape(), x.dtype()), dt = empty(x.shape(), x.dtype()), dp = empty(x.shape(), x.dtype());
      detail::dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&](auto tag) {
        using T = decltype(tag);
        const T* px = x.data<T>();
        const T* pt = t.data<T>();
        const T* pg = g.data<T>();
        const T* pp = has_pos_weight ? pwb.data<T>() : nullptr;
        T *pdx = dx.data<T>(), *pdt = dt.data<T>(), *pdp = dp.data<T>();
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          const T v = px[i], tv = pt[i], w = pp ? pp[i] : T(1);
          const T softplus_neg = std::log1p(std::exp(-std::abs(v))) + std::max(-v, T(0));
          const T sig_neg = v >= T(0) ? std::exp(-v) / (T(1) + std::exp(-v)) : T(1) / (T(1) + std::exp(v));
          pdx[i] = pg[i] * ((T(1) - tv) - (T(1) + (w - T(1)) * tv) * sig_neg);
          pdt[i] = pg[i] * (-v + (w - T(1)) * softplus_neg);
          pdp[i] = pg[i] * tv * softplus_neg;
        }
      });
      if (needs[0]) grads[0] = dx;
      if (needs[1]) grads[1] = dt;
      if (has_pos_weight && needs[2]) grads[2] = sum_to(dp, sp.get().shape());
      return grads;
    };
  });
  if (options.weight.defined()) {
    if (broadcast_shapes(options.weight.shape(), input.shape(), op) != input.shape())
      fail("{}: weight {} does not broadcast to input {}", op, shape_string(options.weight.shape()),
           shape_string(input.shape()));
    out = mul(out, options.weight);
  }
  return reduce(out, options.reduction);
}

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, const BceOptions& options) {
  const char* op = "binary_cross_entropy";
  input_in.check_defined(op);
  target_in.check_defined(op);
  const Tensor input = input_in.contiguous(), target = target_in.contiguous();
  if (!is_floating(input.dtype()) || input.dtype() != target.dtype())
    fail("{}: input is {} and target is {}; expected the same float dtype", op, dtype_name(input.dtype()),
         dtype_name(target.dtype()));
  if (input.shape() != target.shape())
    fail("{}: target size {} must be the same as input size {}", op, shape_string(target.shape()),
         shape_string(input.shape()));
  Tensor out = empty(input.shape(), input.dtype());
  detail::dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = input.data<T>();
    const T* pt = target.data<T>();
    T* po = out.data<T>();
    for (std::int64_t i = 0; i < input.numel(); ++i) {
      const T x = px[i], t = pt[i];
      if (!(x >= T(0) && x <= T(1)))
        fail("{}: all elements of input should be between 0 and 1, got {} at index {}", op, x, i);
      // Note: PyTorch clamps each log at -100, so a saturated prediction costs at most 100, never infinity.
      const T log_x = std::max(std::log(x), T(-100)), log_1mx = std::max(std::log1p(-x), T(-100));
      po[i] = -(t * log_x + (T(1) - t) * log_1mx);
    }
  });
  out = record_if_needed(op, out, {input, target}, [&] {
    return [sx = SavedTensor(input, op), st = SavedTensor(target, op)](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sx.get();
      const Tensor& t = st.get();
      std::vector<Tensor> grads(2);
      // d/dx = (x - t) / (x (1 - x)), its denominator kept >= 1e-12 as PyTorch's; d/dt = log(1 - x) - log(x),
      // with the forward's clamps. Written with ops so that create_graph differentiates them again.
      // Note: PyTorch's floor is the float constant 1e-12f (9.99999996e-13), used here too so saturated inputs agree.
      constexpr double floor = static_cast<double>(1e-12f);
      if (needs[0]) grads[0] = mul(g, div(sub(x, t), clamp(mul(x, rsub(x, 1.0)), floor, std::nullopt)));
      if (needs[1])
        grads[1] = mul(g, sub(clamp(log(rsub(x, 1.0)), -100.0, std::nullopt), clamp(log(x), -100.0, std::nullopt)));
      return grads;
    };
  });
  if (options.weight.defined()) {
    if (options.weight.dtype() != input.dtype())
      fail("{}: weight is {} but input is {}", op, dtype_name(options.weight.dtype()), dtype_name(input.dtype()));
    if (broadcast_shapes(options.weight.shape(), input.shape(), op) != input.shape())
      fail("{}: weight {} does not broadcast to input {}", op, shape_string(options.weight.shape()),
           shape_string(input.shape()));
    out = mul(out, options.weight);
  }
  return reduce(out, options.reduction);
}

}  // namespace tapegrad

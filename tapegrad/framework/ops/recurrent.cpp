// recurrent_sequence: one RNN / LSTM / GRU layer-direction as one op. The forward steps are below; the
// hand-written backpropagation through time is in recurrent_backward.cpp (the loops of both:
// ops/detail/recurrent_steps.h).
#include <tapegrad/framework/ops/recurrent.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/kernels/vector_math.h>
#include <tapegrad/framework/ops/detail/recurrent_steps.h>

namespace tapegrad {

namespace detail {

template <class S>
void recurrent_forward(RecurrentBuffers<S>& b, const S* input_projection, const S* c0, S* h_n, S* c_n) {
  const std::int64_t B = b.batch, H = b.hidden, P = b.state, GH = b.gates;
  std::vector<S> hidden_products(static_cast<std::size_t>(B * GH));
  S* gh = hidden_products.data();
  // Reverse steps of a packed batch whose rows join from h0 read h_prev from here (see `continuing`).
  std::vector<S> joined(b.batch_sizes && b.reverse ? static_cast<std::size_t>(B * P) : 0);
  if (b.kind == RecurrentKind::LSTM)
    for (std::int64_t k = 0; k < B * H; ++k) b.cells[k] = c0 ? c0[k] : S(0);
  for (std::int64_t s = 0; s < b.steps; ++s) {
    const std::int64_t t = b.time(s), rows = b.rows(s), cont = b.continuing(s);
    const std::int64_t t_prev = s == 0 ? 0 : b.time(s - 1);
    const bool threaded = use_threads(rows * H, kGateParallel);
    const S* h_prev = s == 0 ? b.h0 : b.output + b.offset(t_prev) * P;
    if (s > 0 && cont < rows) {
      std::copy(h_prev, h_prev + cont * P, joined.begin());
      std::copy(b.h0 + cont * P, b.h0 + rows * P, joined.begin() + cont * P);
      h_prev = joined.data();
    }
    // Note: only the step's own rows go through the GEMM and the gates (what PyTorch does with batch_sizes).
    kernels::gemm(false, true, rows, GH, P, S(1), h_prev, P, b.weight_hh, P, S(0), gh, GH);
    const S* x = input_projection + b.offset(t) * GH;
    S* out = b.output + b.offset(t) * P;
    switch (b.kind) {
      case RecurrentKind::RNNTanh:
      case RecurrentKind::RNNReLU: {
        const bool relu = b.kind == RecurrentKind::RNNReLU;
        parallel_for(rows, threaded, [&](std::int64_t n) {
          S* h = out + n * P;
          for (std::int64_t j = 0; j < H; ++j) {
            const std::int64_t k = n * GH + j;
            const S pre = x[k] + gh[k] + (b.bias_hh ? b.bias_hh[j] : S(0));
            h[j] = relu ? (pre > S(0) ? pre : S(0)) : pre;
          }
          if (!relu) kernels::tanh(H, h, h);
        });
        break;
      }
      case RecurrentKind::LSTM: {
        S* act = b.activations + b.offset(t) * GH;
        const S* c_prev = s == 0 ? b.cells : b.cells + (B + b.offset(t_prev)) * H;
        S* c = b.cells + (B + b.offset(t)) * H;
        S* u = b.unprojected ? b.unprojected + b.offset(t) * H : out;
        S* c_tanh = b.cell_tanh + b.offset(t) * H;
        parallel_for(rows, threaded, [&](std::int64_t n) {
          const S* cp = n < cont || s == 0 ? c_prev + n * H : b.cells + n * H;  // joining rows: c0
          // Note: one fused vector loop per row (u's row stride is H either way: P = H without projection).
          kernels::lstm_cell_forward(H, x + n * GH, gh + n * GH, b.bias_hh, act + n * GH, cp, c + n * H,
                                     c_tanh + n * H, u + n * H);
        });
        if (b.unprojected) kernels::gemm(false, true, rows, P, H, S(1), u, H, b.weight_hr, H, S(0), out, P);
        break;
      }
      case RecurrentKind::GRU: {
        S* act = b.activations + b.offset(t) * GH;
        S* hn = b.hidden_n + b.offset(t) * H;
        parallel_for(rows, threaded, [&](std::int64_t n) {
          // Per row: r and z's pre-activations, one vector sigmoid; n's, one vector tanh; then the blend.
          const S* bias = b.bias_hh;
          S* a = act + n * GH;
          const S* xr = x + n * GH;
          const S* gr = gh + n * GH;
          for (std::int64_t j = 0; j < 2 * H; ++j) a[j] = xr[j] + gr[j] + (bias ? bias[j] : S(0));
          kernels::sigmoid(2 * H, a, a);
          for (std::int64_t j = 0; j < H; ++j) {
            const S hidden = gr[2 * H + j] + (bias ? bias[2 * H + j] : S(0));
            hn[n * H + j] = hidden;
            a[2 * H + j] = xr[2 * H + j] + a[j] * hidden;
          }
          kernels::tanh(H, a + 2 * H, a + 2 * H);
          for (std::int64_t j = 0; j < H; ++j) {
            const S z = a[H + j], cand = a[2 * H + j];
            out[n * P + j] = (S(1) - z) * cand + z * h_prev[n * P + j];
          }
        });
        break;
      }
    }
  }
  // Each row's final states are those of its last processing step: rows [rows(s + 1), rows(s)) end at step s
  // (in reverse every row ends at time 0, the last step).
  for (std::int64_t s = 0; s < b.steps; ++s) {
    const std::int64_t t = b.time(s), first = s + 1 < b.steps ? b.rows(s + 1) : 0;
    for (std::int64_t n = first; n < b.rows(s); ++n) {
      const S* h = b.output + (b.offset(t) + n) * P;
      if (h_n) std::copy(h, h + P, h_n + n * P);
      if (c_n) {
        const S* c = b.cells + (B + b.offset(t) + n) * H;
        std::copy(c, c + H, c_n + n * H);
      }
    }
  }
}

template void recurrent_forward<float>(RecurrentBuffers<float>&, const float*, const float*, float*, float*);
template void recurrent_forward<double>(RecurrentBuffers<double>&, const double*, const double*, double*, double*);

}  // namespace detail

std::int64_t recurrent_gate_count(RecurrentKind kind) {
  switch (kind) {
    case RecurrentKind::LSTM: return 4;
    case RecurrentKind::GRU: return 3;
    default: return 1;
  }
}

namespace {

const char* op_name(RecurrentKind kind) {
  switch (kind) {
    case RecurrentKind::RNNTanh: return "rnn_tanh";
    case RecurrentKind::RNNReLU: return "rnn_relu";
    case RecurrentKind::LSTM: return "lstm";
    case RecurrentKind::GRU: return "gru";
  }
  return "recurrent";
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected, DType dtype) {
  if (!t.defined()) fail("{}: {} is undefined (expected {})", op, what, shape_string(expected));
  if (t.shape() != expected) fail("{}: expected {} {}, got {}", op, what, shape_string(expected), shape_string(t.shape()));
  if (t.dtype() != dtype) fail("{}: {} is {} but input_projection is {}", op, what, dtype_name(t.dtype()), dtype_name(dtype));
}

// The values of `t` as a contiguous tensor without history (the tensor itself when already contiguous).
Tensor values_of(const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); }

template <class S>
const S* pointer(const Tensor& t) {
  return t.defined() ? t.data<S>() : nullptr;
}
template <class S>
S* pointer(Tensor& t) {
  return t.defined() ? t.data<S>() : nullptr;
}

// What the record keeps for its backward.
struct Saved {
  RecurrentKind kind;
  std::int64_t steps, batch, hidden, state;
  bool reverse;
  SavedTensor weight_hh, bias_hh, weight_hr, h0;
  // The backward reads the outputs (h_prev of every step, and tanh's derivative for RNN): the record's own output,
  // which the caller holds and may write in place; `output_version` makes backward refuse it then, as it refuses
  // a modified h0 or weight (PyTorch's composite layers keep a copy and give the right gradient).
  SavedTensor output_version;
  Tensor output, activations, cells, hidden_n, unprojected, cell_tanh;
  // Packed input only (else empty): rows per time step and their offsets.
  std::vector<std::int64_t> batch_sizes, offsets;
};

template <class S>
detail::RecurrentBuffers<S> buffers_of(const Saved& s, const Tensor& weight_hh, const Tensor& bias_hh,
                                       const Tensor& weight_hr, const Tensor& h0) {
  Tensor output = s.output, activations = s.activations, cells = s.cells, hidden_n = s.hidden_n,
         unprojected = s.unprojected, cell_tanh = s.cell_tanh;
  return {s.kind,
          s.steps,
          s.batch,
          s.hidden,
          s.state,
          recurrent_gate_count(s.kind) * s.hidden,
          s.reverse,
          pointer<S>(weight_hh),
          pointer<S>(bias_hh),
          pointer<S>(weight_hr),
          pointer<S>(h0),
          pointer<S>(output),
          pointer<S>(activations),
          pointer<S>(cells),
          pointer<S>(hidden_n),
          pointer<S>(unprojected),
          pointer<S>(cell_tanh),
          s.batch_sizes.empty() ? nullptr : s.batch_sizes.data(),
          s.offsets.empty() ? nullptr : s.offsets.data()};
}

std::vector<Tensor> backward_of(const Saved& s, const Tensor& grad, NeedsGrad needs);

// A batch of 0 sequences (padded input [T, 0, G*H]), as PyTorch: empty outputs [T, 0, P] and states [0, P] / [0, H],
// recorded so that backward runs and gives every input a zero gradient. (The kernels assume rows to work on.)
RecurrentSequence empty_batch(const char* op, RecurrentKind kind, std::int64_t T, std::int64_t P, std::int64_t H,
                              const std::vector<Tensor>& inputs, bool reverse, bool final_states) {
  const DType dtype = inputs[0].dtype();
  Tensor output = record_if_needed(op, empty({T, 0, P}, dtype), inputs, [&] {
    std::vector<Shape> shapes;
    for (const Tensor& input : inputs) shapes.push_back(input.defined() ? input.shape() : Shape{});
    return [shapes, dtype](const Tensor&, NeedsGrad needs) {
      std::vector<Tensor> grads(shapes.size());
      for (std::size_t i = 0; i < shapes.size(); ++i)
        if (needs[i]) grads[i] = zeros(shapes[i], TensorOptions{}.with_dtype(dtype));
      return grads;
    };
  });
  RecurrentSequence result;
  result.output = output;
  if (!final_states) return result;
  result.h_n = output.select(0, reverse ? 0 : T - 1);
  if (kind == RecurrentKind::LSTM) result.c_n = empty({0, H}, dtype);
  return result;
}

}  // namespace

RecurrentSequence recurrent_sequence(RecurrentKind kind, const Tensor& input_projection, const Tensor& weight_hh,
                                     const Tensor& bias_hh, const Tensor& h0, const Tensor& c0,
                                     const Tensor& weight_hr, bool reverse, bool final_states,
                                     const std::vector<std::int64_t>& batch_sizes) {
  const char* op = op_name(kind);
  input_projection.check_defined(op);
  const DType dtype = input_projection.dtype();
  if (!is_floating(dtype)) fail("{}: expected a float32 or float64 input_projection, got {}", op, dtype_name(dtype));
  const bool packed_input = !batch_sizes.empty();
  const std::int64_t G = recurrent_gate_count(kind);
  std::int64_t T = 0, B = 0, N = 0, GH = 0;
  if (!packed_input) {
    if (input_projection.dim() != 3)
      fail("{}: expected input_projection [T, B, G*H], got {}", op, shape_string(input_projection.shape()));
    T = input_projection.size(0), B = input_projection.size(1), N = T * B, GH = input_projection.size(2);
    if (T < 1 || GH < G || GH % G != 0)
      fail("{}: expected input_projection [T >= 1, B, {} * hidden_size], got {}", op, G,
           shape_string(input_projection.shape()));
  } else {
    if (input_projection.dim() != 2)
      fail("{}: expected a packed input_projection [sum(batch_sizes), G*H], got {}", op,
           shape_string(input_projection.shape()));
    T = static_cast<std::int64_t>(batch_sizes.size()), B = batch_sizes[0], GH = input_projection.size(1);
    for (std::size_t t = 0; t < batch_sizes.size(); ++t) {
      if (batch_sizes[t] < 1 || (t > 0 && batch_sizes[t] > batch_sizes[t - 1]))
        fail("{}: batch_sizes must be positive and non-increasing, got {} at step {} (previous {})", op,
             batch_sizes[t], t, t > 0 ? batch_sizes[t - 1] : 0);
      N += batch_sizes[t];
    }
    if (input_projection.size(0) != N || GH < G || GH % G != 0)
      fail("{}: expected input_projection [{} (the sum of batch_sizes), {} * hidden_size], got {}", op, N, G,
           shape_string(input_projection.shape()));
  }
  const std::int64_t H = GH / G;
  if (weight_hr.defined() && kind != RecurrentKind::LSTM) fail("{}: weight_hr is only for LSTM", op);
  const std::int64_t P = weight_hr.defined() ? weight_hr.size(0) : H;
  if (weight_hr.defined()) check_shape(op, "weight_hr", weight_hr, {P, H}, dtype);
  check_shape(op, "weight_hh", weight_hh, {GH, P}, dtype);
  if (bias_hh.defined()) check_shape(op, "bias_hh", bias_hh, {GH}, dtype);
  check_shape(op, "h0", h0, {B, P}, dtype);
  if (kind == RecurrentKind::LSTM) check_shape(op, "c0", c0, {B, H}, dtype);
  else if (c0.defined()) fail("{}: c0 is only for LSTM", op);

  const bool lstm = kind == RecurrentKind::LSTM;
  if (N == 0) return empty_batch(op, kind, T, P, H, {input_projection, weight_hh, bias_hh, h0, c0, weight_hr},
                                 reverse, final_states);
  Saved saved{kind, T, B, H, P, reverse, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  if (packed_input) {
    saved.batch_sizes = batch_sizes;
    for (std::int64_t t = 0, offset = 0; t < T; offset += batch_sizes[static_cast<std::size_t>(t)], ++t)
      saved.offsets.push_back(offset);
  }
  // The record's single output: the outputs, then (packed input) h_n, then (LSTM) c_n, in one storage. Padded,
  // h_n is a view of the outputs' last step, and RNN's and GRU's record output is the outputs themselves.
  const std::int64_t h_n_size = packed_input ? B * P : 0, final_size = h_n_size + (lstm ? B * H : 0);
  Tensor packed = final_size > 0 ? empty({N * P + final_size}, dtype) : empty({T, B, P}, dtype);
  if (kind == RecurrentKind::LSTM || kind == RecurrentKind::GRU) saved.activations = empty({N, GH}, dtype);
  if (lstm) saved.cells = empty({B + N, H}, dtype), saved.cell_tanh = empty({N, H}, dtype);
  if (kind == RecurrentKind::GRU) saved.hidden_n = empty({N, H}, dtype);
  if (weight_hr.defined()) saved.unprojected = empty({N, H}, dtype);
  saved.output = packed.detach();
  const Tensor x = values_of(input_projection), w = values_of(weight_hh), bias = values_of(bias_hh),
               h = values_of(h0), c = values_of(c0), w_r = values_of(weight_hr);
  detail::dispatch_floating(dtype, op, [&](auto zero) {
    using S = decltype(zero);
    auto b = buffers_of<S>(saved, w, bias, w_r, h);
    S* finals = packed.data<S>() + N * P;
    detail::recurrent_forward<S>(b, x.data<S>(), pointer<S>(c), packed_input ? finals : nullptr,
                                 lstm ? finals + h_n_size : nullptr);
  });

  packed = record_if_needed(op, packed, {input_projection, weight_hh, bias_hh, h0, c0, weight_hr}, [&] {
    saved.weight_hh = SavedTensor(weight_hh, op);
    if (bias_hh.defined()) saved.bias_hh = SavedTensor(bias_hh, op);
    if (weight_hr.defined()) saved.weight_hr = SavedTensor(weight_hr, op);
    saved.h0 = SavedTensor(h0, op);
    saved.output_version = SavedTensor(saved.output, op);
    return [saved = std::move(saved)](const Tensor& grad, NeedsGrad needs) { return backward_of(saved, grad, needs); };
  });
  RecurrentSequence result;
  if (final_size == 0) result.output = packed;
  else result.output = packed_input ? packed.narrow(0, 0, N * P).view({N, P}) : packed.narrow(0, 0, N * P).view({T, B, P});
  if (!final_states) return result;
  result.h_n = packed_input ? packed.narrow(0, N * P, B * P).view({B, P}) : result.output.select(0, reverse ? 0 : T - 1);
  if (lstm) result.c_n = packed.narrow(0, N * P + h_n_size, B * H).view({B, H});
  return result;
}

namespace {

std::vector<Tensor> backward_of(const Saved& s, const Tensor& grad, NeedsGrad needs) {
  const char* op = op_name(s.kind);
  if (is_grad_enabled())
    fail("{}: the fused recurrent op has a first-order backward only (backward with create_graph=true, or a "
         "second derivative, is not supported)",
         op);
  s.output_version.get();  // throws when the outputs were written in place since the forward
  const Tensor w = values_of(s.weight_hh.get()), h0 = values_of(s.h0.get());
  const Tensor bias = s.bias_hh.get().defined() ? values_of(s.bias_hh.get()) : Tensor();
  const Tensor w_r = s.weight_hr.get().defined() ? values_of(s.weight_hr.get()) : Tensor();
  const Tensor g = grad.detach().contiguous();
  const std::int64_t B = s.batch, H = s.hidden, P = s.state, GH = recurrent_gate_count(s.kind) * H;
  const std::int64_t N = s.batch_sizes.empty() ? s.steps * B : s.offsets.back() + s.batch_sizes.back();
  const DType dtype = g.dtype();
  Tensor d_x = s.batch_sizes.empty() ? empty({s.steps, B, GH}, dtype) : empty({N, GH}, dtype), d_w = needs[1] ? empty({GH, P}, dtype) : Tensor(),
         d_b = needs[2] && bias.defined() ? empty({GH}, dtype) : Tensor(), d_h0 = empty({B, P}, dtype),
         d_c0 = s.kind == RecurrentKind::LSTM ? empty({B, H}, dtype) : Tensor(),
         d_w_r = needs[5] && w_r.defined() ? empty({P, H}, dtype) : Tensor();
  detail::dispatch_floating(dtype, op, [&](auto zero) {
    using S = decltype(zero);
    const auto b = buffers_of<S>(s, w, bias, w_r, h0);
    const bool packed_input = !s.batch_sizes.empty();
    const S* g_h_n = packed_input ? g.data<S>() + N * P : nullptr;
    const S* g_c_n = s.kind == RecurrentKind::LSTM ? g.data<S>() + N * P + (packed_input ? B * P : 0) : nullptr;
    detail::recurrent_backward<S>(b, g.data<S>(), g_h_n, g_c_n,
                                  {pointer<S>(d_x), pointer<S>(d_w), pointer<S>(d_b), pointer<S>(d_h0),
                                   pointer<S>(d_c0), pointer<S>(d_w_r)});
  });
  return {needs[0] ? d_x : Tensor(), d_w, d_b, needs[3] ? d_h0 : Tensor(), needs[4] ? d_c0 : Tensor(), d_w_r};
}

}  // namespace

}  // namespace tapegrad

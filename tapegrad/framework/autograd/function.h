#pragma once
/// What an op author needs to make an op differentiable: one record on the tape with a backward closure.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Which inputs of a record want a gradient (bit i for input i), so backward can skip needless work.
class NeedsGrad {
 public:
  explicit NeedsGrad(std::uint64_t mask) : mask_(mask) {}
  bool operator[](std::size_t input) const { return (mask_ >> input) & 1u; }

 private:
  std::uint64_t mask_;
};

/// Given the gradient of the op's output, returns one gradient per input, in input order, each of
/// that input's shape and dtype; an undefined Tensor where `needs` is false or the gradient is zero.
/// Note: write it with tapegrad ops. During backward(create_graph=true) grad mode is on, so those ops
/// record too and the gradient is itself differentiable. A closure must not capture the op's output
/// tensor itself (only its values, via detach()), or the record would keep its own output alive.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, NeedsGrad needs)>;

/// True when grad mode is on and any input requires grad: only then is a record worth building.
bool should_record(std::initializer_list<Tensor> inputs);
bool should_record(const std::vector<Tensor>& inputs);

/// Appends a record producing `output` from `inputs` to the calling thread's tape and returns `output`
/// (now requiring grad, with grad_fn `op`). `output` must be a tensor this op just created.
Tensor record_op(const char* op, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward);

/// For in-place ops (ops/inplace.cpp): appends a record whose output is `target`'s new autograd identity,
/// replacing the one it has; every handle to `target` sees the new history. To differentiate through the
/// old one, pass among `inputs` a handle holding it (taken before the call). Nothing happens for an integer
/// target.
void rebase_history(const char* op, const Tensor& target, const std::vector<Tensor>& inputs, BackwardFn backward);

/// Records only when should_record(inputs); otherwise returns `output` untouched without building the closure.
/// While a tracer is active (autograd/trace.h, the ONNX exporter) it also reports the op, recorded or not.
template <class MakeBackward>
Tensor record_if_needed(const char* op, Tensor output, const std::vector<Tensor>& inputs, MakeBackward&& make_backward) {
  if (trace::active()) [[unlikely]]
    trace::report(op, inputs, {output});
  if (!should_record(inputs)) return output;
  return record_op(op, std::move(output), inputs, BackwardFn(make_backward()));
}

/// A tensor kept for backward together with its version at the time it was saved.
/// Note: get() throws when the tensor was modified in place since, instead of returning a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& tensor, const char* op);
  const Tensor& get() const;

 private:
  Tensor tensor_;
  std::uint64_t version_ = 0;
  const char* op_ = "";
};

}  // namespace tapegrad

TAPEGRAD_API_END

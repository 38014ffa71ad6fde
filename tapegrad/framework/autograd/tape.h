#pragma once
/// The calling thread's tape: inspection, and gradients of several outputs at once.
#include <tapegrad/export.h>
#include <cstddef>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Number of records on the calling thread's tape (live graphs plus not yet pruned dead ones).
std::size_t tape_size();
/// Drops every record that no live tensor can still reach (normally done automatically).
void prune_tape();

namespace autograd {

/// Backpropagates from several outputs at once; gradients accumulate into leaves' .grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Returns d(sum_i <grad_outputs[i], outputs[i]>)/d(inputs[j]) without touching any .grad.
/// With create_graph the results are differentiable (for Hessian-vector products, gradient penalties).
/// An input the outputs do not depend on gives an error unless allow_unused, then a zero tensor.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace autograd
}  // namespace tapegrad

TAPEGRAD_API_END

// Records whose backward cannot build a graph of its own (autocast's bfloat16 products: they multiply rounded
// copies that are not the op's inputs). backward(create_graph=true) refuses a graph that reaches one before it
// deposits any gradient, so a refused call leaves every .grad as it was and can be retried without create_graph.
#pragma once

#include <tapegrad/framework/tensor.h>

namespace tapegrad::autograd::detail {

/// Marks the record that just produced `output` (the last one on this thread's tape) as first-order only;
/// `refusal` is the message backward(create_graph=true) fails with, and must outlive the record (a literal).
/// Does nothing when `output` was not recorded (no grad needed, no-grad mode).
void mark_first_order_only(const Tensor& output, const char* refusal);

}  // namespace tapegrad::autograd::detail

#pragma once
// Internal: dropout fused with its neighbours in the Transformer layers, one pass and one record each where the
// composition is two: relu then dropout (the feed-forward block), and a residual sum with a dropped branch. Both
// draw the mask dropout() draws from the same generator and give its values and gradients bit for bit; they
// keep one byte per element for backward instead of dropout's mask, relu's input and the intermediate.
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// dropout(relu(x), p, true, generator), as one op. p in [0, 1].
Tensor relu_dropout(const Tensor& x, double p, Generator& generator);

/// add(residual, dropout(branch, p, true, generator)), as one op; residual and branch of one shape and dtype.
Tensor add_dropout(const Tensor& residual, const Tensor& branch, double p, Generator& generator);

}  // namespace tapegrad::detail

#pragma once
/// Numerically stable exponential normalisations: logsumexp, softmax, log_softmax.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// log(sum(exp(x))) over `dims`, shifted by the maximum so that large values do not overflow.
Tensor logsumexp(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// exp(x) / sum(exp(x)) along `dim` (max-subtracted; every slice sums to 1).
Tensor softmax(const Tensor& x, std::int64_t dim);
/// x - logsumexp(x) along `dim`; finite even for logits of 1e30.
Tensor log_softmax(const Tensor& x, std::int64_t dim);

}  // namespace tapegrad

TAPEGRAD_API_END

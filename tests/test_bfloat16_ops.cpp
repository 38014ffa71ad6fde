// Every public op with bfloat16 inputs: either the value PyTorch computes (the float32 result of the same
// bfloat16 inputs, rounded once to bfloat16: the ops that only move elements give the inputs' bits exactly), or a
// tapegrad::Error naming bfloat16 and the way out (.to(DType::Float32)). Never a crash, never silent garbage.
// docs/numerics.md ("bfloat16") lists the same two groups; this test prints them with -s.
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>
#include "support/properties.h"

namespace {

using tapegrad::DType;
using tapegrad::Tensor;
namespace tg = tapegrad;

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  const char* name;
  std::vector<tg::Shape> shapes;  // bfloat16 inputs; values in [-2, 2) on the bfloat16 grid
  Op op;
};

Tensor input(const tg::Shape& shape, int salt) {
  const std::int64_t n = tg::shape_numel(shape);
  std::vector<double> v;
  for (std::int64_t i = 0; i < n; ++i)
    v.push_back(static_cast<double>((i * 37 + salt * 11) % 64) / 16.0 - 2.0 + 0.03125);
  return tg::from_vector(v, shape, tg::TensorOptions{}.with_dtype(DType::BFloat16));
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // element moves
      {"clone", {{2, 3}}, [](auto& x) { return x[0].t().clone(); }},
      {"contiguous", {{2, 3}}, [](auto& x) { return x[0].t().contiguous(); }},
      {"reshape", {{2, 3}}, [](auto& x) { return x[0].t().reshape({6}); }},
      {"permute",
       {{2, 3, 2}},
       [](auto& x) {
         return tg::permute(x[0], {2, 0, 1}).contiguous();
       }},
      {"cat",
       {{2, 3}, {1, 3}},
       [](auto& x) {
         return tg::cat({x[0], x[1]}, 0);
       }},
      {"stack",
       {{2, 3}, {2, 3}},
       [](auto& x) {
         return tg::stack({x[0], x[1]}, 2);
       }},
      {"flip",
       {{2, 3}},
       [](auto& x) {
         return tg::flip(x[0], {0, 1});
       }},
      {"tril", {{3, 3}}, [](auto& x) { return tg::tril(x[0]); }},
      {"index_select", {{3, 2}}, [](auto& x) { return tg::index_select(x[0], 0, tg::arange(2, DType::Int64)); }},
      {"gather",
       {{3, 2}},
       [](auto& x) {
         return tg::gather(x[0], 1, tg::zeros({3, 1}, tg::TensorOptions{}.with_dtype(DType::Int64)));
       }},
      {"expand+contiguous",
       {{1, 3}},
       [](auto& x) {
         return x[0].expand({2, 3}).contiguous();
       }},
      {"pad",
       {{2, 3}},
       [](auto& x) {
         return tg::pad(x[0], {1, 1});
       }},
      // arithmetic
      {"add", {{2, 3}, {2, 3}}, [](auto& x) { return tg::add(x[0], x[1]); }},
      {"sub", {{2, 3}, {2, 3}}, [](auto& x) { return tg::sub(x[0], x[1]); }},
      {"mul", {{2, 3}, {2, 3}}, [](auto& x) { return tg::mul(x[0], x[1]); }},
      {"div", {{2, 3}, {2, 3}}, [](auto& x) { return tg::div(x[0], x[1]); }},
      {"neg", {{2, 3}}, [](auto& x) { return tg::neg(x[0]); }},
      {"exp", {{2, 3}}, [](auto& x) { return tg::exp(x[0]); }},
      {"log", {{2, 3}}, [](auto& x) { return tg::log(tg::abs(x[0])); }},
      {"sqrt", {{2, 3}}, [](auto& x) { return tg::sqrt(x[0]); }},
      {"abs", {{2, 3}}, [](auto& x) { return tg::abs(x[0]); }},
      {"pow", {{2, 3}}, [](auto& x) { return tg::pow(x[0], 2.0); }},
      {"clamp", {{2, 3}}, [](auto& x) { return tg::clamp(x[0], -1.0, 1.0); }},
      {"relu", {{2, 3}}, [](auto& x) { return tg::relu(x[0]); }},
      {"sigmoid", {{2, 3}}, [](auto& x) { return tg::sigmoid(x[0]); }},
      {"tanh", {{2, 3}}, [](auto& x) { return tg::tanh(x[0]); }},
      {"gelu", {{2, 3}}, [](auto& x) { return tg::gelu(x[0]); }},
      {"softmax", {{2, 3}}, [](auto& x) { return tg::softmax(x[0], 1); }},
      {"log_softmax", {{2, 3}}, [](auto& x) { return tg::log_softmax(x[0], 1); }},
      {"sum", {{2, 3}}, [](auto& x) { return tg::sum(x[0]); }},
      {"mean", {{2, 3}}, [](auto& x) { return tg::mean(x[0]); }},
      {"max", {{2, 3}}, [](auto& x) { return tg::amax(x[0], {1}); }},
      {"argmax", {{2, 3}}, [](auto& x) { return tg::argmax(x[0], 1); }},
      {"var", {{2, 3}}, [](auto& x) { return tg::var(x[0]); }},
      {"eq", {{2, 3}, {2, 3}}, [](auto& x) { return tg::eq(x[0], x[1]); }},
      {"gt", {{2, 3}, {2, 3}}, [](auto& x) { return tg::gt(x[0], x[1]); }},
      {"where", {{2, 3}, {2, 3}}, [](auto& x) { return tg::where(tg::gt(x[0], x[1]), x[0], x[1]); }},
      {"matmul", {{2, 3}, {3, 2}}, [](auto& x) { return tg::matmul(x[0], x[1]); }},
      {"linear", {{2, 3}, {4, 3}}, [](auto& x) { return tg::linear(x[0], x[1]); }},
      {"bmm", {{2, 2, 3}, {2, 3, 2}}, [](auto& x) { return tg::bmm(x[0], x[1]); }},
      {"conv2d", {{1, 2, 4, 4}, {3, 2, 3, 3}}, [](auto& x) { return tg::conv2d(x[0], x[1]); }},
      {"max_pool2d", {{1, 2, 4, 4}}, [](auto& x) { return tg::max_pool2d(x[0], 2); }},
      {"avg_pool2d", {{1, 2, 4, 4}}, [](auto& x) { return tg::avg_pool2d(x[0], 2); }},
      {"layer_norm", {{2, 3}}, [](auto& x) { return tg::layer_norm(x[0], {3}); }},
      {"mse_loss", {{2, 3}, {2, 3}}, [](auto& x) { return tg::mse_loss(x[0], x[1]); }},
      {"cross_entropy",
       {{2, 3}},
       [](auto& x) { return tg::cross_entropy(x[0], tg::zeros({2}, tg::TensorOptions{}.with_dtype(DType::Int64))); }},
      {"dropout(eval)", {{2, 3}}, [](auto& x) { return tg::dropout(x[0], 0.5, true); }},
      {"embedding", {{4, 3}}, [](auto& x) { return tg::embedding(x[0], tg::arange(2, DType::Int64)); }},
      {"masked_fill", {{2, 3}, {2, 3}}, [](auto& x) { return tg::masked_fill(x[0], tg::gt(x[0], x[1]), 0.5); }},
  };
  return all;
}

// "<op>: bfloat16 is not supported by this op: convert with .to(DType::Float32)": names an op, the dtype, the way out.
bool refuses_clearly(const std::string& message) {
  const std::size_t at = message.find(": bfloat16");
  return at != std::string::npos && at > 0 && message.find(".to(DType::Float32)") != std::string::npos;
}

}  // namespace

TEST_CASE("every op on bfloat16 inputs gives float32's result rounded to bfloat16, or refuses by name") {
  std::string works, refuses;
  for (const Case& c : cases()) {
    INFO("op " << c.name);
    std::vector<Tensor> low, wide;
    int salt = 0;
    for (const auto& shape : c.shapes) {
      low.push_back(input(shape, salt++));
      wide.push_back(low.back().to(DType::Float32));
    }
    Tensor got;
    std::string error;
    try {
      got = c.op(low);
    } catch (const tg::Error& e) {
      error = e.what();
    }
    if (!error.empty()) {
      INFO("error: " << error);
      CHECK(refuses_clearly(error));
      refuses += std::string(refuses.empty() ? "" : "\n") + c.name + ": " + error;
      continue;
    }
    Tensor expected = c.op(wide);
    if (tg::is_floating(expected.dtype())) {
      CHECK(got.dtype() == DType::BFloat16);
      expected = expected.to(DType::BFloat16);
    } else {
      CHECK(got.dtype() == expected.dtype());  // comparisons, argmax: their own dtype
    }
    CHECK(got.shape() == expected.shape());
    CHECK(got.to_vector() == expected.to_vector());
    works += std::string(works.empty() ? "" : ", ") + c.name;
  }
  WARN("bfloat16 works: " << works);
  WARN("bfloat16 refuses: " << refuses);
}

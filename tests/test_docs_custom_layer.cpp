// The custom-layer example of docs/layers.md: the code between the DOC markers is pasted verbatim into the
// doc, and the first test case below fails if the two drift apart.
#include <fstream>
#include <sstream>

#include "support/doc_snippet.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

// DOC-BEGIN
using namespace tapegrad;

/// y = gain * (x - center) / scale. `center` and `scale` are buffers, fitted once from data and then
/// saved with the model; `gain` is a parameter, learned by the optimizer.
class Standardize : public nn::Module {
 public:
  explicit Standardize(std::int64_t features) : Module("Standardize"), features_(features) {
    gain = register_parameter("gain", ones({features}));
    center = register_buffer("center", zeros({features}));
    scale = register_buffer("scale", ones({features}));
  }

  /// Sets the statistics from a batch [N, features]. Buffers change outside the graph.
  void fit(const Tensor& data) {
    NoGradGuard no_grad;
    center.copy_(mean(data, {0}));
    scale.copy_(sqrt(mean(square(data - center), {0})) + 1e-8);
  }

  Tensor forward(const Tensor& x) override {
    if (x.dim() != 2 || x.size(1) != features_)
      fail("Standardize: expected input [N, {}], got {}", features_, shape_string(x.shape()));
    return gain * ((x - center) / scale);
  }

  std::string extra_repr() const override { return fmt::format("features={}", features_); }
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<Standardize>(features_)); }

  Tensor gain, center, scale;

 private:
  std::int64_t features_;
};

TEST_CASE("a custom layer: parameters train, buffers are state") {
  auto standardize = std::make_shared<Standardize>(3);
  nn::Sequential model(standardize, nn::Linear(3, 2));
  const Tensor data = randn({64, 3}) * 5.0 + 2.0;
  standardize->fit(data);

  // The optimizer's view: parameters only. The checkpoint's view: parameters and buffers.
  CHECK(model.parameters().size() == 3);  // 0.gain, 1.weight, 1.bias
  CHECK(model.buffers().size() == 2);     // 0.center, 0.scale
  CHECK(model.state().size() == 5);

  const Tensor center_before = standardize->center.clone();
  Tensor loss = cross_entropy(model(data), randint(0, 2, {64}));
  loss.backward();
  CHECK(standardize->gain.grad().defined());          // gradients reach the parameter...
  CHECK_FALSE(standardize->center.grad().defined());  // ...never a buffer
  CHECK(standardize->center.to_vector() == center_before.to_vector());
  CHECK_THROWS_WITH(model(zeros({4, 5})), "Standardize: expected input [N, 3], got [4, 5]");
}
// DOC-END

TEST_CASE("docs/layers.md contains the example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_custom_layer.cpp", "docs/layers.md");
}

TEST_CASE("the custom layer's gradient is right in float64") {
  Standardize layer(3);
  layer.to(DType::Float64);
  layer.fit(randn({16, 3}, default_generator(), TensorOptions{}.with_dtype(DType::Float64)));
  const Tensor x = randn({4, 3}, default_generator(), TensorOptions{}.with_dtype(DType::Float64));
  CHECK(gradcheck([&](const std::vector<Tensor>& v) { return layer(v[0]); }, {x}).ok);
}

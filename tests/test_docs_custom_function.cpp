// The custom-function example of docs/layers.md ("Custom functions (hand-written backward)"): the code between
// the DOC markers is pasted verbatim into the page, and the last test case fails if the two drift apart.
#include "support/doc_snippet.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>
#include <tapegrad/testing.h>

// DOC-BEGIN custom-function
using namespace tapegrad;

/// swish(x, beta) = x * sigmoid(beta * x), with its backward written by hand: one record on the tape.
Tensor swish(const Tensor& x, const Tensor& beta) {
  Tensor y;
  {
    NoGradGuard no_grad;  // the forward's own ops are not recorded: the record below stands for all of them
    y = x * sigmoid(beta * x);
  }
  return record_if_needed("swish", y, {x, beta}, [&] {
    // SavedTensor: backward fails loudly if x or beta was modified in place after the forward.
    return [x = SavedTensor(x, "swish"), beta = SavedTensor(beta, "swish")](const Tensor& g, NeedsGrad needs) {
      const Tensor& xv = x.get();
      const Tensor s = sigmoid(beta.get() * xv), ds = s * (1.0 - s);  // tapegrad ops: double backward works too
      return std::vector<Tensor>{needs[0] ? g * (s + beta.get() * xv * ds) : Tensor(),
                                 needs[1] ? sum_to(g * xv * xv * ds, beta.get().shape()) : Tensor()};
    };
  });
}

/// A layer around it: one learnable beta per feature.
class Swish : public nn::Module {
 public:
  explicit Swish(std::int64_t features) : Module("Swish"), features_(features) {
    beta = register_parameter("beta", ones({features}));
  }
  Tensor forward(const Tensor& x) override { return swish(x, beta); }
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<Swish>(features_)); }
  Tensor beta;

 private:
  std::int64_t features_;
};

TEST_CASE("Swish's hand-written backward matches finite differences, to second order") {
  const testing::ModuleFactory make = [] { return std::make_shared<Swish>(3); };
  const auto shapes = rc::gen::map(rc::gen::inRange<std::int64_t>(1, 5), [](std::int64_t n) { return Shape{n, 3}; });
  testing::check_module_gradients(make, shapes, {.second_order = true});
  testing::check_buffer_invariance(make, shapes);
}
// DOC-END custom-function

TEST_CASE("the custom function is one record, named, and refuses an input changed after the forward") {
  const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64).with_requires_grad();
  Tensor x = randn({2, 3}, default_generator(), f64);
  const Tensor beta = ones({3}, f64);
  const std::size_t before = tape_size();
  const Tensor y = swish(x, beta);
  CHECK(tape_size() == before + 1);
  CHECK(y.grad_fn_name() == "swish");
  {
    NoGradGuard no_grad;
    x.add_(1.0);
  }
  CHECK_THROWS(sum(y).backward());
}

TEST_CASE("docs/layers.md quotes the custom-function example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_custom_function.cpp", "docs/layers.md",
                                              "custom-function");
}

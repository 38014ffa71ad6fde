// The tape's backward observer: each watched leaf reported exactly once, at the moment its gradient is final
// (what DistributedDataParallel's overlapped allreduce relies on), for leaves used several times, unused ones,
// seeds, retain_graph/create_graph, autograd::grad, and a backward that throws.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include <tapegrad/framework/autograd/backward_observer.h>
#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

// Remembers every call, and each leaf's .grad as it was when reported (a copy, or nothing).
struct Recorder : autograd::BackwardObserver {
  std::vector<Tensor> leaves;
  std::vector<std::string> events;
  std::vector<Tensor> at_ready;
  std::vector<int> reported;
  autograd::BackwardPass pass;
  int begins = 0, records = 0, ends = 0;
  bool completed = false;

  explicit Recorder(std::vector<Tensor> watched) : leaves(std::move(watched)), at_ready(leaves.size()), reported(leaves.size()) {}
  const std::vector<Tensor>& on_backward_begin(const autograd::BackwardPass& p) override {
    pass = p;
    ++begins;
    events.push_back("begin");
    return leaves;
  }
  void on_gradient_ready(std::size_t index) override {
    ++reported[index];
    events.push_back("ready " + std::to_string(index));
    const Tensor grad = leaves[index].grad();
    at_ready[index] = grad.defined() ? grad.detach().clone() : Tensor();
  }
  void on_record_done() override {
    ++records;
    if (events.back() != "record") events.push_back("record");
  }
  void on_backward_end(bool done) override {
    ++ends;
    completed = done;
    events.push_back("end");
  }
};

void require_final(const Recorder& r) {
  for (std::size_t i = 0; i < r.leaves.size(); ++i) {
    INFO("leaf " << i);
    CHECK(r.reported[i] == 1);
    const Tensor final_grad = r.leaves[i].grad();
    REQUIRE(final_grad.defined() == r.at_ready[i].defined());
    if (final_grad.defined()) CHECK(final_grad.to_vector() == r.at_ready[i].to_vector());
  }
}

std::size_t position(const std::vector<std::string>& events, const std::string& event) {
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i] == event) return i;
  FAIL("no event " << event);
  return 0;
}

}  // namespace

TEST_CASE("a leaf used by several records is reported once, after its earliest-recorded use, with its final gradient") {
  Tensor w1 = tensor({1.5, -2.0}, {2}, f64_grad());
  Tensor w2 = tensor({0.5, 3.0}, {2}, f64_grad());
  Tensor w3 = tensor({2.0, 1.0}, {2}, f64_grad());
  const Tensor x = tensor({1.0, 2.0}, {2}, TensorOptions{}.with_dtype(DType::Float64));
  const Tensor a = w1 * x;         // w1's first (earliest-recorded) use
  const Tensor b = a * w2;         // w2
  const Tensor c = b + w1 * w1;    // w1 used twice more, late
  const Tensor loss = sum(c * w3);  // w3, used last: final first
  auto recorder = std::make_shared<Recorder>(std::vector<Tensor>{w1, w2, w3});
  autograd::observe_next_backward(recorder);
  loss.backward();
  require_final(*recorder);
  CHECK(recorder->completed);
  // w3 is final right after the product with it ran, w2 after a * w2, w1 only after its earliest use,
  // w1 * x (records run between each report: "record" marks one or more).
  CHECK(recorder->events == std::vector<std::string>{"begin", "record", "ready 2", "record", "ready 1", "record",
                                                     "ready 0", "record", "end"});
  // d loss / d w1 = w3 (x w2 + 2 w1): every contribution arrived before the report.
  CHECK(recorder->at_ready[0].to_vector()[0] == Approx(2.0 * (1.0 * 0.5 + 2 * 1.5)));
  CHECK(recorder->at_ready[0].to_vector()[1] == Approx(1.0 * (2.0 * 3.0 + 2 * -2.0)));
}

TEST_CASE("a leaf no gradient reaches is reported before the first record runs, its gradient untouched") {
  Tensor used = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor unused = tensor({3.0}, {1}, f64_grad());
  Tensor elsewhere = tensor({4.0}, {1}, f64_grad());
  unused.set_grad(tensor({7.0}, {1}, TensorOptions{}.with_dtype(DType::Float64)));
  const Tensor other_graph = elsewhere * 2.0;  // alive, on the tape, never backpropagated here
  auto recorder = std::make_shared<Recorder>(std::vector<Tensor>{used, unused, elsewhere});
  autograd::observe_next_backward(recorder);
  sum(exp(used) * 3.0).backward();
  require_final(*recorder);
  const auto& e = recorder->events;
  CHECK(position(e, "ready 1") < position(e, "record"));
  CHECK(position(e, "ready 2") < position(e, "record"));
  CHECK(position(e, "ready 0") > position(e, "record"));
  CHECK(unused.grad().to_vector() == std::vector<double>{7.0});
  CHECK_FALSE(elsewhere.grad().defined());
  CHECK(other_graph.requires_grad());
}

TEST_CASE("an observer hears one backward pass, not autograd::grad, and is told retain_graph and create_graph") {
  Tensor w = tensor({1.0, -1.0}, {2}, f64_grad());
  auto recorder = std::make_shared<Recorder>(std::vector<Tensor>{w});
  autograd::observe_next_backward(recorder);
  autograd::observe_next_backward(recorder);  // arming twice is arming once
  CHECK(autograd::is_observing(recorder.get()));
  const Tensor loss = sum(w * w * w);
  const auto first = autograd::grad({loss}, {w}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  CHECK(recorder->begins == 0);
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(recorder->begins == 1);
  CHECK(recorder->pass.retain_graph);
  CHECK_FALSE(recorder->pass.create_graph);
  CHECK_FALSE(autograd::is_observing(recorder.get()));
  require_final(*recorder);

  auto second = std::make_shared<Recorder>(std::vector<Tensor>{w});
  autograd::observe_next_backward(second);
  sum(first[0] * first[0]).backward(Tensor(), false, /*create_graph=*/true);
  CHECK(second->pass.create_graph);
  CHECK(second->reported[0] == 1);
  CHECK(second->completed);

  loss.backward();  // nothing armed: nobody hears it
  CHECK(recorder->begins == 1);
  CHECK(recorder->ends == 1);
  CHECK(second->begins == 1);
}

TEST_CASE("a seed that is itself a watched leaf is reported before any record, with the seed") {
  Tensor w = tensor({2.0, 5.0}, {2}, f64_grad());
  auto recorder = std::make_shared<Recorder>(std::vector<Tensor>{w});
  autograd::observe_next_backward(recorder);
  w.backward(tensor({1.0, 3.0}, {2}, TensorOptions{}.with_dtype(DType::Float64)));
  require_final(*recorder);
  CHECK(recorder->at_ready[0].to_vector() == std::vector<double>{1.0, 3.0});
}

TEST_CASE("a backward function that throws ends the observed pass as not completed") {
  Tensor w = tensor({1.0}, {1}, f64_grad());
  Tensor v = tensor({2.0}, {1}, f64_grad());
  const Tensor y = record_op("explodes", (w * 1.0).detach(), {w}, [](const Tensor&, NeedsGrad) -> std::vector<Tensor> {
    throw std::runtime_error("deliberate");
  });
  const Tensor loss = sum(y * v);
  auto recorder = std::make_shared<Recorder>(std::vector<Tensor>{w, v});
  autograd::observe_next_backward(recorder);
  CHECK_THROWS_WITH(loss.backward(), "deliberate");
  CHECK(recorder->ends == 1);
  CHECK_FALSE(recorder->completed);
  CHECK(recorder->reported[1] == 1);  // v was final before the throw
  CHECK(recorder->reported[0] == 0);
}

TEST_CASE("two observers both hear the pass; a destroyed or cancelled one is skipped") {
  Tensor w = tensor({1.0, 2.0}, {2}, f64_grad());
  auto first = std::make_shared<Recorder>(std::vector<Tensor>{w});
  auto second = std::make_shared<Recorder>(std::vector<Tensor>{w});
  auto cancelled = std::make_shared<Recorder>(std::vector<Tensor>{w});
  autograd::observe_next_backward(first);
  autograd::observe_next_backward(second);
  autograd::observe_next_backward(cancelled);
  autograd::cancel_observation(cancelled.get());
  {
    auto gone = std::make_shared<Recorder>(std::vector<Tensor>{w});
    autograd::observe_next_backward(gone);
  }
  sum(w * 4.0).backward();
  require_final(*first);
  require_final(*second);
  CHECK(cancelled->begins == 0);
}

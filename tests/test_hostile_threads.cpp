// Autograd across threads: the tape is per thread, so a backward that would need another thread's tape is
// refused with a tapegrad::Error before any gradient is touched, and the right thread can still run it.
#include <catch2/catch.hpp>

#include <exception>
#include <string>
#include <thread>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

// Runs `f` on a fresh thread and returns the message of the tapegrad::Error it threw ("" when none).
template <class F>
std::string error_on_other_thread(F f) {
  std::string message = "(no error)";
  std::thread worker([&] {
    try {
      f();
    } catch (const Error& e) {
      message = e.what();
    }
  });
  worker.join();
  return message;
}
}  // namespace

TEST_CASE("backward on another thread than the recording one is refused and changes nothing") {
  Tensor w = tensor({1.0, 2.0, 3.0}, {3}, f64_grad());
  Tensor y = sum(w * w);
  const std::string message = error_on_other_thread([&] { y.backward(); });
  CHECK_THAT(message, Catch::Contains("thread"));
  CHECK_FALSE(w.grad().defined());
  y.backward();  // the retry on the recording thread gives the plain gradient, not a doubled one
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 4.0, 6.0});
}

TEST_CASE("autograd::grad on another thread is refused too") {
  Tensor w = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor y = sum(w * w);
  CHECK_THAT(error_on_other_thread([&] { (void)autograd::grad({y}, {w}); }), Catch::Contains("thread"));
  CHECK(autograd::grad({y}, {w})[0].to_vector() == std::vector<double>{2.0, 4.0});
}

TEST_CASE("a graph that continues on a second thread from a tensor recorded on the first is refused") {
  Tensor w = tensor({1.0, 2.0, 3.0}, {3}, f64_grad());
  Tensor h = w * w;  // recorded on this thread
  const std::string message = error_on_other_thread([&] {
    Tensor z = sum(h * 3.0);  // recorded on the worker's tape, with an input from this thread's tape
    z.backward();
  });
  CHECK_THAT(message, Catch::Contains("thread"));
  CHECK_FALSE(w.grad().defined());
  sum(h).backward();  // h's own graph is intact: exactly 2w, no contribution left over from the worker
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 4.0, 6.0});
}

TEST_CASE("a refused multi-output backward deposits no seed for the outputs it checked first") {
  Tensor w = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor mine = sum(w * w);
  Tensor theirs;
  std::thread([&] { theirs = sum(w * 3.0); }).join();
  CHECK_THROWS_WITH(autograd::backward({mine, theirs}), Catch::Contains("thread"));
  mine.backward();
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 4.0});
}

TEST_CASE("leaves need no tape: a graph built and run on a worker thread from shared leaves works") {
  Tensor w = tensor({1.0, 2.0}, {2}, f64_grad());
  std::thread([&] { sum(w * w).backward(); }).join();
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 4.0});
}

TEST_CASE("a multi-output backward refused for a freed graph leaves no seed on the outputs before it") {
  Tensor w = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor first = sum(w * w), second = sum(w * 3.0);
  second.backward();  // frees second's graph
  CHECK_THROWS_WITH(autograd::backward({first, second}), Catch::Contains("second time"));
  first.backward();  // 3 from the earlier backward plus 2w, not plus 4w from a leftover seed
  CHECK(w.grad().to_vector() == std::vector<double>{5.0, 7.0});
}

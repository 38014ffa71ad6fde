// Strided views: layouts against PyTorch's (sizes, strides, storage offsets), writes through views into the
// base, the shared version counter, the in-place rules, ops on non-contiguous inputs, gradients, saving.
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor iota(const Shape& shape) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, DType::Float64).reshape(shape);
}
std::vector<double> values(std::initializer_list<double> v) { return v; }

template <class F>
TensorFunction squared(F f) {
  return [f](const std::vector<Tensor>& x) {
    Tensor y = f(x);
    return y * y;
  };
}

std::int64_t gen_dim(std::int64_t ndim) { return *rc::gen::inRange<std::int64_t>(-ndim, ndim); }

}  // namespace

// ---- layouts (each checked against torch 2.x by hand) ----

TEST_CASE("transpose, permute and t are views with swapped strides") {
  Tensor x = iota({2, 3});
  Tensor t = x.t();
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.strides() == Shape{1, 3});
  CHECK(t.storage_offset() == 0);
  CHECK_FALSE(t.is_contiguous());
  CHECK(x.is_contiguous());
  CHECK(t.to_vector() == values({0, 3, 1, 4, 2, 5}));
  CHECK(t.at({2, 1}) == 5.0);
  Tensor p = iota({2, 3, 4}).permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.stride(-1) == 4);
  CHECK(transpose(x, 0, 1).strides() == Shape{1, 3});
  CHECK(iota({4}).t().strides() == Shape{1});
  CHECK_THROWS_WITH(iota({2, 2, 2}).t(), Catch::Contains("at most 2 dims"));
}

TEST_CASE("narrow, slice and select move the offset and keep the strides") {
  Tensor x = iota({4, 6});
  Tensor n = x.narrow(1, 2, 3);
  CHECK(n.shape() == Shape{4, 3});
  CHECK(n.strides() == Shape{6, 1});
  CHECK(n.storage_offset() == 2);
  CHECK_FALSE(n.is_contiguous());
  Tensor rows = x.narrow(0, 1, 2);  // whole rows: still contiguous, at an offset
  CHECK(rows.is_contiguous());
  CHECK(rows.storage_offset() == 6);
  CHECK(rows.data<double>()[0] == 6.0);
  Tensor s = x.slice(1, 1, 6, 2);
  CHECK(s.shape() == Shape{4, 3});
  CHECK(s.strides() == Shape{6, 2});
  CHECK(s.storage_offset() == 1);
  CHECK(s.select(0, 1).to_vector() == values({7, 9, 11}));
  Tensor c = x.select(1, -1);
  CHECK(c.shape() == Shape{4});
  CHECK(c.strides() == Shape{6});
  CHECK(c.storage_offset() == 5);
  CHECK(c.to_vector() == values({5, 11, 17, 23}));
  CHECK(x.select(0, 2).select(0, 3).item() == 15.0);
  CHECK(x.slice(0, 4, 4).shape() == Shape{0, 6});
  CHECK_THROWS_WITH(x.select(1, 6), "select: index 6 is out of range for dim 1 of size 6 (tensor of shape [4, 6])");
}

TEST_CASE("expand repeats with stride 0; unsqueeze and squeeze follow PyTorch's strides") {
  Tensor col = iota({3, 1});
  Tensor e = col.expand({2, 3, 4});
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.at({1, 2, 3}) == 2.0);
  CHECK(col.expand({-1, 2}).to_vector() == values({0, 0, 1, 1, 2, 2}));
  CHECK_THROWS_WITH(col.expand({2, 4}), Catch::Contains("expand: the size of dim 0 (3) must match the new size (2)"));
  CHECK_THROWS_WITH(col.expand({3}), Catch::Contains("at least the number of dims"));
  Tensor t = iota({2, 3}).t();  // [3, 2] strides [1, 3]
  CHECK(t.unsqueeze(1).strides() == Shape{1, 6, 3});
  CHECK(t.unsqueeze(2).strides() == Shape{1, 3, 1});
  CHECK(t.unsqueeze(1).squeeze().strides() == Shape{1, 3});
  CHECK(t.unsqueeze(0).squeeze(0).strides() == Shape{1, 3});
}

TEST_CASE("view needs compatible strides; reshape copies only when it must") {
  Tensor x = iota({4, 6});
  Tensor n = x.narrow(1, 0, 3);  // [4, 3] strides [6, 1]
  Tensor split = n.view({2, 2, 3});
  CHECK(split.strides() == Shape{12, 6, 1});
  CHECK(split.to_vector() == n.to_vector());
  CHECK_THROWS_WITH(n.view({12}), Catch::StartsWith("view: shape [12] is not compatible with the input's shape "
                                                     "[4, 3] and strides [6, 1]"));
  Tensor flat = n.reshape({12});  // copies
  CHECK(flat.is_contiguous());
  CHECK(flat.to_vector() == n.to_vector());
  flat.fill_(-1.0);
  CHECK(x.at({0, 0}) == 0.0);
  Tensor shared = x.reshape({2, 12});  // contiguous: a view
  shared.select(0, 0).fill_(7.0);
  CHECK(x.at({1, 5}) == 7.0);
  CHECK(x.t().view({6, 4}).shape() == Shape{6, 4});  // same shape: always a view
  CHECK(x.t().view({6, 2, 2}).strides() == Shape{1, 12, 6});
  CHECK(iota({2, 3}).t().reshape({6}).to_vector() == values({0, 3, 1, 4, 2, 5}));
  CHECK(flatten(x.t()).to_vector() == x.t().contiguous().to_vector());
}

TEST_CASE("contiguous returns the same tensor when already contiguous, else a row-major copy") {
  Tensor x = iota({2, 3});
  CHECK(x.contiguous().is_same(x));
  Tensor c = x.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Shape{2, 1});
  CHECK(c.to_vector() == values({0, 3, 1, 4, 2, 5}));
  CHECK(c.data<double>()[1] == 3.0);
}

TEST_CASE("raw pointers of a non-contiguous view are refused with a clear error") {
  Tensor t = iota({2, 3}).t();
  CHECK_THROWS_WITH(t.data<double>(), Catch::StartsWith("data: the tensor of shape [3, 2] is a non-contiguous view "
                                                         "(strides [1, 3], storage offset 0)") &&
                                          Catch::Contains("contiguous()"));
  CHECK_THROWS_WITH(t.raw_data(), Catch::StartsWith("raw_data: the tensor of shape [3, 2] is a non-contiguous view"));
}

// ---- writing through views ----

TEST_CASE("in-place ops through a view write into the base and bump the shared version") {
  Tensor x = zeros({3, 4}, f64());
  x.narrow(0, 0, 2).fill_(1.0);
  CHECK(x.to_vector() == values({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
  CHECK(x.version() == 1);
  Tensor t = x.t();
  t.select(0, 1).add_(5.0);  // column 1
  CHECK(x.to_vector() == values({1, 6, 1, 1, 1, 6, 1, 1, 0, 5, 0, 0}));
  CHECK(x.version() == 2);
  CHECK(t.version() == 2);
  x.slice(1, 0, 4, 2).mul_(2.0);  // columns 0 and 2
  CHECK(x.to_vector() == values({2, 6, 2, 1, 2, 6, 2, 1, 0, 5, 0, 0}));
  x.t().narrow(0, 3, 1).copy_(tensor({7, 8, 9}, {1, 3}, f64()));  // column 3, broadcast source
  CHECK(x.to_vector() == values({2, 6, 2, 7, 2, 6, 2, 8, 0, 5, 0, 9}));
  x.t().add_(tensor({1, 2, 3}, {3}, f64()), 10.0);  // row r += 10 * (r + 1), through the transpose
  CHECK(x.to_vector() == values({12, 16, 12, 17, 22, 26, 22, 28, 30, 35, 30, 39}));
  x.narrow(1, 1, 2).mul_(zeros({1}, f64()));
  CHECK(x.to_vector() == values({12, 0, 0, 17, 22, 0, 0, 28, 30, 0, 0, 39}));
  x.select(1, 0).zero_();
  CHECK(x.to_vector() == values({0, 0, 0, 17, 0, 0, 0, 28, 0, 0, 0, 39}));
  CHECK(x.version() == 7);
}

TEST_CASE("an expanded view can be filled but not updated element by element") {
  Tensor x = zeros({3}, f64());
  Tensor e = x.unsqueeze(0).expand({2, 3});
  e.fill_(4.0);
  CHECK(x.to_vector() == values({4, 4, 4}));
  CHECK_THROWS_WITH(e.add_(1.0), Catch::Contains("more than one element of the written-to tensor"));
}

TEST_CASE("a saved tensor modified through another view is caught at backward") {
  Tensor a = iota({2, 2});
  Tensor w = ones({2, 2}, f64().with_requires_grad());
  Tensor y = sum(w * a.t());  // mul saves a.t(), a view of a
  a.narrow(0, 0, 1).zero_();  // another view of the same storage
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified in place"));
  // And untouched, the gradient is the saved view's values.
  Tensor b = iota({2, 2});
  Tensor z = sum(w * b.t());
  z.backward();
  CHECK(w.grad().to_vector() == values({0, 2, 1, 3}));
}

TEST_CASE("a view of a tensor that requires grad follows the in-place rule") {
  Tensor w = ones({2, 3}, f64().with_requires_grad());
  CHECK_THROWS_WITH(w.t().zero_(), Catch::Contains("requires grad"));
  Tensor v;
  {
    NoGradGuard no_grad;
    v = w.narrow(1, 0, 2);
    CHECK_FALSE(v.requires_grad());
    v.add_(1.0);  // allowed under NoGradGuard, and it writes into w
  }
  CHECK(w.to_vector() == values({2, 2, 1, 2, 2, 1}));
  CHECK_THROWS_WITH(v.fill_(0.0), Catch::Contains("fill_: tensor of shape [2, 2] is a view of a tensor of shape [2, 3] "
                                                  "that requires grad"));
  w.detach().t().fill_(3.0);  // through a detached handle it is allowed, as in PyTorch
  CHECK(w.to_vector() == values({3, 3, 3, 3, 3, 3}));
}

// ---- ops read views as their values ----

TEST_CASE("ops on non-contiguous views give what they give on contiguous copies") {
  rc::prop("a permuted, sliced view through many ops", [] {
    const Shape s = *gen::shape(2, 3, 1, 4);
    const Tensor x = *gen::tensor_of_shape(s, -2.0, 2.0);
    std::vector<std::int64_t> dims(s.size());
    std::iota(dims.begin(), dims.end(), 0);
    std::reverse(dims.begin(), dims.end());
    const std::int64_t last = x.dim() - 1;
    const std::int64_t start = *rc::gen::inRange<std::int64_t>(0, x.size(last));
    Tensor v = x.permute(dims).slice(0, start, x.size(last), 2);
    Tensor c = v.contiguous();
    auto same = [](const Tensor& a, const Tensor& b) { RC_ASSERT(allclose(a, b, 1e-12, 1e-12)); };
    same(exp(v), exp(c));
    same(v * v + v, c * c + c);
    same(relu(v), relu(c));
    same(sum(v, {0}), sum(c, {0}));
    same(softmax(v, -1), softmax(c, -1));
    same(matmul(flatten(v, 1).t(), flatten(v, 1)), matmul(flatten(c, 1).t(), flatten(c, 1)));
    same(cat({v, c}, 0), cat({c, c}, 0));
    same(v.clone(), c);
    same(v.to(DType::Float32).to(DType::Float64), c.to(DType::Float32).to(DType::Float64));
    same(amax(v, {-1}), amax(c, {-1}));
    const Tensor first = zeros({1}, TensorOptions{}.with_dtype(DType::Int64));
    same(index_select(v, 0, first), index_select(c, 0, first));
    RC_ASSERT(identical(v, c));
  });
}

TEST_CASE("layers take non-contiguous inputs") {
  Generator g(5);
  nn::Linear linear(nn::LinearOptions{3, 2}.with_dtype(DType::Float64).with_generator(g));
  Tensor x = randn({3, 4}, g, f64());
  CHECK(allclose(linear.forward(x.t()), linear.forward(x.t().contiguous())));
  nn::Conv2d conv(nn::Conv2dOptions{2, 3, 3}.with_dtype(DType::Float64).with_generator(g));
  Tensor images = randn({1, 5, 5, 2}, g, f64()).permute({0, 3, 1, 2});  // channels-last storage
  CHECK(allclose(conv.forward(images), conv.forward(images.contiguous())));
}

// ---- gradients ----

TEST_CASE("gradients of transpose, permute and t are right, also through contiguous()") {
  rc::prop("random dims", [] {
    const Tensor x = *gen::tensor(3);
    const auto n = std::max<std::int64_t>(x.dim(), 1);
    const std::int64_t d0 = gen_dim(n), d1 = gen_dim(n);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].transpose(d0, d1).contiguous(); }),
                          std::vector<Tensor>{x});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].transpose(d0, d1) * 2.0; }),
                          std::vector<Tensor>{x});
    const Tensor m = *gen::tensor_of_shape(*gen::shape(2, 2, 1, 4));
    TAPEGRAD_RC_GRADCHECK(squared([](const std::vector<Tensor>& v) { return matmul(v[0].t(), v[0]); }),
                          std::vector<Tensor>{m});
  });
}

TEST_CASE("gradients of narrow, slice and select are right") {
  rc::prop("random ranges", [] {
    const Tensor x = *gen::tensor(3, 5);
    if (x.dim() == 0) return;
    const std::int64_t d = gen_dim(x.dim());
    const std::int64_t size = x.size(d);
    const std::int64_t start = *rc::gen::inRange<std::int64_t>(0, size);
    const std::int64_t length = *rc::gen::inRange<std::int64_t>(0, size - start + 1);
    const std::int64_t step = *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t index = *rc::gen::inRange<std::int64_t>(-size, size);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].narrow(d, start, length); }),
                          std::vector<Tensor>{x});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].slice(d, start, size, step); }),
                          std::vector<Tensor>{x});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].select(d, index); }),
                          std::vector<Tensor>{x});
    // A view of a view: select of a transposed slice.
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) {
                            return v[0].slice(d, start, size, step).transpose(0, -1).select(0, 0) * 3.0;
                          }),
                          std::vector<Tensor>{x});
  });
}

TEST_CASE("gradients of expand, unsqueeze, squeeze, view and reshape of views are right") {
  rc::prop("random shapes", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3, 1, 3));
    Shape target = x.shape();
    for (auto& e : target)
      if (e == 1) e = *rc::gen::inRange<std::int64_t>(1, 4);
    target.insert(target.begin(), *rc::gen::inRange<std::int64_t>(1, 3));
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].expand(target); }),
                          std::vector<Tensor>{x});
    const Tensor matrix = x.dim() <= 2 ? x : flatten(x, 1);
    const std::int64_t u = *rc::gen::inRange<std::int64_t>(-matrix.dim() - 1, matrix.dim() + 1);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].t().unsqueeze(u).squeeze(); }),
                          std::vector<Tensor>{matrix});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) {
                            return v[0].transpose(0, -1).reshape({-1}) + v[0].reshape({-1});
                          }),
                          std::vector<Tensor>{x});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) {
                            Tensor n = v[0].unsqueeze(0).expand({2, -1, -1, -1}).narrow(1, 0, 1);
                            return n.view({2, -1});
                          }),
                          std::vector<Tensor>{x.dim() == 3 ? x : x.reshape({1, 1, -1})});
  });
}

// ---- saving ----

TEST_CASE("save and load of a transposed view keep its values") {
  const auto path = (std::filesystem::temp_directory_path() / fmt::format("tapegrad-views-{}", ::getpid())).string();
  Tensor x = iota({2, 3});
  Checkpoint checkpoint;
  checkpoint.model.push_back({"w", EntryKind::Other, x.t()});
  checkpoint.model.push_back({"col", EntryKind::Other, x.select(1, 1)});
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    save_checkpoint(checkpoint, path, kind);
    const Checkpoint loaded = load_checkpoint(path);
    CHECK(loaded.model[0].value.shape() == Shape{3, 2});
    CHECK(loaded.model[0].value.to_vector() == values({0, 3, 1, 4, 2, 5}));
    CHECK(loaded.model[1].value.to_vector() == values({1, 4}));
    std::stringstream stream;
    save_checkpoint(checkpoint, stream, kind);
    CHECK(load_checkpoint(stream).model[0].value.to_vector() == values({0, 3, 1, 4, 2, 5}));
  }
  std::filesystem::remove(path);
}

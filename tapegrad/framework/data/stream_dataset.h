#pragma once
/// Datasets read one example at a time (`get(i)`, `size()`), composed with `.map(transform)`, libtorch-shaped.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// One example (or, after collation, one batch): the input and its target, as libtorch's `Example<>`.
struct Example {
  Tensor data;
  Tensor target;
};

/// The interface every streaming dataset implements and the loader holds.
/// Note: `get` is const because the loader's worker threads call it concurrently on one shared dataset: an
/// implementation must be safe to call from several threads (read files, do not keep a cursor).
class DatasetBase {
 public:
  virtual ~DatasetBase() = default;
  /// The example at `index` (0 <= index < size()).
  virtual Example get(std::int64_t index) const = 0;
  /// Number of examples.
  virtual std::int64_t size() const = 0;
  /// The example at `index`, with random transforms drawing from `generator`. The loader calls this with a
  /// generator seeded by (seed, epoch, position), so a run is reproducible at any number of workers.
  /// A dataset without random transforms need not override it.
  virtual Example get_seeded(std::int64_t index, Generator& generator) const;
  /// The examples at `indices`, in order (libtorch's `get_batch`): each from get(i).
  std::vector<Example> get_batch(const std::vector<std::int64_t>& indices) const;
};

/// A transform of one example. Random transforms draw only from `generator`.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual Example operator()(Example example, Generator& generator) const = 0;
};

/// A transform of the input tensor alone (the target passes through), as libtorch's `TensorTransform`.
class TensorTransform : public Transform {
 public:
  virtual Tensor apply(Tensor data, Generator& generator) const = 0;
  Example operator()(Example example, Generator& generator) const final {
    example.data = apply(std::move(example.data), generator);
    return example;
  }
};

namespace transforms {

/// Collation (libtorch's `Stack<>`): examples whose data (and targets) share one shape become one Example whose
/// data is [B, ...data shape] and target [B, ...target shape]. The streaming loader always collates so; mapping a
/// dataset with `Stack()` is accepted (and changes nothing) so that a ported `.map(Stack<>())` compiles.
struct Stack {
  Example operator()(const std::vector<Example>& examples) const;
};

/// A transform from a function of the input tensor (libtorch's `TensorLambda`).
class TensorLambda : public TensorTransform {
 public:
  explicit TensorLambda(std::function<Tensor(Tensor)> function) : function_(std::move(function)) {}
  Tensor apply(Tensor data, Generator&) const override { return function_(std::move(data)); }

 private:
  std::function<Tensor(Tensor)> function_;
};

/// A transform from a function of the whole example (libtorch's `Lambda`).
class Lambda : public Transform {
 public:
  explicit Lambda(std::function<Example(Example)> function) : function_(std::move(function)) {}
  Example operator()(Example example, Generator&) const override { return function_(std::move(example)); }

 private:
  std::function<Example(Example)> function_;
};

}  // namespace transforms

class MapDataset;

/// The base a user's dataset derives from, as libtorch's `Dataset<Self>`: `class MyData : public
/// data::Dataset<MyData> { Example get(std::int64_t i) const override; std::int64_t size() const override; }`.
/// Note: Self is only needed by map(), which copies (or moves) the concrete dataset into the mapped one, so
/// `MyData(...).map(t1).map(t2)` reads as in libtorch; the loader itself sees only DatasetBase.
template <class Self>
class Dataset : public DatasetBase {
 public:
  /// This dataset with `transform` applied to each example (a Transform subclass, held by value).
  template <class T>
  MapDataset map(T transform) const&;
  template <class T>
  MapDataset map(T transform) &&;
};

/// A dataset followed by a transform: get(i) is transform(inner.get(i)).
class MapDataset : public Dataset<MapDataset> {
 public:
  /// `transform` may be null (then get(i) is inner's get(i): what map(transforms::Stack()) gives).
  MapDataset(std::shared_ptr<const DatasetBase> inner, std::shared_ptr<const Transform> transform);
  /// Applies random transforms with a generator seeded by `index` alone: the same example every call.
  Example get(std::int64_t index) const override;
  std::int64_t size() const override { return inner_->size(); }
  Example get_seeded(std::int64_t index, Generator& generator) const override;

 private:
  std::shared_ptr<const DatasetBase> inner_;
  std::shared_ptr<const Transform> transform_;
};

namespace detail {
template <class T>
std::shared_ptr<const Transform> make_transform(T&& transform) {
  using Plain = std::decay_t<T>;
  if constexpr (std::is_same_v<Plain, transforms::Stack>) {
    return nullptr;
  } else {
    static_assert(std::is_base_of_v<Transform, Plain>, "map() takes a tapegrad::data::Transform (or transforms::Stack)");
    return std::make_shared<Plain>(std::forward<T>(transform));
  }
}
}  // namespace detail

template <class Self>
template <class T>
MapDataset Dataset<Self>::map(T transform) const& {
  return MapDataset(std::make_shared<Self>(static_cast<const Self&>(*this)), detail::make_transform(std::move(transform)));
}

template <class Self>
template <class T>
MapDataset Dataset<Self>::map(T transform) && {
  return MapDataset(std::make_shared<Self>(std::move(static_cast<Self&>(*this))), detail::make_transform(std::move(transform)));
}

}  // namespace tapegrad::data

TAPEGRAD_API_END

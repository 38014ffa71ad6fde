#include <tapegrad/framework/data/stream_dataset.h>

#include <cstring>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/data/sampler.h>
#include <tapegrad/framework/error.h>

namespace tapegrad::data {

Example DatasetBase::get_seeded(std::int64_t index, Generator&) const { return get(index); }

std::vector<Example> DatasetBase::get_batch(const std::vector<std::int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (std::int64_t index : indices) examples.push_back(get(index));
  return examples;
}

MapDataset::MapDataset(std::shared_ptr<const DatasetBase> inner, std::shared_ptr<const Transform> transform)
    : inner_(std::move(inner)), transform_(std::move(transform)) {
  if (!inner_) fail("MapDataset: expected a dataset, got null");
}

Example MapDataset::get(std::int64_t index) const {
  // Note: seeded by the index alone (stream 3 keeps it apart from the loader's streams), so calling get(i)
  // twice gives the same augmented example; the loader's get_seeded draws fresh values every epoch.
  Generator generator(epoch_seed(static_cast<std::uint64_t>(index), 0, /*stream=*/3));
  return get_seeded(index, generator);
}

Example MapDataset::get_seeded(std::int64_t index, Generator& generator) const {
  Example example = inner_->get_seeded(index, generator);
  return transform_ ? (*transform_)(std::move(example), generator) : example;
}

namespace transforms {
namespace {

// One [B, ...shape] tensor from the B tensors of one field (data or target), checked to agree.
Tensor stack_field(const std::vector<Example>& examples, Tensor Example::*field, const char* name) {
  const Tensor& first = examples.front().*field;
  if (!first.defined()) fail("Stack: example 0 has no {}", name);
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<std::int64_t>(examples.size()));
  Tensor out = empty(shape, first.dtype());
  const std::size_t bytes = static_cast<std::size_t>(first.numel()) * element_size(first.dtype());
  auto* destination = static_cast<unsigned char*>(out.raw_data());
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const Tensor& value = examples[i].*field;
    if (!value.defined() || value.shape() != first.shape() || value.dtype() != first.dtype())
      fail("Stack: example {} has {} {} {}, example 0 has {} {}", i, name,
           value.defined() ? dtype_name(value.dtype()) : "undefined",
           value.defined() ? shape_string(value.shape()) : "", dtype_name(first.dtype()), shape_string(first.shape()));
    const Tensor source = value.is_contiguous() ? value : value.contiguous();
    if (bytes > 0) std::memcpy(destination + i * bytes, source.raw_data(), bytes);
  }
  return out;
}

}  // namespace

Example Stack::operator()(const std::vector<Example>& examples) const {
  if (examples.empty()) fail("Stack: expected at least one example, got none");
  NoGradGuard no_grad;
  return {stack_field(examples, &Example::data, "data"), stack_field(examples, &Example::target, "target")};
}

}  // namespace transforms
}  // namespace tapegrad::data

#pragma once
// Datasets whose example i has label i and every pixel equal to i, so a batch shows where its rows came from.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include <tapegrad/tapegrad.h>

namespace tapegrad::testing {

/// A dataset whose example i has label i and every pixel equal to i, so a batch shows where it came from.
inline data::TensorDataset numbered_dataset(std::int64_t n, std::int64_t side = 3) {
  Tensor images = empty({n, 1, side, side});
  for (std::int64_t i = 0; i < n; ++i)
    std::fill_n(images.data<float>() + i * side * side, side * side, static_cast<float>(i));
  return data::TensorDataset(images, arange(n));
}

inline std::vector<std::int64_t> labels_of(const data::Batch& batch) {
  std::vector<std::int64_t> out(batch.labels.data<std::int64_t>(),
                                batch.labels.data<std::int64_t>() + batch.labels.numel());
  return out;
}

/// Every label of one epoch, in batch order; also checks that each image row matches its label.
inline std::vector<std::int64_t> epoch_labels(data::DataLoader& loader) {
  std::vector<std::int64_t> all;
  for (auto& batch : loader) {
    const std::int64_t row = batch.images.numel() / batch.images.size(0);
    for (std::int64_t i = 0; i < batch.labels.numel(); ++i)
      REQUIRE(batch.images.data<float>()[i * row] == static_cast<float>(batch.labels.data<std::int64_t>()[i]));
    const auto labels = labels_of(batch);
    all.insert(all.end(), labels.begin(), labels.end());
  }
  return all;
}


}  // namespace tapegrad::testing

#pragma once
/// CsvDataset: a table of numbers in a CSV file, one example per row, read from disk row by row.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tapegrad/framework/data/stream_dataset.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// How a CsvDataset reads.
struct CsvOptions {
  /// The header name of the target column (required).
  std::string target;
  /// The feature columns, by header name, in this order; empty means every column but the target, in file order.
  std::vector<std::string> features;
  /// true: the target is a class index, int64 (each value must be a whole number); false: float32 (regression).
  bool classification = true;
  char delimiter = ',';
  /// A longer line is refused (a file without newlines would otherwise be read whole for one row).
  std::int64_t max_line_bytes = std::int64_t{1} << 20;
};

/// Note: the first line is the header. The constructor reads the whole file once, checking every row (field
/// count; each used field a finite number, surrounding spaces allowed, no quotes) and remembering where each
/// row starts, so errors surface at once, naming file, line and column, and memory holds 8 bytes per row; get(i)
/// then reads row i again from disk (thread-safe: each call opens its own stream). Empty lines are skipped, a
/// CR before LF is ignored. data is float32 [features], target an int64 or float32 scalar.
class CsvDataset : public Dataset<CsvDataset> {
 public:
  CsvDataset(std::string path, CsvOptions options);
  Example get(std::int64_t index) const override;
  std::int64_t size() const override { return static_cast<std::int64_t>(row_offsets_.size()); }
  /// Feature names, in the order of data's values.
  const std::vector<std::string>& feature_names() const { return feature_names_; }

 private:
  Example parse_row(std::string_view line, std::int64_t number) const;

  std::string path_;
  CsvOptions options_;
  std::int64_t columns_ = 0;
  std::vector<std::string> column_names_;
  std::vector<std::string> feature_names_;
  std::vector<std::int64_t> feature_columns_;
  std::int64_t target_column_ = -1;
  std::vector<std::int64_t> row_offsets_;  // byte offset of each data row
  std::vector<std::int64_t> row_lines_;    // its 1-based line number, for messages
};

}  // namespace tapegrad::data

TAPEGRAD_API_END

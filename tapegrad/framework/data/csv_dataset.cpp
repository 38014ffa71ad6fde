#include <tapegrad/framework/data/csv_dataset.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> split(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  for (;;) {
    const std::size_t at = line.find(delimiter);
    fields.push_back(trim(line.substr(0, at)));
    if (at == std::string_view::npos) return fields;
    line.remove_prefix(at + 1);
  }
}

// Reads one line (without its '\n'); false at end of file. A line over `limit` bytes is an error.
bool read_line(std::istream& in, std::string& line, std::int64_t limit, const std::string& path, std::int64_t number) {
  line.clear();
  char c;
  bool any = false;
  while (in.get(c)) {
    any = true;
    if (c == '\n') return true;
    line.push_back(c);
    if (static_cast<std::int64_t>(line.size()) > limit)
      fail("CsvDataset: {}: line {} is longer than {} bytes (CsvOptions::max_line_bytes)", path, number, limit);
  }
  return any;
}

bool blank(std::string_view line) { return trim(line).empty(); }

}  // namespace

CsvDataset::CsvDataset(std::string path, CsvOptions options) : path_(std::move(path)), options_(std::move(options)) {
  if (options_.target.empty()) fail("CsvDataset: {}: CsvOptions::target must name the target column", path_);
  std::error_code error;
  if (!std::filesystem::is_regular_file(path_, error)) fail("CsvDataset: {}: not a regular file (or missing)", path_);
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail("CsvDataset: cannot open {}", path_);
  std::string line;
  std::int64_t number = 1;
  if (!read_line(in, line, options_.max_line_bytes, path_, number)) fail("CsvDataset: {}: empty file (no header)", path_);
  // Note: a UTF-8 byte order mark (Excel's "CSV UTF-8", Windows tools) is not part of the first column's name;
  // kept, it made the first column unfindable by its name ("has no column 'label'" for a file starting "label,").
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
  const std::vector<std::string_view> header = split(line, options_.delimiter);
  columns_ = static_cast<std::int64_t>(header.size());
  auto column_of = [&](const std::string& name) -> std::int64_t {
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c] == name) return static_cast<std::int64_t>(c);
    std::string names;
    for (const auto& column : header) names += (names.empty() ? "'" : ", '") + std::string(column) + "'";
    fail("CsvDataset: {}: line 1 (header) has no column '{}' (its columns: {})", path_, name, names);
  };
  target_column_ = column_of(options_.target);
  if (options_.features.empty()) {
    for (std::int64_t c = 0; c < columns_; ++c)
      if (c != target_column_) {
        feature_columns_.push_back(c);
        feature_names_.emplace_back(header[static_cast<std::size_t>(c)]);
      }
  } else {
    for (const std::string& name : options_.features) {
      feature_columns_.push_back(column_of(name));
      feature_names_.push_back(name);
    }
  }
  for (const auto& name : header) column_names_.emplace_back(name);
  std::int64_t offset = static_cast<std::int64_t>(in.tellg());
  while (read_line(in, line, options_.max_line_bytes, path_, ++number)) {
    if (!blank(line)) {
      // Parsed (and so checked) now: a bad value is reported here, before any training starts.
      parse_row(line, number);
      row_offsets_.push_back(offset);
      row_lines_.push_back(number);
    }
    if (in.eof()) break;
    offset = static_cast<std::int64_t>(in.tellg());
  }
}

Example CsvDataset::get(std::int64_t index) const {
  if (index < 0 || index >= size()) fail("CsvDataset: {}: index {} out of range for {} rows", path_, index, size());
  const std::size_t i = static_cast<std::size_t>(index);
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail("CsvDataset: cannot open {}", path_);
  in.seekg(row_offsets_[i]);
  std::string line;
  const std::int64_t number = row_lines_[i];
  if (!read_line(in, line, options_.max_line_bytes, path_, number))
    fail("CsvDataset: {}: line {} is gone (the file changed after it was opened)", path_, number);
  return parse_row(line, number);
}

Example CsvDataset::parse_row(std::string_view line, std::int64_t number) const {
  const std::vector<std::string_view> fields = split(line, options_.delimiter);
  if (static_cast<std::int64_t>(fields.size()) != columns_)
    fail("CsvDataset: {}: line {} has {} fields, the header has {}", path_, number, fields.size(), columns_);
  auto parse = [&](std::int64_t column) {
    const std::string_view text = fields[static_cast<std::size_t>(column)];
    double value = 0.0;
    const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || status != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
      fail("CsvDataset: {}: line {}, column {} ('{}'): expected a finite number, got '{}'", path_, number, column + 1,
           column_names_[static_cast<std::size_t>(column)], text);
    return value;
  };
  Tensor data = empty({static_cast<std::int64_t>(feature_columns_.size())});
  float* values = data.data<float>();
  for (std::size_t f = 0; f < feature_columns_.size(); ++f) values[f] = static_cast<float>(parse(feature_columns_[f]));
  const double target_value = parse(target_column_);
  Tensor target;
  if (options_.classification) {
    if (target_value != std::floor(target_value) || target_value < 0 || target_value > 9.0e15)
      fail("CsvDataset: {}: line {}, column {} ('{}'): a class index must be a non-negative whole number, got '{}'",
           path_, number, target_column_ + 1, options_.target, fields[static_cast<std::size_t>(target_column_)]);
    target = empty({}, DType::Int64);
    target.data<std::int64_t>()[0] = static_cast<std::int64_t>(target_value);
  } else {
    target = empty({}, DType::Float32);
    target.data<float>()[0] = static_cast<float>(target_value);
  }
  return {std::move(data), std::move(target)};
}

}  // namespace tapegrad::data

// CsvDataset: numeric columns by header name, a class or regression target, rows read back from disk by index,
// and every malformed input refused at construction with its file, line and column.
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/error_of.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::data;
using Catch::Matchers::Contains;
using tapegrad::testing::error_of;
namespace fs = std::filesystem;

namespace {

// A CSV file under the temp dir, removed at scope exit.
struct CsvFile {
  fs::path path;
  explicit CsvFile(const std::string& text) {
    static int counter = 0;
    path = fs::temp_directory_path() / fmt::format("tapegrad_test_csv_{}_{}.csv", ::getpid(), counter++);
    std::ofstream(path, std::ios::binary) << text;
  }
  ~CsvFile() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
};

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

CsvOptions target(std::string name) {
  CsvOptions options;
  options.target = std::move(name);
  return options;
}

}  // namespace

TEST_CASE("rows become float32 features and an int64 class, read back from disk by index") {
  CsvFile file("x1,label,x2\n1.5,0,-2\n\n 3e2 , 2 ,0.25\r\n-0,1,7");  // a blank line, CRLF, no final newline
  const CsvDataset csv(file.path.string(), target("label"));
  REQUIRE(csv.size() == 3);
  CHECK(csv.feature_names() == std::vector<std::string>{"x1", "x2"});
  CHECK(values_of(csv.get(0).data) == std::vector<float>{1.5f, -2.0f});
  CHECK(values_of(csv.get(1).data) == std::vector<float>{300.0f, 0.25f});
  CHECK(values_of(csv.get(2).data) == std::vector<float>{-0.0f, 7.0f});
  CHECK(csv.get(1).target.dtype() == DType::Int64);
  CHECK(csv.get(1).target.data<std::int64_t>()[0] == 2);
  CHECK_THAT(error_of([&] { csv.get(3); }), Contains("index 3 out of range for 3 rows"));
}

TEST_CASE("chosen feature columns in their order, a float32 target for regression, another delimiter") {
  CsvFile file("a;b;c;y\n1;2;3;0.5\n4;5;6;-1.25\n");
  CsvOptions options = target("y");
  options.features = {"c", "a"};
  options.classification = false;
  options.delimiter = ';';
  const CsvDataset csv(file.path.string(), options);
  CHECK(values_of(csv.get(1).data) == std::vector<float>{6.0f, 4.0f});
  CHECK(csv.get(1).target.dtype() == DType::Float32);
  CHECK(csv.get(1).target.data<float>()[0] == -1.25f);
}

TEST_CASE("the streaming loader batches a CSV with workers, in order") {
  std::string text = "f,t\n";
  for (int i = 0; i < 50; ++i) text += fmt::format("{},{}\n", i * 0.5, i % 3);
  CsvFile file(text);
  auto loader = make_data_loader(CsvDataset(file.path.string(), target("t")),
                                 StreamingLoaderOptions{}.with_batch_size(8).with_workers(2));
  std::int64_t seen = 0;
  for (Example& batch : *loader) {
    for (std::int64_t j = 0; j < batch.data.size(0); ++j, ++seen) {
      CHECK(batch.data.data<float>()[j] == static_cast<float>(seen * 0.5));
      CHECK(batch.target.data<std::int64_t>()[j] == seen % 3);
    }
    CHECK(batch.data.shape() == Shape{batch.target.size(0), 1});
  }
  CHECK(seen == 50);
}

TEST_CASE("malformed CSV files are refused at construction, naming the file, the line and the column") {
  auto error = [](const std::string& text, CsvOptions options) {
    CsvFile file(text);
    return error_of([&] { CsvDataset(file.path.string(), options); });
  };
  CHECK_THAT(error("a,b\n1,2\n3,x4\n", target("b")), Contains(".csv: line 3, column 2 ('b'): expected a finite number, got 'x4'"));
  CHECK_THAT(error("a,b\n1,2\n3,4,5\n", target("b")), Contains("line 3 has 3 fields, the header has 2"));
  CHECK_THAT(error("a,b\n1\n", target("b")), Contains("line 2 has 1 fields"));
  CHECK_THAT(error("a,b\n1,2\n", target("label")), Contains("line 1 (header) has no column 'label'"));
  CsvOptions missing_feature = target("b");
  missing_feature.features = {"z"};
  CHECK_THAT(error("a,b\n1,2\n", missing_feature), Contains("no column 'z'"));
  CHECK_THAT(error("a,b\n1,2.5\n", target("b")), Contains("line 2, column 2 ('b'): a class index must be a non-negative whole number, got '2.5'"));
  CHECK_THAT(error("a,b\n1,-1\n", target("b")), Contains("non-negative whole number"));
  CHECK_THAT(error("a,b\n1,\n", target("b")), Contains("line 2, column 2 ('b'): expected a finite number, got ''"));
  CHECK_THAT(error("a,b\nnan,1\n", target("b")), Contains("line 2, column 1 ('a')"));
  CHECK_THAT(error("a,b\n\"1\",1\n", target("b")), Contains("got '\"1\"'"));
  CHECK_THAT(error("", target("b")), Contains("empty file (no header)"));
  CHECK_THAT(error("a,b\n1,2\n", CsvOptions{}), Contains("CsvOptions::target must name the target column"));
  CsvOptions short_lines = target("b");
  short_lines.max_line_bytes = 16;
  CHECK_THAT(error("a,b\n1,2\n" + std::string(40, '1') + ",2\n", short_lines), Contains("line 3 is longer than 16 bytes"));
  CHECK_THAT(error_of([] { CsvDataset("/nonexistent/t.csv", target("b")); }), Contains("/nonexistent/t.csv: not a regular file"));
}

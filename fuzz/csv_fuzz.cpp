// libFuzzer target for CsvDataset: whatever bytes the file holds, the constructor either accepts it or throws
// tapegrad::Error, and every row it accepted reads back by get(i) as a float32 [features] and an int64 target
// (classification) or a float32 scalar (regression). Anything else (a crash, a sanitizer report, another
// exception, a hang, a row that fails on the second read) is a bug.
// Note: CsvDataset reads a path, so each input goes to a per-process file first (tmpfs when /dev/shm exists).
// The line limit is lowered so that a long line is refused after 4 KiB, as the default refuses after 1 MiB.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

const std::string& input_path() {
  static const std::string path = [] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    return (dir / ("tapegrad-csv-fuzz-" + std::to_string(::getpid()) + ".csv")).string();
  }();
  return path;
}

void read_all(const std::string& path, bool classification) {
  data::CsvOptions options;
  options.target = "label";
  options.classification = classification;
  options.max_line_bytes = 4096;
  std::optional<data::CsvDataset> dataset;
  try {
    dataset.emplace(path, options);
  } catch (const Error&) {
    return;  // refused at construction: fine
  }
  // A row the constructor accepted must read back: get() throwing here escapes to libFuzzer, which reports it.
  const auto features = static_cast<std::int64_t>(dataset->feature_names().size());
  for (std::int64_t i = 0; i < dataset->size() && i < 64; ++i) {
    const auto example = dataset->get(i);
    if (example.data.dim() != 1 || example.data.size(0) != features || example.data.dtype() != DType::Float32 ||
        example.target.dim() != 0 || example.target.dtype() != (classification ? DType::Int64 : DType::Float32))
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  {
    std::ofstream out(input_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  }
  read_all(input_path(), true);
  read_all(input_path(), false);
  return 0;
}

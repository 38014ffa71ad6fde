// Checkpoint I/O throughput: save() and load() of a ~100 MB model (four Linear(2560, 2560), float32) in the
// binary archive, next to the disk's own bandwidth measured in the same run on the same file system: a raw
// fwrite + fflush + fsync of as many bytes, and a raw fread of them. save() fsyncs too (it is an atomic
// write), so the two write numbers are comparable.
// Reads are timed twice: "cold" after posix_fadvise(DONTNEED) has evicted the file's pages from the page
// cache (the disk), "warm" straight after (memory; what a reload right after a save sees).
// Usage: checkpoint_io [--smoke] [--dir DIR] [--repeat N]   (DIR: where the files go, default ".")
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Drops the file's pages from the page cache, so the next read comes from the disk.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("checkpoint_io: cannot open {}", path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void raw_write(const std::string& path, const std::vector<char>& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) fail("checkpoint_io: cannot open {}", path);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() && std::fflush(file) == 0 &&
                  ::fsync(::fileno(file)) == 0;
  if (std::fclose(file) != 0 || !ok) fail("checkpoint_io: writing {} failed", path);
}

void raw_read(const std::string& path, std::vector<char>& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) fail("checkpoint_io: cannot open {}", path);
  const bool ok = std::fread(bytes.data(), 1, bytes.size(), file) == bytes.size();
  std::fclose(file);
  if (!ok) fail("checkpoint_io: reading {} failed", path);
}

struct Timing {
  std::vector<double> seconds;
  void report(const char* what, double megabytes) const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("%-34s median %8.4f s  %8.0f MB/s   (best %.0f MB/s, %zu runs)\n", what, median, megabytes / median,
                megabytes / sorted.front(), sorted.size());
  }
};

template <class Fn>
void time_into(Timing& timing, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  timing.seconds.push_back(seconds_since(start));
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::string dir = ".";
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke")
      smoke = true;
    else if (arg == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (arg == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: checkpoint_io [--smoke] [--dir DIR] [--repeat N]\n");
      return 2;
    }
  }
  if (smoke) repeat = 1;
  try {
    const std::int64_t width = smoke ? 64 : 2560, layers = 4;
    Generator init(1);
    auto make_model = [&] {
      auto model = std::make_shared<nn::Sequential>();
      for (std::int64_t i = 0; i < layers; ++i)
        model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{width, width}.with_generator(init)));
      return model;
    };
    auto model = make_model(), fresh = make_model();
    const std::string model_path = (std::filesystem::path(dir) / "checkpoint_io.model.tg").string();
    const std::string raw_path = (std::filesystem::path(dir) / "checkpoint_io.raw").string();

    Timing save_timing, load_cold, load_warm, write_timing, read_cold, read_warm;
    for (int run = 0; run < repeat; ++run) {
      time_into(save_timing, [&] { save(*model, model_path); });
      evict(model_path);
      time_into(load_cold, [&] { load(*fresh, model_path); });
      time_into(load_warm, [&] { load(*fresh, model_path); });
    }
    const auto file_bytes = static_cast<std::size_t>(std::filesystem::file_size(model_path));
    std::vector<char> bytes(file_bytes, 1), back(file_bytes);
    for (std::size_t i = 0; i < file_bytes; i += 4096) bytes[i] = static_cast<char>(i / 4096);
    for (int run = 0; run < repeat; ++run) {
      time_into(write_timing, [&] { raw_write(raw_path, bytes); });
      evict(raw_path);
      time_into(read_cold, [&] { raw_read(raw_path, back); });
      time_into(read_warm, [&] { raw_read(raw_path, back); });
    }
    if (back != bytes) fail("checkpoint_io: the raw file did not read back");
    const auto saved_state = model->state(), loaded_state = fresh->state();
    for (std::size_t i = 0; i < saved_state.size(); ++i) {
      const Tensor &a = saved_state[i].second, &b = loaded_state[i].second;
      if (a.numel() != b.numel() ||
          std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * element_size(a.dtype())) != 0)
        fail("checkpoint_io: the loaded model differs at {}", saved_state[i].first);
    }

    const double megabytes = static_cast<double>(file_bytes) / 1e6;
    std::printf("model: %lld x Linear(%lld, %lld) float32, checkpoint file %.1f MB (MB = 10^6 bytes), dir %s\n",
                static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(width), megabytes,
                dir.c_str());
    save_timing.report("save() binary (incl. fsync)", megabytes);
    write_timing.report("raw fwrite+fflush+fsync", megabytes);
    load_cold.report("load() binary, cold cache", megabytes);
    read_cold.report("raw fread, cold cache", megabytes);
    load_warm.report("load() binary, warm cache", megabytes);
    read_warm.report("raw fread, warm cache", megabytes);
    std::filesystem::remove(model_path);
    std::filesystem::remove(raw_path);
  } catch (const Error& e) {
    std::fprintf(stderr, "checkpoint_io: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Checkpoint I/O throughput: saving and loading a ~100 MB model (four Linear(2560, 2560), float32) in each of the
// formats tapegrad writes, next to the disk's own bandwidth measured in the same run on the same file system:
//   - "tapegrad": save() / load(), the binary archive;
//   - "pytorch":  save_pytorch() / load_pytorch(), a torch.save state-dict zip (.pt);
//   - "safetensors": save_safetensors() / load_safetensors();
//   - "raw": fwrite + fflush + fsync of as many bytes as the tapegrad file, and fread of them into a buffer that
//     is already allocated and touched (the disk's and the page cache's sequential speed, nothing else).
// Every save row is the save call followed by an fsync of the file it wrote (save() fsyncs already, so that
// fsync finds nothing to flush; the others may not), so all save rows and the raw write are comparable.
// Reads are timed twice: "cold" after posix_fadvise(DONTNEED) has evicted the file's pages from the page cache
// (the disk), "warm" straight after (memory; what a reload right after a save sees).
// Within each repetition every format runs save, cold load, warm load in turn, the formats' order rotating from
// one repetition to the next, so machine drift (other processes, the disk's cache) hits all formats alike.
// Figures are medians over the repetitions; each load row also prints its MB/s as a percentage of the raw
// fread's in the same state (cold against cold, warm against warm), each save row against the raw write.
// Usage: checkpoint_io [--smoke] [--dir DIR] [--repeat N] [--profile-load FORMAT]
//   DIR: where the files go, default "."; N: repetitions, default 5.
//   --profile-load tapegrad|pytorch|safetensors: save that format once, then only load it N times from a warm
//   cache and print the median; nothing else runs (for `perf record -g`).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Flushes the file's dirty pages to the disk (a no-op when the writer has fsynced already).
void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("checkpoint_io: cannot open {}", path);
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) fail("checkpoint_io: fsync of {} failed", path);
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
  double median() const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
  double best() const { return *std::min_element(seconds.begin(), seconds.end()); }
};

template <class Fn> void time_into(Timing& timing, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  timing.seconds.push_back(seconds_since(start));
}

// One file format: how to write the model and read it back, and what its runs measured.
struct Format {
  Format(const char* name_, std::string path_, std::function<void(const std::string&)> save_ = {},
         std::function<void(const std::string&)> load_ = {})
      : name(name_), path(std::move(path_)), save(std::move(save_)), load(std::move(load_)) {}
  const char* name;
  std::string path;
  std::function<void(const std::string&)> save;
  std::function<void(const std::string&)> load;
  double megabytes = 0;  // the file's size
  Timing save_timing, load_cold, load_warm;
};

// "save   pytorch       104.9 MB  median 0.1234 s   850 MB/s (best 900)   85 % of raw write".
void report(const char* operation, const Format& format, const Timing& timing, const char* reference_name,
            const Timing& reference, double reference_megabytes) {
  const double median = timing.median();
  const double rate = format.megabytes / median;
  const double reference_rate = reference_megabytes / reference.median();
  std::printf("%-10s %-12s %7.1f MB  median %8.4f s  %7.0f MB/s (best %5.0f)  %4.0f %% of raw %s\n", operation,
              format.name, format.megabytes, median, rate, format.megabytes / timing.best(),
              100.0 * rate / reference_rate, reference_name);
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::string dir = ".";
  int repeat = 5;
  std::string profile_load;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke")
      smoke = true;
    else if (arg == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (arg == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--profile-load" && i + 1 < argc)
      profile_load = argv[++i];
    else {
      std::fprintf(stderr, "usage: checkpoint_io [--smoke] [--dir DIR] [--repeat N] [--profile-load FORMAT]\n");
      return 2;
    }
  }
  if (smoke) repeat = 1;
  try {
    const std::int64_t width = smoke ? 64 : 2560, layers = 4;
    Generator init(1);
    auto make_model = [&] {  // each call draws new weights from `init`, so a load that does nothing is caught
      auto model = std::make_shared<nn::Sequential>();
      for (std::int64_t i = 0; i < layers; ++i)
        model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{width, width}.with_generator(init)));
      return model;
    };
    auto model = make_model();
    std::array<std::shared_ptr<nn::Sequential>, 3> fresh{make_model(), make_model(), make_model()};
    auto path_of = [&](const char* file) { return (std::filesystem::path(dir) / file).string(); };

    std::array<Format, 3> formats{
        Format{"tapegrad", path_of("checkpoint_io.model.tg"), [&](const std::string& p) { save(*model, p); },
               [&](const std::string& p) { load(*fresh[0], p); }},
        Format{"pytorch", path_of("checkpoint_io.model.pt"), [&](const std::string& p) { save_pytorch(*model, p); },
               [&](const std::string& p) { load_pytorch(*fresh[1], p); }},
        Format{"safetensors", path_of("checkpoint_io.model.safetensors"),
               [&](const std::string& p) { save_safetensors(*model, p); },
               [&](const std::string& p) { load_safetensors(*fresh[2], p); }}};
    const std::string raw_path = path_of("checkpoint_io.raw");

    if (!profile_load.empty()) {
      const auto it = std::find_if(formats.begin(), formats.end(),
                                   [&](const Format& format) { return profile_load == format.name; });
      if (it == formats.end()) fail("checkpoint_io: --profile-load: unknown format '{}'", profile_load);
      it->save(it->path);
      it->load(it->path);  // the file's pages are now cached
      for (int run = 0; run < repeat; ++run) time_into(it->load_warm, [&] { it->load(it->path); });
      it->megabytes = static_cast<double>(std::filesystem::file_size(it->path)) / 1e6;
      std::printf("warm load %s: %.1f MB, median %.4f s, %.0f MB/s over %d loads\n", it->name, it->megabytes,
                  it->load_warm.median(), it->megabytes / it->load_warm.median(), repeat);
      std::filesystem::remove(it->path);
      return 0;
    }

    // The raw file is as large as the tapegrad checkpoint; a first save tells its size.
    formats[0].save(formats[0].path);
    const auto raw_bytes = static_cast<std::size_t>(std::filesystem::file_size(formats[0].path));
    std::vector<char> bytes(raw_bytes, 1), back(raw_bytes, 0);
    for (std::size_t i = 0; i < raw_bytes; i += 4096) bytes[i] = static_cast<char>(i / 4096);
    Timing write_timing, read_cold, read_warm;

    // Four "formats" per repetition: the three above and the raw file (index 3), in an order that rotates.
    for (int run = 0; run < repeat; ++run) {
      for (std::size_t k = 0; k < formats.size() + 1; ++k) {
        const std::size_t which = (k + static_cast<std::size_t>(run)) % (formats.size() + 1);
        if (which == formats.size()) {
          time_into(write_timing, [&] { raw_write(raw_path, bytes); });
          evict(raw_path);
          time_into(read_cold, [&] { raw_read(raw_path, back); });
          time_into(read_warm, [&] { raw_read(raw_path, back); });
          continue;
        }
        Format& format = formats[which];
        time_into(format.save_timing, [&] {
          format.save(format.path);
          sync_file(format.path);
        });
        evict(format.path);
        time_into(format.load_cold, [&] { format.load(format.path); });
        time_into(format.load_warm, [&] { format.load(format.path); });
      }
    }

    if (back != bytes) fail("checkpoint_io: the raw file did not read back");
    const auto saved_state = model->state();
    for (std::size_t f = 0; f < formats.size(); ++f) {
      const auto loaded_state = fresh[f]->state();
      if (loaded_state.size() != saved_state.size()) fail("checkpoint_io: {}: the state sizes differ", formats[f].name);
      for (std::size_t i = 0; i < saved_state.size(); ++i) {
        const Tensor &a = saved_state[i].second, &b = loaded_state[i].second;
        if (a.numel() != b.numel() ||
            std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * element_size(a.dtype())) != 0)
          fail("checkpoint_io: {}: the loaded model differs at {}", formats[f].name, saved_state[i].first);
      }
      formats[f].megabytes = static_cast<double>(std::filesystem::file_size(formats[f].path)) / 1e6;
    }

    const double raw_megabytes = static_cast<double>(raw_bytes) / 1e6;
    std::printf("model: %lld x Linear(%lld, %lld) float32; dir %s; %d repetitions, medians; MB = 10^6 bytes\n",
                static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(width),
                dir.c_str(), repeat);
    std::printf(
        "save = the call + fsync of its file; cold = after posix_fadvise(DONTNEED) evicted the file; "
        "warm = straight after\n");
    Format raw{"raw", raw_path};
    raw.megabytes = raw_megabytes;
    for (const Format& format : formats)
      report("save", format, format.save_timing, "write", write_timing, raw_megabytes);
    report("write", raw, write_timing, "write", write_timing, raw_megabytes);
    for (const Format& format : formats)
      report("load cold", format, format.load_cold, "cold read", read_cold, raw_megabytes);
    report("read cold", raw, read_cold, "cold read", read_cold, raw_megabytes);
    for (const Format& format : formats)
      report("load warm", format, format.load_warm, "warm read", read_warm, raw_megabytes);
    report("read warm", raw, read_warm, "warm read", read_warm, raw_megabytes);
    for (const Format& format : formats) std::filesystem::remove(format.path);
    std::filesystem::remove(raw_path);
  } catch (const Error& e) {
    std::fprintf(stderr, "checkpoint_io: %s\n", e.what());
    return 1;
  }
  return 0;
}

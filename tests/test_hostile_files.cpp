// Hostile paths and files: a FIFO (or any non-regular file) is refused without blocking; an IDX header is
// read before anything is inflated or allocated, so a gzip bomb or an overflowing header costs nothing.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tapegrad/framework/data/idx.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad-hostile-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `read` on a worker; a reader that blocks on the FIFO is released by opening its write end, so a hang
// shows as a failed check instead of a stuck test. Returns the error message ("" when nothing was thrown).
std::string read_fifo(const fs::path& fifo, const std::function<void()>& read) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      read();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    // Note: the blocked open is woken by a writer and restarts if the writer is gone before it runs, so
    // keep opening and closing the write end until the reader has returned.
    while (result.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout) {
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (writer >= 0) ::close(writer);
    }
    result.get();
    return "(blocked on the FIFO)";
  }
  return result.get();
}

std::string big_endian(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

long peak_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

TEST_CASE("every reader refuses a FIFO without blocking, naming the path") {
  const fs::path dir = scratch_dir("fifo");
  const fs::path fifo = dir / "model.tg";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  nn::Linear model(2, 2);
  const std::vector<std::pair<const char*, std::function<void()>>> readers = {
      {"load", [&] { (void)load(model, fifo.string()); }},
      {"load_checkpoint", [&] { (void)load_checkpoint(fifo.string()); }},
      {"read_checkpoint_header", [&] { (void)read_checkpoint_header(fifo.string()); }},
      {"read_idx_images", [&] { (void)data::read_idx_images(fifo.string()); }},
      {"read_idx_labels", [&] { (void)data::read_idx_labels(fifo.string()); }},
  };
  for (const auto& [name, read] : readers) {
    INFO(name);
    const std::string message = read_fifo(fifo, read);
    CHECK_THAT(message, Catch::Contains("not a regular file") && Catch::Contains(fifo.string()));
  }
  fs::remove_all(dir);
}

TEST_CASE("a directory or a character device is refused as a checkpoint or IDX file") {
  const fs::path dir = scratch_dir("dir");
  CHECK_THROWS_WITH(load_checkpoint(dir.string()), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_checkpoint_header("/dev/zero"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(data::read_idx_labels("/dev/zero"), Catch::Contains("not a regular file"));
  fs::remove_all(dir);
}

TEST_CASE("a gzip bomb behind a bad IDX magic is refused before it is inflated") {
  const fs::path dir = scratch_dir("bomb");
  const fs::path bomb = dir / "bomb.gz";
  // 256 MiB of zeros behind a wrong magic number: about 256 KiB compressed
  const std::string command = fmt::format(
      "{{ printf '\\000\\000\\010\\077'; head -c 268435456 /dev/zero; }} | gzip -1 -c > '{}'", bomb.string());
  REQUIRE(std::system(command.c_str()) == 0);
  const long before = peak_rss_kib();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(data::read_idx_images(bomb.string()), Catch::Contains("wrong magic number"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(peak_rss_kib() - before < 64 * 1024);  // far less than the 256 MiB the stream inflates to
  CHECK(seconds < 0.5);                        // inflating all of it takes well over that
  fs::remove_all(dir);
}

TEST_CASE("a gzip IDX file never inflates past its declared payload plus one byte") {
  const fs::path dir = scratch_dir("trailing");
  const fs::path path = dir / "labels.gz";
  // a valid header for 4 labels, then 256 MiB more
  const std::string command = fmt::format(
      "{{ printf '\\000\\000\\010\\001\\000\\000\\000\\004'; head -c 268435456 /dev/zero; }} | gzip -1 -c > '{}'",
      path.string());
  REQUIRE(std::system(command.c_str()) == 0);
  const long before = peak_rss_kib();
  CHECK_THROWS_WITH(data::read_idx_labels(path.string()), Catch::Contains("unexpected") && Catch::Contains(path.string()));
  CHECK(peak_rss_kib() - before < 64 * 1024);
  fs::remove_all(dir);
}

TEST_CASE("an IDX header whose payload overflows 64 bits is refused, not wrapped to an empty tensor") {
  const fs::path dir = scratch_dir("overflow");
  const fs::path path = dir / "images.idx";
  // 2^31 x 2^31 x 2^31 bytes: the unchecked product wraps to 0, which an empty file then "matches"
  write_bytes(path, big_endian(0x803) + big_endian(1u << 31) + big_endian(1u << 31) + big_endian(1u << 31));
  CHECK_THROWS_AS(data::read_idx_images(path.string()), Error);
  fs::remove_all(dir);
}

TEST_CASE("an IDX header promising more than its file can hold is refused before allocating") {
  const fs::path dir = scratch_dir("promise");
  const fs::path plain = dir / "images.idx", packed = dir / "images.gz";
  const std::string header = big_endian(0x803) + big_endian(1u << 20) + big_endian(1u << 10) + big_endian(1u << 10);
  write_bytes(plain, header + std::string(100, '\0'));  // claims 1 TiB of pixels
  CHECK_THROWS_WITH(data::read_idx_images(plain.string()), Catch::Contains("1099511627776"));
  write_bytes(dir / "raw", header + std::string(100, '\0'));
  REQUIRE(std::system(fmt::format("gzip -c '{}' > '{}'", (dir / "raw").string(), packed.string()).c_str()) == 0);
  CHECK_THROWS_WITH(data::read_idx_images(packed.string()), Catch::Contains("1099511627776"));
  fs::remove_all(dir);
}

TEST_CASE("damaged gzip data is an error naming the file, with zlib's reason and no Boost wording") {
  const fs::path dir = scratch_dir("damaged");
  const fs::path raw = dir / "labels.raw", packed = dir / "labels.gz";
  write_bytes(raw, big_endian(0x801) + big_endian(1000) + std::string(1000, '\7'));
  REQUIRE(std::system(fmt::format("gzip -c '{}' > '{}'", raw.string(), packed.string()).c_str()) == 0);
  std::string bytes;
  {
    std::ifstream in(packed, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 6] = static_cast<char>(bytes[bytes.size() - 6] ^ 0x55);  // the CRC trailer
  write_bytes(packed, bytes);
  try {
    (void)data::read_idx_labels(packed.string());
    FAIL("damaged gzip data was accepted");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains(packed.string()) && !Catch::Contains("stream error"));
  }
  fs::remove_all(dir);
}

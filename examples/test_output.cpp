// The examples' output helpers: progress lines in logs and pipes, gnuplot started without a shell, and the PNG writer.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <zlib.h>

#include "common/png.h"
#include "common/training.h"

namespace fs = std::filesystem;

TEST_CASE("progress written to a file or pipe is whole lines, never carriage-return redraws") {
  std::ostringstream log;
  examples::Progress progress("epoch 1/2", 1000, log, /*interactive=*/false);
  for (int i = 0; i < 100; ++i) progress.advance(10);
  progress.finish();
  // a sub-second epoch prints nothing of its own (its summary line follows); nothing is a redraw
  CHECK(log.str().find('\r') == std::string::npos);
  CHECK(log.str().empty());
}

TEST_CASE("progress on a terminal redraws one line") {
  std::ostringstream screen;
  examples::Progress progress("epoch 1/2", 1000, screen, /*interactive=*/true);
  progress.advance(1000);
  progress.finish();
  CHECK(screen.str().find("\repoch 1/2 [") != std::string::npos);
  CHECK(screen.str().find("1000/1000") != std::string::npos);
}

TEST_CASE("gnuplot strings double their quotes") {
  CHECK(examples::gnuplot_string("a'b") == "'a''b'");
  CHECK(examples::gnuplot_string("$x `y`") == "'$x `y`'");
}

TEST_CASE("metrics and curves are written into a directory whose name holds a space, a quote, a $ and a backtick") {
  REQUIRE(examples::have_gnuplot());  // scripts/setup.sh installs gnuplot-nox
  const fs::path base = fs::temp_directory_path() / "tapegrad test_output";
  fs::remove_all(base);
  const fs::path dir = base / "it's $HOME `touch injected` dir";
  fs::create_directories(dir);
  std::vector<examples::EpochMetrics> rows{{1, 0.9, 0.7, 0.8, 0.72, 1.0, 100.0}, {2, 0.5, 0.8, 0.6, 0.81, 1.0, 100.0}};
  examples::write_metrics(dir.string(), "model", rows);
  CHECK(fs::exists(dir / "model_metrics.csv"));
  CHECK(fs::exists(dir / "model_curves.png"));
  CHECK(fs::file_size(dir / "model_curves.png") > 1000);
  CHECK_FALSE(fs::exists("injected"));
  CHECK_FALSE(fs::exists(dir / "injected"));
  fs::remove_all(base);
}

TEST_CASE("find_on_path finds programs without a shell, and misses cleanly") {
  CHECK_FALSE(examples::find_on_path("sh").empty());
  CHECK(examples::find_on_path("no-such-program-tapegrad").empty());
}

TEST_CASE("the PNG writer's file has PNG's signature, valid chunk CRCs and the pixels in its IDAT") {
  const fs::path path = fs::temp_directory_path() / "tapegrad_test_png.png";
  const std::vector<std::uint8_t> pixels{0, 64, 128, 255, 1, 2};
  examples::write_png_gray8(path.string(), 3, 2, pixels);
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(path);
  REQUIRE(file.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n"));
  auto u32 = [&](std::size_t at) {
    return (std::uint32_t(std::uint8_t(file[at])) << 24) | (std::uint32_t(std::uint8_t(file[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(file[at + 2])) << 8) | std::uint32_t(std::uint8_t(file[at + 3]));
  };
  std::vector<std::string> types;
  std::string idat;
  for (std::size_t at = 8; at < file.size();) {
    const std::uint32_t length = u32(at);
    const std::string type = file.substr(at + 4, 4), data = file.substr(at + 8, length);
    const std::string body = type + data;
    CHECK(u32(at + 8 + length) ==
          crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    if (type == "IHDR") CHECK((u32(at + 8) == 3 && u32(at + 12) == 2 && data[8] == 8 && data[9] == 0));
    if (type == "IDAT") idat = data;
    types.push_back(type);
    at += 12 + length;
  }
  CHECK(types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  std::vector<std::uint8_t> raw(8);
  uLongf raw_size = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  CHECK(raw == std::vector<std::uint8_t>{0, 0, 64, 128, 0, 255, 1, 2});  // a filter byte before each row
}

TEST_CASE("image_grid tiles [N, 1, H, W] images with black padding, mapping [-1, 1] to [0, 255]") {
  const tapegrad::Tensor images = tapegrad::tensor({-1, 1, 0, 1, 1, 1, 1, 1}, {2, 1, 2, 2});
  const examples::GrayImage grid = examples::image_grid(images, 2, -1.0, 1.0, 1);
  CHECK(grid.width == 7);
  CHECK(grid.height == 4);
  CHECK(grid.pixels[1 * 7 + 1] == 0);    // -1
  CHECK(grid.pixels[1 * 7 + 2] == 255);  // 1
  CHECK(grid.pixels[2 * 7 + 1] == 128);  // 0
  CHECK(grid.pixels[0] == 0);            // padding
  CHECK(grid.pixels[1 * 7 + 4] == 255);  // the second image
}

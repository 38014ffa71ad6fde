// The examples' output helpers: progress lines in logs and pipes, and gnuplot started without a shell.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

// Saves under fault and concurrency, and messages users act on: a save that reports success always loads, a
// killed save leaves the previous file and no litter, and errors say what is actually wrong.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad-saves-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::shared_ptr<nn::Sequential> mlp(std::int64_t width) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(width, width), std::make_shared<nn::Linear>(width, width)});
}

std::vector<std::string> litter(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp") != std::string::npos) out.push_back(entry.path().filename());
  return out;
}

int env_or(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

}  // namespace

TEST_CASE("a save taken while another thread trains always loads when it reported success") {
  const fs::path dir = scratch_dir("concurrent");
  auto model = mlp(256);
  std::atomic<bool> stop{false};
  // Note: the trainer runs its own forward and backward on its own thread (its own tape); only the
  // parameter values are shared with the saving thread, which is the race the save must survive.
  std::thread trainer([&] {
    optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 1e-3});
    const Tensor x = ones({8, 256});
    while (!stop) {
      sgd.zero_grad();
      sum(model->forward(x)).backward();
      sgd.step();
    }
  });
  int loaded = 0;
  for (int i = 0; i < 20; ++i) {
    for (const ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
      const fs::path path = dir / (kind == ArchiveKind::Binary ? "model.tg" : "model.txt");
      save(*model, path.string(), kind);
      auto copy = mlp(256);
      CHECK_NOTHROW(load(*copy, path.string()));
      std::ostringstream stream;
      save(*model, stream, kind);
      std::istringstream in(stream.str());
      CHECK_NOTHROW(load(*copy, in));
      ++loaded;
    }
  }
  stop = true;
  trainer.join();
  CHECK(loaded == 40);
  fs::remove_all(dir);
}

TEST_CASE("saves killed at random moments leave the target loadable and no temporary files") {
  // CI runs a small model a few times; TAPEGRAD_KILLED_SAVES=100 TAPEGRAD_KILLED_SAVE_WIDTH=2048 is the
  // full check (about 32 MiB per save).
  const int kills = env_or("TAPEGRAD_KILLED_SAVES", 12);
  const int width = env_or("TAPEGRAD_KILLED_SAVE_WIDTH", 384);
  const fs::path dir = scratch_dir("killed");
  const fs::path target = dir / "model.tg";
  auto model = mlp(width);
  save(*model, target.string());
  std::mt19937 random(7);
  for (int i = 0; i < kills; ++i) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (;;) {
        try {
          save(*model, target.string());
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(random)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    auto copy = mlp(width);
    CHECK_NOTHROW(load(*copy, target.string()));
  }
  save(*model, target.string());  // the next save clears whatever a killed one left
  CHECK(litter(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("a stale temporary file of a dead process is removed by the next save; a live one's is kept") {
  const fs::path dir = scratch_dir("stale");
  const fs::path target = dir / "model.tg";
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = fmt::format("model.tg.tmp-{}", dead), live = fmt::format("model.tg.tmp-{}", ::getppid());
  std::ofstream(dir / stale) << "partial";
  std::ofstream(dir / live) << "in progress";
  std::ofstream(dir / "other.tg.tmp-1x") << "not ours";
  save(nn::Linear(2, 2), target.string());
  CHECK_FALSE(fs::exists(dir / stale));
  CHECK(fs::exists(dir / live));
  CHECK(fs::exists(dir / "other.tg.tmp-1x"));
  fs::remove_all(dir);
}

TEST_CASE("loading a different module type at a prefix names the entries, not a state version") {
  auto saved = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::BatchNorm1d>(2)});  // BatchNorm: state version 2
  auto other = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Linear>(2, 2)});
  std::stringstream stream;
  save(*saved, stream);
  try {
    load(*other, stream);
    FAIL("a BatchNorm1d state loaded into a Linear");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, !Catch::Contains("newer"));
    CHECK_THAT(message, Catch::Contains("running_mean") && Catch::Contains("Linear"));
  }
}

TEST_CASE("no one-bit change in a checkpoint header's kind and type fields is reported as another architecture") {
  std::ostringstream stream;
  save(nn::Linear(2, 2), stream);
  const std::string good = stream.str();
  const std::size_t from = good.find(' ', good.find(' ') + 1) + 1, to = good.find(" le ") + 3;  // "binary f4d8i8 le"
  for (std::size_t i = from; i < to; ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      std::istringstream in(bad);
      try {
        (void)load_checkpoint(in);
        FAIL("a damaged header loaded");
      } catch (const Error& e) {
        INFO(bad.substr(0, good.find('\n')));
        CHECK_THAT(std::string(e.what()), !Catch::Contains("architecture"));
      }
    }
}

TEST_CASE("a truncated checkpoint says so without the archive library's wording") {
  std::ostringstream stream;
  save(nn::Linear(8, 8), stream);
  for (const std::size_t cut : {60, 100, 200}) {
    std::istringstream in(stream.str().substr(0, cut));
    try {
      (void)load_checkpoint(in);
      FAIL("a truncated checkpoint loaded");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("truncated") && !Catch::Contains("input stream error"));
    }
  }
}

TEST_CASE("saving an undefined tensor names the entry") {
  Checkpoint checkpoint;
  checkpoint.model.push_back({"encoder.weight", EntryKind::Parameter, Tensor()});
  std::ostringstream stream;
  CHECK_THROWS_WITH(save_checkpoint(checkpoint, stream), Catch::Contains("encoder.weight"));
  const fs::path dir = scratch_dir("undefined");
  CHECK_THROWS_WITH(save_checkpoint(checkpoint, (dir / "x.tg").string()), Catch::Contains("encoder.weight"));
  CHECK(litter(dir).empty());
  CHECK_FALSE(fs::exists(dir / "x.tg"));
  fs::remove_all(dir);
}

TEST_CASE("non-finite values survive a text checkpoint (a diverged model's save must load)") {
  nn::Linear model(2, 2);
  {
    NoGradGuard no_grad;
    model.named_parameters()[0].second.copy_(tensor({NAN, INFINITY, -INFINITY, 1.5}, {2, 2}));
  }
  std::stringstream stream;
  save(model, stream, ArchiveKind::Text);
  nn::Linear copy(2, 2);
  REQUIRE_NOTHROW(load(copy, stream));
  const auto values = copy.named_parameters()[0].second.to_vector();
  CHECK(std::isnan(values[0]));
  CHECK(values[1] == INFINITY);
  CHECK(values[2] == -INFINITY);
  CHECK(values[3] == 1.5);
}

TEST_CASE("a save into a stream that refuses writes says so without the archive library's wording") {
  std::ofstream full("/dev/full", std::ios::binary);  // every write fails with ENOSPC
  REQUIRE(full.is_open());
  try {
    save(nn::Linear(64, 64), full);
    FAIL("a save into /dev/full reported success");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("writing to the stream failed") && !Catch::Contains("output stream error"));
  }
}

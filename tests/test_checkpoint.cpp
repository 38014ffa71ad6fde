// Saving and loading: round trips in every archive kind, and every way a file can be wrong.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <tapegrad/framework/serialize/checkpoint.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

// A stand-in model with every kind of state: float parameters, a float buffer, an int64 buffer, a child.
class Block : public nn::Module {
 public:
  explicit Block(std::int64_t width, std::uint64_t seed = 1) : Module("Block"), width_(width) {
    Generator g(seed);
    weight = register_parameter("weight", randn({width, width}, g));
    running_var = register_buffer("running_var", rand({width}, g));
    num_batches_tracked = register_buffer("num_batches_tracked", full({}, 7.0, TensorOptions{}.with_dtype(DType::Int64)));
  }
  std::shared_ptr<Module> clone() const override { return clone_into(std::make_shared<Block>(width_)); }
  Tensor weight, running_var, num_batches_tracked;

 private:
  std::int64_t width_;
};

class Net : public nn::Module {
 public:
  explicit Net(std::int64_t width = 3, std::uint64_t seed = 1) : Module("Net") {
    features = register_module("features", std::make_shared<Block>(width, seed));
    bias = register_parameter("bias", full({width}, 0.5));
  }
  std::shared_ptr<Block> features;
  Tensor bias;
};

void expect_same_state(const nn::Module& a, const nn::Module& b) {
  const auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK(identical(sa[i].second, sb[i].second));
  }
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / fmt::format("tapegrad-test-{}-{}", ::getpid(), counter()++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a saved model loads bit-identically into a fresh instance, in every archive kind") {
  TempDir dir;
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    Net trained(4, 11);
    trained.to(DType::Float64);
    Net fresh(4, 99);
    fresh.to(DType::Float64);
    const std::string path = dir.file("model.tg");
    save(trained, path, kind);
    load(fresh, path);
    expect_same_state(trained, fresh);
    CHECK(read_checkpoint_header(path).kind == kind);
  }
}

TEST_CASE("float32 values survive the text archive exactly") {
  Net trained(5, 3), fresh(5, 4);
  std::stringstream stream;
  save(trained, stream, ArchiveKind::Text);
  load(fresh, stream);
  expect_same_state(trained, fresh);
}

TEST_CASE("a checkpoint keeps optimizer and scheduler state, progress, generator states and metadata") {
  Net model;
  Checkpoint c;
  c.set_model(model);
  c.optimizer = Checkpoint::from_named({{"group0.param0.momentum_buffer", ones({3})}}, EntryKind::Optimizer);
  c.scheduler = Checkpoint::from_named({{"last_epoch", full({}, 4.0, TensorOptions{}.with_dtype(DType::Int64))}},
                                       EntryKind::Scheduler);
  c.epoch = 3;
  c.step = 1234;
  Generator g(42);
  g.uniform01();
  c.rng_states["loader"] = g.state();
  const double next_draw = g.uniform01();
  c.metadata["note"] = "line one\nline two with spaces";
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    std::stringstream stream;
    save_checkpoint(c, stream, kind);
    Checkpoint back = load_checkpoint(stream);
    CHECK(back.epoch == 3);
    CHECK(back.step == 1234);
    CHECK(back.metadata == c.metadata);
    CHECK(back.model_versions == c.model_versions);
    REQUIRE(back.optimizer.size() == 1);
    CHECK(back.optimizer[0].kind == EntryKind::Optimizer);
    CHECK(identical(back.scheduler[0].value, c.scheduler[0].value));
    Generator restored;
    restored.set_state(back.rng_states.at("loader"));
    CHECK(restored.uniform01() == next_draw);
    CHECK(back.model[0].kind == EntryKind::Parameter);
    CHECK(back.model.back().kind == EntryKind::Buffer);
  }
}

TEST_CASE("load errors name the file and the key, and leave the model untouched") {
  TempDir dir;
  const std::string path = dir.file("model.tg");
  Net small(3);
  save(small, path);

  SECTION("shape mismatch") {
    Net wide(4, 5);
    const auto before = wide.state();
    CHECK_THROWS_WITH(load(wide, path), Catch::Contains("size mismatch for bias: checkpoint [3], model [4]"));
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(identical(before[i].second.clone(), wide.state()[i].second));
  }
  SECTION("dtype mismatch") {
    Net other(3, 5);
    other.to(DType::Float64);
    CHECK_THROWS_WITH(load(other, path), Catch::Contains("dtype mismatch for bias: checkpoint float32, model float64"));
  }
  SECTION("missing and unexpected keys") {
    Block block(3);
    CHECK_THROWS_WITH(load(block, path), Catch::Contains("missing key") && Catch::Contains(path));
    Net bigger(3);
    bigger.register_buffer("extra", zeros({1}));
    CHECK_THROWS_WITH(load(bigger, path), Catch::Contains("missing key extra"));
    auto result = load(bigger, path, /*strict=*/false);
    CHECK(result.missing_keys == std::vector<std::string>{"extra"});
  }
  SECTION("unexpected keys are an error only in strict mode") {
    Net with_extra(3);
    with_extra.register_buffer("extra", zeros({1}));
    const std::string extra_path = dir.file("extra.tg");
    save(with_extra, extra_path);
    Net plain(3, 8);
    CHECK_THROWS_WITH(load(plain, extra_path), Catch::Contains("unexpected key extra"));
    auto result = load(plain, extra_path, false);
    CHECK(result.unexpected_keys == std::vector<std::string>{"extra"});
    CHECK(identical(plain.features->weight, with_extra.features->weight));
  }
}

TEST_CASE("damaged files are recognised: foreign, truncated, corrupt, from the future") {
  TempDir dir;
  const std::string path = dir.file("model.tg");
  Net model(3);
  save(model, path);
  const std::string good = bytes_of(path);
  Net target(3, 77);
  const auto before = target.state();
  auto unchanged = [&] {
    const auto now = target.state();
    for (std::size_t i = 0; i < now.size(); ++i)
      if (!identical(now[i].second, before[i].second)) return false;
    return true;
  };

  write_bytes(path, "PK\x03\x04 this is a zip file");
  CHECK_THROWS_WITH(load(target, path), Catch::Contains("not a tapegrad checkpoint"));

  write_bytes(path, good.substr(0, good.find("features.running_var") + 30));
  CHECK_THROWS_WITH(load(target, path), Catch::Contains("truncated") && Catch::Contains("at entry 'features.running_var'"));

  std::string flipped = good;
  flipped[flipped.size() - 30] ^= 0x10;  // inside the last tensors' data or checksums
  write_bytes(path, flipped);
  CHECK_THROWS_AS(load(target, path), Error);

  std::string future = good;
  future.replace(0, 10, "TAPEGRAD 9");
  write_bytes(path, future);
  CHECK_THROWS_WITH(load(target, path), Catch::Contains("newer tapegrad (file format version 9"));

  write_bytes(path, good + "junk");
  CHECK_THROWS_WITH(load(target, path), Catch::Contains("unexpected bytes after"));

  CHECK_THROWS_WITH(load(target, dir.file("absent.tg")), Catch::Contains("cannot open"));
  CHECK(unchanged());
}

TEST_CASE("a bit flip inside tensor data names the entry") {
  Net model(3);
  std::stringstream stream;
  save(model, stream);
  std::string bytes = stream.str();
  const std::size_t at = bytes.find("features.weight");
  REQUIRE(at != std::string::npos);
  bytes[at + 40] ^= 0x01;  // within that entry's float data
  std::stringstream damaged(bytes);
  Net target(3, 2);
  CHECK_THROWS_WITH(load(target, damaged), Catch::Contains("features.weight"));
}

TEST_CASE("an interrupted save never destroys the previous checkpoint") {
  TempDir dir;
  const std::string path = dir.file("model.tg");
  Net first(3, 1);
  save(first, path);
  const std::string previous = bytes_of(path);
  // Make the temporary file impossible to create: a directory already has its name.
  std::filesystem::create_directory(fmt::format("{}.tmp-{}", path, ::getpid()));
  Net second(3, 2);
  CHECK_THROWS_WITH(save(second, path), Catch::Contains("cannot open"));
  CHECK(bytes_of(path) == previous);
}

TEST_CASE("thousands of randomly truncated and bit-flipped checkpoints each fail cleanly") {
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    Net model(3);
    std::stringstream stream;
    save(model, stream, kind);
    const std::string good = stream.str();
    Generator g(kind == ArchiveKind::Binary ? 1 : 2);
    std::uniform_int_distribution<std::size_t> position(0, good.size() - 1);
    std::uniform_int_distribution<int> bit(0, 7), mode(0, 2);
    int failures = 0;
    for (int trial = 0; trial < 1500; ++trial) {
      std::string bytes = good;
      switch (mode(g.engine())) {
        case 0: bytes.resize(position(g.engine())); break;
        case 1: bytes[position(g.engine())] ^= static_cast<char>(1 << bit(g.engine())); break;
        default:
          for (int k = 0; k < 8; ++k) bytes[position(g.engine())] = static_cast<char>(g.engine()());
      }
      if (bytes == good) continue;
      std::stringstream damaged(bytes);
      Net target(3, 5);
      try {
        load(target, damaged);
      } catch (const Error&) {
        ++failures;
        continue;
      }
      FAIL("a damaged checkpoint loaded without error (trial " << trial << ")");
    }
    CHECK(failures > 1000);
  }
}

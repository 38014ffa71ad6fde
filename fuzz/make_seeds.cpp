// fuzz_seeds DIR: writes a small seed corpus for every fuzz target into DIR/<target>/, generated here so that
// no binary seed lives in git. Each seed is a valid file of its format (several shapes and options), the
// starting point from which libFuzzer mutates into the damaged ones.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <unistd.h>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string gzip(const std::string& bytes) {
  const std::string temporary = fs::temp_directory_path() / ("fuzz-seed-" + std::to_string(::getpid()) + ".gz");
  gzFile out = ::gzopen(temporary.c_str(), "wb9");
  if (out == nullptr || ::gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzip failed");
  ::gzclose(out);
  std::ifstream in(temporary, std::ios::binary);
  std::string packed((std::istreambuf_iterator<char>(in)), {});
  fs::remove(temporary);
  return packed;
}

std::string big_endian(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string idx(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::string out = big_endian(magic);
  std::size_t count = 1;
  for (auto d : dims) {
    out += big_endian(d);
    count *= d;
  }
  for (std::size_t i = 0; i < count; ++i) out += static_cast<char>(i * 37 % 256);
  return out;
}

std::shared_ptr<nn::Sequential> fuzz_model() {  // the model checkpoint_fuzz loads into
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::Dropout>(0.5)});
}

void checkpoint_seeds(const fs::path& dir) {
  const auto model = fuzz_model();
  int n = 0;
  for (const ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    std::ostringstream plain;
    save(*model, plain, kind);
    write(dir / fmt::format("model-{}.tg", n++), plain.str());
    Checkpoint run;
    run.set_model(nn::Linear(2, 2));
    run.optimizer.push_back({"0.momentum_buffer", EntryKind::Optimizer, ones({2, 2})});
    run.scheduler.push_back({"last_epoch", EntryKind::Scheduler, scalar_tensor(3, DType::Int64)});
    run.epoch = 2;
    run.step = 40;
    run.rng_states["global"] = "12345 678";
    run.metadata["note"] = "seed";
    std::ostringstream full;
    save_checkpoint(run, full, kind);
    write(dir / fmt::format("run-{}.tg", n++), full.str());
  }
}

void idx_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"images-2x3x4", idx(0x803, {2, 3, 4})}, {"images-0x28x28", idx(0x803, {0, 28, 28})},
      {"images-1x28x28", idx(0x803, {1, 28, 28})}, {"labels-5", idx(0x801, {5})}, {"labels-0", idx(0x801, {0})}};
  for (const auto& [name, bytes] : files) {
    write(dir / (name + ".idx"), bytes);
    write(dir / (name + ".gz"), gzip(bytes));
  }
}

void foreign_seeds(const fs::path& pytorch_dir, const fs::path& safetensors_dir) {
  const auto model = fuzz_model();
  save_pytorch(*model, (pytorch_dir / "model.pt").string());
  save_pytorch(nn::Linear(2, 1), (pytorch_dir / "linear.pt").string());
  save_safetensors(*model, (safetensors_dir / "model.safetensors").string());
  save_safetensors(nn::Linear(2, 1), (safetensors_dir / "linear.safetensors").string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n  writes a seed corpus for each fuzz target into DIR/<target>/\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* target : {"checkpoint_fuzz", "idx_fuzz", "pytorch_fuzz", "safetensors_fuzz"})
    fs::create_directories(root / target);
  checkpoint_seeds(root / "checkpoint_fuzz");
  idx_seeds(root / "idx_fuzz");
  foreign_seeds(root / "pytorch_fuzz", root / "safetensors_fuzz");
  std::printf("fuzz_seeds: corpora written under %s\n", root.c_str());
  return 0;
}

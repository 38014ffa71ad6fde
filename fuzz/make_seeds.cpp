// fuzz_seeds DIR: writes a small seed corpus for every fuzz target into DIR/<target>/, generated here so that
// no binary seed lives in git. Each seed is a valid file of its format (several shapes and options), the
// starting point from which libFuzzer mutates into the damaged ones; pytorch_fuzz and safetensors_fuzz also get
// structural seeds of the hostile classes of issue 37 (deep JSON, many keys, opcode floods, many views of one
// storage, oversized records, lying sizes), each within the -max_len that scripts/fuzz.sh passes.
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
#include "tests/support/foreign_files.h"

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
    nn::Linear low(2, 1);  // bfloat16 entries: dtype code 3, 2-byte elements
    low.to(DType::BFloat16);
    std::ostringstream low_bytes;
    save(low, low_bytes, kind);
    write(dir / fmt::format("bfloat16-{}.tg", n++), low_bytes.str());
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
  // bfloat16 entries (BFloat16Storage, BF16): the readers' 2-byte element paths.
  nn::Linear low(2, 1);
  low.to(DType::BFloat16);
  save_pytorch(low, (pytorch_dir / "linear-bfloat16.pt").string());
  save_safetensors(low, (safetensors_dir / "linear-bfloat16.safetensors").string());
}

// The bytes a seed may have: scripts/fuzz.sh runs every target with -max_len=65536, and libFuzzer cuts longer inputs.
constexpr std::size_t kMaxSeed = 65536;

void write_seed(const fs::path& path, const std::string& bytes) {
  if (bytes.size() > kMaxSeed) throw std::runtime_error(fmt::format("seed {} has {} bytes", path.string(), bytes.size()));
  write(path, bytes);
}

// Seeds of the hostile classes (tests/test_hostile_foreign.cpp has the full-size files). pytorch_fuzz takes an input
// with an odd first byte as data.pkl alone, so the pickle classes are seeded that way as well as in archives.
void hostile_pytorch_seeds(const fs::path& dir) {
  namespace ff = tapegrad::testing::foreign_files;
  const std::string zeros(1 << 20, '\0');
  auto pickle_only = [&](const std::string& name, const std::string& pickle) { write_seed(dir / name, "\x01" + pickle); };
  {  // a dict of 4,000 keys (SETITEMS batches), and the same as SETITEM one by one
    ff::Pickle batched, single;
    batched.op('}');
    single.op('}');
    for (int i = 0; i < 4000; ++i) {
      if (i % 1000 == 0) batched.op('(');
      batched.string(fmt::format("{}", i)).op('N');
      if (i % 1000 == 999) batched.op('u');
      single.integer(i).op('N').op('s');
    }
    pickle_only("dict-4000.pkl", batched.finish());
    pickle_only("dict-setitem.pkl", single.finish());
  }
  pickle_only("none-flood.pkl", "\x80\x02" + std::string(60'000, 'N') + ".");
  pickle_only("tuple-nest.pkl", "\x80\x02N" + std::string(30'000, '\x85') + ".");
  pickle_only("mark-flood.pkl", "\x80\x02" + std::string(30'000, '(') + ".");
  {  // 400 views of storage '0' (the wrapper's 256-byte storages), pickle only and as an archive of a 4 MiB storage
    std::vector<ff::TensorRef> small, big;
    for (int i = 0; i < 400; ++i) {
      small.push_back({fmt::format("v{}", i), "0", 64, {64}, {1}});
      big.push_back({fmt::format("v{}", i), "0", 1 << 20, {1 << 20}, {1}});
    }
    pickle_only("views-400.pkl", ff::state_dict_pickle(small));
    write_seed(dir / "views-400.pt", ff::torch_zip(ff::deflated_entry("", ff::state_dict_pickle(big)),
                                                   {ff::deflated_entry("data/0", ff::deflate_repeated(zeros, 4))}));
  }
  // 2 million None opcodes, deflated (about 3 KB): twenty times the reader's stack cap, still cheap per execution
  write_seed(dir / "none-flood.pt", ff::torch_zip(ff::deflated_entry("", ff::deflate_parts({{"\x80\x02", 1},
                                                  {std::string(100'000, 'N'), 20}, {".", 1}})), {}));
  // records bigger than their tensors: 8 MiB behind 0.bias, an 8 MiB version record (small, so executions stay fast)
  write_seed(dir / "big-record.pt", ff::small_model_pt({ff::deflated_entry("data/1", ff::deflate_repeated(zeros, 8))}));
  write_seed(dir / "big-version.pt",
             ff::small_model_pt({ff::deflated_entry("version", ff::deflate_parts({{"3", 1}, {zeros, 8}}))}));
  // the byteorder record PyTorch >= 2.1 writes: little (read), big (refused), and 8 MiB behind it (bounded read)
  write_seed(dir / "byteorder-little.pt", ff::small_model_pt({ff::stored_entry("byteorder", "little")}));
  write_seed(dir / "byteorder-big.pt", ff::small_model_pt({ff::stored_entry("byteorder", "big")}));
  write_seed(dir / "big-byteorder.pt",
             ff::small_model_pt({ff::deflated_entry("byteorder", ff::deflate_parts({{"little", 1}, {zeros, 8}}))}));
  {  // lying sizes: 1032 times the deflated size; all-ones sizes; a duplicate name
    std::string noise(30'000, '\0');
    for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
    ff::ZipEntry liar = ff::deflated_entry("data/0", ff::deflate_parts({{noise, 1}}, 1));
    liar.size = liar.stored.size() * 1032;
    write_seed(dir / "claim-1032.pt", ff::small_model_pt({liar}));
    ff::ZipEntry ones = ff::stored_entry("version", "3\n");
    ones.sizes_all_ones = true;
    write_seed(dir / "sizes-ff.pt", ff::small_model_pt({ones}));
    const auto tensors = ff::small_model_tensors();
    std::vector<ff::ZipEntry> records;
    for (const auto& t : tensors) records.push_back(ff::stored_entry("data/" + t.storage, ff::storage_bytes(t)));
    records.push_back(records[0]);
    write_seed(dir / "duplicate.pt", ff::torch_zip(ff::stored_entry("", ff::state_dict_pickle(tensors)), records));
  }
  {  // control bytes in a key, a storage name and a global; a U8 storage of 48 KB against 0.weight
    auto tensors = ff::small_model_tensors();
    tensors[1].key = std::string("b\x1b[2J\0\x7f", 7);
    tensors[2].storage = std::string("2\x01", 2);
    write_seed(dir / "control.pt", ff::small_model_pt({}, ff::state_dict_pickle(tensors)));
    ff::Pickle global;
    global.global("os\x1b", std::string("sys\0tem", 7)).op(')').op('R');
    pickle_only("global.pkl", global.finish());
    tensors = ff::small_model_tensors();
    tensors[0].storage_type = "ByteStorage";
    tensors[0].storage_numel = 48'000;
    write_seed(dir / "u8-storage.pt", ff::small_model_pt({ff::stored_entry("data/0", std::string(48'000, '\1'))},
                                                         ff::state_dict_pickle(tensors)));
  }
  // a legacy (pre-1.6) file: a raw pickle, no zip
  write_seed(dir / "legacy.pt", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 14) +
                                    std::string("\x80\x02M\xe9\x03.", 6));
}

void hostile_safetensors_seeds(const fs::path& dir) {
  namespace ff = tapegrad::testing::foreign_files;
  const auto [entries, data] = ff::small_model_safetensors_entries();
  write_seed(dir / "deep-json.safetensors",
             ff::safetensors_file("{\"a\":" + std::string(30'000, '[') + std::string(30'000, ']') + ",\"b\":0}", ""));
  std::string metadata = "{\"__metadata__\":{";
  for (int i = 0; i < 4000; ++i) metadata += fmt::format("{}\"{}\":\"v\"", i ? "," : "", i);
  write_seed(dir / "metadata-4000.safetensors", ff::safetensors_file(metadata + "}," + entries + "}", data));
  std::string empty = "{";
  for (int i = 0; i < 1000; ++i) empty += ff::safetensors_entry(fmt::format("{}", i), "F32", "[0]", 0, 0) + ",";
  write_seed(dir / "empty-1000.safetensors", ff::safetensors_file(empty + entries + "}", data));
  for (const char* dtype : {"U8", "BOOL"}) {
    std::string header = "{" + ff::safetensors_entry("1.running_mean", dtype, "[48000]", 0, 48'000);
    std::string bytes(48'000, '\1');
    for (const auto& t : ff::small_model_tensors()) {
      if (t.key == "1.running_mean") continue;
      const std::string b = ff::storage_bytes(t);
      header += "," + ff::safetensors_entry(t.key, t.storage_type == "LongStorage" ? "I64" : "F32", ff::shape_text(t.size),
                                            bytes.size(), bytes.size() + b.size());
      bytes += b;
    }
    write_seed(dir / fmt::format("wide-{}.safetensors", dtype), ff::safetensors_file(header + "}", bytes));
  }
  write_seed(dir / "nested-shape.safetensors",
             ff::safetensors_file("{" + ff::safetensors_entry("t", "F32", std::string(5000, '[') + std::string(5000, ']'), 0, 0) + "}", ""));
  write_seed(dir / "control-key.safetensors",
             ff::safetensors_file("{" + ff::safetensors_entry("x\\u001b[2J\\u0000", "F\\u0007", "[1]", 0, 4) + "}",
                                  std::string(4, '\0')));
}

}  // namespace

void image_seeds(const fs::path& dir);  // image_seeds.cpp
void csv_seeds(const fs::path& dir);    // image_seeds.cpp

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n  writes a seed corpus for each fuzz target into DIR/<target>/\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* target : {"checkpoint_fuzz", "idx_fuzz", "pytorch_fuzz", "safetensors_fuzz", "image_fuzz", "csv_fuzz"})
    fs::create_directories(root / target);
  checkpoint_seeds(root / "checkpoint_fuzz");
  idx_seeds(root / "idx_fuzz");
  foreign_seeds(root / "pytorch_fuzz", root / "safetensors_fuzz");
  hostile_pytorch_seeds(root / "pytorch_fuzz");
  hostile_safetensors_seeds(root / "safetensors_fuzz");
  image_seeds(root / "image_fuzz");
  csv_seeds(root / "csv_fuzz");
  std::printf("fuzz_seeds: corpora written under %s\n", root.c_str());
  return 0;
}

// PyTorch and safetensors files without PyTorch: round trips, key handling, the pickle whitelist, header checks,
// and damaged files (tests/test_interop_torch.cpp checks the same formats against real PyTorch).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/detail/pickle.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

std::shared_ptr<nn::Sequential> make_net(DType dtype = DType::Float32, std::uint64_t seed = 1) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(3, 2)});
  net->to(dtype);
  NoGradGuard no_grad;
  for (auto& [name, t] : net->state())  // every entry a value a fresh model would not have
    if (name == "1.running_mean" || name == "1.running_var") {
      Tensor target = t;
      target.copy_(rand(t.shape(), default_generator(), TensorOptions{}.with_dtype(dtype)).add_(0.5));
    } else if (name == "1.num_batches_tracked") {
      Tensor target = t;
      target.fill_(static_cast<double>(seed * 100));
    }
  return net;
}

bool same_state(const nn::Module& a, const nn::Module& b) {
  const auto sa = a.state(), sb = b.state();
  if (sa.size() != sb.size()) return false;
  for (std::size_t i = 0; i < sa.size(); ++i)
    if (sa[i].first != sb[i].first || !identical(sa[i].second, sb[i].second)) return false;
  return true;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() / fmt::format("tapegrad-interop-{}-{}", ::getpid(), counter++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A string literal's bytes, embedded NULs included.
template <std::size_t N>
std::string raw(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

// A safetensors file from a JSON header and data bytes, as the format lays it out.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  const std::uint64_t length = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("a model saved in either format loads bit-identically into a fresh one") {
  TempDir dir;
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const std::string name : {"m.pt", "m.safetensors"}) {
      INFO(name << " " << dtype_name(dtype));
      const auto saved = make_net(dtype, 1);
      const std::string path = dir.file(name);
      name == "m.pt" ? save_pytorch(*saved, path) : save_safetensors(*saved, path);
      auto loaded = make_net(dtype, 2);
      CHECK_FALSE(same_state(*saved, *loaded));
      const nn::LoadResult result = name == "m.pt" ? load_pytorch(*loaded, path) : load_safetensors(*loaded, path);
      CHECK(result.missing_keys.empty());
      CHECK(result.unexpected_keys.empty());
      const auto a = pytorch_state(*saved), b = pytorch_state(*loaded);
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(identical(a[i].second, b[i].second));
      // load() recognises the format by its first bytes.
      auto again = make_net(dtype, 3);
      load(*again, path);
      CHECK(identical(again->state()[0].second, saved->state()[0].second));
    }
}

TEST_CASE("the files hold PyTorch's keys only; tapegrad-only buffers keep their values on load") {
  TempDir dir;
  const auto saved = make_net();
  save_pytorch(*saved, dir.file("m.pt"));
  save_safetensors(*saved, dir.file("m.safetensors"));
  const std::vector<std::string> torch_keys = {"0.weight",     "0.bias",           "1.weight",
                                               "1.bias",       "1.running_mean",   "1.running_var",
                                               "1.num_batches_tracked", "4.weight", "4.bias"};
  for (const std::string name : {"m.pt", "m.safetensors"}) {
    const std::string bytes = foreign::read_whole_file(dir.file(name), "test");
    const auto tensors = name == "m.pt" ? read_pytorch(bytes, name) : read_safetensors(bytes, name);
    std::vector<std::string> keys;
    for (const ForeignTensor& t : tensors) keys.push_back(t.name);
    CHECK(keys == torch_keys);
    CHECK(tensors[6].stored_dtype == "int64");
    CHECK(tensors[6].value.item() == 100);

    auto target = make_net(DType::Float32, 4);
    auto& bn = dynamic_cast<nn::BatchNorm1d&>(*target->named_children()[1].second);
    bn.freeze();
    const Tensor dropout_seed = target->named_children()[3].second->buffer("mask_seed").clone();
    load(*target, dir.file(name));
    CHECK(bn.frozen());  // `frozen` is not in the file, so the flag stays
    CHECK(identical(target->named_children()[3].second->buffer("mask_seed"), dropout_seed));
  }
}

TEST_CASE("strict loads refuse missing and unexpected keys, non-strict ones report them; failures change nothing") {
  TempDir dir;
  const auto big = make_net();
  save_pytorch(*big, dir.file("big.pt"));
  auto small = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3)});
  const auto before = small->clone();
  CHECK_THROWS_WITH(load_pytorch(*small, dir.file("big.pt")),
                    Catch::Contains("big.pt") && Catch::Contains("unexpected key") && Catch::Contains("1.running_var"));
  CHECK(same_state(*small, *before));
  const nn::LoadResult result = load_pytorch(*small, dir.file("big.pt"), /*strict=*/false);
  CHECK(result.unexpected_keys.size() == 7);
  CHECK(identical(small->state()[0].second, big->state()[0].second));

  // A model with more state than the file: missing keys; a different width: a size mismatch naming the key.
  save_safetensors(*small, dir.file("small.safetensors"));
  auto target = make_net(DType::Float32, 9);
  const auto untouched = target->clone();
  CHECK_THROWS_WITH(load(*target, dir.file("small.safetensors")), Catch::Contains("missing keys"));
  CHECK(same_state(*target, *untouched));
  auto wide = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 3)});
  CHECK_THROWS_WITH(load(*wide, dir.file("small.safetensors")),
                    Catch::Contains("0.weight") && Catch::Contains("[3, 4]") && Catch::Contains("[3, 5]"));
}

TEST_CASE("the pickle reader executes nothing: other globals and opcodes are refused by name") {
  using pickle::unpickle;
  // os.system("ls") as pickle protocol 2 writes it.
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02" "cposix\nsystem\nX\x02\x00\x00\x00ls\x85R."), "evil"),
                    Catch::Contains("global 'posix.system' is not allowed") && Catch::Contains("byte 2"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02" "c__builtin__\neval\n."), "evil"),
                    Catch::Contains("'__builtin__.eval'"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02I1\n."), "old"), Catch::Contains("opcode 0x49 ('I')"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02" "ccollections\nOrderedDict\nK\x01\x85R."), "args"),
                    Catch::Contains("OrderedDict called with arguments"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02}q\x00h\x01."), "memo"), Catch::Contains("memo entry 1"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02X\xff\xff\xff\x00"), "long"), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(unpickle(raw("\x80\x02u."), "mark"), Catch::Contains("no MARK"));
  // A dict that holds itself is harmless: the arena owns every object.
  const auto cyclic = unpickle(raw("\x80\x02}q\x00X\x01\x00\x00\x00" "ah\x00s."), "cycle");
  CHECK(cyclic.root->entries.at(0).second == cyclic.root);
}

TEST_CASE("safetensors headers are checked: offsets, overlap, gaps, dtypes, JSON, lengths") {
  const std::string four_floats(16, '\0');
  const auto read = [](const std::string& bytes) { return read_safetensors(bytes, "t.safetensors"); };
  CHECK(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", four_floats)).size() == 1);
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                                           std::string(8, '\0'))),
                    Catch::Contains("cover 16 data bytes but the file holds 8"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", four_floats)),
                    Catch::Contains("tensor 'a'") && Catch::Contains("[2, 3]") && Catch::Contains("needs 24"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                           std::string(12, '\0'))),
                    Catch::Contains("overlap"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", four_floats)),
                    Catch::Contains("gap"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", four_floats)),
                    Catch::Contains("dtype 'C64'"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four_floats)),
                    Catch::Contains("non-negative integer"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                                           R"("data_offsets":[0,16]}})", four_floats)),
                    Catch::Contains("overflow") || Catch::Contains("more elements"));
  CHECK_THROWS_WITH(read(safetensors_bytes(R"({"a":)", four_floats)), Catch::Contains("JSON header"));
  std::string huge = safetensors_bytes("{}", "");
  huge[7] = '\x7f';
  CHECK_THROWS_WITH(read(huge), Catch::Contains("header length") && Catch::Contains("offset 0"));
  CHECK_THROWS_WITH(read("short"), Catch::Contains("too short"));
}

TEST_CASE("files are told apart by their first bytes") {
  CHECK(sniff_state_format("TAPEGRAD 1 binary") == StateFormat::Checkpoint);
  CHECK(sniff_state_format(raw("PK\x03\x04rest")) == StateFormat::PyTorch);
  CHECK(sniff_state_format(safetensors_bytes("{}", "")) == StateFormat::Safetensors);
  CHECK(sniff_state_format("hello, world") == StateFormat::Unknown);
  CHECK(sniff_state_format("") == StateFormat::Unknown);
  TempDir dir;
  write_bytes(dir.file("junk"), "not a model file at all");
  auto net = make_net();
  CHECK_THROWS_WITH(load(*net, dir.file("junk")), Catch::Contains("not a tapegrad checkpoint"));
}

TEST_CASE("thousands of truncated and damaged files each fail cleanly or load the undamaged values") {
  TempDir dir;
  const auto saved = make_net(DType::Float32, 1);
  for (const std::string name : {"m.pt", "m.safetensors"}) {
    const std::string path = dir.file(name), damaged_path = dir.file("damaged-" + name);
    name == "m.pt" ? save_pytorch(*saved, path) : save_safetensors(*saved, path);
    const std::string good = foreign::read_whole_file(path, "test");
    std::uint64_t header = 0;  // safetensors: where the data starts (values there carry no checksum)
    std::memcpy(&header, good.data(), 8);
    const std::size_t data_start = name == "m.pt" ? good.size() : 8 + static_cast<std::size_t>(header);
    Generator g(name == "m.pt" ? 1 : 2);
    std::uniform_int_distribution<std::size_t> position(0, good.size() - 1);
    std::uniform_int_distribution<int> bit(0, 7), mode(0, 2);
    int refused = 0;
    for (int trial = 0; trial < 1500; ++trial) {
      std::string bytes = good;
      std::size_t first_damage = bytes.size();
      switch (mode(g.engine())) {
        case 0: bytes.resize(first_damage = position(g.engine())); break;
        case 1: {
          first_damage = position(g.engine());
          bytes[first_damage] ^= static_cast<char>(1 << bit(g.engine()));
          break;
        }
        default:
          for (int k = 0; k < 4; ++k) {
            const std::size_t at = position(g.engine());
            first_damage = std::min(first_damage, at);
            bytes[at] = static_cast<char>(g.engine()());
          }
      }
      if (bytes == good) continue;
      write_bytes(damaged_path, bytes);
      auto target = make_net(DType::Float32, 5);
      const auto before = target->clone();
      try {
        load(*target, damaged_path);
      } catch (const Error&) {
        ++refused;
        if (!same_state(*target, *before)) FAIL("a failed load changed the model (trial " << trial << ")");
        continue;
      }
      // Accepted: then the damage missed everything that matters (zip CRCs cover .pt records; a safetensors file
      // has no checksum, so damage inside its data is a different, valid file).
      if (first_damage < data_start) {
        const auto a = pytorch_state(*saved), b = pytorch_state(*target);
        for (std::size_t i = 0; i < a.size(); ++i)
          if (!identical(a[i].second, b[i].second))
            FAIL(name << ": damage at byte " << first_damage << " loaded different values (trial " << trial << ")");
      }
    }
    INFO(name << ": " << refused << " of 1500 damaged files refused");
    CHECK(refused > (name == "m.pt" ? 1000 : 400));
  }
}

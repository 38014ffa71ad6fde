// bfloat16 tensors in every format tapegrad reads and writes, bit for bit: torch 1.13's own .pt and safetensors
// files (tests/data/bfloat16_tensors.*, made by tests/reference/make_bfloat16_reference.py: NaN, +-inf,
// subnormals, -0, the largest finite), tapegrad's checkpoint (binary and text), and the .pt and safetensors files
// tapegrad writes, which python3 + torch reads back in this test (a missing python3 or torch fails it).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/tapegrad.h>
#include "support/properties.h"

namespace {

using tapegrad::BFloat16;
using tapegrad::DType;
using tapegrad::Tensor;

// The bits make_bfloat16_reference.py stores as "special".
const std::vector<std::uint16_t> kSpecial = {0x7FC0, 0xFFC0, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F, 0x0080,
                                             0x8000, 0x0000, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x4049, 0x7FA0};

std::vector<std::uint16_t> bits_of(const Tensor& t) {
  REQUIRE(t.dtype() == DType::BFloat16);
  const Tensor c = t.contiguous();
  std::vector<std::uint16_t> out;
  for (std::int64_t i = 0; i < c.numel(); ++i) out.push_back(c.data<BFloat16>()[i].bits);
  return out;
}

Tensor from_bits(const std::vector<std::uint16_t>& bits, const tapegrad::Shape& shape) {
  Tensor t = tapegrad::empty(shape, DType::BFloat16);
  for (std::size_t i = 0; i < bits.size(); ++i) t.data<BFloat16>()[i] = BFloat16{bits[i]};
  return t;
}

// grid = (0.1 * arange(15, float64) - 0.7).to(bfloat16): through float, as torch (test_bfloat16_dtype checks that).
std::vector<std::uint16_t> grid_bits() {
  std::vector<std::uint16_t> out;
  for (int k = 0; k < 15; ++k) out.push_back(tapegrad::bfloat16_from_float(static_cast<float>(0.1 * k - 0.7)).bits);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Note: appended, not std::string(...) + "/" + name: compiled in a test batch (TAPEGRAD_TEST_UNITY) at -O1, GCC 12
// reports a false -Warray-bounds inside the moved temporary's copy.
std::string data_file(const char* name) {
  std::string path = TAPEGRAD_TEST_DATA_DIR "/";
  path += name;
  return path;
}

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tapegrad_bf16_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// special (bf16 [16]) and grid (bf16 [3, 5]) as buffers, wide (float32 [4]) as a parameter: the keys of the files.
struct Holder : tapegrad::nn::Module {
  Holder(DType grid_dtype, DType wide_dtype) {
    register_buffer("special", tapegrad::zeros({16}, tapegrad::TensorOptions{}.with_dtype(DType::BFloat16)));
    register_buffer("grid", tapegrad::zeros({3, 5}, tapegrad::TensorOptions{}.with_dtype(grid_dtype)));
    register_buffer("wide", tapegrad::zeros({4}, tapegrad::TensorOptions{}.with_dtype(wide_dtype)));
  }
  Tensor get(const std::string& name) const {
    for (const auto& [key, value] : named_buffers())
      if (key == name) return value;
    FAIL("no buffer " << name);
    return {};
  }
};

void check_torch_tensors(const std::vector<tapegrad::ForeignTensor>& tensors) {
  REQUIRE(tensors.size() == 3);
  for (const auto& t : tensors) {
    INFO(t.name);
    if (t.name == "special") {
      CHECK(t.stored_dtype == "bfloat16");
      CHECK(t.value.shape() == tapegrad::Shape{16});
      CHECK(bits_of(t.value) == kSpecial);
    } else if (t.name == "grid") {
      CHECK(t.value.shape() == tapegrad::Shape{3, 5});
      CHECK(bits_of(t.value) == grid_bits());
    } else {
      CHECK(t.name == "wide");
      CHECK(t.value.dtype() == DType::Float32);
      CHECK(t.value.to_vector() == std::vector<double>{1.5, -2.25, static_cast<double>(3.0e-3f), 7.0});
    }
  }
}

}  // namespace

TEST_CASE("torch 1.13's bfloat16 tensors read bit for bit from .pt and safetensors") {
  check_torch_tensors(tapegrad::read_pytorch(read_file(data_file("bfloat16_tensors.pt")), "bfloat16_tensors.pt"));
  check_torch_tensors(
      tapegrad::read_safetensors(read_file(data_file("bfloat16_tensors.safetensors")), "bfloat16_tensors.safetensors"));
}

TEST_CASE("torch's bfloat16 files load into bfloat16, float32 and float64 module entries, converted as torch") {
  for (const bool pt : {true, false}) {
    INFO((pt ? ".pt" : "safetensors"));
    Holder m(DType::Float32, DType::BFloat16);  // grid bf16 -> float32 (exact), wide float32 -> bf16 (rounded)
    if (pt)
      tapegrad::load_pytorch(m, data_file("bfloat16_tensors.pt"));
    else
      tapegrad::load_safetensors(m, data_file("bfloat16_tensors.safetensors"));
    CHECK(bits_of(m.get("special")) == kSpecial);
    std::vector<double> grid;
    for (auto b : grid_bits()) grid.push_back(tapegrad::bfloat16_to_float(BFloat16{b}));
    CHECK(m.get("grid").dtype() == DType::Float32);
    CHECK(m.get("grid").to_vector() == grid);
    CHECK(bits_of(m.get("wide")) ==
          std::vector<std::uint16_t>{0x3FC0, 0xC010, tapegrad::bfloat16_from_float(3.0e-3f).bits, 0x40E0});
  }
}

TEST_CASE("tapegrad's checkpoint, .pt and safetensors keep bfloat16 bits; torch reads tapegrad's files") {
  Holder m(DType::BFloat16, DType::Float32);
  m.get("special").copy_(from_bits(kSpecial, {16}));
  m.get("grid").copy_(from_bits(grid_bits(), {3, 5}));
  m.get("wide").copy_(tapegrad::from_vector(std::vector<double>{1.5, -2.25, 3.0e-3, 7.0}, {4}));
  // copy_ between bfloat16 tensors moves the bits (a NaN payload included).
  REQUIRE(bits_of(m.get("special")) == kSpecial);

  const std::string binary = scratch("model.tg"), text = scratch("model_text.tg"), pt = scratch("model.pt"),
                    st = scratch("model.safetensors");
  tapegrad::save(m, binary);
  tapegrad::save(m, text, tapegrad::ArchiveKind::Text);
  tapegrad::save_pytorch(m, pt);
  tapegrad::save_safetensors(m, st);
  for (const std::string& path : {binary, text, pt, st}) {
    INFO(path);
    Holder back(DType::BFloat16, DType::Float32);
    tapegrad::load(back, path);  // sniffs the format
    CHECK(bits_of(back.get("special")) == kSpecial);
    CHECK(bits_of(back.get("grid")) == grid_bits());
    CHECK(back.get("wide").to_vector() == m.get("wide").to_vector());
  }

  // torch reads the .pt and the safetensors bytes: dtype bfloat16, the same bits.
  const std::string script = scratch("check.py");
  {
    std::ofstream py(script);
    py << "import json, struct, sys, torch\n"
          "special = "
       << fmt::format("{}", kSpecial)
       << "\n"
          "grid = "
       << fmt::format("{}", grid_bits())
       << "\n"
          "def bits(t):\n"
          "    return [b & 0xFFFF for b in t.contiguous().view(torch.int16).flatten().tolist()]\n"
          "sd = torch.load(sys.argv[1])\n"
          "assert sd['special'].dtype == torch.bfloat16 and bits(sd['special']) == special, sd['special']\n"
          "assert sd['grid'].dtype == torch.bfloat16 and sd['grid'].shape == (3, 5) and bits(sd['grid']) == grid\n"
          "assert sd['wide'].dtype == torch.float32\n"
          "raw = open(sys.argv[2], 'rb').read()\n"
          "n = struct.unpack('<Q', raw[:8])[0]\n"
          "header = json.loads(raw[8:8 + n])\n"
          "for name, want in (('special', special), ('grid', grid)):\n"
          "    e = header[name]\n"
          "    assert e['dtype'] == 'BF16', e\n"
          "    a, b = e['data_offsets']\n"
          "    t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.bfloat16)\n"
          "    assert bits(t) == want, (name, t)\n"
          "print('torch read tapegrad bfloat16 files: ok')\n";
  }
  const char* python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string command = fmt::format("{} '{}' '{}' '{}'", python, script, pt, st);
  CHECK(std::system(command.c_str()) == 0);
  for (const std::string& path : {binary, text, pt, st, script}) std::filesystem::remove(path);
}

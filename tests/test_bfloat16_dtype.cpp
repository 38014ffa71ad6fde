// The bfloat16 dtype: the scalar conversions and every run-time path of the array conversion kernel against
// torch 1.13's conversion (tests/data/bfloat16_reference.txt, made by tests/reference/make_bfloat16_reference.py)
// and against each other; all 2^16 bfloat16 values round-trip; the tensor-level dtype (factories, to, copy_,
// item, printing, the ops that only move elements). Under scripts/portability.sh this runs the AVX2 and scalar
// paths; natively, every path this CPU has (AVX512-BF16, AVX-512, AVX2, scalar on this project's machine).
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/kernels/bfloat16_convert.h>
#include <tapegrad/tapegrad.h>
#include "support/properties.h"

namespace {

using tapegrad::BFloat16;
using tapegrad::DType;
using tapegrad::Tensor;

struct Reference {
  std::vector<std::uint32_t> f32_in;
  std::vector<std::uint16_t> f32_out;
  std::vector<double> f64_in;
  std::vector<std::uint16_t> f64_out;
  std::vector<std::int64_t> i64_in;
  std::vector<std::uint16_t> i64_out;
  std::vector<std::uint16_t> b2i_in;
  std::vector<std::int64_t> b2i_out;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    std::ifstream in(std::string(TAPEGRAD_TEST_DATA_DIR) + "/bfloat16_reference.txt");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream words(line);
      std::string kind, a, b;
      words >> kind >> a >> b;
      const auto hex = [](const std::string& s) { return static_cast<std::uint32_t>(std::stoul(s, nullptr, 16)); };
      if (kind == "f32") {
        r.f32_in.push_back(hex(a));
        r.f32_out.push_back(static_cast<std::uint16_t>(hex(b)));
      } else if (kind == "f64") {
        r.f64_in.push_back(std::stod(a));
        r.f64_out.push_back(static_cast<std::uint16_t>(hex(b)));
      } else if (kind == "i64") {
        r.i64_in.push_back(std::stoll(a));
        r.i64_out.push_back(static_cast<std::uint16_t>(hex(b)));
      } else if (kind == "b2i") {
        r.b2i_in.push_back(static_cast<std::uint16_t>(hex(a)));
        r.b2i_out.push_back(std::stoll(b));
      }
    }
    return r;
  }();
  REQUIRE(ref.f32_in.size() > 3000);
  return ref;
}

bool is_nan_bits(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

std::vector<float> floats_of(const std::vector<std::uint32_t>& bits) {
  std::vector<float> out;
  for (auto b : bits) out.push_back(std::bit_cast<float>(b));
  return out;
}

// torch's bits for a non-NaN; for a NaN, torch 1.13 gives 0xffff (its sign is lost), tapegrad keeps the sign
// and quiets it: (bits >> 16) | 0x40 (bfloat16.h says why).
void check_against_torch(std::uint32_t in, std::uint16_t got, std::uint16_t torch_bits) {
  INFO("float bits " << std::hex << in << " got " << got << " torch " << torch_bits);
  if (is_nan_bits(torch_bits)) {
    CHECK(got == static_cast<std::uint16_t>((in >> 16) | 0x40u));
  } else {
    CHECK(got == torch_bits);
  }
}

}  // namespace

TEST_CASE("float -> bfloat16 rounds as torch 1.13 on random bits, ties, overflow, subnormals, inf and -0") {
  const Reference& ref = reference();
  std::size_t nans = 0, ties = 0, subnormals = 0;
  for (std::size_t i = 0; i < ref.f32_in.size(); ++i) {
    const std::uint32_t in = ref.f32_in[i];
    check_against_torch(in, tapegrad::bfloat16_from_float(std::bit_cast<float>(in)).bits, ref.f32_out[i]);
    nans += is_nan_bits(ref.f32_out[i]);
    ties += (in & 0xffffu) == 0x8000u;
    subnormals += (in & 0x7f800000u) == 0 && (in & 0x7fffffu) != 0;
  }
  // The file covers what it claims to (so the loop above cannot pass on an empty or one-sided sample).
  CHECK(nans > 10);
  CHECK(ties >= 13);
  CHECK(subnormals >= 10);
}

TEST_CASE("every conversion path gives the scalar function's bits at every length, on torch's inputs") {
  const Reference& ref = reference();
  const std::vector<float> in = floats_of(ref.f32_in);
  const std::vector<std::string> paths = tapegrad::kernels::bfloat16_convert_kernels();
  REQUIRE(!paths.empty());
  CHECK(paths.front() == tapegrad::kernels::bfloat16_convert_kernel());
  CHECK(paths.back() == "scalar");
  for (const std::string& path : paths) {
    INFO("path " << path);
    std::vector<std::uint16_t> out(in.size());
    tapegrad::kernels::float_to_bfloat16_on(path, in.data(), out.data(), static_cast<std::int64_t>(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i) check_against_torch(ref.f32_in[i], out[i], ref.f32_out[i]);
    // Every length around the vector widths, at an odd offset: the tails take the scalar loop.
    for (std::int64_t n = 0; n <= 40; ++n) {
      std::vector<std::uint16_t> part(static_cast<std::size_t>(n) + 1, 0xabcd);
      tapegrad::kernels::float_to_bfloat16_on(path, in.data() + 7, part.data(), n);
      for (std::int64_t i = 0; i < n; ++i)
        CHECK(part[static_cast<std::size_t>(i)] ==
              tapegrad::bfloat16_from_float(in[static_cast<std::size_t>(i) + 7]).bits);
      CHECK(part.back() == 0xabcd);  // nothing written past n
    }
  }
}

TEST_CASE("all 2^16 bfloat16 values: to float is exact on every path, and back gives the same bits") {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<std::uint16_t>(b);
  for (const std::string& path : tapegrad::kernels::bfloat16_convert_kernels()) {
    INFO("path " << path);
    std::vector<float> wide(all.size());
    std::vector<std::uint16_t> back(all.size());
    tapegrad::kernels::bfloat16_to_float_on(path, all.data(), wide.data(), 65536);
    tapegrad::kernels::float_to_bfloat16_on(path, wide.data(), back.data(), 65536);
    std::size_t mismatches = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      mismatches += std::bit_cast<std::uint32_t>(wide[b]) != b << 16;
      // A signalling NaN comes back quiet (bit 6 set), as from vcvtneps2bf16; everything else unchanged.
      const std::uint16_t expected = is_nan_bits(static_cast<std::uint16_t>(b)) ? static_cast<std::uint16_t>(b | 0x40u)
                                                                                : static_cast<std::uint16_t>(b);
      mismatches += back[b] != expected;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("random floats: every path agrees with the scalar function (RapidCheck)") {
  const std::vector<std::string> paths = tapegrad::kernels::bfloat16_convert_kernels();
  rc::prop("bits match", [&] {
    const auto bits = *rc::gen::container<std::vector<std::uint32_t>>(rc::gen::arbitrary<std::uint32_t>());
    const std::vector<float> in = floats_of(bits);
    for (const std::string& path : paths) {
      std::vector<std::uint16_t> out(in.size());
      tapegrad::kernels::float_to_bfloat16_on(path, in.data(), out.data(), static_cast<std::int64_t>(in.size()));
      for (std::size_t i = 0; i < in.size(); ++i) RC_ASSERT(out[i] == tapegrad::bfloat16_from_float(in[i]).bits);
    }
  });
}

TEST_CASE("Tensor::to(BFloat16) from float32, float64 and int64, and back to int64, give torch's values") {
  const Reference& ref = reference();
  const auto bits_of = [](const Tensor& t) {
    std::vector<std::uint16_t> out;
    const BFloat16* p = t.data<BFloat16>();
    for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(p[i].bits);
    return out;
  };
  std::vector<float> f32 = floats_of(ref.f32_in);
  const Tensor from_f32 = tapegrad::from_vector(f32, {static_cast<std::int64_t>(f32.size())}).to(DType::BFloat16);
  CHECK(from_f32.dtype() == DType::BFloat16);
  const auto got32 = bits_of(from_f32);
  for (std::size_t i = 0; i < f32.size(); ++i) check_against_torch(ref.f32_in[i], got32[i], ref.f32_out[i]);

  const Tensor f64 = tapegrad::from_vector(ref.f64_in, {static_cast<std::int64_t>(ref.f64_in.size())},
                                           tapegrad::TensorOptions{}.with_dtype(DType::Float64));
  CHECK(bits_of(f64.to(DType::BFloat16)) == ref.f64_out);

  std::vector<double> ints(ref.i64_in.begin(), ref.i64_in.end());
  Tensor i64 = tapegrad::empty({static_cast<std::int64_t>(ints.size())}, DType::Int64);
  for (std::size_t i = 0; i < ints.size(); ++i) i64.data<std::int64_t>()[i] = ref.i64_in[i];
  CHECK(bits_of(i64.to(DType::BFloat16)) == ref.i64_out);

  Tensor b = tapegrad::empty({static_cast<std::int64_t>(ref.b2i_in.size())}, DType::BFloat16);
  for (std::size_t i = 0; i < ref.b2i_in.size(); ++i) b.data<BFloat16>()[i] = BFloat16{ref.b2i_in[i]};
  const Tensor back = b.to(DType::Int64);
  for (std::size_t i = 0; i < ref.b2i_in.size(); ++i) CHECK(back.data<std::int64_t>()[i] == ref.b2i_out[i]);
  // bfloat16 -> float32 / float64 exact.
  const Tensor wide = b.to(DType::Float64);
  for (std::size_t i = 0; i < ref.b2i_in.size(); ++i)
    CHECK(wide.data<double>()[i] == static_cast<double>(tapegrad::bfloat16_to_float(BFloat16{ref.b2i_in[i]})));
}

TEST_CASE("bfloat16 dtype facts, factories, item, copy_ and printing") {
  CHECK(tapegrad::dtype_name(DType::BFloat16) == "bfloat16");
  CHECK(tapegrad::element_size(DType::BFloat16) == 2);
  CHECK(tapegrad::is_floating(DType::BFloat16));
  CHECK(static_cast<int>(DType::BFloat16) == 3);
  static_assert(tapegrad::dtype_of<BFloat16>() == DType::BFloat16);
  const auto bf = tapegrad::TensorOptions{}.with_dtype(DType::BFloat16);
  CHECK(tapegrad::zeros({2, 3}, bf).to_vector() == std::vector<double>(6, 0.0));
  CHECK(tapegrad::ones({4}, bf).to_vector() == std::vector<double>(4, 1.0));
  CHECK(tapegrad::full({2}, 0.1, bf).to_vector() == std::vector<double>(2, 0.10009765625));  // torch.full: same
  CHECK(tapegrad::arange(0.0, 3.0, 1.0, DType::BFloat16).to_vector() == std::vector<double>{0, 1, 2});
  CHECK(tapegrad::from_vector(std::vector<double>{257.0, -1.5}, {2}, bf).to_vector() == std::vector<double>{256, -1.5});
  const Tensor x = tapegrad::full({}, 3.140625, bf);
  CHECK(x.item() == 3.140625);
  CHECK(x.item<float>() == 3.140625f);
  CHECK(x.item<double>() == 3.140625);

  Tensor target = tapegrad::zeros({2, 2}, bf);
  target.copy_(tapegrad::from_vector(std::vector<double>{1.0, 1.00390625, 1.01171875, -3.0}, {2, 2}));
  CHECK(target.to_vector() == std::vector<double>{1.0, 1.0, 1.015625, -3.0});  // ties to even
  Tensor column = target.select(1, 0);                                         // a strided view
  column.copy_(tapegrad::full({2}, 7.0));
  CHECK(target.to_vector() == std::vector<double>{7.0, 1.0, 7.0, -3.0});
  target.fill_(0.5);
  CHECK(target.to_vector() == std::vector<double>(4, 0.5));
  CHECK(tapegrad::to_string(tapegrad::full({2}, 0.5, bf)) == "tensor([0.5000, 0.5000], shape=[2], dtype=bfloat16)");
}

TEST_CASE("ops that only move elements work on bfloat16 and keep the bits") {
  const auto bf = tapegrad::TensorOptions{}.with_dtype(DType::BFloat16);
  const Tensor x = tapegrad::from_vector(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3}, bf);
  const auto values = [](const Tensor& t) {
    CHECK(t.dtype() == DType::BFloat16);
    return t.to_vector();
  };
  CHECK(values(x.t().contiguous()) == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(values(x.t().clone()) == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(values(x.reshape({3, 2})) == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(values(x.t().reshape({6})) == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(values(x.narrow(1, 1, 2)) == std::vector<double>{1, 2, 4, 5});
  CHECK(values(x.slice(1, 0, 3, 2)) == std::vector<double>{0, 2, 3, 5});
  CHECK(values(x.unsqueeze(0).squeeze()) == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(values(x.select(0, 1).expand({2, 3})) == std::vector<double>{3, 4, 5, 3, 4, 5});
  CHECK(values(tapegrad::cat({x, x}, 0)) == std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  CHECK(values(tapegrad::stack({x.select(0, 0), x.select(0, 1)}, 1)) == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(values(tapegrad::flip(x, {1})) == std::vector<double>{2, 1, 0, 5, 4, 3});
  CHECK(values(tapegrad::triu(x)) == std::vector<double>{0, 1, 2, 0, 4, 5});
  CHECK(values(tapegrad::permute(x, {1, 0}).contiguous()) == std::vector<double>{0, 3, 1, 4, 2, 5});
  const Tensor index = tapegrad::flip(tapegrad::arange(0.0, 2.0, 1.0, DType::Int64), {0});
  CHECK(values(tapegrad::index_select(x, 0, index)) == std::vector<double>{3, 4, 5, 0, 1, 2});
  CHECK(values(x.split(1, 1)[2]) == std::vector<double>{2, 5});
  CHECK(values(x.view({3, 2}).chunk(3, 0)[1]) == std::vector<double>{2, 3});
  CHECK(values(x.unbind(1)[1]) == std::vector<double>{1, 4});
  Tensor target = tapegrad::zeros({3}, bf);
  target.index_put_({index}, tapegrad::from_vector(std::vector<double>{1.5, 2.5}, {2}, bf));
  CHECK(values(target) == std::vector<double>{2.5, 1.5, 0});
  // A NaN payload and -0 pass through a copy bit for bit.
  Tensor special = tapegrad::empty({3}, DType::BFloat16);
  special.data<BFloat16>()[0] = BFloat16{0xffa1};
  special.data<BFloat16>()[1] = BFloat16{0x8000};
  special.data<BFloat16>()[2] = BFloat16{0x0001};
  const Tensor moved = tapegrad::flip(tapegrad::cat({tapegrad::flip(special, {0}), special}, 0), {0}).contiguous();
  // [0x0001, -0, NaN, NaN, -0, 0x0001] reversed is itself.
  CHECK(moved.data<BFloat16>()[0].bits == 0x0001);
  CHECK(moved.data<BFloat16>()[1].bits == 0x8000);
  CHECK(moved.data<BFloat16>()[2].bits == 0xffa1);
  CHECK(moved.data<BFloat16>()[3].bits == 0xffa1);
}

TEST_CASE("to(BFloat16) is differentiable between floating types; gradients come back in the input's dtype") {
  Tensor w = tapegrad::from_vector(std::vector<double>{0.5, -1.25}, {2}).requires_grad_(true);
  Tensor y = w.to(DType::BFloat16).reshape({2, 1}).t().to(DType::Float32);
  tapegrad::sum(y * y).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
  CHECK(w.grad().to_vector() == std::vector<double>{1.0, -2.5});
}

TEST_CASE("bfloat16 refusals are errors naming bfloat16: gradient accumulation, random factories, in-place math") {
  Tensor w = tapegrad::from_vector(std::vector<double>{0.5, -1.25}, {2}).requires_grad_(true);
  const Tensor low = w.to(DType::BFloat16);
  // low is used twice: its two gradients would have to be added in bfloat16.
  Tensor y = tapegrad::cat({low, low}, 0).to(DType::Float32);
  CHECK_THROWS_WITH(tapegrad::sum(y).backward(), Catch::Contains("bfloat16") && Catch::Contains(".to(DType::Float32)"));
  const auto bf = tapegrad::TensorOptions{}.with_dtype(DType::BFloat16);
  CHECK_THROWS_WITH(tapegrad::randn({2}, tapegrad::default_generator(), bf),
                    Catch::Contains("bfloat16") && Catch::Contains(".to(DType::Float32)"));
  Tensor z = tapegrad::zeros({2}, bf);
  CHECK_THROWS_WITH(z.add_(1.0), Catch::Contains("bfloat16") && Catch::Contains(".to(DType::Float32)"));
  CHECK(z.to_vector() == std::vector<double>{0, 0});
}

TEST_CASE("Module::to(BFloat16) converts parameters and buffers, rounded as to()") {
  tapegrad::nn::Linear linear(3, 2);
  const std::vector<double> weight = linear.weight.to_vector();
  linear.to(DType::BFloat16);
  CHECK(linear.weight.dtype() == DType::BFloat16);
  CHECK(linear.bias.dtype() == DType::BFloat16);
  const std::vector<double> low = linear.weight.to_vector();
  for (std::size_t i = 0; i < weight.size(); ++i)
    CHECK(low[i] == tapegrad::bfloat16_to_float(tapegrad::bfloat16_from_float(static_cast<float>(weight[i]))));
}

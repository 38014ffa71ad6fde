// The float32 matrix product on oneDNN's matmul primitive, which picks its AVX2 / AVX-512 / AMX code from the CPU
// at run time (its brgemm kernels on AVX-512).
//
// Note: why a primitive and not only dnnl_sgemm: for A B^T, the product under every Linear forward, the primitive
// is as fast or faster from 16 rows up (bench/gemm_paths: +9% at 1024x512x784 and +30% at 64x128x3136 on one
// thread, +7% to +67% on two; only a 10-column product was slower, 0.92x on two threads), and it adds the bias
// in its epilogue instead of a separate pass. It needs a primitive per shape
// (creating one JIT-compiles, 0.3-1.5 ms), hence the cache; kernels::gemm holds the rule for which products come
// here.
#include <tapegrad/framework/kernels/matmul_onednn.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <optional>
#include <unordered_map>

#include <tapegrad/framework/kernels/onednn_support.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad::kernels::onednn {

namespace {

using dnnl::memory;

struct Key {
  bool transpose_a, transpose_b, bias, bf16;  // bf16: bfloat16 A and B (f32 bias and C, f32 accumulation)
  std::int64_t m, n, k, lda, ldb, ldc;
  int threads;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    std::size_t hash = (key.bf16 ? 8u : 0u) + (key.transpose_a ? 4u : 0u) + (key.transpose_b ? 2u : 0u) +
                       (key.bias ? 1u : 0u);
    for (std::int64_t field : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, std::int64_t{key.threads}})
      hash = hash * 1000003u ^ static_cast<std::size_t>(field);
    return hash;
  }
};

// The primitive with its operand layouts (tapegrad's strided row-major matrices as they lie: no reorders), or
// nothing when oneDNN has no implementation for them.
struct Entry {
  std::optional<dnnl::matmul> primitive;
  memory::desc a, b, bias, c, scratchpad;
};

// A row-major rows x cols matrix with leading dimension ld, or its transpose (stored cols x rows) when asked.
memory::desc matrix(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool transposed,
                    memory::data_type type = memory::data_type::f32) {
  return memory::desc({rows, cols}, type,
                      transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

std::shared_ptr<const Entry> build(const Key& key) {
  auto entry = std::make_shared<Entry>();
  const memory::data_type operands = key.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  entry->a = matrix(key.m, key.k, key.lda, key.transpose_a, operands);
  entry->b = matrix(key.k, key.n, key.ldb, key.transpose_b, operands);
  entry->c = matrix(key.m, key.n, key.ldc, false);
  if (key.bias) entry->bias = memory::desc({1, key.n}, memory::data_type::f32, memory::format_tag::ab);
  try {
    const dnnl::matmul::desc desc = key.bias ? dnnl::matmul::desc(entry->a, entry->b, entry->bias, entry->c)
                                             : dnnl::matmul::desc(entry->a, entry->b, entry->c);
    const dnnl::matmul::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    entry->primitive.emplace(pd);
    entry->scratchpad = pd.scratchpad_desc();
  } catch (const dnnl::error&) {
    // Note: an unimplemented layout is remembered as such, so the caller's fallback costs no second attempt.
    // bfloat16 is unimplemented on a CPU without AVX-512 (oneDNN 2.6 has no AVX2 bfloat16 matmul, not even its
    // reference one): autocast then takes its float32 fallback (kernels/autocast.cpp).
    entry->primitive.reset();
  }
  return entry;
}

// Note: 64 covers the forward product of every Linear of a deep MLP at a full and a last partial batch (the
// backward products run on sgemm), with room for the x W^T matmuls beside them.
using Cache = LruCache<Key, Entry, KeyHash>;

Cache& cache() {
  static Cache instance(64);
  return instance;
}

// One product on the primitive of `key`; a and b point to float32 or bfloat16 elements as the key says.
bool execute(const Key& key, const void* a, const void* b, const float* bias, float* c) {
  const std::shared_ptr<const Entry> entry = cache().get(key, build);
  if (!entry->primitive) return false;
  const dnnl::engine& engine = cpu_engine();
  std::optional<Storage> scratchpad;
  std::unordered_map<int, memory> arguments{{DNNL_ARG_SRC, memory(entry->a, engine, const_cast<void*>(a))},
                                            {DNNL_ARG_WEIGHTS, memory(entry->b, engine, const_cast<void*>(b))},
                                            {DNNL_ARG_DST, memory(entry->c, engine, c)}};
  if (bias) arguments.emplace(DNNL_ARG_BIAS, memory(entry->bias, engine, const_cast<float*>(bias)));
  if (entry->scratchpad.get_size() > 0) {
    scratchpad.emplace(entry->scratchpad.get_size());
    arguments.emplace(DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, scratchpad->data()));
  }
  dnnl::stream& stream = thread_stream();
  entry->primitive->execute(stream, arguments);
  stream.wait();
  return true;
}

}  // namespace

bool matmul(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, const float* bias, float* c, std::int64_t ldc) {
  return execute({transpose_a, transpose_b, bias != nullptr, false, m, n, k, lda, ldb, ldc, primitive_threads()}, a,
                 b, bias, c);
}

bool matmul_bf16(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, const float* bias,
                 float* c, std::int64_t ldc) {
  return execute({transpose_a, transpose_b, bias != nullptr, true, m, n, k, lda, ldb, ldc, primitive_threads()}, a,
                 b, bias, c);
}

std::size_t matmul_cache_size() { return cache().size(); }
std::size_t matmul_cache_capacity() { return cache().capacity(); }

}  // namespace tapegrad::kernels::onednn

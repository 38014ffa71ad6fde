// libFuzzer target for the safetensors reader (header length, JSON, dtypes, shapes,
// offset tiling): whatever bytes it is given, read_safetensors() returns tensors or
// throws tapegrad::Error. Anything else (a crash, a sanitizer report, another exception, a huge allocation, a
// hang) is a bug. A file that parses also goes into a model through load_foreign_state, non-strictly, as load()
// would. Seed corpus: the files the interop tests write (ctest -R interop_torch), e.g.
//   mkdir -p corpus && cp build/release/tests/interop/*.safetensors corpus/ && build/fuzz/fuzz/safetensors_fuzz corpus -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto tensors = read_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "<fuzz>");
    static const auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::Dropout>(0.5)});
    load_foreign_state(*model, tensors, /*strict=*/false, "<fuzz>");
  } catch (const Error&) {
  }
  return 0;
}

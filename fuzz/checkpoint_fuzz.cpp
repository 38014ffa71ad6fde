// libFuzzer target for the checkpoint reader: whatever bytes it is given, load_checkpoint() returns a
// Checkpoint or throws tapegrad::Error. Anything else (a crash, a sanitizer report, another exception, a huge
// allocation, a hang) is a bug. The library itself is built with -fsanitize=fuzzer-no-link,address,undefined
// (CMake option TAPEGRAD_FUZZ), so the fuzzer sees coverage inside the parser.
// Run (seed corpus: the committed version-1 files):
//   mkdir -p corpus && cp tests/data/*.tg corpus/ && build/fuzz/fuzz/checkpoint_fuzz corpus -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Note: the fuzzer's memory limit (-rss_limit_mb, 2 GB by default) catches a corrupt length that would
  // allocate blindly; the reader must reject it from the bytes actually present first.
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const Checkpoint checkpoint = load_checkpoint(in, "<fuzz>");
    // A file that parses also goes into a model, non-strictly: names, shapes and dtypes are checked there.
    static const auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::Dropout>(0.5)});
    model->load_state(checkpoint.model_state(), /*strict=*/false, checkpoint.model_versions);
  } catch (const Error&) {
  }
  return 0;
}

// libFuzzer target for the torch.save zip reader (libzip container, whitelisted pickle
// interpreter, strided storages): whatever bytes it is given, read_pytorch() returns tensors or
// throws tapegrad::Error. Anything else (a crash, a sanitizer report, another exception, a huge allocation, a
// hang) is a bug. A file that parses also goes into a model through load_foreign_state, non-strictly, as load()
// would. Note: zip records carry CRC-32s that random mutations almost never keep valid, so an input whose first
// byte is odd is taken as data.pkl itself and wrapped (by libzip, in memory) in an archive with two 256-byte
// storages, '0' and '1': that is how the fuzzer reaches the pickle interpreter and the tensor checks behind it.
// Seed corpus: the files the interop tests write (ctest -R interop_torch) and their data.pkl with a 0x01 prefix, e.g.
//   mkdir -p corpus && cp build/release/tests/interop/*.pt corpus/ && build/fuzz/fuzz/pytorch_fuzz corpus -max_total_time=60
#include <zip.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

// A torch.save-shaped archive around `pickle`, built in memory; empty if libzip fails.
std::string wrap_pickle(std::string_view pickle) {
  static const std::string storage(256, '\x01');
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* memory = zip_source_buffer_create(nullptr, 0, 0, &error);
  zip_error_fini(&error);
  if (memory == nullptr) return {};
  zip_source_keep(memory);
  std::string out;
  if (zip_t* archive = zip_open_from_source(memory, ZIP_TRUNCATE, nullptr)) {
    const std::pair<const char*, std::string_view> records[] = {
        {"f/data.pkl", pickle}, {"f/data/0", storage}, {"f/data/1", storage}, {"f/version", "3\n"}};
    for (const auto& [name, bytes] : records)
      if (zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
          source != nullptr && zip_file_add(archive, name, source, 0) < 0)
        zip_source_free(source);
    if (zip_close(archive) != 0) zip_discard(archive);
    if (zip_source_open(memory) == 0) {
      zip_source_seek(memory, 0, SEEK_END);
      const zip_int64_t size = zip_source_tell(memory);
      zip_source_seek(memory, 0, SEEK_SET);
      if (size > 0) {
        out.resize(static_cast<std::size_t>(size));
        if (zip_source_read(memory, out.data(), static_cast<zip_uint64_t>(size)) != size) out.clear();
      }
      zip_source_close(memory);
    }
  }
  zip_source_free(memory);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool pickle_only = size > 0 && (data[0] & 1) != 0;
  const std::string wrapped = pickle_only ? wrap_pickle(input.substr(1)) : std::string();
  try {
    const auto tensors = read_pytorch(pickle_only ? std::string_view(wrapped) : input, "<fuzz>");
    static const auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::Dropout>(0.5)});
    load_foreign_state(*model, tensors, /*strict=*/false, "<fuzz>");
  } catch (const Error&) {
  }
  return 0;
}

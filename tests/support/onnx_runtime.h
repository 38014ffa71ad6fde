#pragma once
// ONNX Runtime for tests: runs an .onnx file in npm's onnxruntime-node (its CPU runtime) through the Node script
// tests/onnx/run_model.js and returns the outputs as tensors. scripts/setup_onnxruntime.sh installs the pinned
// package (tests/onnx/package-lock.json) into build/onnxruntime, or into $TAPEGRAD_ONNXRUNTIME_DIR.
// Note: a check against ONNX Runtime must fail, never skip, when the runtime is missing (CI installs it):
// run_in_onnx_runtime throws a tapegrad::Error saying what is missing and how to install it. Header-only, as the
// other support files, so that any test (and the main job's fashion_mnist_onnx) can include it without a CMake edit.
// Note: Node runs as a child process from an argument vector (posix_spawnp, no shell); its stderr goes to a file
// that the error message quotes.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/tensor.h>

#ifndef TAPEGRAD_SOURCE_DIR
#error "onnx_runtime.h needs TAPEGRAD_SOURCE_DIR (the repository root; tests/CMakeLists.txt defines it)"
#endif

extern char** environ;

namespace tapegrad::testing {

/// One tensor of a tensor file, by name (an ONNX model's input or output).
struct NamedTensor {
  std::string name;
  Tensor value;
};

/// Where scripts/setup_onnxruntime.sh installs onnxruntime-node: $TAPEGRAD_ONNXRUNTIME_DIR, else
/// <repository>/build/onnxruntime (shared by every build directory).
inline std::string onnx_runtime_dir() {
  const char* dir = std::getenv("TAPEGRAD_ONNXRUNTIME_DIR");
  return dir && *dir ? std::string(dir) : std::string(TAPEGRAD_SOURCE_DIR) + "/build/onnxruntime";
}

/// The Node script that runs a model (tests/onnx/run_model.js).
inline std::string onnx_runtime_runner() { return std::string(TAPEGRAD_SOURCE_DIR) + "/tests/onnx/run_model.js"; }

/// The path of `program` on $PATH, or "".
inline std::string find_program_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

/// "" when node, the runner and the installed package are all there; otherwise what is missing and the fix.
inline std::string onnx_runtime_unavailable_reason() {
  const std::string fix = "install it with: bash scripts/setup_onnxruntime.sh";
  if (find_program_on_path("node").empty()) return "ONNX Runtime: node is not on PATH; " + fix;
  if (!std::filesystem::exists(onnx_runtime_runner())) return "ONNX Runtime: no runner at " + onnx_runtime_runner();
  const std::string package = onnx_runtime_dir() + "/node_modules/onnxruntime-node/package.json";
  if (!std::filesystem::exists(package)) return "ONNX Runtime: onnxruntime-node is not installed (no " + package + "); " + fix;
  return "";
}

inline bool onnx_runtime_available() { return onnx_runtime_unavailable_reason().empty(); }

namespace onnx_runtime_detail {

inline const char* dtype_text(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::BFloat16: break;  // the exporter writes no bfloat16 tensors
  }
  fail("tensor file: unsupported dtype");
}

inline DType dtype_of(const std::string& text, const std::string& path) {
  if (text == "float32") return DType::Float32;
  if (text == "float64") return DType::Float64;
  if (text == "int64") return DType::Int64;
  fail("tensor file {}: unknown dtype '{}'", path, text);
}

inline std::size_t element_bytes(DType dtype) { return dtype == DType::Float32 ? 4 : 8; }

constexpr char kMagic[8] = {'T', 'G', 'T', 'E', 'N', 'S', 'R', '1'};

}  // namespace onnx_runtime_detail

/// Writes `tensors` in run_model.js's tensor file format: "TGTENSR1", a little-endian uint64 header length, a
/// JSON header {"tensors": [{"name", "dtype", "shape"}, ...]}, then each tensor's elements, row-major.
inline void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  namespace d = onnx_runtime_detail;
  nlohmann::json header;
  header["tensors"] = nlohmann::json::array();
  for (const NamedTensor& t : tensors)
    header["tensors"].push_back({{"name", t.name}, {"dtype", d::dtype_text(t.value.dtype())}, {"shape", t.value.shape()}});
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("tensor file: cannot write {}", path);
  out.write(d::kMagic, sizeof d::kMagic);
  std::uint64_t length = text.size();
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(length >> (8 * i));  // little-endian
  out.write(reinterpret_cast<const char*>(length_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const NamedTensor& t : tensors) {
    const Tensor values = t.value.detach().contiguous();
    out.write(static_cast<const char*>(values.raw_data()),
              static_cast<std::streamsize>(static_cast<std::size_t>(values.numel()) * d::element_bytes(values.dtype())));
  }
  if (!out.flush()) fail("tensor file: writing {} failed", path);
}

/// Reads a tensor file (see write_tensor_file).
inline std::vector<NamedTensor> read_tensor_file(const std::string& path) {
  namespace d = onnx_runtime_detail;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tensor file: cannot open {}", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 16 || bytes.compare(0, 8, std::string(d::kMagic, 8)) != 0)
    fail("tensor file {}: not a tensor file ({} bytes)", path, bytes.size());
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[8 + static_cast<std::size_t>(i)]);
  if (length > bytes.size() - 16) fail("tensor file {}: truncated header", path);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(16, length));
  std::size_t offset = 16 + length;
  std::vector<NamedTensor> tensors;
  for (const auto& entry : header.at("tensors")) {
    const DType dtype = d::dtype_of(entry.at("dtype").get<std::string>(), path);
    const Shape shape = entry.at("shape").get<Shape>();
    std::int64_t count = 1;
    for (std::int64_t extent : shape) count *= extent;
    const std::size_t nbytes = static_cast<std::size_t>(count) * d::element_bytes(dtype);
    if (nbytes > bytes.size() - offset) fail("tensor file {}: tensor '{}' is truncated", path, entry.at("name").get<std::string>());
    Tensor value = empty(shape, dtype);
    if (nbytes > 0) std::memcpy(value.raw_data(), bytes.data() + offset, nbytes);
    offset += nbytes;
    tensors.push_back({entry.at("name").get<std::string>(), value});
  }
  if (offset != bytes.size()) fail("tensor file {}: {} bytes after the last tensor", path, bytes.size() - offset);
  return tensors;
}

/// How run_in_onnx_runtime runs the session.
struct OnnxRuntimeOptions {
  /// ONNX Runtime's intra-op threads.
  int threads = 1;
  /// Run the inputs in this many slices of their first axis (outputs concatenated); 1: one run.
  int batches = 1;
};

/// Runs `model_path` in ONNX Runtime on `inputs` (by the model's input names) and returns its outputs in the
/// model's output order. Throws a tapegrad::Error when the runtime is not installed or the run fails, quoting
/// ONNX Runtime's message.
inline std::vector<Tensor> run_in_onnx_runtime(const std::string& model_path, const std::vector<NamedTensor>& inputs,
                                               const OnnxRuntimeOptions& options = {}) {
  if (const std::string why = onnx_runtime_unavailable_reason(); !why.empty()) fail("{}", why);
  char pattern[] = "/tmp/tapegrad_onnxrt_XXXXXX";
  if (!mkdtemp(pattern)) fail("run_in_onnx_runtime: cannot create a temporary directory: {}", std::strerror(errno));
  const std::filesystem::path dir(pattern);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string input_file = (dir / "inputs.tgt").string(), output_file = (dir / "outputs.tgt").string();
  const std::string log_file = (dir / "stderr.txt").string();
  write_tensor_file(input_file, inputs);

  const std::string node = find_program_on_path("node"), runner = onnx_runtime_runner(), ort_dir = onnx_runtime_dir();
  const std::string threads = std::to_string(options.threads), batches = std::to_string(options.batches);
  std::vector<std::string> args{node, runner, model_path, input_file, output_file, "--threads", threads,
                                "--batches", batches, "--ort-dir", ort_dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, node.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) fail("run_in_onnx_runtime: cannot start {}: {}", node, std::strerror(spawned));
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream log(log_file);
    const std::string message((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    fail("ONNX Runtime failed on {} (status {}): {}", model_path, status, message);
  }
  std::vector<Tensor> outputs;
  for (NamedTensor& t : read_tensor_file(output_file)) outputs.push_back(std::move(t.value));
  return outputs;
}

/// "" when `actual` matches `expected` (same shape, |a - e| <= atol + rtol * |e| everywhere, NaN where NaN);
/// otherwise the worst element and the differences, for a test's failure message.
inline std::string compare_outputs(const Tensor& expected, const Tensor& actual, double rtol = 1e-5, double atol = 1e-6) {
  if (expected.shape() != actual.shape())
    return fmt::format("shapes differ: expected {}, got {}", shape_string(expected.shape()), shape_string(actual.shape()));
  const std::vector<double> e = expected.to_vector(), a = actual.to_vector();
  double worst = 0, worst_abs = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      if (std::isnan(e[i]) != std::isnan(a[i])) return fmt::format("element {}: expected {}, got {}", i, e[i], a[i]);
      continue;
    }
    const double diff = std::abs(a[i] - e[i]), excess = diff / (atol + rtol * std::abs(e[i]));
    worst_abs = std::max(worst_abs, diff);
    if (excess > worst) worst = excess, worst_at = i;
  }
  if (worst <= 1) return "";
  return fmt::format("element {} of {}: expected {}, got {} (largest |difference| {:.3g}; rtol {}, atol {})", worst_at,
                     shape_string(expected.shape()), e[worst_at], a[worst_at], worst_abs, rtol, atol);
}

}  // namespace tapegrad::testing

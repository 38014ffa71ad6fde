// docs/interop.md's examples: the C++ between the DOC markers is compiled and run here, the Python between the
// markers of tests/interop/torch_side.py runs in the interop_torch tests; the last test case checks that the page
// quotes both verbatim.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

#include <filesystem>
#include <unistd.h>

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/serialize/checkpoint.h>  // load(), which reads all three formats
using namespace tapegrad;

// The layers of PyTorch's model, in the same order: nn.Sequential names them 0, 1, 2, ... in both.
std::shared_ptr<nn::Sequential> make_mlp(std::int64_t hidden = 256) {
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Flatten(),
      nn::Linear(28 * 28, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
      nn::Linear(hidden, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
      nn::Linear(hidden, 10)});
}

// tapegrad -> PyTorch: torch.load(path) then load_state_dict(strict=True) accepts either file.
void export_for_pytorch(const nn::Module& model, const std::string& dir) {
  save_pytorch(model, dir + "/mlp.pt");
  save_safetensors(model, dir + "/mlp.safetensors");
}

// PyTorch -> tapegrad: load() tells the three formats apart by their first bytes.
std::shared_ptr<nn::Sequential> import_from_pytorch(const std::string& path) {
  auto model = make_mlp();
  const nn::LoadResult result = load(*model, path);  // strict: throws naming any missing or unexpected key
  (void)result;  // empty when strict; non-strict loads list the keys instead of throwing
  model->eval();
  return model;
}
// DOC-END

using tapegrad::testing::check_doc_quotes_snippet;
using tapegrad::testing::read_source_file;

TEST_CASE("docs/interop.md: a model exported for PyTorch imports back with the same eval outputs") {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tapegrad-docs-interop-{}", ::getpid());
  std::filesystem::create_directories(dir);
  manual_seed(0);
  auto model = make_mlp(16);
  model->eval();
  export_for_pytorch(*model, dir.string());
  const Tensor x = randn({4, 1, 28, 28});
  NoGradGuard no_grad;
  const Tensor expected = (*model)(x);
  for (const char* file : {"/mlp.pt", "/mlp.safetensors"}) {
    manual_seed(1);  // other initial weights: only the file can make the outputs agree
    auto fresh = make_mlp(16);
    fresh->eval();
    CHECK(max(abs(sub((*fresh)(x), expected))).item() > 0);
    load(*fresh, dir.string() + file);
    CHECK(max(abs(sub((*fresh)(x), expected))).item() == 0);
  }
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(import_from_pytorch("/nonexistent/mlp.pt"), Catch::Contains("cannot open"));
}

TEST_CASE("docs/interop.md quotes this file's C++ and torch_side.py's Python verbatim") {
  check_doc_quotes_snippet("tests/test_docs_interop.cpp", "docs/interop.md");
  const std::string python = read_source_file("tests/interop/torch_side.py");
  const std::string page = read_source_file("docs/interop.md");
  const auto begin = python.find("# DOC-BEGIN python\n"), end = python.find("# DOC-END python\n");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string snippet = python.substr(begin + 19, end - begin - 19);
  INFO("paste the Python between the DOC markers of tests/interop/torch_side.py into docs/interop.md");
  CHECK(page.find("```python\n" + snippet + "```") != std::string::npos);
}

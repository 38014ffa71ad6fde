// The committed format-version-1 files of tests/data/ still load, value for value, into models built by
// today's code. Note: the files are never regenerated (tests/data/make_v1_checkpoint.cpp says how they were
// made); when a layer's state layout changes, they load through its upgrade_state() path, which is the point.
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "data/v1_checkpoint_spec.h"
#include <tapegrad/framework/serialize/checkpoint.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
namespace spec = tapegrad::v1_checkpoint;

namespace {

// Note: appended, not std::string(...) + "/" + name: compiled in a test batch (TAPEGRAD_TEST_UNITY) at -O1, GCC 12
// reports a false -Warray-bounds inside the moved temporary's copy.
std::string data_file(const std::string& name) {
  std::string path = TAPEGRAD_TEST_DATA_DIR "/";
  path += name;
  return path;
}

/// The model's tensor called `name` (from state(): parameters and persistent buffers).
Tensor state_entry(const nn::Module& model, std::string_view name) {
  for (const auto& [n, t] : model.state())
    if (n == name) return t;
  FAIL("the model has no state entry " << name);
  return {};
}

/// Every value of every entry the v1 files hold, compared bit for bit with its formula.
void check_v1_values(const nn::Module& model) {
  for (std::size_t e = 0; e < spec::kEntries.size(); ++e) {
    const Tensor t = state_entry(model, spec::kEntries[e].name);
    INFO("entry " << spec::kEntries[e].name);
    CHECK(t.dtype() == (spec::kEntries[e].name.ends_with("num_batches_tracked") ? DType::Int64 : DType::Float32));
    const std::vector<double> values = t.to_vector();  // float32 and int64 values are exact doubles
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < values.size(); ++k)
      if (values[k] != spec::model_value(e, static_cast<std::int64_t>(k))) ++wrong;
    CHECK(wrong == 0);
  }
}

std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

TEST_CASE("the committed version-1 model files are what their names say") {
  for (const char* kind : {"binary", "text"}) {
    const std::string path = data_file(fmt::format("v1_model.{}.tg", kind));
    CHECK(first_line(path).starts_with(fmt::format("TAPEGRAD 1 {} f4d8i8 le ", kind)));
    const CheckpointHeader header = read_checkpoint_header(path);
    CHECK(header.format_version == 1);
    CHECK(header.kind == (std::string(kind) == "binary" ? ArchiveKind::Binary : ArchiveKind::Text));
  }
}

TEST_CASE("every per-entry checksum of the version-1 files still verifies") {
  // Note: loading skips the per-entry checksums when the whole payload's matches, so the header's is zeroed
  // here: every entry is then checked, and only the payload checksum may be reported as wrong.
  for (const char* name : {"v1_model.binary.tg", "v1_model.text.tg", "v1_run.binary.tg", "v1_run.text.tg"}) {
    INFO(name);
    std::ifstream in(data_file(name), std::ios::binary);
    std::string bytes(std::istreambuf_iterator<char>(in), {});
    const std::size_t newline = bytes.find('\n');
    REQUIRE(newline != std::string::npos);
    REQUIRE(bytes.substr(newline - 8, 8) != "00000000");
    bytes.replace(newline - 8, 8, "00000000");
    std::istringstream damaged(bytes);
    CHECK_THROWS_WITH(load_checkpoint(damaged), Catch::Contains("payload checksum mismatch"));
  }
}

TEST_CASE("a version-1 model file loads bit-exactly into a freshly built model, in both archive kinds") {
  for (const char* kind : {"binary", "text"}) {
    INFO(kind);
    auto model = spec::make_model();
    const nn::LoadResult result = load(*model, data_file(fmt::format("v1_model.{}.tg", kind)));
    CHECK(result.missing_keys.empty());
    CHECK(result.unexpected_keys.empty());
    check_v1_values(*model);
    const Checkpoint c = load_checkpoint(data_file(fmt::format("v1_model.{}.tg", kind)));
    REQUIRE(c.model.size() == spec::kEntries.size());
    for (std::size_t e = 0; e < c.model.size(); ++e) {
      CHECK(c.model[e].name == spec::kEntries[e].name);
      CHECK(c.model[e].kind == (spec::kEntries[e].parameter ? EntryKind::Parameter : EntryKind::Buffer));
    }
    // The state versions of the day: BatchNorm at 2 (num_batches_tracked present), every other module at 1.
    CHECK(c.model_versions.at("1") == 2);
    CHECK(c.model_versions.at("3") == 2);
    CHECK(c.model_versions.at("0") == 1);
    CHECK(c.optimizer.empty());
    CHECK(c.metadata.empty());
  }
}

TEST_CASE("a version-1 model file restores BatchNorm's running statistics, so eval outputs use them") {
  auto model = spec::make_model();
  load(*model, data_file("v1_model.binary.tg"));
  auto bn = model->at_as<nn::BatchNorm1d>(1);
  bn->eval();
  NoGradGuard no_grad;
  const Tensor x = zeros({2, 3});
  // eval: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, element by element in float
  const Tensor y = (*bn)(x);
  const auto mean = bn->running_mean.to_vector(), var = bn->running_var.to_vector();
  const auto w = bn->weight.to_vector(), b = bn->bias.to_vector();
  for (std::int64_t c = 0; c < 3; ++c) {
    const double expected = (0.0 - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c];
    CHECK(y.at({0, c}) == Approx(expected).epsilon(1e-5));
  }
  CHECK(bn->num_batches_tracked.item() == 1000 + 17 * 12);
}

TEST_CASE("a version-1 run file restores model, Adam, StepLR, progress, generator and metadata") {
  for (const char* kind : {"binary", "text"}) {
    INFO(kind);
    const Checkpoint run = load_checkpoint(data_file(fmt::format("v1_run.{}.tg", kind)));
    auto model = spec::make_model();
    model->load_state(run.model_state(), true, run.model_versions);
    check_v1_values(*model);

    optim::Adam adam(model->parameters(), optim::AdamOptions{.lr = spec::kAdamLr});
    optim::StepLR schedule(adam, spec::kStepSize, spec::kGamma);
    adam.load_state(Checkpoint::as_named(run.optimizer));
    schedule.load_state(Checkpoint::as_named(run.scheduler));
    for (const auto& e : run.optimizer) CHECK(e.kind == EntryKind::Optimizer);

    // Adam's per-parameter state, every element.
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : adam.state()) state[name] = t;
    const auto params = model->parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      INFO("param " << p);
      CHECK(state.at(fmt::format("group0.param{}.step", p)).item() == spec::kAdamStep);
      const auto m = state.at(fmt::format("group0.param{}.exp_avg", p)).to_vector();
      const auto v = state.at(fmt::format("group0.param{}.exp_avg_sq", p)).to_vector();
      REQUIRE(static_cast<std::int64_t>(m.size()) == params[p].numel());
      std::size_t wrong = 0;
      for (std::size_t k = 0; k < m.size(); ++k) {
        const auto i = static_cast<std::int64_t>(k);
        if (m[k] != spec::exp_avg_value(p, i) || v[k] != spec::exp_avg_sq_value(p, i)) ++wrong;
      }
      CHECK(wrong == 0);
    }
    // StepLR after 5 steps of 3-step decay: one halving, and the next decay comes at step 6.
    CHECK(schedule.last_epoch() == spec::kSchedulerSteps);
    CHECK(adam.param_groups()[0].lr() == spec::kAdamLr * spec::kGamma);
    CHECK(adam.param_groups()[0].get("initial_lr") == spec::kAdamLr);
    schedule.step();
    CHECK(adam.param_groups()[0].lr() == spec::kAdamLr * spec::kGamma * spec::kGamma);

    CHECK(run.epoch == spec::kEpoch);
    CHECK(run.step == spec::kStep);
    Generator expected(spec::kSeed), restored;
    for (int i = 0; i < spec::kDraws; ++i) (void)expected.engine()();
    restored.set_state(run.rng_states.at("default"));
    CHECK(restored.seed() == spec::kSeed);
    for (int i = 0; i < 5; ++i) CHECK(restored.engine()() == expected.engine()());
    CHECK(run.metadata.at("made_by") == "tests/data/make_v1_checkpoint.cpp");
    CHECK(run.metadata.at("note") == "format version 1 reference file\nkeep it: tests/test_checkpoint_compat.cpp loads it");
  }
}

TEST_CASE("a version-1 run file keeps training: an Adam step from the restored state moves every parameter") {
  const Checkpoint run = load_checkpoint(data_file("v1_run.binary.tg"));
  auto model = spec::make_model();
  model->load_state(run.model_state(), true, run.model_versions);
  optim::Adam adam(model->parameters(), optim::AdamOptions{.lr = spec::kAdamLr});
  adam.load_state(Checkpoint::as_named(run.optimizer));
  const auto params = model->parameters();
  std::vector<Tensor> before;
  for (Tensor p : params) {  // a handle: set_grad reaches the model's parameter
    before.push_back(p.detach().clone());
    p.set_grad(zeros_like(p));
  }
  adam.step();
  // With a zero gradient, Adam at t = 4 still moves each parameter by lr / (1 - b1^4) * b1 m / (...): nonzero.
  for (std::size_t p = 0; p < params.size(); ++p) CHECK(!tapegrad::testing::identical(before[p], params[p].detach()));
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : adam.state()) state[name] = t;
  CHECK(state.at("group0.param0.step").item() == spec::kAdamStep + 1);
}

// A character-level causal Transformer language model trained on Debian's fortunes (package `fortunes`): every
// 10th fortune is held out, and the model's bits per character on those is reported beside a bigram baseline's
// (add-one smoothed counts from the training fortunes, scored on the same held-out characters). Then it samples
// text from a seed prompt, saves the model, reloads it into a fresh model, samples again with the same seed and
// exits 1 unless the two texts are identical.
// The model, data and evaluation are examples/common/recipes.cpp's, which tests/test_examples_smoke.cpp also runs.
#include <cstdio>
#include <iostream>
#include <string>

#include "common/training.h"

using namespace tapegrad;

int main(int argc, char** argv) try {
  examples::Options o;
  o.batch_size = 32;
  o.lr = 2e-3;
  examples::CharTransformerOptions model_options;
  std::int64_t steps = 1000, sample_length = 300, log_interval = 100;
  std::string corpus_dir = "/usr/share/games/fortunes", prompt = "The meaning of life is";
  double temperature = 0.8;
  bool smoke = false;
  CLI::App app{"Train a character-level causal Transformer on Debian's fortunes; bits/char vs a bigram; sample"};
  app.add_option("--steps", steps, "training steps (random windows of the training fortunes)")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "windows per step")->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate (AdamW, one-cycle)")->capture_default_str();
  app.add_option("--context", model_options.context, "window length (the longest input)")->capture_default_str();
  app.add_option("--d-model", model_options.d_model, "model width")->capture_default_str();
  app.add_option("--heads", model_options.heads, "attention heads")->capture_default_str();
  app.add_option("--layers", model_options.layers, "encoder layers")->capture_default_str();
  app.add_option("--feed-forward", model_options.feed_forward, "feed-forward width")->capture_default_str();
  app.add_option("--dropout", model_options.dropout, "dropout everywhere in the encoder")->capture_default_str();
  app.add_option("--corpus-dir", corpus_dir, "the fortune files")->capture_default_str();
  app.add_option("--prompt", prompt, "the seed text of the samples")->capture_default_str();
  app.add_option("--sample-length", sample_length, "characters to sample")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)")->capture_default_str();
  app.add_option("--threads", o.threads, "kernel threads (0: hardware concurrency)")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, windows, dropout and sampling")->capture_default_str();
  app.add_option("--output-dir", o.output_dir, "the checkpoint goes here")->capture_default_str();
  app.add_option("--log-interval", log_interval, "print the loss every this many steps")->capture_default_str();
  app.add_flag("--smoke", smoke, "a tiny model for a few seconds (d_model 32, 1 layer, context 32, 60 steps)");
  CLI11_PARSE(app, argc, argv);
  if (smoke) {
    model_options = {.d_model = 32, .heads = 2, .layers = 1, .feed_forward = 64, .context = 32, .dropout = 0.0};
    steps = 60;
    o.batch_size = 16;
    o.lr = 1e-2;
    sample_length = 60;
    log_interval = 20;
  }
  examples::apply(o, "char_transformer");

  const examples::CharCorpus corpus = examples::load_fortunes(corpus_dir);
  std::printf("corpus: %lld files, %lld fortunes; training %zu characters, held out %zu (%lld fortunes, every 10th)\n",
              static_cast<long long>(corpus.files), static_cast<long long>(corpus.fortunes), corpus.train.size(),
              corpus.held_out.size(), static_cast<long long>(corpus.held_out_fortunes));
  auto model = examples::make_char_transformer(model_options);
  examples::Training training = examples::make_adamw_one_cycle(*model, o.lr, steps);
  std::int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  std::printf("model: d_model %lld, %lld heads, %lld layers, feed-forward %lld, context %lld, dropout %g: %lld "
              "parameters; %lld steps of %lld windows\n",
              static_cast<long long>(model_options.d_model), static_cast<long long>(model_options.heads),
              static_cast<long long>(model_options.layers), static_cast<long long>(model_options.feed_forward),
              static_cast<long long>(model_options.context), model_options.dropout,
              static_cast<long long>(parameters), static_cast<long long>(steps), static_cast<long long>(o.batch_size));
  std::fflush(stdout);

  const double start = examples::now_seconds();
  double recent = 0;
  examples::train_char_lm(*model, corpus.train, model_options.context, o.batch_size, steps, training,
                          [&](std::int64_t step, double loss) {
                            recent += loss;
                            if (step % log_interval == 0 || step == steps) {
                              const std::int64_t span = step % log_interval == 0 ? log_interval : step % log_interval;
                              std::printf("step %5lld  loss %.4f nats/char (%.3f bits/char)  %.0f s\n",
                                          static_cast<long long>(step), recent / static_cast<double>(span),
                                          recent / static_cast<double>(span) / std::log(2.0),
                                          examples::now_seconds() - start);
                              std::fflush(stdout);
                              recent = 0;
                            }
                          });
  const double train_seconds = examples::now_seconds() - start;
  const double model_bits = examples::model_bits_per_char(*model, corpus.held_out, model_options.context);
  const double bigram_bits = examples::bigram_bits_per_char(corpus.train, corpus.held_out);
  std::printf("held-out bits/char: model %.3f, bigram %.3f (add-one), after %.0f s of training\n", model_bits,
              bigram_bits, train_seconds);

  const std::string sample =
      examples::sample_text(*model, prompt, sample_length, model_options.context, temperature, o.seed);
  std::printf("sample (temperature %g, seed %llu):\n%s%s\n", temperature, static_cast<unsigned long long>(o.seed),
              prompt.c_str(), sample.c_str());

  const std::string path = o.output_dir + "/char_transformer.tg";
  save(*model, path);
  manual_seed(o.seed + 12345);  // the fresh model starts from other weights: only the file can make it agree
  auto reloaded = examples::make_char_transformer(model_options);
  load(*reloaded, path);
  const std::string again =
      examples::sample_text(*reloaded, prompt, sample_length, model_options.context, temperature, o.seed);
  if (again != sample) {
    std::printf("the reloaded model sampled different text:\n%s%s\n", prompt.c_str(), again.c_str());
    return 1;
  }
  std::printf("saved %s; reloaded into a fresh model: the same %lld sampled characters\n", path.c_str(),
              static_cast<long long>(sample_length));
  return 0;
} catch (const std::exception& error) {
  std::cerr << "char_transformer: " << error.what() << "\n";
  return 1;
}

// The figure tapegrad's design starts from: over training batches, one BatchNorm channel's batch mean and
// variance fluctuate, while its running mean and variance converge toward the true statistics of the data.
// The channel is channel --channel of a fixed, randomly initialised Conv2d(1, 4, 3, padding 1) over
// Fashion-MNIST; three BatchNorm2d layers see the same batches with momentum 0.1, 0.01 and unset
// (cumulative average). The true statistics are the mean and unbiased variance of that channel over all
// 60,000 training images. Every --recalibrate-every batches, recompute_batchnorm_statistics() also
// recomputes the statistics exactly over the batches seen so far, for the bottom panel: how far each
// estimate is from the truth. Writes <output-dir>/running_stats.csv, running_stats_recalibrated.csv and,
// with gnuplot, running_stats.png.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "common/training.h"

using namespace tapegrad;

namespace {

/// Count, mean and unbiased variance of one channel's values, accumulated in double.
struct ChannelStats {
  double count = 0, sum = 0, sum_of_squares = 0;

  void add(const Tensor& features, std::int64_t channel) {
    const std::int64_t batch = features.size(0), channels = features.size(1),
                       plane = features.size(2) * features.size(3);
    const float* values = features.data<float>();
    for (std::int64_t n = 0; n < batch; ++n) {
      const float* p = values + (n * channels + channel) * plane;
      for (std::int64_t i = 0; i < plane; ++i) {
        sum += p[i];
        sum_of_squares += static_cast<double>(p[i]) * p[i];
      }
    }
    count += static_cast<double>(batch * plane);
  }
  double mean() const { return sum / count; }
  // Note: sum-of-squares form in double; the values are O(1) and the counts below 1e8, so cancellation
  // costs far less than the float32 the features are stored in.
  double unbiased_var() const { return (sum_of_squares - sum * sum / count) / (count - 1); }
};

struct Tracked {
  std::string label;
  std::shared_ptr<nn::BatchNorm2d> layer;
};

/// The range a zoomed panel shows: the batch statistics' spread, with a margin.
struct Range {
  double low = 1e300, high = -1e300;
  void add(double v) { low = std::min(low, v); high = std::max(high, v); }
  std::string gnuplot() const {
    const double margin = 0.15 * (high - low);
    return fmt::format("[{:.6g}:{:.6g}]", low - margin, high + margin);
  }
};

void plot(const std::string& output_dir, const std::string& csv_path, const std::string& recalibrated_csv_path,
          const Range& mean_range, const Range& var_range) {
  const std::string script = output_dir + "/running_stats.gp";
  // gnuplot runs in output_dir (examples::run_gnuplot): files are named relative to it, as quoted strings
  const std::string csv = examples::gnuplot_string(std::filesystem::path(csv_path).filename().string());
  const std::string recalibrated_csv =
      examples::gnuplot_string(std::filesystem::path(recalibrated_csv_path).filename().string());
  std::ofstream out(script);
  auto panel = [&](const std::string& title, int batch_column, int first_running, int true_column,
                   const std::string& what) {
    return fmt::format("set title '{1}'\n"
                       "plot {0} using 1:{2} with lines lc rgb '#bbbbbb' title 'batch {5}', "
                       "{0} using 1:{3} with lines lw 2 lc rgb '#009e73' title 'running, momentum 0.1', "
                       "{0} using 1:{6} with lines lw 2 lc rgb '#56b4e9' title 'running, momentum 0.01', "
                       "{0} using 1:{7} with lines lw 2 lc rgb '#e69f00' title 'running, cumulative', "
                       "{0} using 1:{4} with lines dt 2 lw 2 lc rgb 'black' title 'true {5}'\n",
                       csv, title, batch_column, first_running, true_column, what, first_running + 2,
                       first_running + 4);
  };
  auto error_panel = [&](const std::string& what, int first_running, int true_column, int recalibrated_column) {
    return fmt::format("set title 'distance from the true {1}'\n"
                       "plot {0} using 1:(abs(${2}-${5})) with lines lw 2 lc rgb '#009e73' title 'running, momentum 0.1', "
                       "{0} using 1:(abs(${3}-${5})) with lines lw 2 lc rgb '#56b4e9' title 'running, momentum 0.01', "
                       "{0} using 1:(abs(${4}-${5})) with lines lw 2 lc rgb '#e69f00' title 'running, cumulative', "
                       "{6} using 1:{7} with linespoints pt 7 lc rgb 'black' title 'recalibrated over the batches so far'\n",
                       csv, what, first_running, first_running + 2, first_running + 4, true_column, recalibrated_csv,
                       recalibrated_column);
  };
  out << "set datafile separator ','\nset terminal pngcairo size 1200,1300 noenhanced\n"
      << fmt::format("set output {}\n", examples::gnuplot_string("running_stats.png"))
      << "set multiplot layout 3,2 title 'One BatchNorm channel over training batches'\n"
      << "set xlabel 'batch'\nset key top right box opaque\n"
      << panel("mean", 2, 4, 10, "mean") << panel("unbiased variance", 3, 5, 11, "variance")
      << "set key bottom right box opaque\n"
      << "set yrange " << mean_range.gnuplot() << "\n" << panel("mean (zoomed to the batch spread)", 2, 4, 10, "mean")
      << "set yrange " << var_range.gnuplot() << "\n"
      << panel("unbiased variance (zoomed to the batch spread)", 3, 5, 11, "variance")
      << "set autoscale y\nset logscale y\nset format y '%.0e'\nset key top right box opaque\n"
      << error_panel("mean", 4, 10, 4) << error_panel("variance", 5, 11, 5) << "unset multiplot\n";
  out.close();
  examples::run_gnuplot(script);
}

}  // namespace

int main(int argc, char** argv) try {
  examples::Options options;
  options.batch_size = 32;
  std::int64_t steps = 600, channel = 0, recalibrate_every = 25;
  CLI::App app{"Batch vs running BatchNorm statistics over training batches (CSV + PNG)"};
  examples::add_options(app, options);
  app.add_option("--steps", steps, "training batches to follow")->capture_default_str();
  app.add_option("--channel", channel, "which of the 4 channels to follow")->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--recalibrate-every", recalibrate_every, "batches between exact recomputations")
      ->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  examples::apply(options, "running_stats");

  data::FashionMnistOptions data_options;
  data_options.dir = options.data_dir;
  const data::FashionMNIST train_set(data::Split::Train, data_options);

  // Fixed weights: the statistics do not drift, so "the true statistics" exist.
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 4, 3}.with_padding(1));
  nn::Conv2d& features = *conv;
  NoGradGuard no_grad;  // nothing here is differentiated; BatchNorm's running update does not need the tape

  ChannelStats truth;
  {
    data::DataLoader all(train_set, data::DataLoaderOptions{}.with_batch_size(1000));
    for (auto& batch : all) truth.add(features(batch.images), channel);
  }
  fmt::print("channel {} over all {} training images: mean {:.6f}, unbiased variance {:.6f}\n", channel,
             train_set.size(), truth.mean(), truth.unbiased_var());

  std::vector<Tracked> tracked;
  for (const auto& [label, momentum] : std::vector<std::pair<std::string, std::optional<double>>>{
           {"momentum 0.1", 0.1}, {"momentum 0.01", 0.01}, {"cumulative", std::nullopt}}) {
    nn::BatchNormOptions bn_options{4};
    bn_options.momentum = momentum;
    tracked.push_back({label, std::make_shared<nn::BatchNorm2d>(bn_options)});
    tracked.back().layer->train();
  }

  const std::string csv = options.output_dir + "/running_stats.csv";
  std::ofstream out(csv);
  out << "batch,batch_mean,batch_var,running_mean_0.1,running_var_0.1,running_mean_0.01,running_var_0.01,"
         "running_mean_cumulative,running_var_cumulative,true_mean,true_var\n";
  const auto loader_options =
      data::DataLoaderOptions{}.with_batch_size(options.batch_size).with_shuffle().with_drop_last().with_seed(options.seed);
  data::DataLoader loader(train_set, loader_options);

  // The exact statistics of the first `count` batches the others saw: a second loader with the same seed
  // replays the same order, and recompute_batchnorm_statistics() pools every value of those batches.
  const std::string recalibrated_csv = options.output_dir + "/running_stats_recalibrated.csv";
  std::ofstream recalibrated_out(recalibrated_csv);
  recalibrated_out << "batches,recalibrated_mean,recalibrated_var,mean_error,var_error\n";
  auto recalibrate = [&](std::int64_t count) {
    auto recalibrated_bn = std::make_shared<nn::BatchNorm2d>(4);
    nn::Sequential model({conv, recalibrated_bn});
    data::DataLoader replay(train_set, loader_options);
    nn::recompute_batchnorm_statistics(model, replay, count);
    const double mean = recalibrated_bn->running_mean.data<float>()[channel];
    const double var = recalibrated_bn->running_var.data<float>()[channel];
    recalibrated_out << fmt::format("{},{:.8g},{:.8g},{:.8g},{:.8g}\n", count, mean, var,
                                    std::abs(mean - truth.mean()), std::abs(var - truth.unbiased_var()));
    return std::pair{mean, var};
  };
  std::int64_t step = 0;
  std::pair<double, double> last_recalibrated;
  Range mean_range, var_range;
  while (step < steps) {
    for (auto& batch : loader) {
      if (step >= steps) break;
      ++step;
      const Tensor x = features(batch.images);
      ChannelStats batch_stats;
      batch_stats.add(x, channel);
      mean_range.add(batch_stats.mean());
      var_range.add(batch_stats.unbiased_var());
      out << fmt::format("{},{:.8g},{:.8g}", step, batch_stats.mean(), batch_stats.unbiased_var());
      for (auto& t : tracked) {
        (*t.layer)(x);  // training mode: batch statistics, and the EMA (or cumulative) update of the buffers
        out << fmt::format(",{:.8g},{:.8g}", t.layer->running_mean.data<float>()[channel],
                           t.layer->running_var.data<float>()[channel]);
      }
      out << fmt::format(",{:.8g},{:.8g}\n", truth.mean(), truth.unbiased_var());
      if (step % recalibrate_every == 0 || step == steps) last_recalibrated = recalibrate(step);
    }
  }
  out.close();
  recalibrated_out.close();
  const auto [recalibrated_mean, recalibrated_var] = last_recalibrated;
  for (const auto& t : tracked) {
    const double mean = t.layer->running_mean.data<float>()[channel], var = t.layer->running_var.data<float>()[channel];
    fmt::print("after {} batches, {:>13}: running mean {:.6f} (error {:+.2e}), running variance {:.6f} (error {:+.2e})\n",
               steps, t.label, mean, mean - truth.mean(), var, var - truth.unbiased_var());
  }
  fmt::print("after {} batches,  recalibrated: mean {:.6f} (error {:+.2e}), variance {:.6f} (error {:+.2e})\n", steps,
             recalibrated_mean, recalibrated_mean - truth.mean(), recalibrated_var,
             recalibrated_var - truth.unbiased_var());
  fmt::print("wrote {} and {}\n", csv, recalibrated_csv);
  plot(options.output_dir, csv, recalibrated_csv, mean_range, var_range);
  return 0;
} catch (const std::exception& error) {
  std::cerr << "running_stats: " << error.what() << "\n";
  return 1;
}

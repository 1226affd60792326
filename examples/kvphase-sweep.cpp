// kvphase-sweep: per-phase recall of a compressed model and of full attention on the same
// inputs, with intervals, the phase gap and tests of uniformity and period-S periodicity.
//
//   kvphase-sweep --preset gated --stride 4 --gate-bias 3,0,0,0 --task needle --trials 2000
//                 --threads 2 --out gated.csv
//
// Output (kvphase-sweep/1, io/sweep_format.hpp): CSV with one row per (model, phase group),
// model = compressed | full, or JSON with per-model gap, uniformity and periodicity tests and a
// provenance object. --shard i/N runs a part of the trials; kvphase-merge joins the parts into
// the same bytes (provenance aside) as one run. Bad flags or values exit with status 2.
//
// Operators that are not linear in the keys (v4-csa, v4-hca, v41, nsa, paper-ref, --pool max)
// run every task (needle, kv-pairs, padding) in the general key-space path: --engine key only.

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/compress/presets.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/theory/padding_task.hpp>
#include <kvphase/theory/predict.hpp>

#include "sweep_common.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kvphase::index_t;
namespace sim = kvphase::sim;
namespace compress = kvphase::compress;

struct cli_options {
  std::string preset = "mean";
  index_t window = -1;  // chunk window W (-1: the preset's)
  index_t stride = -1;  // S (-1: the preset's)
  std::string pool;    // override of the pool kind (mean, slot-gate, weights)
  std::vector<double> gate_bias;
  std::vector<double> slot_weights;
  double gate_content_std = 0.0;
  index_t raw_window = 0;
  std::string task = "needle";
  index_t context = 0;  // 0: task default
  index_t dim = 64;
  index_t key_span = -1, value_span = -1;
  double value_key_weight = 1.0;
  double query_noise = 0.0;
  double logit_scale = -1;
  index_t pairs = 16000;
  index_t codes = 64;
  index_t modulus = 0;
  index_t pad_min = 24;
  index_t lengths = 0;
  std::string engine = "key";
  index_t trials = 1000;
  std::uint64_t seed = 1;
  std::uint64_t params_seed = 0;
  int threads = 0;
  std::string shard = "0/1";
  std::string format;
  std::string out;
  bool theory = false;
  bool quiet = false;
};

/// The compressed operator of a preset name (with the flag overrides applied).
compress::operator_spec make_operator(const cli_options& o) {
  compress::operator_spec op;
  const std::string& p = o.preset;
  if (p == "full") {
    op = {.grid = {.window = 1, .stride = 1}, .pool = compress::pool_kind::identity, .name = "full"};
  } else if (p == "mean") {
    op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean, .name = "mean"};
  } else if (p == "gated") {
    op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .name = "gated"};
  } else if (p == "v4-csa" || p == "v4-hca" || p == "v41" || p == "nsa" || p == "paper-ref") {
    std::string lib = p;
    for (auto& ch : lib)
      if (ch == '-') ch = '_';
    op = compress::preset(lib == "paper_ref" ? "paper_ref" : lib);
  } else {
    kvphase::fail("preset", p, "must be one of full, mean, gated, v4-csa, v4-hca, v41, nsa, paper-ref");
  }
  if (o.stride != -1) {
    op.grid.stride = o.stride;
    if (o.window == -1 && op.grid.window < o.stride) op.grid.window = o.stride;
    if (o.window == -1 && (p == "mean" || p == "gated")) op.grid.window = o.stride;
  }
  if (o.window != -1) op.grid.window = o.window;
  if (!o.pool.empty()) {
    if (o.pool == "mean") op.pool = compress::pool_kind::mean;
    else if (o.pool == "slot-gate" || o.pool == "gated") op.pool = compress::pool_kind::slot_gate;
    else if (o.pool == "weights") op.pool = compress::pool_kind::weights;
    else if (o.pool == "max") op.pool = compress::pool_kind::max;
    else if (o.pool == "identity") op.pool = compress::pool_kind::identity;
    else kvphase::fail("pool", o.pool, "must be mean, slot-gate, weights, max or identity");
  }
  if (op.pool == compress::pool_kind::slot_gate) {
    if (!o.gate_bias.empty()) op.slot_bias = o.gate_bias;
    else if (op.slot_bias.size() != static_cast<std::size_t>(op.grid.window)) op.slot_bias.assign(static_cast<std::size_t>(op.grid.window), 0.0);
    if (p == "gated" || !o.pool.empty()) op.content_std = o.gate_content_std;
    kvphase::require(static_cast<index_t>(op.slot_bias.size()) == op.grid.window, "gate-bias", op.slot_bias.size(),
                     "needs one value per slot of the window (" + std::to_string(op.grid.window) + ")");
  } else {
    kvphase::require(o.gate_bias.empty(), "gate-bias", o.gate_bias.size(), "applies only to gated pools (--preset gated)");
    kvphase::require(o.gate_content_std == 0.0, "gate-content-std", o.gate_content_std,
                     "applies only to gated pools (--preset gated)");
  }
  if (op.pool == compress::pool_kind::weights) op.slot_weights = o.slot_weights;
  op.validate();
  return op;
}

sim::sweep_config make_config(const cli_options& o) {
  sim::sweep_config c;
  c.op = make_operator(o);
  c.task = sim::parse_task(o.task);
  c.engine = sim::parse_engine(o.engine);
  c.window = o.raw_window;
  c.trials = o.trials;
  c.seed = o.seed;
  c.params_seed = o.params_seed;
  c.threads = o.threads;
  c.shard = sim::shard_spec::parse(o.shard);
  c.compute_mass = false;  // the output carries counts only
  const index_t S = c.op.grid.stride;
  switch (c.task) {
    case sim::task_kind::needle:
      c.needle.dim = o.dim;
      if (o.context > 0) c.needle.context = o.context;
      if (o.key_span >= 0) c.needle.key_span = o.key_span;
      if (o.value_span >= 0) c.needle.value_span = o.value_span;
      c.needle.value_key_weight = o.value_key_weight;
      c.needle.query_noise = o.query_noise;
      if (o.logit_scale >= 0) c.needle.logit_scale = o.logit_scale;
      c.modulus = o.modulus > 0 ? o.modulus : std::max<index_t>(S, 2);
      break;
    case sim::task_kind::kv_pairs:
      c.kv_pairs.dim = o.dim;
      if (o.context > 0) c.kv_pairs.context = o.context;
      c.kv_pairs.pairs = o.pairs;
      c.kv_pairs.codes = o.codes;
      if (o.key_span >= 0) c.kv_pairs.key_span = o.key_span;
      if (o.value_span >= 0) c.kv_pairs.value_span = o.value_span;
      c.kv_pairs.value_key_weight = o.value_key_weight;
      c.kv_pairs.query_noise = o.query_noise;
      if (o.logit_scale >= 0) c.kv_pairs.logit_scale = o.logit_scale;
      c.modulus = o.modulus > 0 ? o.modulus : 8;
      break;
    case sim::task_kind::padding:
      c.padding.dim = o.dim;
      if (o.context > 0) c.padding.code_length = o.context;
      if (o.key_span >= 0) c.padding.span_a = o.key_span;
      if (o.value_span >= 0) c.padding.span_b = o.value_span;
      c.padding.query_noise = o.query_noise;
      if (o.logit_scale >= 0) c.padding.logit_scale = o.logit_scale;
      c.padding.pad_min = o.pad_min;
      c.padding.lengths = o.lengths > 0 ? o.lengths : 4 * std::max<index_t>(S, 1);
      kvphase::require(o.modulus == 0, "modulus", o.modulus, "does not apply to the padding task (groups = --lengths)");
      break;
  }
  kvphase::require(c.groups() >= 2, "modulus", c.groups(), "needs at least 2 phase groups");
  const index_t period = S >= 2 ? S : c.groups();
  kvphase::require(c.groups() % period == 0, "modulus", c.groups(),
                   "must be a multiple of the stride " + std::to_string(S) + " (the period tested)");
  c.validate();
  return c;
}

nlohmann::json config_json(const cli_options& o, const sim::sweep_config& c) {
  nlohmann::json j;
  j["preset"] = o.preset;
  j["operator"] = [&] {
    std::ostringstream os;
    os << c.op;
    return os.str();
  }();
  j["chunk_window"] = c.op.grid.window;
  j["stride"] = c.op.grid.stride;
  j["pool"] = compress::to_string(c.op.pool);
  j["gate_bias"] = c.op.slot_bias;
  j["gate_content_std"] = c.op.content_std;
  j["raw_window"] = c.window;
  j["task"] = sim::to_string(c.task);
  j["task_config"] = c.describe();
  j["engine"] = sim::to_string(c.engine);
  j["groups"] = c.groups();
  j["trials"] = c.trials;
  j["seed"] = c.seed;
  j["params_seed"] = c.params_seed;
  j["threads"] = o.threads;
  j["shard"] = o.shard;
  j["format"] = o.format;
  j["out"] = o.out;
  j["theory"] = o.theory;
  return j;
}

/// The theory column (--theory): per-group predicted recall of the compressed and full models
/// (theory/predict.hpp), or nothing when the configuration is outside the theory.
std::optional<std::pair<std::vector<double>, std::vector<double>>> theory_prediction(const sim::sweep_config& c,
                                                                                      std::string& reason) {
  if (c.task == sim::task_kind::padding) {  // theory/padding_task.hpp: P(answer A preferred) per length
    const auto pc = kvphase::theory::predict_padding(c.op, c.padding, c.window);
    const auto pf = kvphase::theory::predict_padding(
        {.grid = {.window = 1, .stride = 1}, .pool = kvphase::compress::pool_kind::identity}, c.padding, 0);
    if (!pc.covered || !pf.covered) {
      reason = pc.covered ? pf.reason : pc.reason;
      return std::nullopt;
    }
    std::pair<std::vector<double>, std::vector<double>> out;
    for (const auto& l : pc.lengths) out.first.push_back(l.p_a);
    for (const auto& l : pf.lengths) out.second.push_back(l.p_a);
    return out;
  }
  if (c.task != sim::task_kind::needle) {
    reason = "the theory column covers the needle and padding tasks";
    return std::nullopt;
  }
  const auto p = kvphase::theory::predict_sweep_needle(c.op, c.needle, c.window, c.groups());
  if (!p.covered) {
    reason = p.reason;
    return std::nullopt;
  }
  return std::make_pair(p.compressed, p.full);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-phase recall of a chunked-compressed model and full attention on the same inputs.", "kvphase-sweep"};
  cli_options o;
  app.add_option("--preset", o.preset, "operator: full, mean, gated, v4-csa, v4-hca, v41, nsa, paper-ref")
      ->capture_default_str();
  app.add_option("--window", o.window, "chunk window W: tokens pooled per entry (default: the preset's)");
  app.add_option("--stride", o.stride, "stride S between entries (default: the preset's; mean/gated: 4)");
  app.add_option("--pool", o.pool, "override the pool kind: mean, slot-gate, weights, max, identity");
  app.add_option("--gate-bias", o.gate_bias, "slot-gate bias b0,b1,... (one per slot; gated)")->delimiter(',');
  app.add_option("--slot-weights", o.slot_weights, "fixed slot weights w0,w1,... (--pool weights)")->delimiter(',');
  app.add_option("--gate-content-std", o.gate_content_std, "std of random per-token content logits of the gate (gated)");
  app.add_option("--raw-window", o.raw_window, "raw sliding window of the compressed model (tokens)");
  app.add_option("--task", o.task, "needle, kv-pairs or padding")->capture_default_str();
  app.add_option("--context", o.context, "context tokens N (padding: code length; default 8192 / 131072 / 512)");
  app.add_option("--dim", o.dim, "key dimension d")->capture_default_str();
  app.add_option("--key-span", o.key_span, "tokens of the target key (padding: span of evidence A)");
  app.add_option("--value-span", o.value_span, "tokens of the target value (padding: span of evidence B)");
  app.add_option("--value-key-weight", o.value_key_weight, "K row of value tokens = c * key (induction); default 1");
  app.add_option("--query-noise", o.query_noise, "query = key + sigma * noise");
  app.add_option("--logit-scale", o.logit_scale, "softmax logit scale beta (0: 1/sqrt(d); task default otherwise)");
  app.add_option("--pairs", o.pairs, "key-value pairs (kv-pairs)")->capture_default_str();
  app.add_option("--codes", o.codes, "value codebook size (kv-pairs)")->capture_default_str();
  app.add_option("--modulus", o.modulus, "phase groups: target position mod M (default: S; kv-pairs: 8)");
  app.add_option("--pad-min", o.pad_min, "first padding length (padding)")->capture_default_str();
  app.add_option("--lengths", o.lengths, "number of padding lengths (padding; default 4*S)");
  app.add_option("--engine", o.engine,
                 "key (generate keys) or score (sample scores; exact for Gaussian keys and linear pools)")
      ->capture_default_str();
  app.add_option("--trials", o.trials, "trials per phase group")->capture_default_str();
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--params-seed", o.params_seed,
                 "seed of the random compressor parameters of presets with learned projections")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "threads (0: all cores); results do not depend on it");
  app.add_option("--shard", o.shard, "run shard i/N of the trials (merge with kvphase-merge)")->capture_default_str();
  app.add_option("--format", o.format, "csv or json (default: from --out's extension, else csv)");
  app.add_option("--out,-o", o.out, "output file (default: standard output)");
  app.add_flag("--theory", o.theory, "add a theory column with the predicted recall per phase");
  app.add_flag("--quiet,-q", o.quiet, "no progress on stderr");
  if (const auto status = kvphase::cli::parse(app, argc, argv, "kvphase-sweep")) return *status;
  try {
    if (o.format.empty()) o.format = (o.out.size() >= 5 && o.out.ends_with(".json")) ? "json" : "csv";
    kvphase::require(o.format == "csv" || o.format == "json", "format", o.format, "must be csv or json");
    const sim::sweep_config c = make_config(o);
    std::optional<std::pair<std::vector<double>, std::vector<double>>> theory;
    if (o.theory) {
      std::string reason;
      theory = theory_prediction(c, reason);
      kvphase::require(theory.has_value(), "theory", "on", "no prediction for this configuration: " + reason);
    }
    const auto t0 = std::chrono::steady_clock::now();
    bool shown = false;
    sim::sweep_progress progress;
    if (!o.quiet) {
      progress.report = [&](std::int64_t done, std::int64_t total) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (el < 2.0 || total == 0) return;
        std::fprintf(stderr, "\rkvphase-sweep: %lld/%lld trials (%.0f%%), %.1f s", static_cast<long long>(done),
                     static_cast<long long>(total), 100.0 * static_cast<double>(done) / static_cast<double>(total), el);
        shown = true;
      };
    }
    const auto r = sim::run_sweep(c, progress);
    if (shown) std::fprintf(stderr, "\rkvphase-sweep: %lld trials in %.1f s%30s\n", static_cast<long long>(r.total_trials()), r.seconds, "");

    const auto out = kvphase::examples::to_sweep_output(r, config_json(o, c), argc, argv, theory);
    const std::string text = kvphase::io::sweep_text(out, o.format);
    if (o.out.empty()) {
      std::cout << text << std::flush;
    } else {
      kvphase::examples::write_text_file(o.out, text);
    }
  } catch (const kvphase::error& e) {
    std::cerr << "kvphase-sweep: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

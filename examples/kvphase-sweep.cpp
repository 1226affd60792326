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
// run every task (needle, kv-pairs, padding) in the general key-space path; --engine auto (the
// default) picks the exact score engine where compress::capabilities says it is exact, and the
// key engine otherwise, and the output names the engine used. The general path runs the spec as
// given (RoPE included) through the library's attention models (--model, --heads, --topk, ...).
// Every step is a library call: sim::run_sweep, sim::to_output (provenance, run columns, theory
// column), sim::output_text (stats::summarize, then io).

#include <cerrno>
#include <cstdlib>
#include <CLI/CLI.hpp>

#include "cli_common.hpp"
#include "cli_operator.hpp"
#include "progress.hpp"

#include <kvphase/compress/checkpoint.hpp>
#include <kvphase/compress/presets.hpp>
#include <kvphase/io/study.hpp>
#include <kvphase/sim/report.hpp>
#include <kvphase/sim/sweep.hpp>

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

// the operator flags (--preset, --window, --stride, --pool, ...) are shared with kvphase-bench
struct cli_options : kvphase::cli::operator_flags {
  std::string model = "compressed";
  std::optional<index_t> indexer_dim, indexer_heads;
  std::optional<double> indexer_align, gate_std;
  std::optional<index_t> topk, select_blocks, select_block;
  std::vector<double> gates;
  std::vector<double> head_gates;
  bool sink = false;
  std::string layers;
  std::optional<index_t> read_layer;
  std::string params = "random";
  std::optional<double> params_strength;
  std::string params_file;
  index_t raw_window = 0;
  std::string task = "needle";
  std::optional<index_t> context;  // default: the task's
  index_t dim = 64;
  std::optional<index_t> key_span, value_span;
  double value_key_weight = 1.0;
  double query_noise = 0.0;
  std::optional<double> logit_scale;
  std::optional<double> depth_lo, depth_hi;
  index_t pairs = 16000;
  index_t codes = 64;
  std::optional<index_t> modulus;
  index_t pad_min = 24;
  std::optional<index_t> lengths;
  std::string engine = "auto";
  std::string design = "independent";
  index_t trials = 1000;
  std::uint64_t seed = 1;
  std::uint64_t params_seed = 0;
  int threads = 0;
  std::string shard = "0/1";
  std::string grid;                // study file (--grid), its unit (--unit), --list, --out-dir
  std::optional<std::int64_t> unit;
  bool list = false;
  std::string out_dir;
  std::string format;
  std::string out;
  bool theory = false;
  bool quiet = false;
};

sim::sweep_config make_config(const cli_options& o) {
  sim::sweep_config c;
  c.op = kvphase::cli::make_operator(o);
  c.task = sim::make_task(o.task);
  c.engine = sim::parse_engine(o.engine);
  c.design = sim::parse_design(o.design);
  c.window = o.raw_window;
  c.trials = o.trials;
  c.seed = o.seed;
  c.params_seed = o.params_seed;
  sim::parse(o.model, c.model.kind);
  if (o.topk) c.model.top_k = *o.topk;
  if (o.indexer_dim) c.model.indexer.dim = *o.indexer_dim;
  if (o.indexer_heads) c.model.indexer.heads = *o.indexer_heads;
  if (o.indexer_align) c.model.indexer.align = *o.indexer_align;
  if (o.select_blocks) c.model.select_blocks = *o.select_blocks;
  if (o.select_block) c.model.select_block = *o.select_block;
  if (!o.gates.empty()) {
    kvphase::require(o.gates.size() == 3, "gates", o.gates.size(), "needs three values cmp,slc,win (--model nsa)");
    c.model.gate_cmp = o.gates[0];
    c.model.gate_slc = o.gates[1];
    c.model.gate_win = o.gates[2];
  }
  kvphase::require(!o.topk || c.model.kind == sim::model_kind::csa, "topk", o.topk.value_or(0), "applies only to --model csa");
  kvphase::require(!o.indexer_dim || c.model.kind == sim::model_kind::csa, "indexer-dim", o.indexer_dim.value_or(0),
                   "applies only to --model csa");
  if (o.indexer_heads)
    kvphase::require(c.model.indexer.dim > 0, "indexer-heads", *o.indexer_heads, "needs --indexer-dim > 0");
  if (o.indexer_align)
    kvphase::require(c.model.indexer.dim > 0, "indexer-align", *o.indexer_align, "needs --indexer-dim > 0");
  kvphase::require((!o.select_blocks && !o.select_block && o.gates.empty()) || c.model.kind == sim::model_kind::nsa,
                   "select-blocks", o.select_blocks.value_or(o.select_block.value_or(0)),
                   "--select-blocks, --select-block and --gates apply only to --model nsa");
  kvphase::require(o.head_gates.empty() || c.model.kind == sim::model_kind::nsa, "head-gates", o.head_gates.size(),
                   "values given: --head-gates applies only to --model nsa");
  kvphase::require(o.head_gates.empty() || o.gates.empty(), "head-gates", o.head_gates.size(),
                   "values given: use --gates (every head) or --head-gates (per head), not both");
  c.model.head_gates = o.head_gates;
  kvphase::require(!o.gate_std || c.model.kind == sim::model_kind::nsa, "gate-std", o.gate_std.value_or(0),
                   "applies only to --model nsa");
  if (o.gate_std) c.model.gate_std = *o.gate_std;
  c.model.sink = o.sink;
  c.model.layers = o.layers;
  if (o.read_layer) c.model.read_layer = *o.read_layer;
  kvphase::compress::parse(o.params, c.model.params);
  if (o.params_strength) c.model.params_strength = *o.params_strength;
  c.model.params_file = o.params_file;
  c.threads = o.threads;
  c.shard = sim::shard_spec::parse(o.shard);
  c.compute_mass = false;  // the output carries counts only
  const index_t S = c.op.grid.stride;
  auto set = [](auto& field, const auto& flag) {
    if (flag) field = *flag;
  };
  // needle and kv-pairs share their flags; kv-pairs adds pairs and codes
  auto phase_task = [&](auto& t, index_t default_modulus) {
    t.dim = o.dim;
    set(t.context, o.context);
    set(t.key_span, o.key_span);
    set(t.value_span, o.value_span);
    t.value_key_weight = o.value_key_weight;
    t.query_noise = o.query_noise;
    set(t.logit_scale, o.logit_scale);
    set(t.depth_lo, o.depth_lo);
    set(t.depth_hi, o.depth_hi);
    c.modulus = o.modulus ? *o.modulus : default_modulus;
  };
  if (auto* t = c.task.get_if<kvphase::tasks::needle_config>()) {
    phase_task(*t, std::max<index_t>(S, 2));
  } else if (auto* t = c.task.get_if<kvphase::tasks::kv_pairs_config>()) {
    phase_task(*t, 8);
    t->pairs = o.pairs;
    t->codes = o.codes;
  } else if (auto* t = c.task.get_if<kvphase::tasks::padding_config>()) {
    t->dim = o.dim;
    set(t->code_length, o.context);
    set(t->span_a, o.key_span);
    set(t->span_b, o.value_span);
    t->query_noise = o.query_noise;
    set(t->logit_scale, o.logit_scale);
    t->pad_min = o.pad_min;
    t->lengths = o.lengths ? *o.lengths : 4 * std::max<index_t>(S, 1);
    kvphase::require(!o.modulus, "modulus", o.modulus.value_or(0), "does not apply to the padding task (groups = --lengths)");
    kvphase::require(!o.depth_lo && !o.depth_hi, "depth-lo", o.depth_lo.value_or(o.depth_hi.value_or(0)),
                     "does not apply to the padding task (its evidence sits at fixed code offsets)");
  }
  kvphase::require(c.groups() >= 2, "modulus", c.groups(), "needs at least 2 phase groups");
  const index_t period = S >= 2 ? S : c.groups();
  kvphase::require(c.groups() % period == 0, "modulus", c.groups(),
                   "must be a multiple of the stride " + std::to_string(S) + " (the period tested)");
  c.validate();
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cl = kvphase::cli;
  CLI::App app{"Per-phase recall of a chunked-compressed model and full attention on the same inputs.", "kvphase-sweep"};
  cli_options o;
  // --params file: a DeepSeek-V4 checkpoint layer ("PATH" or "PATH#LAYER", compress/checkpoint.hpp)
  kvphase::compress::set_params_loader<float>(kvphase::compress::v4_params_loader<float>());
  const index_t big = index_t(1) << 30;
  // optional overrides (default: the preset's or the task's); values range-checked as text
  auto opt_int = [&](const char* name, std::optional<index_t>& v, index_t lo, index_t hi, const std::string& help) {
    return app.add_option(name, v, help)->transform(cl::integer<index_t>(lo, hi));
  };
  auto opt_real = [&](const char* name, std::optional<double>& v, double lo, double hi, const std::string& help) {
    return app.add_option(name, v, help)->transform(cl::real(lo, hi));
  };
  cl::add_operator_flags(app, o);
  app.add_option("--model", o.model,
                 "attention model: compressed (entries + raw window, joint softmax), csa (indexer top-k + window), "
                 "nsa (entries, selected blocks, window; gated)")
      ->check(CLI::IsMember({"compressed", "csa", "v4-csa", "nsa"}))
      ->capture_default_str();
  opt_int("--topk", o.topk, 1, big, "entries the CSA indexer keeps (--model csa; default 512)");
  opt_int("--indexer-dim", o.indexer_dim, 0, 65536,
          "width dI of V4's indexer with its own compressor and projections (--model csa; default 0: the query "
          "scores the compressed entries)");
  opt_int("--indexer-heads", o.indexer_heads, 1, 256, "index heads of V4's indexer (--indexer-dim > 0; default 1)");
  opt_real("--indexer-align", o.indexer_align, 0, 1,
           "agreement rho of each index head's query projection with the key projection: 1 aligned, 0 untrained "
           "(--indexer-dim > 0; default 1)");
  opt_int("--select-blocks", o.select_blocks, 3, big, "NSA selected blocks incl. initial and 2 local (default 16)");
  opt_int("--select-block", o.select_block, 1, big, "NSA selection block size in tokens (default 64)");
  cl::add_reals(app, "--gates", o.gates, 0, 1, "NSA branch gates cmp,slc,win (default 1/3 each)");
  cl::add_reals(app, "--head-gates", o.head_gates, 0, 1,
                "NSA branch gates per compression head: cmp,slc,win for head 0, then head 1, ... (3 x --heads values)");
  opt_real("--gate-std", o.gate_std, 0, 100,
           "NSA gates per query: each gate's logit moves by about this between queries, sigma(logit(g) + w.q) "
           "(--model nsa; default 0: constant gates)");
  app.add_flag("--sink", o.sink, "a sink of logit 0 in every softmax (DeepSeek-V4)");
  app.add_option("--layers", o.layers,
                 "layer schedule, comma-separated: op (the operator and --model), window, full, or an operator preset "
                 "(v4-hca, v4-csa, v41, nsa, paper-ref); e.g. window,window,op,v4-hca,op (docs/sim.md)");
  opt_int("--read-layer", o.read_layer, 0, 64, "1-based layer of --layers whose outcome is read (an op layer; default: the last op)");
  app.add_option("--params", o.params,
                 "compressor parameters: random, identity, planted-early, planted-middle, planted-late, file")
      ->check(CLI::IsMember({"random", "identity", "planted-early", "planted-middle", "planted-late", "file"}))
      ->capture_default_str();
  opt_real("--params-strength", o.params_strength, 0, 100, "slope kappa of the planted slot-bias profiles (default 2)");
  app.add_option("--params-file", o.params_file, "compressor parameters from a safetensors checkpoint, PATH or PATH#LAYER (--params file; "
                 "docs/real-models.md)");
  cl::add_int(app, "--raw-window", o.raw_window, 0, big, "raw sliding window of the compressed model (tokens)");
  app.add_option("--task", o.task, "needle, kv-pairs, padding (or any registered task)")->capture_default_str();
  opt_int("--context", o.context, 1, big, "context tokens N (padding: code length; default 8192 / 131072 / 512)");
  cl::add_int(app, "--dim", o.dim, 1, 65536, "key dimension d");
  opt_int("--key-span", o.key_span, 1, big, "tokens of the target key (padding: span of evidence A)");
  opt_int("--value-span", o.value_span, 0, big, "tokens of the target value (padding: span of evidence B)");
  cl::add_real(app, "--value-key-weight", o.value_key_weight, -1e6, 1e6,
               "K row of value tokens = c * key (induction); default 1");
  cl::add_real(app, "--query-noise", o.query_noise, 0, 1e6, "query = key + sigma * noise");
  opt_real("--logit-scale", o.logit_scale, 0, 1e6, "softmax logit scale beta (0: 1/sqrt(d); task default otherwise)");
  opt_real("--depth-lo", o.depth_lo, 0, 1,
           "lowest target depth as a fraction of the context (needle) or of the pairs (kv-pairs); default 0.1");
  opt_real("--depth-hi", o.depth_hi, 0, 1, "highest target depth (needle, kv-pairs); default 0.9");
  cl::add_int(app, "--pairs", o.pairs, 2, big, "key-value pairs (kv-pairs)");
  cl::add_int(app, "--codes", o.codes, 2, 65536, "value codebook size (kv-pairs)");
  opt_int("--modulus", o.modulus, 2, 4096, "phase groups: target position mod M (default: S; kv-pairs: 8)");
  cl::add_int(app, "--pad-min", o.pad_min, 0, index_t(1) << 29, "first padding length (padding)");
  opt_int("--lengths", o.lengths, 1, 4096, "number of padding lengths (padding; default 4*S)");
  app.add_option("--engine", o.engine,
                 "auto (score where exact, else key), key (generate keys) or score (sample scores; exact for "
                 "Gaussian keys and linear pools)")
      ->check(CLI::IsMember({"auto", "key", "score"}))
      ->capture_default_str();
  app.add_option("--design", o.design,
                 "independent (each phase group its own contexts) or shifted (one item per trial, shifted by "
                 "prefix padding to every phase; adds the paired tests)")
      ->check(CLI::IsMember({"independent", "shifted"}))
      ->capture_default_str();
  cl::add_int(app, "--trials", o.trials, 1, index_t(1) << 40, "trials per phase group");
  cl::add_u64(app, "--seed", o.seed, "random seed");
  cl::add_u64(app, "--params-seed", o.params_seed,
              "seed of the random compressor parameters of presets with learned projections");
  cl::add_int(app, "--threads", o.threads, 0, 1024, "threads (0: all cores); results do not depend on it");
  app.add_option("--shard", o.shard,
                 "run shard i/N of the trials (merge with kvphase-merge), or auto: i and N from the launcher "
                 "(sbatch --array, srun, mpirun); with --grid and no --unit, task t of the whole study")
      ->capture_default_str();
  app.add_option("--grid", o.grid, "study file (JSON): a grid of configurations (docs/scale-out.md)");
  app.add_option("--unit", o.unit, "run unit K of the --grid study")->transform(cl::integer<std::int64_t>(0, std::int64_t(1) << 20));
  app.add_flag("--list", o.list, "print the units of the --grid study and its array size, then exit");
  app.add_option("--out-dir", o.out_dir, "with --grid: write unit-K.shard-I-of-N.<format> into this directory");
  app.add_option("--format", o.format, "csv or json (default: from --out's extension, else csv)")
      ->check(CLI::IsMember({"csv", "json"}));
  app.add_option("--out,-o", o.out, "output file (default: standard output)");
  app.add_flag("--theory", o.theory, "add a theory column with the predicted recall per phase");
  app.add_flag("--quiet,-q", o.quiet, "no progress on stderr");
  if (const auto status = cl::parse(app, argc, argv, "kvphase-sweep")) return *status;
  std::vector<std::string> unit_args;  // argv with a study unit's flags in front (--grid)
  std::vector<char*> unit_argv;
  nlohmann::json study_extra = nlohmann::json::object();
  kvphase::sim::launched_shard launched;
  if (const int status = cl::run("kvphase-sweep", [&] {
        if (o.grid.empty()) {
          kvphase::require(!o.unit && !o.list && o.out_dir.empty(), o.unit ? "unit" : o.list ? "list" : "out-dir",
                           "given", "needs --grid");
          launched = cl::resolve_shard(o.shard);
          o.out = cl::shard_path(o.out, launched);
          return 0;
        }
        const auto st = kvphase::io::parse_study(kvphase::io::read_text_file(o.grid), o.grid);
        if (o.list) {
          std::cout << "# study " << st.name << " (" << o.grid << ", hash " << st.hash << "): " << st.units()
                    << " units x " << st.shards << " shards = " << st.tasks() << " array tasks (sbatch --array=0-"
                    << st.tasks() - 1 << ")\nunit\tconfiguration\n";
          for (std::int64_t k = 0; k < st.units(); ++k) std::cout << k << '\t' << st.unit_label(k) << '\n';
          return 1;
        }
        kvphase::require(o.out.empty(), "out", o.out, "is replaced by --out-dir with --grid (one file per unit and shard)");
        launched = cl::resolve_shard(o.shard);
        std::int64_t unit = 0;
        if (o.unit) {
          unit = *o.unit;
        } else {
          const auto [u, i] = kvphase::io::study_task(st, launched.shard.index, launched.shard.count);
          unit = u;
          launched.shard = {i, st.shards};
        }
        const auto flags = st.unit_flags(unit);  // throws unless unit < units
        unit_args.push_back(argv[0]);
        for (const auto& f : flags) {
          const std::string flag = "--" + f.key;
          const CLI::Option* opt = app.get_option_no_throw(flag);
          kvphase::require(opt != nullptr, o.grid + " key", f.key, "is not a kvphase-sweep flag");
          kvphase::require((opt->get_type_size() == 0) == !f.value, o.grid + " key " + f.key,
                           f.value ? *f.value : "true", f.value ? "is a flag without value: use true or false" : "needs a value");
          for (int a = 1; a < argc; ++a) {
            const std::string_view arg = argv[a];
            kvphase::require(arg != flag && !arg.starts_with(flag + "="), flag, "on the command line",
                             "is set by the study file " + o.grid + " (" + f.key + "): remove it from the command line");
          }
          unit_args.push_back(f.value ? flag + "=" + *f.value : flag);  // --key=value: a value "-3,0" stays a value
        }
        for (int a = 1; a < argc; ++a) unit_args.emplace_back(argv[a]);
        study_extra = {{"study", st.name}, {"study_hash", st.hash}, {"unit", unit}, {"units", st.units()},
                       {"unit_label", st.unit_label(unit)}};
        return 0;
      }))
    return status == 1 ? 0 : status;
  if (!unit_args.empty()) {  // parse again with the unit's flags in front of the command line
    for (auto& a : unit_args) unit_argv.push_back(a.data());
    unit_argv.push_back(nullptr);
    const kvphase::sim::launched_shard keep = launched;
    const std::string out_dir = o.out_dir;
    if (const auto status = cl::parse(app, static_cast<int>(unit_args.size()), unit_argv.data(), "kvphase-sweep"))
      return *status;
    launched = keep;
    if (o.format.empty()) o.format = "csv";
    if (!out_dir.empty()) {  // (the directory is checked, and created, at the start of the run)
      o.out = out_dir + "/unit-" + study_extra["unit"].dump() + ".shard-" + std::to_string(launched.shard.index) + "-of-" +
              std::to_string(launched.shard.count) + "." + o.format;
    }
  }
  o.shard = std::to_string(launched.shard.index) + "/" + std::to_string(launched.shard.count);
  return cl::run("kvphase-sweep", [&] {
    if (o.format.empty()) o.format = (o.out.size() >= 5 && o.out.ends_with(".json")) ? "json" : "csv";
    const sim::sweep_config c = make_config(o);
    if (o.theory) (void)sim::theory_or_throw(c);  // before the run: fail fast when not covered
    if (!o.out_dir.empty()) cl::check_writable_dir(o.out_dir, "out-dir");
    if (!o.out.empty()) cl::check_writable_file(o.out, "out");
    cl::progress_printer printer("kvphase-sweep");
    sim::sweep_progress progress;
    if (!o.quiet) progress.report = printer.callback();
    const auto r = sim::run_sweep(c, progress);
    printer.finish();
    if (const std::string w = sim::recall_warning(r); !w.empty()) std::cerr << "kvphase-sweep: warning: " << w << "\n";
    nlohmann::json extra{{"program", "kvphase-sweep"}, {"preset", o.preset}, {"format", o.format}, {"out", o.out}};
    extra.update(study_extra);
    auto out = sim::to_output(r, {.extra_config = extra, .argc = argc, .argv = argv, .theory = o.theory});
    out.prov.launcher = launched.launcher;
    out.prov.job = launched.job;
    const std::string text = sim::output_text(out, o.format);
    if (o.out.empty()) {
      std::cout << text << std::flush;
    } else {
      sim::write_text_file(o.out, text);
    }
    return 0;
  });
}

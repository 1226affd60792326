// train_lm: pretrains small transformer LMs (lm/model.hpp, libtorch) with and without the
// library's compressed attention on key–value recall sequences, and measures recall per phase.
//
//   train_lm --preset csa,full --seeds 3 --steps 3000 --out results/lm
//
// Presets (the controlled grid): csa (CSA W = 8, S = 4), full (the full-attention twin),
// gated-s2 / gated-s4 / gated-s8 (channel-gated pool, W = 8, S = 2, 4, 8), nope (csa without
// RoPE), uniform (mean pool on the CSA grid), nsa (NSA's compressed, selected-block and window
// branches mixed by per-head gates, on the csa grid). Every preset shares the data, the optimiser, the
// width and the depth; only the attention differs.
// Mitigations at matched cache memory (one entry per S = 4 tokens and layer, as their baseline):
// hca-s4 (channel-gated pool W = S = 4, the unmitigated baseline), overlap (W = 2S = 8, the
// gated-s4 model), shifted (layer l's grid origin ⌊l·S/L⌋), shifted-heads (query head h reads its
// own compressor on the grid W = S = 4H at origin 4h: T/(4H) entries per head), random-offset (grid origin drawn per
// training sequence in [0, S), evaluated at origin 0), blur (causal [1, 2, 1]/4 low-pass of the
// compressor's input), gate-entropy (hca-s4 plus λ · the mean negative gate entropy in the
// loss, λ = --gate-entropy).
// --top-k K adds a lightning indexer (top-K entries per query, lm/model.hpp) to every compressed
// layer of every preset; --indexer-heads, --indexer-dim and --indexer-weight set it.
// --stop-recall R ends a run at the first snapshot with eval recall ≥ R, on the --steps schedule
// (a twin stopped at a matched accuracy); lm_summary.json records steps_trained.
// --data-seed D draws every run's data (training batches, grid offsets, evaluation sequences)
// from seed D while its initialisation stays its own seed: crossing the two tells whether a
// seed's outcome comes from its start or its data order.
//
// Writes to --out: lm_phase.csv (recall per phase group with Wilson intervals), lm_history.csv
// (loss, recall and gate slot profiles over training), lm_ablation.csv (recall per phase with
// each head or layer knocked out), lm_readout.csv (--readout: per layer, head, phase group and
// outcome, the attention mass on the entries or tokens holding the query's key and value),
// lm_summary.json (per run: period and uniformity tests,
// speed), all with provenance, and one checkpoint directory per run
// (ckpt_<preset>_seed<k>/model.safetensors + config.json) that kvphase-inspect reads. The
// provenance names the BLAS libtorch's products ran on (lm/blas.hpp): it sets the speed (the
// reference BLAS is about 8x slower than OpenBLAS) and the last bits.
//
// --load DIR[,DIR…] evaluates stored checkpoints instead of training (lm::load_checkpoint): each
// model comes from its directory, the evaluation sequences from the data flags and --seed (the
// run's seed reproduces its evaluation), and --ablate / --readout apply; the rows name the
// directory as their preset, and lm_history.csv holds one row set at step 0: the evaluation and
// the model's gate slot profiles. The flags that shape or train a model are refused with it.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_common.hpp"
#include "kvphase/io/csv.hpp"
#include "kvphase/io/fields_json.hpp"
#include "kvphase/io/provenance.hpp"
#include "kvphase/io/safetensors.hpp"
#include "kvphase/lm/blas.hpp"
#include "kvphase/lm/checkpoint.hpp"
#include "kvphase/lm/data.hpp"
#include "kvphase/lm/model.hpp"
#include "kvphase/lm/train.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/periodicity.hpp"
#include "kvphase/stats/uniformity.hpp"
#include "progress.hpp"
#include "roofline.hpp"

using namespace kvphase;

namespace {

/// A preset: the model and the training options that differ between presets.
struct preset_config {
  lm::model_config model;
  bool random_origin = false;
  double gate_entropy = 0.0;
};

const char* const preset_list =
    "csa, full, nope, uniform, gated-s2, gated-s4, gated-s8, nsa, hca-s4, overlap, shifted, shifted-heads, random-offset, "
    "blur or "
    "gate-entropy";

/// --grid W,S (0, 0: the preset's own) and --schedule (empty: the preset's own) override a
/// preset's grid and layer kinds and keep everything else.
struct preset_override {
  std::string schedule;
  index_t window = 0, stride = 0;
};

preset_config preset(const std::string& name, const lm::model_config& base, double gate_entropy,
                     const preset_override& o = {}) {
  if (!o.schedule.empty() || o.stride > 0) {
    auto out = preset(name, base, gate_entropy);
    if (!o.schedule.empty()) out.model.schedule = o.schedule;
    if (o.stride > 0) out.model.window = o.window, out.model.stride = o.stride;
    return out;
  }
  preset_config out;
  lm::model_config& m = out.model;
  m = base;
  const index_t L = static_cast<index_t>(base.layers().size());
  auto all = [&](const char* k) {
    std::string s;
    for (index_t l = 0; l < L; ++l) s += (l ? "," : "") + std::string(k);
    return s;
  };
  if (name == "csa") {
    m.schedule = all("csa"), m.window = 8, m.stride = 4;
  } else if (name == "full") {
    m.schedule = all("full");
  } else if (name == "nope") {
    m.schedule = all("csa"), m.window = 8, m.stride = 4, m.rope = false;
  } else if (name == "uniform") {
    m.schedule = all("uniform"), m.window = 8, m.stride = 4;
  } else if (name == "gated-s2" || name == "gated-s4" || name == "gated-s8") {
    m.schedule = all("gated"), m.window = 8, m.stride = name.back() - '0';
  } else if (name == "nsa") {
    // NSA's three branches at the miniature scale of the csa grid: entries W = 8, S = 4
    // (channel-gated pool), selection blocks of 8 tokens, 4 per query (the first and the 2 most
    // recent forced), the raw window
    m.schedule = all("nsa"), m.window = 8, m.stride = 4;
    m.select_block = 8, m.select_top_n = 4, m.select_initial = 1, m.select_local = 2;
  } else if (name == "overlap") {
    out = preset("gated-s4", base, gate_entropy);  // W = 2S = 8 at S = 4: the gated-s4 model
  } else if (name == "hca-s4" || name == "shifted" || name == "shifted-heads" || name == "random-offset" ||
             name == "blur" || name == "gate-entropy") {
    m.schedule = all("gated"), m.window = 4, m.stride = 4;  // HCA: W = S = 4
    m.shift_layers = name == "shifted";
    m.shift_heads = name == "shifted-heads";  // head h: its own grid (H·4, H·4) at origin 4h
    m.blur = name == "blur";
    out.random_origin = name == "random-offset";
    if (name == "gate-entropy") {
      require(gate_entropy > 0.0, "gate-entropy", gate_entropy, "must be > 0 for the gate-entropy preset");
      out.gate_entropy = gate_entropy;
    }
  } else {
    fail("preset", name, std::string("must be ") + preset_list);
  }
  return out;
}

struct run_record {
  std::string preset;
  std::uint64_t seed = 0;
  lm::model_config model;
  lm::train_config train;
  lm::train_result r;
  stats::periodicity_result period;
  stats::test_result uniform;
  std::vector<lm::phase_counts> ablation;  ///< [layer * (heads + 1) + head + 1]: head -1 = whole layer
  lm::attention_readout_result readout;    ///< --readout
};

}  // namespace

int main(int argc, char** argv) {
  return cli::run("train_lm", [&]() -> int {
    CLI::App app{"train_lm: small LMs with compressed attention, recall per phase"};
    std::string presets = "csa,full", out = "results/lm";
    preset_override over;
    std::vector<index_t> grid;
    std::uint64_t seed = 1;
    index_t seeds = 1, layers = 2;
    bool ablate = false, readout = false, quiet = false;
    std::vector<std::string> loads;
    double gate_entropy = 0.1;
    lm::model_config base;
    lm::data_config data;
    lm::train_config tc;
    app.add_option("--preset", presets,
                   "comma-separated presets: csa full nope uniform gated-s2 gated-s4 gated-s8 nsa hca-s4 overlap shifted "
                   "shifted-heads random-offset blur gate-entropy")
        ->capture_default_str();
    cli::add_u64(app, "--seed", seed, "first seed (runs use seed, seed + 1, ...)");
    cli::add_int(app, "--seeds", seeds, 1, 64, "seeds per preset");
    cli::add_int(app, "--data-seed", tc.data_seed, 0, std::numeric_limits<std::int64_t>::max(),
                 "seed of every run's data (training batches, grid offsets, evaluation) apart from its "
                 "initialisation (default -1: each run's own seed)");
    cli::add_int(app, "--layers", layers, 1, 64, "layers");
    app.add_option("--grid", grid,
                   "W,S: every preset's compressor window and stride instead of its own (e.g. --preset hca-s4 --grid 8,8)")
        ->expected(2)
        ->delimiter(',')
        ->transform(cli::integer<index_t>(1, 4096));
    app.add_option("--schedule", over.schedule,
                   "layer kinds, comma-separated (full, csa, gated, uniform), replacing every preset's schedule; "
                   "each preset keeps its grid and options (e.g. --preset csa --schedule csa,full)");
    cli::add_int(app, "--d-model", base.d_model, 4, 4096, "model width");
    cli::add_int(app, "--heads", base.heads, 1, 64, "query heads");
    cli::add_int(app, "--head-dim", base.head_dim, 4, 1024, "head width c (even)");
    cli::add_int(app, "--mlp", base.mlp_hidden, 1, 65536, "MLP hidden width");
    cli::add_int(app, "--rope-dim", base.rope_dim, 2, 1024, "rotated channels");
    cli::add_int(app, "--raw-window", base.raw_window, 1, 1 << 20, "raw tokens seen by a compressed layer");
    cli::add_int(app, "--top-k", base.top_k, 0, 1 << 20,
                 "lightning indexer on every compressed layer: entries kept per query (0: none)");
    cli::add_int(app, "--indexer-heads", base.indexer_heads, 1, 256, "indexer heads H_I");
    cli::add_int(app, "--indexer-dim", base.indexer_dim, 2, 4096, "indexer width d_I (even, >= --rope-dim)");
    cli::add_real(app, "--indexer-weight", tc.indexer_weight, 0.0, 100.0, "weight of the indexer KL term in the loss");
    cli::add_int(app, "--context", data.context, 2, 1 << 20, "context tokens");
    cli::add_int(app, "--pairs", data.pairs, 1, 1 << 16, "key-value pairs in the context");
    cli::add_int(app, "--queries", data.queries, 1, 1 << 16, "queries per sequence");
    cli::add_int(app, "--gap", data.gap, 0, 1 << 20, "filler tokens between the context and the queries");
    cli::add_int(app, "--keys", data.keys, 1, 1 << 16, "key vocabulary");
    cli::add_int(app, "--values", data.values, 2, 1 << 16, "value vocabulary");
    cli::add_int(app, "--modulus", data.modulus, 2, 4096, "phase groups (key position mod this)");
    cli::add_int(app, "--steps", tc.steps, 1, 10000000, "training steps");
    cli::add_int(app, "--batch", tc.batch, 1, 65536, "sequences per step");
    cli::add_real(app, "--lr", tc.lr, 1e-6, 0.5, "peak learning rate");
    cli::add_int(app, "--eval-every", tc.eval_every, 0, 10000000, "steps between snapshots");
    cli::add_int(app, "--eval", tc.eval_sequences, 1, 1 << 24, "evaluation sequences");
    cli::add_int(app, "--threads", tc.threads, 1, 1024, "torch threads");
    cli::add_real(app, "--gate-entropy", gate_entropy, 0.0, 100.0,
                  "λ of the gate-entropy preset: loss + λ · mean negative gate entropy");
    cli::add_real(app, "--stop-recall", tc.stop_recall, 0.0, 1.0,
                  "stop after the first snapshot with eval recall >= this (0: off; the schedule stays --steps')");
    app.add_flag("--ablate", ablate, "knock out each head and layer and evaluate again");
    app.add_flag("--readout", readout,
                 "after training, record where each evaluation query's attention goes (the rows holding its "
                 "pair's key, value or both), per layer, head, phase group and outcome: lm_readout.csv");
    app.add_flag("--quiet", quiet, "no progress line");
    {
      auto* lo = app.add_option("--load", loads,
                                "evaluate stored checkpoints (train_lm's ckpt_<preset>_seed<k> directories) instead of "
                                "training: the model from each, the evaluation from the data flags and --seed")
                     ->delimiter(',');
      for (const char* f : {"--preset", "--seeds", "--layers", "--grid", "--schedule", "--d-model", "--heads",
                            "--head-dim", "--mlp", "--rope-dim", "--raw-window", "--top-k", "--indexer-heads",
                            "--indexer-dim", "--indexer-weight", "--steps", "--batch", "--lr", "--eval-every",
                            "--gate-entropy", "--stop-recall"})
        lo->excludes(app.get_option(f));
    }
    app.add_option("--out", out, "output directory")->capture_default_str();
    if (auto rc = cli::parse(app, argc, argv, "train_lm")) return *rc;
    cli::check_writable_dir(out);
    if (!grid.empty()) {
      require(grid[0] >= grid[1], "grid", std::to_string(grid[0]) + "," + std::to_string(grid[1]),
              "must be W,S with W >= S");
      over.window = grid[0];
      over.stride = grid[1];
    }
    if (!over.schedule.empty()) {
      lm::model_config probe;
      probe.schedule = over.schedule;
      const auto n = static_cast<index_t>(probe.layers().size());  // names a bad layer kind
      require(app.count("--layers") == 0 || n == layers, "schedule", over.schedule,
              "must name --layers = " + std::to_string(layers) + " layers (or leave --layers out)");
      layers = n;
    }
    {
      std::string s;
      for (index_t l = 0; l < layers; ++l) s += l ? ",full" : "full";
      base.schedule = s;
    }
    base.vocab = data.vocab();
    data.validate();
    std::vector<std::string> names;
    {
      std::stringstream ss(presets);
      for (std::string p; std::getline(ss, p, ',');) names.push_back(p);
    }
    require(!names.empty(), "preset", presets, "must name at least one preset");
    for (const auto& n : names) {
      const auto pc = preset(n, base, gate_entropy, over);
      pc.model.validate();
      lm::train_config t = tc;
      t.random_origin = pc.random_origin;
      t.gate_entropy = pc.gate_entropy;
      t.validate();
      if (readout)
        for (const auto k : pc.model.layers())
          require(k != lm::layer_kind::nsa, "readout", n,
                  "needs one attention weight per row; preset " + n + " has NSA layers (three branches)");
    }

    const double peak = bench::fma_peak_gflops_per_cpu_second<float>(tc.threads);
    // the BLAS of libtorch's products sets the speed and the last bits (lm/blas.hpp)
    const lm::blas_info blas = lm::blas_backend();
    if (blas.name == "reference" && names.size() > 0)
      std::cerr << "train_lm: note: matrix products run on the reference BLAS (" << blas.library
                << "), 8x slower than OpenBLAS on an AVX-512 Xeon; Debian's libopenblas0-openmp replaces it "
                   "(scripts/setup.sh --with-libtorch installs it). Results differ between the two in the "
                   "last bits.\n";
    std::vector<run_record> runs;
    // after a run's model is trained or loaded: its tests, ablations and readout
    auto finish_run = [&](run_record& rec, lm::lm& model) {
      const auto& e = rec.r.eval;
      const index_t S = rec.model.stride;
      const index_t period = (data.modulus % S == 0 && S >= 2) ? S : 0;
      if (period) rec.period = stats::periodicity_test(e.hits, e.trials, data.modulus, period, {.seed = rec.seed});
      rec.uniform = stats::uniformity_test(e.hits, e.trials);
      // the readout first: it refuses NSA layers (a loaded model's are not checked before)
      if (readout) rec.readout = lm::attention_readout(model, data, tc.data_seed_for(rec.seed), tc.eval_sequences);
      if (ablate) {
        for (index_t l = 0; l < static_cast<index_t>(model->kinds.size()); ++l)
          for (index_t h = -1; h < rec.model.heads; ++h)
            rec.ablation.push_back(lm::evaluate(model, data, tc.data_seed_for(rec.seed), tc.eval_sequences, l, h));
      }
    };
    if (!loads.empty()) names.clear();
    for (const auto& dir : loads) {
      run_record rec;
      rec.preset = std::filesystem::path(dir).lexically_normal().filename().string();
      if (rec.preset.empty()) rec.preset = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
      rec.seed = seed;
      lm::lm model = lm::load_checkpoint(dir);
      rec.model = model->cfg;
      require(rec.model.vocab == data.vocab(), "load", dir,
              "holds a model of vocabulary " + std::to_string(rec.model.vocab) + "; the data flags give " +
                  std::to_string(data.vocab()) + " (pass the --keys/--values/--pairs… of the run that saved it)");
      rec.train = tc;
      rec.train.steps = 0;
      rec.r.eval = lm::evaluate(model, data, tc.data_seed_for(rec.seed), tc.eval_sequences);
      // one snapshot, step 0: the loaded model's evaluation and gate slot profiles (lm_history.csv),
      // so that its ablation can be read against its gates (scripts/lm_report.py)
      rec.r.history.push_back({.step = 0, .eval_loss = rec.r.eval.mean_loss(), .eval_recall = rec.r.eval.mean_recall(),
                               .slot_profile = lm::slot_profiles(model)});
      finish_run(rec, model);
      runs.push_back(std::move(rec));
    }
    const index_t total = static_cast<index_t>(names.size()) * seeds * tc.steps;
    cli::progress_printer progress("train_lm");
    index_t done = 0;
    for (const auto& n : names)
      for (index_t k = 0; k < seeds; ++k) {
        run_record rec;
        rec.preset = n;
        rec.seed = seed + static_cast<std::uint64_t>(k);
        const auto pc = preset(n, base, gate_entropy, over);
        rec.model = pc.model;
        rec.train = tc;
        rec.train.random_origin = pc.random_origin;
        rec.train.gate_entropy = pc.gate_entropy;
        lm::lm model(nullptr);
        rec.r = lm::train(rec.model, data, rec.train, rec.seed, [&](index_t s, index_t, double) {
          if (!quiet) progress.update(done + s, total);
        }, &model);
        done += tc.steps;
        finish_run(rec, model);
        std::ostringstream dir;
        dir << out << "/ckpt_" << n << "_seed" << rec.seed;
        lm::save_checkpoint(model, dir.str());
        runs.push_back(std::move(rec));
      }
    if (!quiet) progress.finish();

    // ---- outputs ----
    nlohmann::json cfg;
    cfg["presets"] = loads.empty() ? presets : std::string();
    cfg["seeds"] = seeds;
    if (!loads.empty()) {  // the loaded models' own field lists, under the names their rows carry
      cfg["load"] = loads;
      for (const auto& r : runs) cfg["preset_config"][r.preset]["model"] = io::fields_to_json(r.model);
    }
    cfg["model"] = io::fields_to_json(base);
    cfg["data"] = io::fields_to_json(data);
    cfg["train"] = io::fields_to_json(tc);
    cfg["gate_entropy"] = gate_entropy;
    cfg["blas"] = {{"name", blas.name}, {"library", blas.library}, {"config", blas.config}};
    // every preset's own field lists (model and training), so a row's preset names its config
    for (const auto& n : names) {
      const auto pc = preset(n, base, gate_entropy, over);
      lm::train_config t = tc;
      t.random_origin = pc.random_origin;
      t.gate_entropy = pc.gate_entropy;
      cfg["preset_config"][n]["model"] = io::fields_to_json(pc.model);
      cfg["preset_config"][n]["train"] = io::fields_to_json(t);
    }
    const io::provenance prov = io::make_provenance(cfg, seed, tc.threads, argc, argv);
    const std::string header = io::to_csv_comment(prov);
    // a recall over no queries is NaN (lm::phase_counts): an empty cell, never a number
    auto fx = [](double v, int d = 6) {
      if (std::isnan(v)) return std::string();
      std::ostringstream s;
      s.setf(std::ios::fixed);
      s.precision(d);
      s << v;
      return s.str();
    };
    {
      std::ofstream f(out + "/lm_phase.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"preset", "seed", "window", "stride", "group", "phase", "trials", "hits", "recall", "ci_low", "ci_high"});
      for (const auto& r : runs)
        for (index_t g = 0; g < data.modulus; ++g) {
          const auto t = r.r.eval.trials[static_cast<std::size_t>(g)], h = r.r.eval.hits[static_cast<std::size_t>(g)];
          const auto ci = stats::wilson_interval(h, t);
          w.row({r.preset, std::to_string(r.seed), std::to_string(r.model.window), std::to_string(r.model.stride),
                 std::to_string(g), std::to_string(g % r.model.stride), std::to_string(t), std::to_string(h),
                 fx(r.r.eval.recall(g)), fx(ci.low), fx(ci.high)});
        }
    }
    {
      std::ofstream f(out + "/lm_history.csv");
      io::csv_writer w(f);
      w.comment(header);
      // head: "all" for a layer's one compressor, h for query head h's (shift_heads)
      w.row({"preset", "seed", "step", "train_loss", "eval_loss", "eval_recall", "indexer_kl", "layer", "head", "slot",
             "slot_weight"});
      for (const auto& r : runs)
        for (const auto& s : r.r.history) {
          for (const auto& g : s.slot_profile)
            for (std::size_t q = 0; q < g.weight.size(); ++q)
              w.row({r.preset, std::to_string(r.seed), std::to_string(s.step), fx(s.train_loss), fx(s.eval_loss),
                     fx(s.eval_recall), fx(s.indexer_kl), std::to_string(g.layer), g.head < 0 ? "all" : std::to_string(g.head),
                     std::to_string(q), fx(g.weight[q])});
          if (s.slot_profile.empty())
            w.row({r.preset, std::to_string(r.seed), std::to_string(s.step), fx(s.train_loss), fx(s.eval_loss),
                   fx(s.eval_recall), fx(s.indexer_kl), "", "", "", ""});
        }
    }
    if (ablate) {
      std::ofstream f(out + "/lm_ablation.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"preset", "seed", "layer", "head", "group", "trials", "hits", "recall", "drop"});
      for (const auto& r : runs) {
        std::size_t i = 0;
        for (index_t l = 0; l < static_cast<index_t>(r.model.layers().size()); ++l)
          for (index_t h = -1; h < r.model.heads; ++h, ++i)
            for (index_t g = 0; g < data.modulus; ++g) {
              const auto& a = r.ablation[i];
              w.row({r.preset, std::to_string(r.seed), std::to_string(l), h < 0 ? "all" : std::to_string(h),
                     std::to_string(g), std::to_string(a.trials[static_cast<std::size_t>(g)]),
                     std::to_string(a.hits[static_cast<std::size_t>(g)]), fx(a.recall(g)),
                     fx(r.r.eval.recall(g) - a.recall(g))});
            }
      }
    }
    if (readout) {
      std::ofstream f(out + "/lm_readout.csv");
      io::csv_writer w(f);
      w.comment(header);
      // per cell the query count, the mean attention mass on the rows holding the pair's key,
      // value and both (an entry: its unmasked source tokens; a raw row: its token), and how many
      // queries' largest-weight row holds both, the key only, the value only, neither
      w.row({"preset", "seed", "layer", "kind", "head", "group", "outcome", "queries", "key_mass", "value_mass",
             "pair_mass", "top_pair", "top_key_only", "top_value_only", "top_neither"});
      for (const auto& r : runs) {
        const auto& ro = r.readout;
        for (index_t l = 0; l < ro.layers; ++l)
          for (index_t h = 0; h < ro.heads; ++h)
            for (index_t g = 0; g < ro.modulus; ++g)
              for (const bool hit : {true, false}) {
                const auto& c = ro.cell(l, h, g, hit);
                if (c.queries == 0) continue;
                const double n = static_cast<double>(c.queries);
                w.row({r.preset, std::to_string(r.seed), std::to_string(l), lm::to_string(ro.kinds[static_cast<std::size_t>(l)]),
                       std::to_string(h), std::to_string(g), hit ? "hit" : "miss", std::to_string(c.queries),
                       fx(c.key / n), fx(c.value / n), fx(c.pair / n), std::to_string(c.top_pair),
                       std::to_string(c.top_key), std::to_string(c.top_value), std::to_string(c.top_neither)});
              }
      }
    }
    nlohmann::json js;
    js["provenance"] = io::to_json(prov);
    js["fma_peak_gflops_per_cpu_second"] = peak;
    js["runs"] = nlohmann::json::array();
    std::cout << "preset        seed  mean_recall  eval_loss  period_p  uniformity_p  tok/s/core  roofline  recall by group\n";
    for (const auto& r : runs) {
      const double tps = r.r.tokens / std::max(r.r.cpu_seconds, 1e-9);
      // forward + backward ≈ 3 × forward multiply-adds, 2 FLOP each
      const double gflops = 6.0 * r.r.macs / std::max(r.r.cpu_seconds, 1e-9) * 1e-9;
      nlohmann::json j;
      j["preset"] = r.preset;
      j["seed"] = r.seed;
      j["model"] = io::fields_to_json(r.model);
      j["train"] = io::fields_to_json(r.train);
      j["mean_recall"] = r.r.eval.mean_recall();
      j["eval_loss"] = r.r.eval.mean_loss();
      j["eval_loss_se"] = r.r.eval.loss_se();
      j["trials"] = r.r.eval.trials;
      j["hits"] = r.r.eval.hits;
      j["period"] = r.period.period;
      j["period_p"] = r.period.p;
      j["period_test"] = r.period.test;
      j["uniformity_p"] = r.uniform.p;
      j["steps_trained"] = r.r.steps_done;
      j["train_seconds"] = r.r.seconds;
      j["train_cpu_seconds"] = r.r.cpu_seconds;
      const bool trained = r.r.steps_done > 0;  // a --load run has no speed: null, and "-" below
      j["tokens_per_cpu_second"] = trained ? nlohmann::json(tps) : nlohmann::json();
      j["gflops_per_cpu_second"] = trained ? nlohmann::json(gflops) : nlohmann::json();
      j["roofline_fraction"] = trained ? nlohmann::json(gflops / peak) : nlohmann::json();
      js["runs"].push_back(j);
      std::cout << std::left << std::setw(13) << r.preset << " " << std::setw(5) << r.seed << " " << fx(r.r.eval.mean_recall(), 3)
                << "        " << fx(r.r.eval.mean_loss(), 3) << "      " << (r.period.period ? fx(r.period.p, 4) : "  -   ")
                << "    " << fx(r.uniform.p, 4) << "        " << (trained ? fx(tps, 0) : "-") << "       " << (trained ? fx(gflops / peak, 3) : "-") << "    ";
      for (index_t g = 0; g < data.modulus; ++g) {
        const double v = r.r.eval.recall(g);
        std::cout << (std::isnan(v) ? std::string("-") : fx(v, 2)) << " ";
      }
      std::cout << "\n";
    }
    std::ofstream(out + "/lm_summary.json") << js.dump(2) << "\n";
    return 0;
  });
}

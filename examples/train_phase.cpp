// Trains toy retrieval models over a chunked-compressed cache and a full-attention control on the
// same data, then measures recall per phase: gate profiles during training, the per-phase table
// with Wilson intervals and a periodicity test, the ablation matrix (one head or one layer knocked
// out), and the mitigations at matched cache size (mean, worst phase and gap with intervals).
// Writes CSV (with provenance comments) and JSON to --out; plot with scripts/plot_train.py.
//
//   train_phase                      full run (all variants, 3 seeds; about 2 minutes on 2 cores)
//   train_phase --quick              seconds: a small task, plain + full attention, 1 seed
//   train_phase --shard i/N|auto     train only shard i of the (variant, seed) units; writes their
//                                    results to --out/train_units.json (no tables)
//   train_phase --merge F1 F2 ...    join the shards' unit files into the unsharded run's outputs
#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kvphase/io/csv.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/provenance.hpp"
#include "kvphase/io/train_units.hpp"
#include "kvphase/stats/gap.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/periodicity.hpp"
#include "kvphase/stats/uniformity.hpp"
#include "kvphase/theory/heads.hpp"
#include "kvphase/train/mitigations.hpp"
#include "kvphase/train/trainer.hpp"

using namespace kvphase;
using namespace kvphase::train;
using kvphase::io::format_fixed;

namespace {

struct job_result {
  variant v;
  std::uint64_t seed = 0;
  train_result trained;
  std::vector<ablation_row> ablation;  // row 0 = no knockout
  std::vector<std::vector<double>> final_gates;  // slot_gate_profile of the trained parameters
  bool done = false;
};

// ---- unit files (io/train_units.hpp): one (variant, seed) unit's results, exactly ----
io::ordered_json unit_to_json(const job_result& j) {
  return io::to_json(io::train_unit{.variant = j.v.name(), .seed = j.seed, .trained = {.params = {},
                                     .history = j.trained.history, .final_loss = j.trained.final_loss,
                                     .final_accuracy = j.trained.final_accuracy, .seconds = j.trained.seconds},
                                     .ablation = j.ablation, .final_gates = j.final_gates});
}

// Per-phase summary of one trained model.
struct phase_summary {
  phase_counts phases;
  stats::interval mean_ci;
  double mean = 0;
  index_t worst_phase = 0;
  double worst = 0;
  stats::interval worst_ci;
  stats::gap_result gap;
  stats::periodicity_result period;
  stats::test_result uniform;
};

phase_summary summarise(const position_counts& pc, index_t S, std::int64_t permutations, std::uint64_t seed) {
  phase_summary s;
  s.phases = by_phase(pc, S);
  s.mean = static_cast<double>(s.phases.total_hits()) / static_cast<double>(s.phases.total_trials());
  s.mean_ci = stats::wilson_interval(s.phases.total_hits(), s.phases.total_trials());
  s.worst_phase = 0;
  for (index_t f = 1; f < S; ++f)
    if (s.phases.recall(f) < s.phases.recall(s.worst_phase)) s.worst_phase = f;
  s.worst = s.phases.recall(s.worst_phase);
  s.worst_ci = stats::wilson_interval(s.phases.hits[static_cast<std::size_t>(s.worst_phase)],
                                      s.phases.trials[static_cast<std::size_t>(s.worst_phase)]);
  s.gap = stats::phase_gap_bootstrap(s.phases.hits, s.phases.trials, {.replicates = 2000, .seed = seed});
  // periodicity over residues mod 2S (two periods), period S
  const phase_counts m2 = by_phase(pc, 2 * S);
  s.period = stats::periodicity_test(m2.hits, m2.trials, 2 * S, S, {.permutations = permutations, .seed = seed});
  s.uniform = stats::uniformity_test(s.phases.hits, s.phases.trials);
  return s;
}

std::string ci_text(const stats::interval& ci) { return "[" + format_fixed(ci.low, 3) + ", " + format_fixed(ci.high, 3) + "]"; }

std::string p_text(double p) {
  std::ostringstream os;
  if (p < 1e-3) os << std::scientific << std::setprecision(1) << p;
  else os << std::fixed << std::setprecision(3) << p;
  return os.str();
}

/// "all" or a comma list of mitigation names; an empty list or an empty item is an error (it
/// would train nothing and still exit 0).
std::vector<mitigation> parse_variants(const std::string& list) {
  if (list == "all") return {std::begin(all_mitigations), std::end(all_mitigations)};
  require(!list.empty(), "--variants", list, "must be all or a comma list of variants, not empty");
  std::vector<mitigation> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    require(!item.empty(), "--variants", list, "has an empty item");
    out.push_back(parse_mitigation(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train toy retrieval models over a chunked-compressed cache and measure recall per phase"};
  retrieval_task task{};
  model_config base{};
  base.layers = 2;
  train_config tc{.steps = 4000, .batch = 32, .adam = {.lr = 1e-2}, .profile_every = 100, .log_every = 1000};
  mitigation_settings ms{};
  index_t stride = 4, seeds = 3, trials = 64, threads = 2;
  std::int64_t permutations = 9999;
  std::uint64_t seed = 1;
  std::string variants_text = "all", out_dir = "train_out";
  bool quick = false;
  std::string shard_text;
  std::vector<std::string> merge_files;
  namespace cl = kvphase::cli;
  cl::add_int<index_t>(app, "--steps", tc.steps, 0, 10'000'000, "training steps");
  cl::add_int<index_t>(app, "--batch", tc.batch, 1, 65536, "examples per step");
  cl::add_real(app, "--lr", tc.adam.lr, 0.0, 1e6, "Adam learning rate (> 0)");
  cl::add_int<index_t>(app, "--heads", base.spec.heads, 1, 64, "heads per layer");
  cl::add_int<index_t>(app, "--layers", base.layers, 1, 8, "attention layers");
  cl::add_int<index_t>(app, "--head-dim", base.head_dim, 1, 1024, "head dimension");
  cl::add_int<index_t>(app, "--stride", stride, 1, 4096, "compression stride S (window W = S in the base)");
  cl::add_int<index_t>(app, "--n-context", task.n_context, 2, 65536, "context tokens");
  cl::add_int<index_t>(app, "--raw-window", task.raw_window, 0, 65535, "raw window tokens");
  cl::add_int<index_t>(app, "--n-keys", task.n_keys, 2, index_t(1) << 20, "key vocabulary");
  cl::add_int<index_t>(app, "--key-dim", task.key_dim, 1, 4096, "key embedding dimension");
  cl::add_int<index_t>(app, "--n-values", task.n_values, 2, 4096, "value vocabulary");
  cl::add_int<index_t>(app, "--seeds", seeds, 1, 100, "training seeds per variant");
  cl::add_u64(app, "--seed", seed, "first seed (init seed s, data seed 1000 + s)");
  cl::add_int<index_t>(app, "--trials", trials, 1, 10'000'000, "evaluation trials per target position");
  cl::add_int<std::int64_t>(app, "--permutations", permutations, 1, 10'000'000,
                            "permutations of the periodicity test");
  cl::add_real(app, "--entropy-reg", ms.entropy_reg, 0.0, 1e6, "lambda of the gate_entropy mitigation");
  app.add_option("--variants", variants_text,
                 "comma list of plain, overlap, shifted_heads, random_offset, blur, gate_entropy, content_gate, "
                 "full_attention, or all")
      ->capture_default_str();
  cl::add_int<index_t>(app, "--threads", threads, 1, 64, "training jobs run in parallel (results do not depend on it)");
  app.add_option("--out", out_dir, "output directory")->capture_default_str();
  app.add_flag("--quick", quick, "short run for tests: small task, plain and full_attention, 1 seed");
  auto* shard_opt = app.add_option("--shard", shard_text,
                                   "train only shard i/N of the (variant, seed) units and write --out/train_units.json "
                                   "(join with --merge), or auto: i and N from the launcher (Slurm array, srun, mpirun); "
                                   "--out may contain {index} and {count}");
  app.add_option("--merge", merge_files,
                 "unit files of every shard (train_units.json): write the unsharded run's outputs from them, "
                 "training nothing; give the same configuration flags as the shards")
      ->excludes(shard_opt);
  if (const auto status = kvphase::cli::parse(app, argc, argv, "train_phase")) return *status;

  return kvphase::cli::run("train_phase", [&]() -> int {
    if (quick) {
      task = {.n_context = 28, .raw_window = 4, .n_keys = 64, .key_dim = 16, .n_values = 8, .embed_seed = 2};
      base.layers = 1;
      base.spec.heads = 1;
      base.head_dim = 8;
      tc.steps = 3000;
      tc.batch = 16;
      tc.adam.lr = 1e-2;
      tc.log_every = 1000;
      seeds = 1;
      trials = 50;
      permutations = 999;
      if (variants_text == "all") variants_text = "plain,full_attention";
    }
    require(seeds >= 1 && seeds <= 100, "--seeds", seeds, "must be in [1, 100]");
    require(threads >= 1 && threads <= 64, "--threads", threads, "must be in [1, 64]");
    base.spec.grid = {.window = stride, .stride = stride};
    base.validate(task);
    tc.validate();
    const std::vector<mitigation> kinds = parse_variants(variants_text);
    const retrieval_data data(task);
    const eval_config ec{.trials_per_position = trials, .seed = 4242};
    ec.validate();
    require(task.target_end() % (2 * stride) == 0, "n_context - raw_window", task.target_end(),
            "must be a multiple of 2 * stride (equal trials per residue mod 2S)");
    sim::launched_shard launched;
    if (!shard_text.empty()) {
      launched = cl::resolve_shard(shard_text, "--shard");
      out_dir = cl::shard_path(out_dir, launched, "--out");
    }
    cl::check_writable_dir(out_dir, "--out");  // before the run, not after it

    std::cout << task << "\n" << base << "\n" << tc << "\nvariants:";
    for (auto k : kinds) std::cout << " " << to_string(k);
    std::cout << "\nseeds " << seeds << " (first " << seed << "), eval " << trials << " trials per target position ("
              << task.target_end() << " positions)\n\n";

    // ---- train every (variant, seed), in parallel; results are stored by job index ----
    std::vector<job_result> jobs;
    for (auto k : kinds)
      for (index_t s = 0; s < seeds; ++s) {
        job_result j;
        j.v = make_variant(k, base, tc, ms);
        j.seed = seed + static_cast<std::uint64_t>(s);
        j.v.model.init_seed = j.seed;
        j.v.train.data_seed = 1000 + j.seed;
        jobs.push_back(std::move(j));
      }
    // the configuration every output records; shards and their merge must agree on it
    nlohmann::json cfg;
    {
      std::ostringstream a, b, c;
      a << task;
      b << base;
      c << tc;
      cfg["task"] = a.str();
      cfg["model"] = b.str();
      cfg["train"] = c.str();
      cfg["seeds"] = seeds;
      cfg["trials_per_position"] = trials;
      cfg["permutations"] = permutations;
      cfg["entropy_reg"] = ms.entropy_reg;
      cfg["variants"] = variants_text;
    }
    // units [first, last) of the job list: all of them, or those of --shard (sim::shard_spec)
    const auto [first, last] = launched.shard.range(static_cast<index_t>(jobs.size()));
    if (!merge_files.empty()) {
      for (const auto& path : merge_files) {
        std::ifstream in(path, std::ios::binary);
        require(static_cast<bool>(in), "--merge", path, "cannot be opened");
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto file = io::parse_train_units(text, path, task.target_end());
        require(nlohmann::json::parse(file.config.dump()) == cfg, "--merge", path,
                "has a different configuration than these flags: " + file.config.dump());
        for (auto& u : file.units) {
          auto it = std::find_if(jobs.begin(), jobs.end(), [&](const job_result& j) { return j.v.name() == u.variant && j.seed == u.seed; });
          const std::string unit = u.variant + " seed " + std::to_string(u.seed);
          require(it != jobs.end(), "--merge", path, "has unit " + unit + " outside this configuration");
          require(!it->done, "--merge", path, "repeats unit " + unit);
          // shapes follow the variant's model: L·H gate rows of W weights (none for full attention),
          // the baseline plus one row per head and per layer in the ablation matrix
          const auto& m = it->v.model;
          const std::size_t rows = static_cast<std::size_t>(m.layers * m.heads());
          const std::size_t slots = m.compressed() ? static_cast<std::size_t>(m.spec.grid.window) : 0;
          auto gates_fit = [&](const std::vector<std::vector<double>>& g) {
            return g.size() == rows && std::all_of(g.begin(), g.end(), [&](const auto& r) { return r.size() == slots; });
          };
          require(gates_fit(u.final_gates) && std::all_of(u.trained.history.begin(), u.trained.history.end(),
                                                          [&](const auto& h) { return gates_fit(h.profile); }),
                  "--merge", path, "unit " + unit + ": gate profiles must have " + std::to_string(rows) + " rows of " +
                                       std::to_string(slots) + " weights (this configuration's heads and window)");
          const auto expected = ablation_components(m);
          bool rows_fit = u.ablation.size() == expected.size();
          for (std::size_t r = 0; rows_fit && r < expected.size(); ++r)
            rows_fit = std::tie(u.ablation[r].component, u.ablation[r].layer, u.ablation[r].head) ==
                       std::tie(expected[r].component, expected[r].layer, expected[r].head);
          require(rows_fit, "--merge", path,
                  "unit " + unit + ": the ablation matrix must have the " + std::to_string(expected.size()) +
                      " rows ablation_matrix writes for this configuration (baseline, every head, every layer, in order)");
          it->trained = std::move(u.trained);
          it->ablation = std::move(u.ablation);
          it->final_gates = std::move(u.final_gates);
          it->done = true;
        }
      }
      for (const auto& j : jobs)
        require(j.done, "--merge", "(" + std::to_string(merge_files.size()) + " files)",
                "misses unit " + j.v.name() + " seed " + std::to_string(j.seed));
    } else {
      std::atomic<std::size_t> next{static_cast<std::size_t>(first)};
      std::mutex log_mutex;
      auto worker = [&] {
        for (std::size_t i = next++; i < static_cast<std::size_t>(last); i = next++) {
          job_result& j = jobs[i];
          std::ostringstream log;
          j.trained = train_model(data, j.v.model, j.v.train, &log, j.v.name() + " seed " + std::to_string(j.seed));
          j.ablation = ablation_matrix(data, j.v.model, j.trained.params, ec);
          j.final_gates = slot_gate_profile(j.v.model, j.trained.params);
          j.done = true;
          std::lock_guard<std::mutex> lock(log_mutex);
          std::cerr << log.str();
        }
      };
      std::vector<std::thread> pool;
      for (index_t t = 0; t < std::min<index_t>(threads, last - first); ++t) pool.emplace_back(worker);
      for (auto& t : pool) t.join();
    }
    if (!shard_text.empty()) {
      // a shard writes its units' results only; the tables come from --merge
      std::filesystem::create_directories(out_dir);
      io::provenance prov = io::make_provenance(cfg, seed, static_cast<int>(threads), argc, argv);
      prov.shard_index = launched.shard.index;
      prov.shard_count = launched.shard.count;
      prov.launcher = launched.launcher;
      prov.job = launched.job;
      io::ordered_json file;
      file["provenance"] = io::to_json(prov);
      file["config"] = cfg;
      file["shard"] = std::to_string(launched.shard.index) + "/" + std::to_string(launched.shard.count);
      file["units"] = io::ordered_json::array();
      for (index_t i = first; i < last; ++i) {
        const job_result& j = jobs[static_cast<std::size_t>(i)];
        file["units"].push_back(unit_to_json(j));
        std::cout << "trained " << j.v.name() << " seed " << j.seed << ": final loss " << format_fixed(j.trained.final_loss, 4)
                  << ", " << format_fixed(j.trained.seconds, 1) << " s\n";
      }
      std::ofstream f(out_dir + "/train_units.json");
      f << io::json_text(file);
      require(static_cast<bool>(f), "--out", out_dir, "train_units.json could not be written");
      std::cout << "shard " << launched.shard << ": " << last - first << " of " << jobs.size() << " units; wrote " << out_dir
                << "/train_units.json (join all shards with train_phase --merge)\n";
      return 0;
    }

    std::vector<phase_summary> sums;
    for (std::size_t i = 0; i < jobs.size(); ++i)
      sums.push_back(summarise(jobs[i].ablation[0].counts, stride, permutations, 77 + i));

    for (const auto& j : jobs)
      std::cout << "trained " << std::left << std::setw(15) << j.v.name() << std::right << " seed " << j.seed
                << ": final loss " << format_fixed(j.trained.final_loss, 4) << ", train acc "
                << format_fixed(j.trained.final_accuracy, 3) << ", " << format_fixed(j.trained.seconds, 1) << " s\n";

    // ---- gate profiles of the plain model (first seed) during training ----
    auto find_job = [&](mitigation k, std::uint64_t sd) -> int {
      for (std::size_t i = 0; i < jobs.size(); ++i)
        if (jobs[i].v.kind == k && jobs[i].seed == sd) return static_cast<int>(i);
      return -1;
    };
    const int main_job = find_job(mitigation::plain, seed);
    const int full_job = find_job(mitigation::full_attention, seed);
    const index_t H = base.heads();
    if (main_job >= 0) {
      const auto& hist = jobs[static_cast<std::size_t>(main_job)].trained.history;
      std::cout << "\nGate profile softmax(b) by slot, plain model seed " << seed << " (rows: step; per layer.head)\n";
      std::vector<std::size_t> picks;
      for (std::size_t i = 0; i < hist.size(); ++i) {
        const std::size_t stepi = hist.size() > 8 ? (hist.size() - 1) * picks.size() / 7 : i;
        if (picks.size() < 8 && (picks.empty() || stepi != picks.back()) && stepi < hist.size()) picks.push_back(stepi);
      }
      for (std::size_t i : picks) {
        std::cout << "  step " << std::setw(6) << hist[i].step << "  loss "
                  << (hist[i].step == 0 ? std::string("  -  ") : format_fixed(hist[i].loss, 3)) << " ";
        for (std::size_t h = 0; h < hist[i].profile.size(); ++h) {
          std::cout << " | l" << h / static_cast<std::size_t>(H) << ".h" << h % static_cast<std::size_t>(H);
          for (double v : hist[i].profile[h]) std::cout << " " << format_fixed(v, 2);
        }
        std::cout << "\n";
      }
    }

    // ---- per-phase table: plain vs full attention ----
    auto phase_table = [&](int ji) {
      const phase_summary& s = sums[static_cast<std::size_t>(ji)];
      const job_result& j = jobs[static_cast<std::size_t>(ji)];
      std::cout << "\nPer-phase recall, " << j.v.name() << " seed " << j.seed << " (phase = target mod " << stride
                << ", Wilson 95% intervals)\n  phase  trials  recall  interval\n";
      for (index_t f = 0; f < stride; ++f)
        std::cout << "  " << std::setw(5) << f << "  " << std::setw(6) << s.phases.trials[static_cast<std::size_t>(f)]
                  << "  " << format_fixed(s.phases.recall(f), 3) << "   "
                  << ci_text(stats::wilson_interval(s.phases.hits[static_cast<std::size_t>(f)],
                                                    s.phases.trials[static_cast<std::size_t>(f)]))
                  << "\n";
      std::cout << "  periodicity (residues mod " << 2 * stride << ", period " << stride << "): " << s.period.test
                << ", T " << format_fixed(s.period.statistic, 1) << ", p " << p_text(s.period.p) << ", amplitude "
                << format_fixed(s.period.amplitude, 3) << "\n  equal-recall test: " << s.uniform << "\n";
    };
    if (main_job >= 0) phase_table(main_job);
    if (full_job >= 0) phase_table(full_job);

    // ---- ablation matrix ----
    auto ablation_table = [&](int ji) {
      const job_result& j = jobs[static_cast<std::size_t>(ji)];
      const phase_counts b = by_phase(j.ablation[0].counts, stride);
      std::cout << "\nAblation matrix, " << j.v.name() << " seed " << j.seed
                << ": per-phase recall drop when a component is knocked out (baseline row: recall)\n  component ";
      for (index_t f = 0; f < stride; ++f) std::cout << "  phase" << f;
      std::cout << "\n";
      for (const auto& row : j.ablation) {
        const phase_counts r = by_phase(row.counts, stride);
        std::cout << "  " << std::left << std::setw(9) << (row.component == "none" ? "baseline" : row.component)
                  << std::right;
        for (index_t f = 0; f < stride; ++f)
          std::cout << "  " << std::setw(6)
                    << format_fixed(row.component == "none" ? r.recall(f) : b.recall(f) - r.recall(f), 3);
        std::cout << "\n";
      }
    };
    if (main_job >= 0) ablation_table(main_job);
    if (full_job >= 0) ablation_table(full_job);

    // ablation row of head index h = l·H + head
    auto head_row = [&](const job_result& j, std::size_t h) -> const ablation_row& {
      for (const auto& row : j.ablation)
        if (row.head >= 0 && static_cast<std::size_t>(row.layer * H + row.head) == h) return row;
      throw kvphase::error("ablation row missing");
    };
    // ---- theory: multi-head prediction from the learned gates (theory/heads.hpp) ----
    // Every trained head becomes a fixed-weight pool with weights softmax(b); the Gaussian needle
    // model (keys of dimension key_dim, noiseless query, the targets' region as context) predicts
    // each head's entry-retrieval recall per phase, the any-head recall and the drop when one head
    // is removed. Training measures value retrieval through the whole model.
    std::vector<std::vector<double>> theory_rows;  // per head: predicted recall by phase, then drop
    theory::heads_prediction pred;
    bool theory_done = false;
    if (main_job >= 0) {
      const job_result& j = jobs[static_cast<std::size_t>(main_job)];
      const auto& prof = j.final_gates;
      std::vector<compress::operator_spec> specs;
      for (const auto& w : prof) {
        compress::operator_spec sp;
        sp.grid = j.v.model.spec.grid;
        sp.pool = compress::pool_kind::weights;
        sp.slot_weights = w;
        specs.push_back(sp);
      }
      const theory::needle_model nm{.context = task.target_end(), .dim = task.key_dim};
      pred = theory::predict_heads(specs, nm);
      theory_done = true;
      const phase_counts b = by_phase(j.ablation[0].counts, stride);
      std::cout << "\nTheory (multi-head prediction from the learned slot gates, theory/heads.hpp) vs training, plain seed "
                << j.seed << "\n  " << nm << "\n  phase  measured recall  predicted any-head entry retrieval\n";
      for (index_t f = 0; f < stride; ++f)
        std::cout << "  " << std::setw(5) << f << "  " << std::setw(15) << format_fixed(b.recall(f), 3) << "  "
                  << format_fixed(pred.any[static_cast<std::size_t>(f)], 3) << "\n";
      std::cout << "  head    predicted recall by phase          predicted drop by phase            measured drop by phase\n";
      for (std::size_t h = 0; h < specs.size(); ++h) {
        const phase_counts r = by_phase(head_row(j, h).counts, stride);
        std::cout << "  l" << h / static_cast<std::size_t>(H) << ".h" << h % static_cast<std::size_t>(H) << " ";
        for (index_t f = 0; f < stride; ++f) std::cout << " " << format_fixed(pred.per_head[h][static_cast<std::size_t>(f)], 3);
        std::cout << "   ";
        for (index_t f = 0; f < stride; ++f) std::cout << " " << format_fixed(pred.ablation_drop[h][static_cast<std::size_t>(f)], 3);
        std::cout << "   ";
        for (index_t f = 0; f < stride; ++f) std::cout << " " << format_fixed(b.recall(f) - r.recall(f), 3);
        std::cout << "\n";
      }
    }

    // ---- gap of every variant minus the plain model's gap (same seed), bootstrap interval ----
    std::vector<stats::gap_difference_result> dgap(jobs.size());
    std::vector<bool> has_dgap(jobs.size(), false);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const int pj = find_job(mitigation::plain, jobs[i].seed);
      if (pj < 0 || static_cast<std::size_t>(pj) == i) continue;
      const phase_summary& a = sums[i];
      const phase_summary& b = sums[static_cast<std::size_t>(pj)];
      dgap[i] = stats::gap_difference_bootstrap(a.phases.hits, a.phases.trials, b.phases.hits, b.phases.trials,
                                                {.replicates = 2000, .seed = 91 + i});
      has_dgap[i] = true;
    }
    auto signed_text = [](double v) { return (v >= 0 ? "+" : "") + format_fixed(v, 3); };

    // ---- mitigation table ----
    std::cout << "\nMitigations at matched cache size (" << stride << "-stride entries + " << task.raw_window
              << " raw tokens per head; full_attention keeps all " << task.n_context << " tokens)\n"
              << "  variant          seed  mean   [95% CI]        worst phase  recall [95% CI]       gap   [bootstrap 95%]   period p"
                 "  gap - plain [95%]\n";
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const phase_summary& s = sums[i];
      std::cout << "  " << std::left << std::setw(15) << jobs[i].v.name() << std::right << "  " << std::setw(4)
                << jobs[i].seed << "  " << format_fixed(s.mean, 3) << " " << ci_text(s.mean_ci) << "  " << std::setw(5)
                << s.worst_phase << "        " << format_fixed(s.worst, 3) << " " << ci_text(s.worst_ci) << "  "
                << format_fixed(s.gap.gap, 3) << " " << ci_text(s.gap.ci) << "  " << std::setw(8) << p_text(s.period.p);
      if (has_dgap[i])
        std::cout << "  " << signed_text(dgap[i].difference) << " [" << signed_text(dgap[i].ci.low) << ", "
                  << signed_text(dgap[i].ci.high) << "]";
      std::cout << "\n";
    }
    // across seeds
    std::cout << "\n  across seeds (mean of per-model values; min..max)\n  variant          mean recall        worst phase        gap\n";
    for (auto k : kinds) {
      double a[3] = {0, 0, 0}, lo[3] = {2, 2, 2}, hi[3] = {-1, -1, -1};
      int n = 0;
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (jobs[i].v.kind != k) continue;
        const double v[3] = {sums[i].mean, sums[i].worst, sums[i].gap.gap};
        for (int c = 0; c < 3; ++c) {
          a[c] += v[c];
          lo[c] = std::min(lo[c], v[c]);
          hi[c] = std::max(hi[c], v[c]);
        }
        ++n;
      }
      std::cout << "  " << std::left << std::setw(15) << to_string(k) << std::right;
      for (int c = 0; c < 3; ++c)
        std::cout << "  " << format_fixed(a[c] / n, 3) << " (" << format_fixed(lo[c], 2) << ".." << format_fixed(hi[c], 2)
                  << ")";
      std::cout << "\n";
    }

    // ---- outputs ----
    std::filesystem::create_directories(out_dir);
    io::provenance prov = io::make_provenance(cfg, seed, static_cast<int>(threads), argc, argv);
    if (!merge_files.empty()) prov.merged_from = static_cast<std::int64_t>(merge_files.size());
    const std::string header = io::to_csv_comment(prov);
    {
      std::ofstream f(out_dir + "/train_gates.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"variant", "seed", "step", "loss", "accuracy", "layer", "head", "slot", "weight"});
      for (const auto& j : jobs)
        for (const auto& snap : j.trained.history)
          for (std::size_t h = 0; h < snap.profile.size(); ++h)
            for (std::size_t r = 0; r < snap.profile[h].size(); ++r)
              w.row({j.v.name(), std::to_string(j.seed), std::to_string(snap.step), format_fixed(snap.loss, 6),
                     format_fixed(snap.accuracy, 6), std::to_string(h / static_cast<std::size_t>(H)),
                     std::to_string(h % static_cast<std::size_t>(H)), std::to_string(r), format_fixed(snap.profile[h][r], 6)});
    }
    {
      std::ofstream f(out_dir + "/train_phase.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"model", "seed", "phase", "trials", "hits", "recall", "ci_low", "ci_high"});
      for (std::size_t i = 0; i < jobs.size(); ++i)
        for (index_t ph = 0; ph < stride; ++ph) {
          const auto h = sums[i].phases.hits[static_cast<std::size_t>(ph)], t = sums[i].phases.trials[static_cast<std::size_t>(ph)];
          const auto ci = stats::wilson_interval(h, t);
          w.row({jobs[i].v.name(), std::to_string(jobs[i].seed), std::to_string(ph), std::to_string(t), std::to_string(h),
                 format_fixed(sums[i].phases.recall(ph), 6), format_fixed(ci.low, 6), format_fixed(ci.high, 6)});
        }
    }
    {
      std::ofstream f(out_dir + "/train_position.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"model", "seed", "position", "phase", "trials", "hits", "recall", "mean_margin"});
      for (const auto& j : jobs) {
        const auto& pc = j.ablation[0].counts;
        for (std::size_t p = 0; p < pc.hits.size(); ++p)
          w.row({j.v.name(), std::to_string(j.seed), std::to_string(p), std::to_string(static_cast<index_t>(p) % stride),
                 std::to_string(pc.trials[p]), std::to_string(pc.hits[p]),
                 format_fixed(static_cast<double>(pc.hits[p]) / static_cast<double>(pc.trials[p]), 6),
                 format_fixed(pc.mean_margin[p], 6)});
      }
    }
    {
      std::ofstream f(out_dir + "/train_ablation.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"model", "seed", "component", "layer", "head", "phase", "trials", "hits", "recall", "drop"});
      for (const auto& j : jobs) {
        const phase_counts b = by_phase(j.ablation[0].counts, stride);
        for (const auto& row : j.ablation) {
          const phase_counts r = by_phase(row.counts, stride);
          for (index_t ph = 0; ph < stride; ++ph)
            w.row({j.v.name(), std::to_string(j.seed), row.component, std::to_string(row.layer), std::to_string(row.head),
                   std::to_string(ph), std::to_string(r.trials[static_cast<std::size_t>(ph)]),
                   std::to_string(r.hits[static_cast<std::size_t>(ph)]), format_fixed(r.recall(ph), 6),
                   format_fixed(b.recall(ph) - r.recall(ph), 6)});
        }
      }
    }
    {
      std::ofstream f(out_dir + "/train_mitigations.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"variant", "seed", "mean", "mean_low", "mean_high", "worst_phase", "worst", "worst_low", "worst_high", "gap",
             "gap_low", "gap_high", "period_p", "period_amplitude", "uniformity_p", "gap_minus_plain",
             "gap_minus_plain_low", "gap_minus_plain_high", "final_loss", "seconds"});
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        const phase_summary& s = sums[i];
        w.row({jobs[i].v.name(), std::to_string(jobs[i].seed), format_fixed(s.mean, 6), format_fixed(s.mean_ci.low, 6),
               format_fixed(s.mean_ci.high, 6), std::to_string(s.worst_phase), format_fixed(s.worst, 6),
               format_fixed(s.worst_ci.low, 6), format_fixed(s.worst_ci.high, 6), format_fixed(s.gap.gap, 6),
               format_fixed(s.gap.ci.low, 6), format_fixed(s.gap.ci.high, 6), io::format_shortest(s.period.p),
               format_fixed(s.period.amplitude, 6), io::format_shortest(s.uniform.p),
               has_dgap[i] ? format_fixed(dgap[i].difference, 6) : std::string(),
               has_dgap[i] ? format_fixed(dgap[i].ci.low, 6) : std::string(),
               has_dgap[i] ? format_fixed(dgap[i].ci.high, 6) : std::string(),
               format_fixed(jobs[i].trained.final_loss, 6), format_fixed(jobs[i].trained.seconds, 3)});
      }
    }
    if (theory_done) {
      const job_result& j = jobs[static_cast<std::size_t>(main_job)];
      const phase_counts b = by_phase(j.ablation[0].counts, stride);
      std::ofstream f(out_dir + "/train_theory.csv");
      io::csv_writer w(f);
      w.comment(header);
      w.row({"head", "phase", "predicted_recall", "predicted_any", "predicted_drop", "measured_recall", "measured_drop"});
      for (std::size_t h = 0; h < pred.per_head.size(); ++h) {
        const phase_counts r = by_phase(head_row(j, h).counts, stride);
        for (index_t f = 0; f < stride; ++f) {
          const auto fi = static_cast<std::size_t>(f);
          w.row({"l" + std::to_string(h / static_cast<std::size_t>(H)) + ".h" + std::to_string(h % static_cast<std::size_t>(H)),
                 std::to_string(f), format_fixed(pred.per_head[h][fi], 6), format_fixed(pred.any[fi], 6),
                 format_fixed(pred.ablation_drop[h][fi], 6), format_fixed(b.recall(f), 6),
                 format_fixed(b.recall(f) - r.recall(f), 6)});
        }
      }
    }
    {
      io::ordered_json j;
      j["provenance"] = io::to_json(prov);
      io::ordered_json models = io::ordered_json::array();
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        const phase_summary& s = sums[i];
        io::ordered_json m;
        m["variant"] = jobs[i].v.name();
        m["seed"] = jobs[i].seed;
        std::ostringstream mc;
        mc << jobs[i].v.model;
        m["model"] = mc.str();
        m["final_loss"] = jobs[i].trained.final_loss;
        m["recall_by_phase"] = std::vector<double>();
        for (index_t ph = 0; ph < stride; ++ph) m["recall_by_phase"].push_back(s.phases.recall(ph));
        m["hits_by_phase"] = s.phases.hits;
        m["trials_by_phase"] = s.phases.trials;
        m["mean"] = s.mean;
        m["mean_ci"] = {s.mean_ci.low, s.mean_ci.high};
        m["worst_phase"] = s.worst_phase;
        m["worst"] = s.worst;
        m["worst_ci"] = {s.worst_ci.low, s.worst_ci.high};
        m["gap"] = s.gap.gap;
        m["gap_ci"] = {s.gap.ci.low, s.gap.ci.high};
        m["periodicity"] = {{"test", s.period.test}, {"statistic", s.period.statistic}, {"p", s.period.p},
                            {"amplitude", s.period.amplitude}, {"peak_phase", s.period.peak_phase}};
        m["uniformity_p"] = s.uniform.p;
        m["final_gate_profile"] = jobs[i].final_gates;
        models.push_back(m);
      }
      j["models"] = models;
      std::ofstream f(out_dir + "/train_summary.json");
      f << io::json_text(j);
    }
    std::cout << "\nwrote " << out_dir << "/train_{gates,phase,position,ablation,mitigations,theory}.csv and train_summary.json\n";

    // the headline check: a compressed model periodic in phase, the control flat
    if (main_job >= 0 && full_job >= 0) {
      const auto& sp = sums[static_cast<std::size_t>(main_job)];
      const auto& sf = sums[static_cast<std::size_t>(full_job)];
      std::cout << "headline: plain periodicity p " << p_text(sp.period.p) << " (gap " << format_fixed(sp.gap.gap, 3)
                << "), full attention periodicity p " << p_text(sf.period.p) << " (gap " << format_fixed(sf.gap.gap, 3)
                << ")\nheadline: plain periodic in phase (p < 0.01): " << (sp.period.p < 0.01 ? "yes" : "no")
                << ", full attention periodic: " << (sf.period.p < 0.01 ? "yes" : "no") << "\n";
    }
    return 0;
  });
}

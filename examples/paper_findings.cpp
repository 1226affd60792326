// paper_findings: the paper's findings reproduced in miniature, one sweep (or a few) each.
//
//   paper_findings --finding 1 --out findings      # padding flip (FP8 vs FP32 completion)
//   paper_findings --finding 2 --out findings      # 128K key-value retrieval by residue group
//   paper_findings --finding 3 --out findings      # the period follows the stride
//   paper_findings --finding 4 --out findings      # ablations: uniform mean, NoPE, 1-token target
//   paper_findings --finding 5 --out findings      # control: no chunked compression is flat
//   paper_findings --finding 6 --out findings      # the ablations on the faithful path (RoPE, pooling)
//   paper_findings --quick                         # every finding, short (the ctest form)
//   paper_findings --shard i/N|auto --out dir_{index}   # shard i of every sweep's trials
//
// With --shard, every sweep runs only its shard's trials (sim::shard_spec) and writes shard
// files; the tables and verdicts printed then describe that shard alone. kvphase-merge joins the
// shards of each sweep (<dir>/<name>.csv or .json) into the unsharded run's file, byte-identical
// provenance aside (docs/scale-out.md).
//
// Each sweep prints a per-group table and writes <out>/<name>.csv and <out>/<name>.json in the
// kvphase-sweep/1 format (with provenance; plot the CSV with scripts/plot.py). Counts are
// bitwise identical for any --threads. docs/reproduce.md maps each finding to the paper.

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/compress/spec.hpp>
#include <kvphase/sim/report.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/stats/summary.hpp>
#include <kvphase/stats/uniformity.hpp>
#include <kvphase/theory/straddle.hpp>
#include <kvphase/theory/sweep_column.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>


namespace {

using kvphase::index_t;
namespace sim = kvphase::sim;
namespace io = kvphase::io;
namespace compress = kvphase::compress;
namespace theory = kvphase::theory;
namespace stats = kvphase::stats;

struct options {
  int finding = 0;  // 0: all
  bool quick = false;
  std::string out = "paper_findings_out";
  int threads = 0;
  std::uint64_t seed = 1;
  std::string shard_text;       // empty: the whole run
  sim::launched_shard shard{};  // 0/1 unless --shard
  int argc = 0;
  const char* const* argv = nullptr;
};

/// Significance level of every yes/no claim printed.
constexpr double alpha = 1e-3;

std::string fmt(double x, int digits = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, x);
  return b;
}
std::string fmt_p(double p) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2g", p);
  return b;
}
std::string pp(double x) { return fmt(100.0 * x, 1); }

compress::operator_spec slot_gate(index_t window, index_t stride, std::vector<double> bias, double content_std,
                                  std::string name) {
  compress::operator_spec op{.grid = {.window = window, .stride = stride},
                             .pool = compress::pool_kind::slot_gate,
                             .slot_bias = std::move(bias),
                             .content_std = content_std,
                             .name = std::move(name)};
  op.validate();
  return op;
}
compress::operator_spec mean_pool(index_t stride) {
  return {.grid = {.window = stride, .stride = stride}, .pool = compress::pool_kind::mean, .name = "mean"};
}
compress::operator_spec identity() { return compress::full(); }

/// Homogeneity of recall inside the residue classes mod P: Pearson chi-square summed over the
/// classes (pooled rate per class), with Σ (groups in class − 1) degrees of freedom.
double fold_homogeneity_p(const io::phase_counts& m, index_t P) {
  const index_t M = static_cast<index_t>(m.trials.size());
  double stat = 0, dof = 0;
  for (index_t r = 0; r < P; ++r) {
    double h = 0, n = 0, k = 0;
    for (index_t g = r; g < M; g += P) {
      h += static_cast<double>(m.hits[static_cast<std::size_t>(g)]);
      n += static_cast<double>(m.trials[static_cast<std::size_t>(g)]);
      k += 1;
    }
    const double p = n > 0 ? h / n : 0;
    dof += k - 1;
    if (p <= 0 || p >= 1) continue;
    for (index_t g = r; g < M; g += P) {
      const double ng = static_cast<double>(m.trials[static_cast<std::size_t>(g)]);
      const double e = ng * p;
      const double d = static_cast<double>(m.hits[static_cast<std::size_t>(g)]) - e;
      stat += d * d / (e * (1 - p));
    }
  }
  return dof > 0 ? stats::chi_square_upper_tail(stat, dof) : 1.0;
}

/// Detected period: none when recall is uniform over the groups (p ≥ alpha); otherwise the
/// smallest divisor P ≥ 2 of M whose residue classes are homogeneous (fold p ≥ alpha).
struct period_detection {
  index_t period = 0;  // 0: none (flat)
  double uniformity_p = 1;
  std::vector<std::pair<index_t, double>> fold_p;  // (P, homogeneity p) for the divisors tried
};
period_detection detect_period(const io::phase_counts& m) {
  period_detection d;
  const index_t M = static_cast<index_t>(m.trials.size());
  d.uniformity_p = stats::uniformity_test(m.hits, m.trials).p;
  for (index_t P = 2; P < M; ++P) {
    if (M % P) continue;
    d.fold_p.push_back({P, fold_homogeneity_p(m, P)});
  }
  if (d.uniformity_p >= alpha) return d;
  d.period = M;
  for (const auto& [P, p] : d.fold_p)
    if (p >= alpha) {
      d.period = P;
      break;
    }
  return d;
}
std::string period_text(const period_detection& d) {
  std::string s = d.period == 0 ? "none (flat)" : std::to_string(d.period);
  s += " (uniformity p " + fmt_p(d.uniformity_p);
  for (const auto& [P, p] : d.fold_p) s += ", period-" + std::to_string(P) + " fold p " + fmt_p(p);
  return s + ")";
}

/// One sweep: run, convert, write CSV + JSON, summarise.
struct sweep_run {
  sim::sweep_result raw;
  io::sweep_result out;
  std::vector<stats::model_summary> summary;
};

sweep_run run(const options& o, const std::string& name, const sim::sweep_config& c,
              const std::optional<theory::sweep_column>& th = std::nullopt, index_t period_override = 0) {
  sim::sweep_config cs = c;
  cs.shard = o.shard.shard;
  cs.validate();
  sweep_run r;
  r.raw = sim::run_sweep(cs);
  r.out = sim::to_output(r.raw, {.extra_config = {{"program", "paper_findings"}, {"sweep", name}, {"quick", o.quick}},
                                 .argc = o.argc,
                                 .argv = o.argv,
                                 .theory = th.has_value(),
                                 .period = period_override});
  r.out.prov.launcher = o.shard.launcher;
  r.out.prov.job = o.shard.job;
  r.summary = stats::summarize(r.out.models, r.out.analysis);
  std::filesystem::create_directories(o.out);
  const std::string base = (std::filesystem::path(o.out) / name).string();
  sim::write_text_file(base + ".csv", io::sweep_text(r.out, r.summary, "csv"));
  sim::write_text_file(base + ".json", io::sweep_text(r.out, r.summary, "json"));
  std::printf("  [%s: %lld trials in %.1f s -> %s.csv, %s.json]\n", name.c_str(),
              static_cast<long long>(r.raw.total_trials() * 2), r.raw.seconds, base.c_str(), base.c_str());
  return r;
}

/// Per-group table: label, compressed recall [CI] (theory), full recall [CI] (theory).
void print_table(const sweep_run& r, const std::string& label, const std::string& measure = "recall") {
  const auto& c = r.summary[0];
  const auto& f = r.summary[1];
  const auto& m0 = r.out.models[0];
  const bool th = !m0.extra.empty() && m0.extra.back().name == "theory";
  std::printf("  %-9s | compressed %-6s [95%% CI] %s | full %-6s [95%% CI] %s\n", label.c_str(), measure.c_str(),
              th ? "theory " : "", measure.c_str(), th ? "theory" : "");
  for (std::size_t g = 0; g < c.recall.size(); ++g) {
    std::printf("  %-9lld | %.3f [%.3f, %.3f]", static_cast<long long>(r.raw.labels[g]), c.recall[g], c.ci[g].low,
                c.ci[g].high);
    if (th) std::printf("  %.3f", m0.extra.back().values[g]);
    std::printf("   | %.3f [%.3f, %.3f]", f.recall[g], f.ci[g].low, f.ci[g].high);
    if (th) std::printf("  %.3f", r.out.models[1].extra.back().values[g]);
    std::printf("\n");
  }
}

void print_gaps(const sweep_run& r) {
  for (const auto& s : r.summary) {
    std::printf("  %-10s gap %s pp [%s, %s] (bias-corrected max-min over groups, simultaneous 95%% interval; raw %s), "
                "period %lld test p %s",
                s.model.c_str(), pp(s.gap.bias_corrected).c_str(), pp(s.gap.simultaneous.low).c_str(),
                pp(s.gap.simultaneous.high).c_str(), pp(s.gap.gap).c_str(), static_cast<long long>(s.periodicity.period),
                fmt_p(s.periodicity.p).c_str());
    if (s.vs_baseline)
      std::printf(", gap minus full %s pp [%s, %s]", pp(s.vs_baseline->bias_corrected).c_str(),
                  pp(s.vs_baseline->simultaneous.low).c_str(), pp(s.vs_baseline->simultaneous.high).c_str());
    std::printf("\n");
  }
}

/// The theory column of c (theory::predict_sweep_column), or nothing when it is not covered.
std::optional<theory::sweep_column> theory_of(const sim::sweep_config& c) {
  auto t = theory::predict_sweep_column(c);
  if (!t.covered) return std::nullopt;
  return t;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// ---------------------------------------------------------------------------------------------
// 1. Padding flip
sim::sweep_config padding_config(const options& o, const compress::operator_spec& op) {
  sim::sweep_config c;
  c.task = kvphase::tasks::padding_config{.dim = 32, .pad_min = 24, .lengths = 16};
  c.op = op;
  c.trials = o.quick ? 50 : 1000;
  c.seed = o.seed;
  c.threads = o.threads;
  return c;
}

/// The needle sweep shared by findings 3, 4 and 5: N = 2048, d = 32, query noise 0.5, one key
/// span, `modulus` phase groups, the same trial counts and seed.
sim::sweep_config needle_config(const options& o, const compress::operator_spec& op, index_t modulus,
                                index_t key_span = 1) {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32, .key_span = key_span, .query_noise = 0.5};
  c.op = op;
  c.modulus = modulus;
  c.trials = o.quick ? 200 : 2000;
  c.seed = o.seed;
  c.threads = o.threads;
  c.compute_mass = false;
  return c;
}

/// Lengths at which answer A is preferred (by most trials), and the residues L mod 4 where B is.
struct flip_count {
  int prefer_a = 0, prefer_b = 0;
  std::string b_residues;
};
flip_count count_preferences(const sweep_run& r, std::size_t model) {
  flip_count f;
  const auto& m = r.out.models[model];
  std::vector<int> b_at(4, 0), n_at(4, 0);
  for (std::size_t g = 0; g < m.trials.size(); ++g) {
    const bool a = 2 * m.hits[g] > m.trials[g];
    (a ? f.prefer_a : f.prefer_b)++;
    const auto res = static_cast<std::size_t>(r.raw.labels[g] % 4);
    n_at[res]++;
    if (!a) b_at[res]++;
  }
  for (int res = 0; res < 4; ++res)
    if (b_at[static_cast<std::size_t>(res)] == n_at[static_cast<std::size_t>(res)] && n_at[static_cast<std::size_t>(res)] > 0)
      f.b_residues += (f.b_residues.empty() ? "" : ",") + std::to_string(res);
  if (f.b_residues.empty()) f.b_residues = "none";
  return f;
}

void finding_padding(const options& o) {
  std::printf("\n=== Finding 1: padding flip (the FP8 vs FP32 completion analogue) ===\n");
  std::printf(
      "  Evidence A (the correct answer, '8') and B (the plausible wrong one, '32') are single tokens in a\n"
      "  fixed 512-token code, 130 tokens apart (130 = 2 mod 4); the query prefers A (q = kA + 0.9 kB).\n"
      "  Padding L = 24..39 shifts both by L, so A's in-chunk slot is L mod 4 and B's is (L + 2) mod 4.\n"
      "  Compressed: W = S = 4 slot-gate pool, gate bias (0, 0, 3, 3) (slots 2, 3 of every chunk\n"
      "  favoured, no content term), no raw window. Whichever evidence sits in a favoured slot keeps its\n"
      "  weight in the pooled entry, the other is diluted ~e^3-fold, so the winner flips every 2 lengths\n"
      "  with period 4. Full attention sees both tokens unpooled and always prefers A.\n");
  const auto c = padding_config(o, slot_gate(4, 4, {0, 0, 3, 3}, 0.0, "v4-like-gate"));
  const auto r = run(o, "finding1_padding", c, theory_of(c));
  print_table(r, "L", "P(A)");
  const auto fc = count_preferences(r, 0), ff = count_preferences(r, 1);
  std::printf("  compressed: A ('8') preferred at %d of 16 lengths, B ('32') at %d; B wins at L mod 4 in {%s}\n",
              fc.prefer_a, fc.prefer_b, fc.b_residues.c_str());
  std::printf("  full attention: A ('8') preferred at %d of 16 lengths, B ('32') at %d\n", ff.prefer_a, ff.prefer_b);
  const auto dc = detect_period(r.out.models[0]), df = detect_period(r.out.models[1]);
  std::printf("  compressed period detected: %s\n", period_text(dc).c_str());
  std::printf("  full period detected: %s\n", period_text(df).c_str());
  std::printf("finding 1 verdict: compressed prefers A at %d of 16 lengths, B at L mod 4 in {%s}, period detected: %s; "
              "full attention prefers A at %d of 16, period detected: %s\n",
              fc.prefer_a, fc.b_residues.c_str(), dc.period ? std::to_string(dc.period).c_str() : "none", ff.prefer_a,
              df.period ? std::to_string(df.period).c_str() : "none");
}

// ---------------------------------------------------------------------------------------------
// 2. 128K key-value retrieval
void finding_kv128k(const options& o) {
  std::printf("\n=== Finding 2: 128K key-value retrieval by residue group (Figure 2 analogue) ===\n");
  std::printf(
      "  131072 tokens, 16000 pairs (2-token keys, 2-token values, the value tokens carry the key in K),\n"
      "  target key position mod 8 = group, prompt length / query position / bindings fixed, target\n"
      "  depth uniform in [10%%, 90%%] of the pairs in every group. Compressed: the V4-CSA grid (W = 8,\n"
      "  S = 4, overlapping, entry j pools tokens [4(j-1), 4j+3]) with a linear softmax slot gate:\n"
      "  bias (0,0,0,0,2,2,0,0) (the first two tokens of the newest stride block favoured) plus random\n"
      "  per-token content logits (std 1); no RMSNorm, no RoPE, no learned projections. Query noise 0.8,\n"
      "  readout softmax beta 1, 64-code value book. Score engine (exact for Gaussian keys).\n");
  sim::sweep_config c;
  c.task = kvphase::tasks::kv_pairs_config{.query_noise = 0.8};
  c.engine = sim::engine_kind::score;
  c.op = slot_gate(8, 4, {0, 0, 0, 0, 2, 2, 0, 0}, 1.0, "v4-csa-like");
  c.modulus = 8;
  c.trials = o.quick ? 50 : 1000;
  c.seed = o.seed;
  c.threads = o.threads;
  const auto r = run(o, "finding2_kv128k", c);
  print_table(r, "pos mod 8");
  print_gaps(r);
  const auto& s = r.summary[0];
  const auto& f = r.summary[1];
  std::printf("  compressed gap: %s pp [%s, %s] (bias-corrected, simultaneous 95%%; paper, V4-Flash-Base: 40.2 pp)\n",
              pp(s.gap.bias_corrected).c_str(), pp(s.gap.simultaneous.low).c_str(), pp(s.gap.simultaneous.high).c_str());
  std::printf("  compressed phase-dependent: %s (uniformity p %s)\n", s.uniformity.p < alpha ? "yes" : "no",
              fmt_p(s.uniformity.p).c_str());
  std::printf("  full phase-dependent: %s (uniformity p %s; its gap %s pp [%s, %s], raw max-min %s pp)\n",
              f.uniformity.p < alpha ? "yes" : "no", fmt_p(f.uniformity.p).c_str(), pp(f.gap.bias_corrected).c_str(),
              pp(f.gap.simultaneous.low).c_str(), pp(f.gap.simultaneous.high).c_str(), pp(f.gap.gap).c_str());
  const auto dc = detect_period(r.out.models[0]);
  std::printf("  compressed period detected: %s\n", period_text(dc).c_str());
  std::printf("finding 2 verdict: compressed phase-dependent: %s, period detected: %s; full phase-dependent: %s\n",
              s.uniformity.p < alpha ? "yes" : "no", dc.period ? std::to_string(dc.period).c_str() : "none",
              f.uniformity.p < alpha ? "yes" : "no");
}

// ---------------------------------------------------------------------------------------------
// 3. The period follows the stride
void finding_stride(const options& o) {
  std::printf("\n=== Finding 3: the period follows the stride ===\n");
  std::printf(
      "  Needle retrieval (2048 tokens, d = 32, 1-token key, query noise 0.5), 8 groups = needle\n"
      "  position mod 8. Compressed: W = S slot-gate pool favouring slot 0 (bias 3, others 0), S = 2, 4, 8.\n"
      "  Detected period = smallest divisor P of 8 whose residue classes mod P have equal recall (fold\n"
      "  test p >= 0.001), given that recall is not uniform; a smaller P being rejected shows the\n"
      "  pattern is NOT periodic at that period.\n");
  std::string detected, full_flat;
  for (index_t S : {2, 4, 8}) {
    std::vector<double> bias(static_cast<std::size_t>(S), 0.0);
    bias[0] = 3.0;
    const sim::sweep_config c = needle_config(o, slot_gate(S, S, bias, 0.0, "gated"), 8);
    std::printf("\n  -- S = %lld --\n", static_cast<long long>(S));
    const auto r = run(o, "finding3_stride" + std::to_string(S), c, theory_of(c));
    print_table(r, "pos mod 8");
    const auto& s = r.summary[0];
    std::printf("  S = %lld: period-%lld harmonic test p %s (compressed), %s (full)\n", static_cast<long long>(S),
                static_cast<long long>(S), fmt_p(s.periodicity.p).c_str(), fmt_p(r.summary[1].periodicity.p).c_str());
    const auto dc = detect_period(r.out.models[0]), df = detect_period(r.out.models[1]);
    std::printf("  S = %lld: period detected: %s\n", static_cast<long long>(S), period_text(dc).c_str());
    std::printf("  S = %lld: full period detected: %s\n", static_cast<long long>(S), period_text(df).c_str());
    detected += (detected.empty() ? "" : ", ") + (dc.period ? std::to_string(dc.period) : std::string("none"));
    full_flat += (full_flat.empty() ? "" : ", ") + std::string(df.period == 0 ? "yes" : "no");
  }
  std::printf("finding 3 verdict: period detected: %s for S = 2, 4, 8; full attention flat: %s\n", detected.c_str(),
              full_flat.c_str());
}

// ---------------------------------------------------------------------------------------------
// 4. Ablations
void finding_ablations(const options& o) {
  std::printf("\n=== Finding 4: ablations (uniform mean pooling, NoPE, single-token target) ===\n");
  std::printf(
      "  Needle retrieval, 2048 tokens, d = 32, query noise 0.5, 4 groups = key position mod 4, S = 4.\n"
      "  None of these models has a positional encoding (NoPE): the periodicity comes from chunking.\n"
      "  Theory column: theory::predict_sweep_needle for the same operator and task.\n");
  struct row {
    std::string name, title;
    compress::operator_spec op;
    index_t key_span;
    bool periodic_expected;
  };
  const std::vector<row> rows{
      {"finding4_mean_span2", "uniform mean W = S = 4, 2-token key", mean_pool(4), 2, true},
      {"finding4_mean_span1", "uniform mean W = S = 4, 1-token key", mean_pool(4), 1, false},
      {"finding4_gate_nope", "slot gate W = S = 4, bias (3,0,0,0), content std 1, NoPE, 1-token key",
       slot_gate(4, 4, {3, 0, 0, 0}, 1.0, "gated"), 1, true},
  };
  std::printf("  Span straddling (theory::span_shares_by_phase, uniform mean W = S = 4): largest share of the\n"
              "  target's pooled weight inside one entry, by phase:\n");
  for (index_t k : {1, 2}) {
    std::printf("    %lld-token key:", static_cast<long long>(k));
    for (const auto& s : theory::span_shares_by_phase(mean_pool(4), k))
      std::printf("  phase %lld: %.2f (%lld entries)", static_cast<long long>(s.phase), s.max_share,
                  static_cast<long long>(s.entries_touched));
    std::printf("\n");
  }
  std::string verdict;
  for (const auto& rw : rows) {
    const sim::sweep_config c = needle_config(o, rw.op, 4, rw.key_span);
    std::printf("\n  -- %s --\n", rw.title.c_str());
    const auto th = theory_of(c);
    const auto r = run(o, rw.name, c, th);
    print_table(r, "phase");
    const auto& s = r.summary[0];
    std::printf("  %s: periodic %s (period-4 harmonic test p %s, gap %s pp [%s, %s]); theory gap %s pp",
                rw.title.c_str(), s.periodicity.p < alpha ? "yes" : "no", fmt_p(s.periodicity.p).c_str(),
                pp(s.gap.bias_corrected).c_str(), pp(s.gap.simultaneous.low).c_str(), pp(s.gap.simultaneous.high).c_str(),
                th ? pp(*std::max_element(th->compressed.begin(), th->compressed.end()) -
                        *std::min_element(th->compressed.begin(), th->compressed.end()))
                         .c_str()
                   : "n/a");
    if (th) std::printf(", max |measured - theory| %s", fmt(max_abs_diff(s.recall, th->compressed)).c_str());
    std::printf("\n");
    verdict += (verdict.empty() ? "" : "; ") + rw.name.substr(9) + " periodic: " + (s.periodicity.p < alpha ? "yes" : "no");
  }
  std::printf("finding 4 verdict: %s\n", verdict.c_str());
}

// ---------------------------------------------------------------------------------------------
// 5. Control
void finding_control(const options& o) {
  std::printf("\n=== Finding 5: control without chunked compression (the V3.1 analogue) ===\n");
  std::printf(
      "  The 'compressed' model is the identity grid (W = S = 1): every token its own entry, i.e. full\n"
      "  attention. Same needle task as finding 3 (8 groups, tested at the V4 period 4) and the same\n"
      "  padding task as finding 1.\n");
  const sim::sweep_config c = needle_config(o, identity(), 8);
  const auto r = run(o, "finding5_control_needle", c, theory_of(c), 4);
  print_table(r, "pos mod 8");
  const auto& s = r.summary[0];
  std::printf("  control needle: gap %s pp [%s, %s] (bias-corrected, simultaneous 95%%), period-4 harmonic test p %s\n",
              pp(s.gap.bias_corrected).c_str(), pp(s.gap.simultaneous.low).c_str(), pp(s.gap.simultaneous.high).c_str(),
              fmt_p(s.periodicity.p).c_str());
  std::printf("  control period detected: %s\n", period_text(detect_period(r.out.models[0])).c_str());
  const auto rp = run(o, "finding5_control_padding", padding_config(o, identity()));
  const auto fc = count_preferences(rp, 0);
  std::printf("  control padding: A ('8') preferred at %d of 16 lengths, B ('32') at %d\n", fc.prefer_a, fc.prefer_b);
  const auto dc = detect_period(r.out.models[0]);
  std::printf("finding 5 verdict: control period detected: %s; control padding prefers A at %d of 16 lengths\n",
              dc.period ? std::to_string(dc.period).c_str() : "none", fc.prefer_a);
}

// ---------------------------------------------------------------------------------------------
// 6. Faithful: the same manipulations on the general path (compress:: as the spec says, attention::)
void finding_faithful(const options& o) {
  std::printf("\n=== Finding 6: faithful path (compressor as specified, RoPE, attention models) ===\n");
  std::printf(
      "  Needle retrieval as finding 4 (2048 tokens, d = 32, query noise 0.5, 4 groups, S = 4), run through\n"
      "  compress:: and attention:: (sim/general_model.hpp): values pooled by the operator, joint softmax\n"
      "  with a 16-token raw window, RoPE (theta 10000, last 8 channels) on the query at N, the raw keys\n"
      "  and the entries at their anchors. Each ablation is a flag of kvphase-sweep (--rope, --uniform-pool,\n"
      "  --key-span, --raw-window). Theory column where covered, else the reason.\n");
  struct row {
    std::string name, title;
    compress::operator_spec op;
    index_t key_span;
    compress::params_kind params;
  };
  auto with_rope = [](compress::operator_spec op, compress::rope_anchor a) {
    op.rope = {.anchor = a, .theta = 10000.0, .rope_dim = 8};
    return op;
  };
  auto cg = compress::operator_spec{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::channel_gate,
                                    .rmsnorm = true, .name = "channel_gate"};
  const std::vector<row> rows{
      {"finding6_gate_rope", "channel gate W = S = 4, planted early-slot profile, RMSNorm, RoPE start, 2-token key",
       with_rope(cg, compress::rope_anchor::start), 2, compress::params_kind::planted_early},
      {"finding6_gate_nope", "the same, RoPE removed", cg, 2, compress::params_kind::planted_early},
      {"finding6_uniform_span2", "uniform pooling of the same grid (RMSNorm, RoPE start kept), 2-token key",
       with_rope(mean_pool(4), compress::rope_anchor::start), 2, compress::params_kind::identity},
      {"finding6_uniform_span1", "uniform pooling of the same grid (RMSNorm, RoPE start kept), 1-token key",
       with_rope(mean_pool(4), compress::rope_anchor::start), 1, compress::params_kind::identity},
      {"finding6_mean_general", "uniform mean W = S = 4 without RoPE on the general path, 2-token key", mean_pool(4), 2,
       compress::params_kind::identity},
  };
  std::string verdict;
  for (const auto& rw : rows) {
    sim::sweep_config c = needle_config(o, rw.op, 4, rw.key_span);
    c.window = 16;
    c.model.params = rw.params;
    c.trials = o.quick ? 150 : 2000;
    std::printf("\n  -- %s --\n", rw.title.c_str());
    const auto col = theory::predict_sweep_column(c);
    const auto th = col.covered ? std::optional<theory::sweep_column>(col) : std::nullopt;
    const auto r = run(o, rw.name, c, th);
    print_table(r, "phase");
    const auto& s = r.summary[0];
    std::printf("  %s: periodic %s (period-4 harmonic test p %s, gap %s pp [%s, %s]); full attention uniformity p %s; ",
                rw.title.c_str(), s.periodicity.p < alpha ? "yes" : "no", fmt_p(s.periodicity.p).c_str(),
                pp(s.gap.bias_corrected).c_str(), pp(s.gap.simultaneous.low).c_str(), pp(s.gap.simultaneous.high).c_str(),
                fmt_p(r.summary[1].uniformity.p).c_str());
    if (th) std::printf("theory: max |measured - theory| %s\n", fmt(max_abs_diff(s.recall, th->compressed)).c_str());
    else std::printf("theory: not covered: %s\n", col.reason.c_str());
    verdict += (verdict.empty() ? "" : "; ") + rw.name.substr(9) + " periodic: " + (s.periodicity.p < alpha ? "yes" : "no");
  }
  std::printf("finding 6 verdict: %s\n", verdict.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The paper's findings reproduced in miniature (see docs/reproduce.md).", "paper_findings"};
  options o;
  app.add_option("--finding", o.finding, "1 padding flip, 2 128K retrieval, 3 stride, 4 ablations, 5 control, 6 faithful path; 0: all")
      ->check(CLI::Range(0, 6))
      ->capture_default_str();
  app.add_flag("--quick", o.quick, "short runs (seconds), as in ctest");
  app.add_option("--out,-o", o.out, "directory for the CSV and JSON files")->capture_default_str();
  kvphase::cli::add_int(app, "--threads", o.threads, 0, 1024, "threads (0: all cores); results do not depend on it");
  kvphase::cli::add_u64(app, "--seed", o.seed, "random seed");
  app.add_option("--shard", o.shard_text,
                 "run shard i/N of every sweep's trials (join each sweep's files with kvphase-merge), or auto: i and N "
                 "from the launcher (Slurm array, srun, mpirun); --out may contain {index} and {count}");
  if (const auto status = kvphase::cli::parse(app, argc, argv, "paper_findings")) return *status;
  o.argc = argc;
  o.argv = argv;
  return kvphase::cli::run("paper_findings", [&] {
    if (!o.shard_text.empty()) {
      o.shard = kvphase::cli::resolve_shard(o.shard_text, "--shard");
      o.out = kvphase::cli::shard_path(o.out, o.shard, "--out");
    }
    kvphase::cli::check_writable_dir(o.out, "out");  // before the first finding, not after it
    std::printf("paper_findings%s (seed %llu)\n", o.quick ? " --quick" : "", static_cast<unsigned long long>(o.seed));
    if (!o.shard_text.empty())
      std::printf("shard %lld/%lld%s%s: every sweep runs this shard's trials only; the tables below describe the shard, "
                  "merge each sweep's files with kvphase-merge\n",
                  static_cast<long long>(o.shard.shard.index), static_cast<long long>(o.shard.shard.count),
                  o.shard.launcher.empty() ? "" : " from ", o.shard.launcher.c_str());
    if (o.finding == 0 || o.finding == 1) finding_padding(o);
    if (o.finding == 0 || o.finding == 2) finding_kv128k(o);
    if (o.finding == 0 || o.finding == 3) finding_stride(o);
    if (o.finding == 0 || o.finding == 4) finding_ablations(o);
    if (o.finding == 0 || o.finding == 5) finding_control(o);
    if (o.finding == 0 || o.finding == 6) finding_faithful(o);
    return 0;
  });
}

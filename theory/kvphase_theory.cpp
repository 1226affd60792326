// kvphase-theory: per-phase analytic predictions beside a Monte-Carlo estimate.
//
//   kvphase-theory recall   --window 8 --stride 4 --context 4096 --dim 64 [--pool weights --weights ...]
//   kvphase-theory gumbel   (closed-form extreme-value approximation beside the exact integral)
//   kvphase-theory straddle --stride 4 --key-span 3
//   kvphase-theory gates    --stride 4 --gate-bias 0,2,0,0 --gate-content-std 1
//   kvphase-theory overlap  --stride 4 --key-span 3
//   kvphase-theory heads    --stride 4 --head-bias "2,0,0,0;0,0,2,0"
//   kvphase-theory padding  --stride 4 --gate 0.1,0.2,0.3,0.4
//   kvphase-theory window   --stride 4 --raw-window 16
//
// --check makes the exit status 1 when a prediction and the simulation disagree by more than
// max(4·SE, 0.005) (SE combines the Monte Carlo's and the prediction's own error), plus the
// documented bound of the approximation used, if any.

#include <cmath>
#include <limits>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/cli_common.hpp"

#include "kvphase/compress/spec.hpp"
#include "kvphase/theory/gaussian.hpp"
#include "kvphase/theory/theory.hpp"
#include "needle_mc.hpp"

using namespace kvphase;

namespace {

/// Strict comma-separated list of finite reals (kvphase::error naming `flag` on any bad item).
std::vector<double> parse_list(const std::string& s, std::string_view flag) {
  return kvphase::cli::parse_real_list(s, flag);
}

constexpr index_t max_extent = (index_t(1) << 40) - 1;
constexpr index_t max_tokens = index_t(1) << 30;
constexpr index_t max_trials = index_t(1) << 32;

struct common_args {
  index_t window = 4, stride = 4, origin = 0;
  std::string pool = "mean", weights, gate_bias, convention = "v4";
  index_t context = 4096, dim = 64, key_span = 1, target = -1;
  double snr = INFINITY;
  index_t trials = 4000, samples = 40000;
  std::uint64_t seed = 1;
  std::string far = "markov";
  bool check = false;
  std::string sampler = "token";

  compress::operator_spec spec() const {
    compress::operator_spec s;
    s.grid.window = window;
    s.grid.stride = stride;
    s.grid.origin = origin;
    s.grid.convention = kvphase::cli::parse_choice(convention, "--convention", {"v4", "nsa"}) == "nsa"
                            ? compress::grid_convention::nsa
                            : compress::grid_convention::v4;
    if (pool == "mean") s.pool = compress::pool_kind::mean;
    else if (pool == "identity") s.pool = compress::pool_kind::identity;
    else if (pool == "weights") {
      s.pool = compress::pool_kind::weights;
      s.slot_weights = parse_list(weights, "--weights");
    } else if (pool == "gated") {
      s.pool = compress::pool_kind::slot_gate;
      if (!gate_bias.empty()) s.slot_bias = parse_list(gate_bias, "--gate-bias");
    } else {
      fail("--pool", pool, "must be mean, identity, weights or gated");
    }
    require(weights.empty() || pool == "weights", "--weights", weights, "applies only to --pool weights");
    s.validate();
    return s;
  }
  theory::needle_model model() const {
    theory::needle_model m{.context = context, .dim = dim, .key_span = key_span, .snr = snr, .target_position = target};
    m.validate();
    return m;
  }
  theory::recall_options options() const {
    theory::recall_options o;
    o.samples = samples;
    o.far = kvphase::cli::parse_choice(far, "--far", {"markov", "independent"}) == "independent"
                ? theory::far_model::independent
                : theory::far_model::markov;
    return o;
  }
};

void add_common(CLI::App* a, common_args& c) {
  namespace cl = kvphase::cli;
  cl::add_int<index_t>(*a, "--window", c.window, 1, index_t(1) << 20, "W");
  cl::add_int<index_t>(*a, "--stride", c.stride, 1, index_t(1) << 20, "S");
  cl::add_int<index_t>(*a, "--origin", c.origin, -max_extent, max_extent, "grid origin");
  a->add_option("--convention", c.convention, "v4 or nsa")->check(CLI::IsMember({"v4", "nsa"}));
  a->add_option("--pool", c.pool, "mean, identity, weights, gated")
      ->check(CLI::IsMember({"mean", "identity", "weights", "gated"}));
  a->add_option("--weights", c.weights, "slot weights w0,w1,... (pool weights)");
  a->add_option("--gate-bias", c.gate_bias, "slot bias b0,b1,... (pool gated)");
  cl::add_int<index_t>(*a, "--context", c.context, 1, max_tokens, "N");
  cl::add_int<index_t>(*a, "--dim", c.dim, 1, 65536, "d");
  cl::add_int<index_t>(*a, "--key-span", c.key_span, 1, max_tokens, "k");
  cl::add_real(*a, "--snr", c.snr, 0.0, INFINITY,
               "query signal-to-noise (inf = query is the target key)", true);
  cl::add_int<index_t>(*a, "--target", c.target, -1, max_tokens, "target anchor position (-1 = middle)");
  cl::add_int<index_t>(*a, "--trials", c.trials, 1, max_trials, "Monte Carlo trials");
  cl::add_int<index_t>(*a, "--samples", c.samples, 100, max_trials,
                       "conditional Monte Carlo samples of the theory (W > S)");
  cl::add_u64(*a, "--seed", c.seed, "seed");
  a->add_option("--far", c.far, "far distractors: markov or independent")
      ->check(CLI::IsMember({"markov", "independent"}));
  a->add_option("--sampler", c.sampler, "Monte Carlo sampler: token or key")->check(CLI::IsMember({"token", "key"}));
  a->add_flag("--check", c.check, "exit 1 if prediction and simulation disagree");
}

int report(const theory::recall_prediction& pred, const std::vector<theory_check::phase_count>& mc, bool check,
           double approx_bound) {
  std::printf("phase,target_position,theory,theory_err,method,mc_recall,mc_lo,mc_hi,trials,z\n");
  int bad = 0;
  for (std::size_t i = 0; i < pred.phases.size(); ++i) {
    const auto& p = pred.phases[i];
    const auto& c = mc[i];
    const double r = c.recall(), se = c.se(p.recall);
    const double comb = std::sqrt(se * se + p.error * p.error);
    const double z = (r - p.recall) / comb;
    std::printf("%lld,%lld,%.6f,%.2e,%s,%.6f,%.6f,%.6f,%lld,%.2f\n", static_cast<long long>(p.phase),
                static_cast<long long>(p.target_position), p.recall, p.error, theory::to_string(p.method), r,
                r - 1.96 * c.se(r), r + 1.96 * c.se(r), static_cast<long long>(c.trials), z);
    if (std::abs(r - p.recall) > std::max(4 * comb, 0.005) + approx_bound) ++bad;
  }
  std::printf("# gap: theory %.4f, mc %.4f\n", pred.gap(), [&] {
    double lo = 2, hi = -1;
    for (const auto& c : mc) {
      lo = std::min(lo, c.recall());
      hi = std::max(hi, c.recall());
    }
    return hi - lo;
  }());
  if (check && bad) {
    std::fprintf(stderr, "kvphase-theory: %d phase(s) outside max(4 SE, 0.005)%s\n", bad,
                 approx_bound > 0 ? " + approximation bound" : "");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvphase-theory: analytic per-phase recall beside simulation"};
  app.require_subcommand(1);
  common_args c;

  auto* recall = app.add_subcommand("recall", "Gaussian score model (exact for W = S)");
  add_common(recall, c);

  auto* gumbel = app.add_subcommand("gumbel", "extreme-value closed forms beside the exact integral");
  add_common(gumbel, c);

  auto* straddle = app.add_subcommand("straddle", "span straddling: shares and recall by phase");
  add_common(straddle, c);

  double tau = 1.0;
  index_t gate_samples = 256;
  auto* gates = app.add_subcommand("gates", "slot softmax with random content logits");
  add_common(gates, c);
  kvphase::cli::add_real(*gates, "--gate-content-std", tau, 0.0, 1e6, "tau");
  kvphase::cli::add_int<index_t>(*gates, "--gate-samples", gate_samples, 16, index_t(1) << 24,
                                 "gate vectors sampled for the numerical integral (even)");

  auto* overlap = app.add_subcommand("overlap", "V4-CSA two-stream overlap (W = 2S) against W = S");
  add_common(overlap, c);

  std::string head_bias;
  auto* heads = app.add_subcommand("heads", "several heads: any-head recall and ablation drops");
  add_common(heads, c);
  heads->add_option("--head-bias", head_bias, "per-head slot bias, heads separated by ';'");

  std::string gate_profile = "0.1,0.2,0.3,0.4";
  double strength_correct = 1.0, strength_wrong = 1.2, padding_noise = 0.0;
  index_t offset_correct = 0, offset_wrong = 1, pad_first = 24;
  auto* padding = app.add_subcommand("padding", "two-way choice: fraction of padding lengths the correct answer wins");
  kvphase::cli::add_int<index_t>(*padding, "--stride", c.stride, 1, index_t(1) << 20, "S");
  padding->add_option("--gate", gate_profile, "retained weight by slot g0,...,g(S-1)");
  kvphase::cli::add_real(*padding, "--strength-correct", strength_correct, -1e300, 1e300, "strength of the correct evidence");
  kvphase::cli::add_real(*padding, "--strength-wrong", strength_wrong, -1e300, 1e300, "strength of the wrong evidence");
  kvphase::cli::add_int<index_t>(*padding, "--offset-correct", offset_correct, -max_extent, max_extent,
                                 "slot of the correct evidence at L = 0");
  kvphase::cli::add_int<index_t>(*padding, "--offset-wrong", offset_wrong, -max_extent, max_extent,
                                 "slot of the wrong evidence at L = 0");
  kvphase::cli::add_real(*padding, "--noise", padding_noise, 0.0, 1e300, "sigma of the margin");
  kvphase::cli::add_int<index_t>(*padding, "--first", pad_first, 0, max_tokens, "first padding length");

  index_t raw_window = 16;
  auto* window = app.add_subcommand("window", "sliding raw window: distance below which recall is phase-invariant");
  add_common(window, c);
  kvphase::cli::add_int<index_t>(*window, "--raw-window", raw_window, 1, max_tokens, "raw window length");

  if (const auto status = kvphase::cli::parse(app, argc, argv, "kvphase-theory")) return *status;
  return kvphase::cli::run("kvphase-theory", [&]() -> int {
    if (recall->parsed()) {
      const auto spec = c.spec();
      const auto m = c.model();
      std::cout << "# " << spec << "\n# " << m << "\n";
      const auto pred = theory::predict_recall_by_phase(spec, m, c.options());
      if (!pred.covered) {
        std::cout << "# outside the theory: " << pred.reason << "\n";
        return 0;
      }
      std::cout << "# " << pred.assumptions << "\n";
      const auto mc = theory_check::simulate(spec, m, c.trials, c.seed,
                                             c.sampler == "key" ? theory_check::sampler::key_space
                                                                : theory_check::sampler::token_score);
      const double bound = spec.grid.window == spec.grid.stride ? 0.0 : theory::overlap_approximation_bound(spec);
      return report(pred, mc, c.check, bound);
    }
    if (gumbel->parsed()) {
      const auto spec = c.spec();
      const auto m = c.model();
      std::cout << "# " << spec << "\n# " << m << "\n";
      const auto exact = theory::predict_recall_by_phase(spec, m, c.options());
      const auto g = theory::gumbel_recall_by_phase(spec, m);
      std::printf("phase,exact,gumbel_sharp,gumbel_normal,critical_dim\n");
      for (std::size_t i = 0; i < g.size(); ++i)
        std::printf("%lld,%.6f,%.6f,%.6f,%.2f\n", static_cast<long long>(g[i].phase), exact.phases[i].recall,
                    g[i].recall_sharp, g[i].recall_normal, g[i].critical_dim);
      return 0;
    }
    if (straddle->parsed()) {
      const auto spec = c.spec();
      const auto m = c.model();
      std::cout << "# " << spec << "\n# " << m << "\n";
      const auto sh = theory::span_shares_by_phase(spec, c.key_span);
      const auto pred = theory::predict_recall_by_phase(spec, m, c.options());
      const auto mc = theory_check::simulate(spec, m, c.trials, c.seed);
      std::printf("phase,chunks_touched,max_share,theory,mc\n");
      for (std::size_t i = 0; i < sh.size(); ++i)
        std::printf("%lld,%lld,%.6f,%.6f,%.6f\n", static_cast<long long>(sh[i].phase),
                    static_cast<long long>(sh[i].entries_touched), sh[i].max_share, pred.phases[i].recall, mc[i].recall());
      return 0;
    }
    if (gates->parsed()) {
      auto spec = c.spec();
      spec.pool = compress::pool_kind::slot_gate;
      if (spec.slot_bias.empty() && !c.gate_bias.empty()) spec.slot_bias = parse_list(c.gate_bias, "--gate-bias");
      spec.content_std = tau;
      spec.validate();
      const auto m = c.model();
      std::cout << "# " << spec << "\n# " << m << "\n";
      const auto dist = theory::gate_weight_distribution(spec, 20000, c.seed);
      std::printf("slot,mean_weight,sd_weight,q05,q50,q95\n");
      for (const auto& s : dist)
        std::printf("%lld,%.5f,%.5f,%.5f,%.5f,%.5f\n", static_cast<long long>(s.slot), s.mean, s.sd, s.q05, s.q50, s.q95);
      theory::gate_options go;
      go.gate_samples = gate_samples;
      const auto pred = theory::predict_recall_gated(spec, m, go);
      const auto mc = theory_check::simulate_gated(spec, m, c.trials, c.seed);
      return report(pred, mc, c.check, 0.0);
    }
    if (overlap->parsed()) {
      const auto m = c.model();
      const auto r = theory::two_stream_gap(c.stride, m, c.options());
      std::printf("# never-split spans: k <= %lld (W = 2S = %lld)\n", static_cast<long long>(theory::max_never_split_span(c.stride)),
                  static_cast<long long>(2 * c.stride));
      std::printf("phase,split_w_eq_s,split_w_eq_2s,recall_w_eq_s,recall_w_eq_2s\n");
      for (std::size_t i = 0; i < r.non_overlapping.phases.size(); ++i)
        std::printf("%zu,%d,%d,%.6f,%.6f\n", i, theory::span_is_split(c.stride, c.stride, static_cast<index_t>(i), c.key_span) ? 1 : 0,
                    theory::span_is_split(2 * c.stride, c.stride, static_cast<index_t>(i), c.key_span) ? 1 : 0,
                    r.non_overlapping.phases[i].recall, r.overlapping.phases[i].recall);
      std::printf("# gap W=S %.4f, W=2S %.4f, ratio %.3f\n", r.non_overlapping.gap(), r.overlapping.gap(), r.gap_ratio());
      return 0;
    }
    if (heads->parsed()) {
      std::vector<compress::operator_spec> specs;
      std::stringstream ss(head_bias);
      std::string item;
      while (std::getline(ss, item, ';')) {
        auto s = c.spec();
        s.pool = compress::pool_kind::slot_gate;
        s.slot_bias = parse_list(item, "--head-bias[" + std::to_string(specs.size()) + "]");
        s.validate();
        specs.push_back(s);
      }
      require(!specs.empty(), "--head-bias", head_bias, "needs at least one head");
      const auto m = c.model();
      const auto hp = theory::predict_heads(specs, m, c.options());
      const auto mc = theory_check::simulate(specs, m, c.trials, c.seed);
      std::printf("phase,any_head_theory,any_head_mc");
      for (std::size_t h = 0; h < specs.size(); ++h) std::printf(",drop_without_%zu", h);
      std::printf("\n");
      for (std::size_t i = 0; i < hp.any.size(); ++i) {
        std::printf("%zu,%.6f,%.6f", i, hp.any[i], mc[i].recall());
        for (std::size_t h = 0; h < specs.size(); ++h) std::printf(",%.6f", hp.ablation_drop[h][i]);
        std::printf("\n");
      }
      return 0;
    }
    if (padding->parsed()) {
      theory::padding_model pm;
      pm.stride = c.stride;
      pm.gate = parse_list(gate_profile, "--gate");
      pm.strength_correct = strength_correct;
      pm.strength_wrong = strength_wrong;
      pm.offset_correct = offset_correct;
      pm.offset_wrong = offset_wrong;
      pm.noise = padding_noise;
      pm.first_length = pad_first;
      const auto r = theory::padding_flip(pm);
      std::printf("length,p_correct\n");
      for (std::size_t i = 0; i < r.p_correct.size(); ++i)
        std::printf("%lld,%.6f\n", static_cast<long long>(pm.first_length + static_cast<index_t>(i)), r.p_correct[i]);
      std::printf("# fraction of lengths won by the correct answer: %.4f (period %lld)\n", r.fraction_correct,
                  static_cast<long long>(pm.stride));
      return 0;
    }
    if (window->parsed()) {
      const auto spec = c.spec();
      std::printf("# the raw window covers the whole target at every phase for distance (query - first target token) <= %lld\n",
                  static_cast<long long>(theory::window_invariant_distance(raw_window, c.key_span)));
      std::printf("# from distance %lld on, no target token is raw: every phase depends on the compressed entries only\n",
                  static_cast<long long>(theory::window_compressed_only_distance(raw_window, c.key_span)));
      return 0;
    }
    return 0;
  });
}

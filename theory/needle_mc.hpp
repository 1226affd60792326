#pragma once
// Independent Monte Carlo of the needle task for checking the theory (not library API).
//
// Two samplers, both keyed by (seed, config, trial) through kvphase::rng:
//  - key_space: draws every key vector k_p ~ N(0, I_d), the target key x* and the query
//    q = x* + N(0, I/snr); pools the key vectors with the spec's linear slot weights; scores
//    q·pooled_key; argmax over the visible entries. Cost ∝ N·d per trial.
//  - token_score: draws x*, q in d dimensions and T = q·x*/|q|, then every other token's normalised
//    score q·k_p/|q| directly as N(0, 1) (its exact law given q). Cost ∝ N per trial.
// Both evaluate every phase in the same trial: the background is drawn once and the entries
// touched by the target are recomputed per phase (prefix/suffix maxima give the rest). Phases are
// therefore correlated with each other, but each phase's hit rate is an unbiased estimate.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "kvphase/compress/spec.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory_check {

enum class sampler { key_space, token_score };

struct phase_count {
  index_t phase = 0;
  index_t hits = 0;
  index_t trials = 0;
  [[nodiscard]] double recall() const { return trials ? static_cast<double>(hits) / static_cast<double>(trials) : 0.0; }
  [[nodiscard]] double se(double p) const {
    return std::sqrt(std::max(p * (1 - p), 0.25 / static_cast<double>(trials)) / static_cast<double>(trials));
  }
};

/// Linear pooling over several heads' specs is handled by running each spec on the same tokens:
/// `specs` all share the stride; phase is measured on specs[0]'s grid. A trial is a hit when ANY
/// listed spec retrieves (for one spec: the plain needle task).
inline std::vector<phase_count> simulate(const std::vector<compress::operator_spec>& specs, const theory::needle_model& m,
                                         index_t trials, std::uint64_t seed, sampler smp = sampler::token_score) {
  const auto& g0 = specs.front().grid;
  const index_t S = g0.stride, N = m.context, d = m.dim;
  std::vector<phase_count> out(static_cast<std::size_t>(S));
  for (index_t ph = 0; ph < S; ++ph) out[static_cast<std::size_t>(ph)] = {ph, 0, trials};
  std::vector<index_t> pos(static_cast<std::size_t>(S));
  for (index_t ph = 0; ph < S; ++ph) pos[static_cast<std::size_t>(ph)] = theory::target_position_for_phase(g0, m, ph);

  // keyed by the specs' canonical field text (core/fields.hpp), not by their printed form
  std::ostringstream key;
  for (const auto& s : specs) key << fields::canonical(s, "kvphase.theory_check");
  key << m;
  const std::uint64_t cfg = rng::hash_text(key.str());
  const double eps_sd = std::isinf(m.snr) ? 0.0 : 1.0 / std::sqrt(m.snr);

  std::vector<double> xs(static_cast<std::size_t>(d)), q(static_cast<std::size_t>(d));
  std::vector<double> tok(static_cast<std::size_t>(N));  // per-token score q·k_p (background)
  std::vector<double> keys;                                // key_space: N × d
  struct per_spec {
    index_t M = 0;
    std::vector<double> entry, pre, suf;
  };
  std::vector<per_spec> ps(specs.size());
  for (index_t tr = 0; tr < trials; ++tr) {
    rng::philox_stream s(seed, rng::trial_stream(cfg, static_cast<std::uint64_t>(tr)));
    double qn2 = 0, qx = 0;
    for (index_t c = 0; c < d; ++c) {
      xs[static_cast<std::size_t>(c)] = s.normal();
      q[static_cast<std::size_t>(c)] = xs[static_cast<std::size_t>(c)] + (eps_sd > 0 ? eps_sd * s.normal() : 0.0);
      qn2 += q[static_cast<std::size_t>(c)] * q[static_cast<std::size_t>(c)];
      qx += q[static_cast<std::size_t>(c)] * xs[static_cast<std::size_t>(c)];
    }
    const double qn = std::sqrt(qn2);
    const double target_score = qx;  // q·x*
    if (smp == sampler::key_space) {
      keys.resize(static_cast<std::size_t>(N * d));
      for (index_t p = 0; p < N; ++p) {
        double sc = 0;
        for (index_t c = 0; c < d; ++c) {
          const double k = s.normal();
          keys[static_cast<std::size_t>(p * d + c)] = k;
          sc += q[static_cast<std::size_t>(c)] * k;
        }
        tok[static_cast<std::size_t>(p)] = sc;
      }
    } else {
      for (index_t p = 0; p < N; ++p) tok[static_cast<std::size_t>(p)] = qn * s.normal();
    }
    // background entry scores per spec
    for (std::size_t h = 0; h < specs.size(); ++h) {
      const auto& g = specs[h].grid;
      auto& P = ps[h];
      P.M = g.num_entries(N);
      P.entry.assign(static_cast<std::size_t>(P.M), 0.0);
      for (index_t e = 0; e < P.M; ++e) {
        const auto w = specs[h].linear_slot_weights(g.masked_slots(e));
        const auto src = g.sources(e);
        double sc = 0;
        if (smp == sampler::key_space) {
          // pool the key vectors, then score (direct key space)
          for (index_t c = 0; c < d; ++c) {
            double pk = 0;
            for (index_t r = 0; r < g.window; ++r) {
              const index_t p = src.first + r;
              if (p >= 0 && w[static_cast<std::size_t>(r)] != 0) pk += w[static_cast<std::size_t>(r)] * keys[static_cast<std::size_t>(p * d + c)];
            }
            sc += q[static_cast<std::size_t>(c)] * pk;
          }
        } else {
          for (index_t r = 0; r < g.window; ++r) {
            const index_t p = src.first + r;
            if (p >= 0) sc += w[static_cast<std::size_t>(r)] * tok[static_cast<std::size_t>(p)];
          }
        }
        P.entry[static_cast<std::size_t>(e)] = sc;
      }
      P.pre.assign(static_cast<std::size_t>(P.M + 1), -std::numeric_limits<double>::infinity());
      P.suf.assign(static_cast<std::size_t>(P.M + 1), -std::numeric_limits<double>::infinity());
      for (index_t e = 0; e < P.M; ++e) P.pre[static_cast<std::size_t>(e + 1)] = std::max(P.pre[static_cast<std::size_t>(e)], P.entry[static_cast<std::size_t>(e)]);
      for (index_t e = P.M - 1; e >= 0; --e) P.suf[static_cast<std::size_t>(e)] = std::max(P.suf[static_cast<std::size_t>(e + 1)], P.entry[static_cast<std::size_t>(e)]);
    }
    for (index_t ph = 0; ph < S; ++ph) {
      const index_t p0 = pos[static_cast<std::size_t>(ph)];
      bool hit = false;
      for (std::size_t h = 0; h < specs.size() && !hit; ++h) {
        const auto& g = specs[h].grid;
        const auto& P = ps[h];
        // entries holding a target token, and the window of entries whose scores change
        index_t lo = std::numeric_limits<index_t>::max(), hi = -1;
        for (index_t t = 0; t < m.key_span; ++t)
          g.for_each_entry_containing(p0 + t, [&](index_t e, index_t) {
            if (e < P.M) {
              lo = std::min(lo, e);
              hi = std::max(hi, e);
            }
          });
        if (hi < 0) continue;
        double best_t = -std::numeric_limits<double>::infinity();
        for (index_t e = lo; e <= hi; ++e) {
          const auto w = specs[h].linear_slot_weights(g.masked_slots(e));
          const auto src = g.sources(e);
          double sc = 0;
          for (index_t r = 0; r < g.window; ++r) {
            const index_t p = src.first + r;
            if (p < 0) continue;
            const bool is_t = p >= p0 && p < p0 + m.key_span;
            double ts;
            if (smp == sampler::key_space && is_t) {
              ts = target_score;
            } else {
              ts = is_t ? target_score : tok[static_cast<std::size_t>(p)];
            }
            sc += w[static_cast<std::size_t>(r)] * ts;
          }
          best_t = std::max(best_t, sc);
        }
        const double best_d = std::max(P.pre[static_cast<std::size_t>(lo)], P.suf[static_cast<std::size_t>(hi + 1)]);
        if (best_t > best_d) hit = true;
      }
      if (hit) ++out[static_cast<std::size_t>(ph)].hits;
    }
  }
  return out;
}

inline std::vector<phase_count> simulate(const compress::operator_spec& spec, const theory::needle_model& m, index_t trials,
                                         std::uint64_t seed, sampler smp = sampler::token_score) {
  return simulate(std::vector<compress::operator_spec>{spec}, m, trials, seed, smp);
}

/// Slot gate with random content logits z_p ~ N(0, τ²) per token (W = S), token-score sampler.
inline std::vector<phase_count> simulate_gated(const compress::operator_spec& spec, const theory::needle_model& m,
                                               index_t trials, std::uint64_t seed) {
  const auto& g = spec.grid;
  const index_t S = g.stride, W = g.window, N = m.context, d = m.dim;
  std::vector<phase_count> out(static_cast<std::size_t>(S));
  std::vector<index_t> pos(static_cast<std::size_t>(S));
  for (index_t ph = 0; ph < S; ++ph) {
    out[static_cast<std::size_t>(ph)] = {ph, 0, trials};
    pos[static_cast<std::size_t>(ph)] = theory::target_position_for_phase(g, m, ph);
  }
  std::ostringstream key;
  key << fields::canonical(spec, "kvphase.theory_check") << m << "gated";
  const std::uint64_t cfg = rng::hash_text(key.str());
  const double eps_sd = std::isinf(m.snr) ? 0.0 : 1.0 / std::sqrt(m.snr);
  std::vector<double> b(static_cast<std::size_t>(W), 0.0);
  if (!spec.slot_bias.empty()) b = spec.slot_bias;
  const index_t M = g.num_entries(N);
  std::vector<double> tok(static_cast<std::size_t>(N)), z(static_cast<std::size_t>(N)), entry(static_cast<std::size_t>(M)),
      pre(static_cast<std::size_t>(M + 1)), suf(static_cast<std::size_t>(M + 1));
  auto score = [&](index_t e, index_t p0, double ts) {
    const auto src = g.sources(e);
    double mx = -INFINITY;
    for (index_t r = 0; r < W; ++r) mx = std::max(mx, b[static_cast<std::size_t>(r)] + z[static_cast<std::size_t>(src.first + r)]);
    double zs = 0, sc = 0;
    for (index_t r = 0; r < W; ++r) {
      const index_t p = src.first + r;
      const double a = std::exp(b[static_cast<std::size_t>(r)] + z[static_cast<std::size_t>(p)] - mx);
      zs += a;
      sc += a * ((p >= p0 && p < p0 + m.key_span) ? ts : tok[static_cast<std::size_t>(p)]);
    }
    return sc / zs;
  };
  for (index_t tr = 0; tr < trials; ++tr) {
    rng::philox_stream s(seed, rng::trial_stream(cfg, static_cast<std::uint64_t>(tr)));
    double qn2 = 0, qx = 0;
    for (index_t c = 0; c < d; ++c) {
      const double x = s.normal();
      const double q = x + (eps_sd > 0 ? eps_sd * s.normal() : 0.0);
      qn2 += q * q;
      qx += q * x;
    }
    const double qn = std::sqrt(qn2);
    for (index_t p = 0; p < N; ++p) {
      tok[static_cast<std::size_t>(p)] = qn * s.normal();
      z[static_cast<std::size_t>(p)] = spec.content_std * s.normal();
    }
    pre[0] = suf[static_cast<std::size_t>(M)] = -INFINITY;
    for (index_t e = 0; e < M; ++e) entry[static_cast<std::size_t>(e)] = score(e, -1 - m.key_span, 0.0);
    for (index_t e = 0; e < M; ++e) pre[static_cast<std::size_t>(e + 1)] = std::max(pre[static_cast<std::size_t>(e)], entry[static_cast<std::size_t>(e)]);
    for (index_t e = M - 1; e >= 0; --e) suf[static_cast<std::size_t>(e)] = std::max(suf[static_cast<std::size_t>(e + 1)], entry[static_cast<std::size_t>(e)]);
    for (index_t ph = 0; ph < S; ++ph) {
      const index_t p0 = pos[static_cast<std::size_t>(ph)];
      index_t lo = std::numeric_limits<index_t>::max(), hi = -1;
      for (index_t t = 0; t < m.key_span; ++t)
        g.for_each_entry_containing(p0 + t, [&](index_t e, index_t) {
          if (e < M) {
            lo = std::min(lo, e);
            hi = std::max(hi, e);
          }
        });
      if (hi < 0) continue;
      double bt = -INFINITY;
      for (index_t e = lo; e <= hi; ++e) bt = std::max(bt, score(e, p0, qx));
      if (bt > std::max(pre[static_cast<std::size_t>(lo)], suf[static_cast<std::size_t>(hi + 1)])) ++out[static_cast<std::size_t>(ph)].hits;
    }
  }
  return out;
}

}  // namespace kvphase::theory_check

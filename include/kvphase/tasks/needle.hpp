#pragma once
/// \file tasks/needle.hpp
/// Single-needle retrieval.
///
/// Context: N tokens at positions 0 … N−1; the query is token N and sees every context token
/// (full attention) or every complete compressed entry plus an optional raw window
/// (compressed attention).
///
/// K layout (rows of the key matrix, d channels):
///  - noise tokens: x_i ~ N(0, I_d), iid (isotropic Gaussian keys);
///  - the needle's key span [p, p + k_key): K row = κ, the target key, κ ~ N(0, I_d) per trial;
///  - the needle's value span [p + k_key, p + k_key + k_value): K row = c·κ with
///    c = value_key_weight (default 1: a value token carries the identity of the key before it,
///    as an induction head provides; 0: its K row is 0, so only the key span is found);
///  - query: q = κ + σ·ε, ε ~ N(0, I_d), σ = query_noise (0 = the query is exactly the key;
///    the signal-to-noise ratio of the query is 1/σ²).
/// V layout: needle tokens (key and value span) carry the payload, all others none, so the
/// attention mass on the target is the weight the output gives the needle's tokens (general
/// path: one value channel, 1 on the needle's tokens; the mass is that channel of the output).
///
/// Outcome per model (full or compressed), over the model's items (entries, window tokens):
///  - hit: the highest-scoring item holds a needle token (its sources meet [p, p + k_key + k_value));
///  - mass: Σ_items softmax(β·score)_item · (pooled weight of the needle's tokens in the item),
///    β = logit_scale (0 → 1/√d), i.e. the needle's share of the attention output;
///  - margin: best needle item score − best other item score (score units q·k).
///
/// Placement for a phase sweep with modulus M: p0 is drawn uniformly in [lo, hi] (lo, hi from
/// the depth range), then shifted by the centred residue δ ∈ [−M/2, M/2) that makes p = p0 + δ
/// ≡ group (mod M). δ is nearly uniform for every group, so the absolute positions of all
/// groups have the same mean and spread (to within a fraction of a token).

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <ostream>
#include <string_view>
#include <vector>

#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::tasks {

namespace detail {
/// The readout and placement fields that needle and kv-pairs share: the value tokens' key weight,
/// the query noise, the readout's logit scale and the target's depth range.
inline void validate_readout(double value_key_weight, double query_noise, double logit_scale, double depth_lo,
                             double depth_hi) {
  require(std::isfinite(value_key_weight), "value_key_weight", value_key_weight, "must be finite");
  require(std::isfinite(query_noise) && query_noise >= 0, "query_noise", query_noise, "must be finite and >= 0");
  require(std::isfinite(logit_scale) && logit_scale >= 0, "logit_scale", logit_scale, "must be finite and >= 0");
  require(depth_lo >= 0 && depth_lo <= 1, "depth_lo", depth_lo, "must be in [0, 1]");
  require(depth_hi >= depth_lo && depth_hi <= 1, "depth_hi", depth_hi, "must be in [depth_lo, 1]");
}
}  // namespace detail

struct needle_config {
  index_t context = 8192;         ///< N context tokens
  index_t dim = 64;               ///< d
  index_t key_span = 1;           ///< k_key ≥ 1
  index_t value_span = 0;         ///< k_value ≥ 0
  double value_key_weight = 1.0;  ///< c: K row of a value token = c·κ
  double query_noise = 0.0;       ///< σ ≥ 0
  double logit_scale = 0.0;       ///< β for the mass (0 → 1/√d)
  double depth_lo = 0.1;          ///< needle start range as fractions of N
  double depth_hi = 0.9;

  [[nodiscard]] index_t span() const noexcept { return key_span + value_span; }
  [[nodiscard]] double beta() const noexcept {
    return logit_scale > 0 ? logit_scale : 1.0 / std::sqrt(static_cast<double>(dim));
  }

  void validate() const {
    require(dim >= 1 && dim <= limits::max_dim, "dim", dim, "must be in [1, 65536]");
    require(key_span >= 1 && key_span <= limits::max_tokens, "key_span", key_span, "must be in [1, 2^30]");
    require(value_span >= 0 && value_span <= limits::max_tokens, "value_span", value_span, "must be in [0, 2^30]");
    // spans <= 2^30 each: 2 * span() + 16 <= 2^32 + 16 cannot overflow
    require(context >= 2 * span() + 16 && context <= limits::max_tokens, "context", context,
            "must be >= 2 * (key_span + value_span) + 16 and <= 2^30");
    detail::validate_readout(value_key_weight, query_noise, logit_scale, depth_lo, depth_hi);
  }

  // ---- the task (tasks/task.hpp) ----------------------------------------------------------------
  static constexpr std::string_view task_name = "needle";
  template <class V>
  void visit_fields(V&& v) {
    v("context", context);
    v("dim", dim);
    v("key_span", key_span);
    v("value_span", value_span);
    v("value_key_weight", value_key_weight);
    v("query_noise", query_noise);
    v("logit_scale", logit_scale);
    v("depth_lo", depth_lo);
    v("depth_hi", depth_hi);
  }
  [[nodiscard]] index_t groups(const sweep_geometry& g) const noexcept { return g.phase_groups(); }
  [[nodiscard]] index_t label(index_t g) const noexcept { return g; }
  [[nodiscard]] std::string_view label_column() const noexcept { return {}; }
  [[nodiscard]] index_t key_dim() const noexcept { return dim; }
  [[nodiscard]] index_t context_tokens(index_t) const noexcept { return context; }
  /// The config's own rules and the sweep's: room for the window, the chunk and the modulus.
  void validate(const sweep_geometry& g) const {
    validate();
    const index_t M = groups(g);
    require(context >= g.raw_window + g.chunk_window + 4 * M + 2 * span() + 16, "context", context,
            "too short for the window, the chunk window and the modulus");
  }
  struct state {
    std::vector<float> kappa, eps, q;
    std::vector<planted_span> planted;
  };
  /// One trial: needle at p ≡ origin + group (mod M) (needle_position), query q = κ + σ·ε;
  /// hit = the best item holds a needle token; margin = best needle item − best other item;
  /// mass = the needle's share of the output (only when env.want_mass()).
  void run(trial_env& env, state& w, trial_outcome& comp, trial_outcome& full) const;

  friend std::ostream& operator<<(std::ostream& os, const needle_config& c) { return fields::print(os, c, "needle_config"); }
};


/// Centred shift δ ∈ [−M/2, M/2) with p0 + δ ≡ group (mod M).
constexpr index_t centred_residue_shift(index_t p0, index_t group, index_t modulus) noexcept {
  const index_t h = modulus / 2;
  return floor_mod(group - p0 + h, modulus) - h;
}

/// Needle start for a trial of phase group `group` (mod `modulus`, positions relative to
/// `origin`): p ≡ origin + group (mod M), the whole needle inside [0, N − reserve), where
/// `reserve` keeps it out of a raw window at the end of the context.
/// Preconditions (checked, kvphase::error): c valid, 1 <= modulus <= 2^30, 0 <= group < modulus,
/// 0 <= reserve <= 2^31, |origin| <= 2^40 — so every sum below stays far inside index_t.
inline index_t needle_position(const needle_config& c, index_t modulus, index_t group, index_t origin,
                               index_t reserve, rng::philox_stream& s) {
  c.validate();
  require(modulus >= 1 && modulus <= limits::max_tokens, "modulus", modulus, "must be in [1, 2^30]");
  require(group >= 0 && group < modulus, "group", group, "must be in [0, modulus)");
  require(reserve >= 0 && reserve <= 2 * limits::max_tokens, "reserve", reserve, "must be in [0, 2^31]");
  require(origin > -(index_t(1) << 40) && origin < (index_t(1) << 40), "origin", origin, "must be within ±2^40");
  const index_t N = c.context;
  const index_t h = modulus / 2;
  const index_t last_start = N - reserve - c.span() - modulus;  // room for the shift
  index_t lo = static_cast<index_t>(std::floor(c.depth_lo * static_cast<double>(N))) + h;
  index_t hi = static_cast<index_t>(std::floor(c.depth_hi * static_cast<double>(N)));
  hi = std::min(hi, last_start);
  require(hi >= lo, "context", N, "too short for the needle span, modulus and window at this depth range");
  const index_t p0 = lo + static_cast<index_t>(s.below(static_cast<std::uint64_t>(hi - lo + 1)));
  return p0 + centred_residue_shift(p0 - origin, group, modulus);
}

inline void needle_config::run(trial_env& env, state& w, trial_outcome& oc, trial_outcome& of) const {
  const index_t N = context, d = dim;
  const sweep_geometry& geo = env.geometry();
  const index_t p = needle_position(*this, groups(geo), env.group(), geo.origin, geo.reserve(), env.layout());
  auto& gen = env.normals();
  detail::fill(gen, w.kappa, d);
  if (query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
  const double qn = detail::make_query(w.q, w.kappa, w.eps, query_noise, d);
  const double qk = detail::dot_d(w.q.data(), w.kappa.data(), d);
  sim::normal_state st = gen.state();
  static constexpr float one = 1.0f;  // value payload: one indicator channel on the needle's tokens
  w.planted.assign({{p, key_span, w.kappa.data(), 1.0f, static_cast<float>(qk), &one},
                    {p + key_span, value_span, w.kappa.data(), static_cast<float>(value_key_weight),
                     static_cast<float>(value_key_weight * qk), &one}});
  env.score(st, N, w.q.data(), qn, w.planted, 1, beta());
  const float b = static_cast<float>(beta());
  auto readout = [&](model_view mv) {
    float bt, bo;
    mv.best_scores(p, p + span(), bt, bo);
    trial_outcome o;
    o.hit = bt > bo;
    o.margin = static_cast<double>(bt) - static_cast<double>(bo);
    if (mv.output) {
      o.mass = mv.output[0];  // the indicator channel of the output: the needle's share
    } else if (env.want_mass()) {
      mv.model.softmax(mv.buffers, b, false, std::max(bt, bo));
      o.mass = mv.model.span_mass(mv.buffers, p, p + span());
    }
    return o;
  };
  oc = readout(env.compressed());
  of = readout(env.full());
}

inline const bool needle_registered = register_task<needle_config>();

}  // namespace kvphase::tasks

#pragma once
/// \file tasks/kv_pairs.hpp
/// Key–value retrieval over many pairs (the paper's 128K-token experiment: ≈16,000 pairs, the
/// target grouped by key position mod 8).
///
/// Layout of the N context tokens: leading filler, then P pairs in order; pair j is a key span
/// of k_key tokens followed by a value span of k_value tokens, and is preceded by a filler gap
/// g_j drawn uniformly from [0, g_max] with g_max chosen so the pairs fill the context (the
/// remaining filler trails the last pair).
///
/// K layout (d channels):
///  - filler tokens: x_i ~ N(0, I_d) iid;
///  - key tokens of pair j: κ_j, the pair's key identity, κ_j ~ N(0, I_d) iid over pairs;
///  - value tokens of pair j: c·κ_j, c = value_key_weight (default 1): a value token carries the
///    identity of the key before it in K, as an induction head would provide.
/// V layout: value tokens of pair j carry the codebook vector ν_{code(j)}; key and filler tokens
/// carry no payload (V row 0). Codebook: `codes` vectors drawn N(0, I_d) and normalised to unit
/// length per trial; code(j) uniform and independent over pairs.
/// Query: q = κ_{j*} + σ·ε for the target pair j*.
/// Readout: o = Σ_items softmax(β·score)_item · pooled V_item; decoded value = the nearest
/// codebook vector (max o·ν_c for unit vectors); hit = decoded code is code(j*). On the general
/// path o is the attention output itself (value rows [ν_code(j) | 1 for the target pair]; the
/// last channel of o is the target's mass).
///
/// Logit scale on the general (faithful) path: β is the attention's softmax scale. The default
/// β = 1 with unit-variance keys puts the target's logit near d, a hard argmax under which an
/// entry carrying the value at a small slot weight still decodes it, so a compressor's slot
/// profile shows no phase effect; β = 1/√d (logit_scale 0, DeepSeek-V4's scale) lets the payload's
/// weight decide (docs/sim.md, "V4-CSA at 32K"). Because value tokens also carry c·κ, some entry
/// matches the key strongly at every phase; what a slot profile attenuates is the value payload
/// of the shared key/value entry.
///
/// Target choice for residue group g (mod M): j* uniform in [P·depth_lo, P·depth_hi]; the gaps
/// around it are widened by M/2 each (taken from the trailing filler) and the pair is shifted by
/// the centred residue δ ∈ [−M/2, M/2) that puts its first key token at ≡ origin + g (mod M).
/// Prompt length, query position and bindings are fixed across groups; the absolute position of
/// the target has the same distribution in every group up to the nearly uniform δ.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string_view>
#include <vector>

#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/tasks/needle.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::tasks {

/// Pair positions of one trial. start[j] = first key token of pair j; target = j*.
struct kv_layout {
  std::vector<index_t> start;
  index_t target = 0;
};

struct kv_pairs_config {
  index_t context = 131072;       ///< N
  index_t dim = 64;               ///< d
  index_t pairs = 16000;          ///< P
  index_t key_span = 2;           ///< tokens per key
  index_t value_span = 2;         ///< tokens per value
  index_t codes = 64;             ///< codebook size (≥ 2)
  double value_key_weight = 1.0;  ///< c
  double query_noise = 0.0;       ///< σ
  double logit_scale = 1.0;       ///< β of the readout softmax (0 → 1/√d)
  double depth_lo = 0.1;          ///< target pair index range as fractions of P
  double depth_hi = 0.9;

  [[nodiscard]] index_t pair_span() const noexcept { return key_span + value_span; }
  [[nodiscard]] double beta() const noexcept {
    return logit_scale > 0 ? logit_scale : 1.0 / std::sqrt(static_cast<double>(dim));
  }
  /// Largest gap so that P gaps of mean g_max/2 plus 6 standard deviations, the M/2 widening
  /// and a 64-token reserve fit: Σ g ≤ N − P·span always holds in practice and is enforced.
  /// Computed in double (exact for validated configs, whose terms are all < 2^53), so an
  /// unvalidated config cannot overflow here.
  [[nodiscard]] index_t max_gap(index_t modulus) const noexcept {
    const double free = static_cast<double>(context) -
                        static_cast<double>(pairs) * (static_cast<double>(key_span) + static_cast<double>(value_span)) -
                        static_cast<double>(modulus) - 64.0;
    if (free <= 0) return 0;
    // mean P·g/2, sd ≈ g·√(P/12): choose g with P·g/2 + 6·g·√(P/12) ≤ free
    const double P = static_cast<double>(pairs);
    return static_cast<index_t>(std::floor(free / (P / 2 + 6 * std::sqrt(P / 12))));
  }

  /// Bounds (each documented in core/checked.hpp): dim <= 2^16, pairs, key_span, value_span,
  /// context <= 2^30 and 1 <= modulus <= 2^30, so pairs * (key_span + value_span) <= 2^61 and
  /// every layout sum fits index_t; the product is also checked explicitly.
  void validate(index_t modulus = 8) const {
    require(dim >= 1 && dim <= limits::max_dim, "dim", dim, "must be in [1, 65536]");
    require(pairs >= 2 && pairs <= limits::max_tokens, "pairs", pairs, "must be in [2, 2^30]");
    require(key_span >= 1 && key_span <= limits::max_tokens, "key_span", key_span, "must be in [1, 2^30]");
    require(value_span >= 1 && value_span <= limits::max_tokens, "value_span", value_span,
            "must be in [1, 2^30] (the value is what is read out)");
    require(codes >= 2 && codes <= 65536, "codes", codes, "must be in [2, 65536]");
    require(modulus >= 1 && modulus <= limits::max_tokens, "modulus", modulus, "must be in [1, 2^30]");
    require(context >= 0 && context <= limits::max_tokens, "context", context, "must be in [0, 2^30]");
    const index_t tokens = checked_add(checked_mul(pairs, pair_span(), "pairs * (key_span + value_span)"),
                                       modulus + 64, "pairs * (key_span + value_span) + modulus + 64");
    if (context < tokens)  // message built only on failure: validate runs once per trial layout
      fail("context", context,
           "must hold pairs * (key_span + value_span) + modulus + 64 = " + std::to_string(tokens) + " tokens");
    detail::validate_readout(value_key_weight, query_noise, logit_scale, depth_lo, depth_hi);
  }

  // ---- the task (tasks/task.hpp) ----------------------------------------------------------------
  static constexpr std::string_view task_name = "kv-pairs";
  template <class V>
  void visit_fields(V&& v) {
    v("context", context);
    v("dim", dim);
    v("pairs", pairs);
    v("key_span", key_span);
    v("value_span", value_span);
    v("codes", codes);
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
  void validate(const sweep_geometry& g) const { validate(groups(g)); }
  struct state {
    std::vector<float> kappa, eps, q, codebook, values;
    std::vector<planted_span> planted;
    std::vector<std::uint32_t> codes;
    std::vector<double> code_weight;
    kv_layout layout;
    std::vector<float> gram;  ///< C × C, row-major
  };
  /// One trial (the layout above); readout: values weighted by the output weight of their
  /// tokens, decoded to the nearest unit codebook vector; mass = the target value's weight.
  void run(trial_env& env, state& w, trial_outcome& comp, trial_outcome& full) const;

  friend std::ostream& operator<<(std::ostream& os, const kv_pairs_config& c) {
    return fields::print(os, c, "kv_pairs_config");
  }
};

/// Counter-based uniform integer: element i of the sequence keyed by `key`, in [0, n)
/// (splitmix64 finaliser, multiply-shift range reduction; bias < n/2^64). Cheap enough to draw
/// one value per pair of a 16,000-pair context in every trial.
constexpr std::uint64_t hashed_below(std::uint64_t key, std::uint64_t i, std::uint64_t n) noexcept {
  const std::uint64_t x = rng::mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
  return static_cast<std::uint64_t>((static_cast<__uint128_t>(x) * n) >> 64);
}

/// Draws the layout for residue group `group` (mod `modulus`, relative to `origin`) into `out`
/// (its vector is reused: no allocation once sized). Randomness: the target index from the
/// Philox stream `s`, the gaps from hashed_below keyed by one draw of `s`.
/// Checked (kvphase::error): c.validate(modulus), 0 <= group < modulus, |origin| <= 2^40.
inline void kv_pairs_layout(const kv_pairs_config& c, index_t modulus, index_t group, index_t origin,
                            rng::philox_stream& s, kv_layout& out) {
  c.validate(modulus);
  require(group >= 0 && group < modulus, "group", group, "must be in [0, modulus)");
  require(origin > -(index_t(1) << 40) && origin < (index_t(1) << 40), "origin", origin, "must be within ±2^40");
  const index_t P = c.pairs;
  const index_t span = c.pair_span();
  const index_t gmax = c.max_gap(modulus);
  const index_t h = modulus / 2;
  out.start.resize(static_cast<std::size_t>(P));
  const index_t jlo = static_cast<index_t>(std::floor(c.depth_lo * static_cast<double>(P - 1)));
  const index_t jhi = std::max(jlo, static_cast<index_t>(std::floor(c.depth_hi * static_cast<double>(P - 1))));
  const index_t jt = jlo + static_cast<index_t>(s.below(static_cast<std::uint64_t>(jhi - jlo + 1)));
  out.target = jt;
  const std::uint64_t gap_key = s.next_u64();
  const index_t budget = c.context - P * span - 2 * h;  // filler tokens available to the gaps
  index_t pos = 0, used = 0;
  for (index_t j = 0; j < P; ++j) {
    index_t g = gmax > 0 ? static_cast<index_t>(hashed_below(gap_key, static_cast<std::uint64_t>(j),
                                                              static_cast<std::uint64_t>(gmax + 1)))
                         : 0;
    g = std::min(g, budget - used);  // never overflow the context (practically never binds)
    used += g;
    pos += g;
    if (j == jt) pos += h;           // widened gap before the target
    if (j == jt + 1) pos += h;       // and after it
    out.start[static_cast<std::size_t>(j)] = pos;
    pos += span;
  }
  // shift the target by the centred residue: it moves inside its widened gaps
  const index_t p0 = out.start[static_cast<std::size_t>(jt)];
  out.start[static_cast<std::size_t>(jt)] = p0 + centred_residue_shift(p0 - origin, group, modulus);
}

inline void kv_pairs_config::run(trial_env& env, state& w, trial_outcome& oc, trial_outcome& of) const {
  const index_t N = context, d = dim, P = pairs, C = codes;
  const sweep_geometry& geo = env.geometry();
  auto& ps = env.layout();
  auto& gen = env.normals();
  kv_pairs_layout(*this, groups(geo), env.group(), geo.origin, ps, w.layout);
  const std::uint64_t code_key = ps.next_u64();
  detail::fill(gen, w.kappa, d);
  if (query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
  detail::fill(gen, w.codebook, C * d);
  const double qn = detail::make_query(w.q, w.kappa, w.eps, query_noise, d);
  const double qk = detail::dot_d(w.q.data(), w.kappa.data(), d);
  // unit-length codebook ν_c (rows of C × d) and its Gram matrix G = ν νᵀ (dots in double)
  float* nu = w.codebook.data();
  for (index_t c = 0; c < C; ++c) {
    const float n = static_cast<float>(std::sqrt(detail::dot_d(nu + c * d, nu + c * d, d)));
    for (index_t i = 0; i < d; ++i) nu[c * d + i] /= n;
  }
  w.gram.resize(static_cast<std::size_t>(C * C));
  for (index_t a = 0; a < C; ++a)
    for (index_t b = a; b < C; ++b)
      w.gram[static_cast<std::size_t>(a * C + b)] = w.gram[static_cast<std::size_t>(b * C + a)] =
          static_cast<float>(detail::dot_d(nu + a * d, nu + b * d, d));
  sim::normal_state st = gen.state();
  w.codes.resize(static_cast<std::size_t>(P));
  for (index_t j = 0; j < P; ++j)
    w.codes[static_cast<std::size_t>(j)] =
        static_cast<std::uint32_t>(hashed_below(code_key, static_cast<std::uint64_t>(j), static_cast<std::uint64_t>(C)));
  // pair j: its key vector κ_j (general path: the target's is κ) or its score q·κ_j
  const float cv = static_cast<float>(value_key_weight);
  float* ids = env.identities(st, w.q.data(), qn, P);
  const bool rows = env.key_rows();
  if (rows) {
    float* kt = ids + w.layout.target * d;
    for (index_t i = 0; i < d; ++i) kt[i] = w.kappa[static_cast<std::size_t>(i)];
  } else {
    ids[w.layout.target] = static_cast<float>(qk);
  }
  // general path: value tokens of pair j carry [ν_code(j) | 1 if j is the target] (d + 1 channels)
  const index_t dv = d + 1;
  if (rows) {
    w.values.resize(static_cast<std::size_t>(P * dv));
    for (index_t j = 0; j < P; ++j) {
      float* vr = w.values.data() + j * dv;
      const float* nuj = nu + static_cast<index_t>(w.codes[static_cast<std::size_t>(j)]) * d;
      std::copy(nuj, nuj + d, vr);
      vr[d] = j == w.layout.target ? 1.0f : 0.0f;
    }
  }
  w.planted.clear();
  for (index_t j = 0; j < P; ++j) {
    const index_t st0 = w.layout.start[static_cast<std::size_t>(j)];
    const float* kj = rows ? ids + j * d : nullptr;
    const float sj = rows ? 0.0f : ids[j];
    w.planted.push_back({st0, key_span, kj, 1.0f, sj});
    w.planted.push_back({st0 + key_span, value_span, kj, cv, cv * sj, rows ? w.values.data() + j * dv : nullptr});
  }
  env.score(st, N, w.q.data(), qn, w.planted, dv, beta());
  const float b = static_cast<float>(beta());
  auto readout = [&](model_view mv) {
    const std::uint32_t ct = w.codes[static_cast<std::size_t>(w.layout.target)];
    double best_t = 0, best_o = -std::numeric_limits<double>::infinity();
    double target_mass = 0;
    if (mv.output) {
      // the attention output o (first d channels), decoded to the nearest unit codebook vector
      for (index_t c = 0; c < C; ++c) {
        const double v = detail::dot_d(mv.output, nu + c * d, d);
        if (static_cast<std::uint32_t>(c) == ct) best_t = v;
        else best_o = std::max(best_o, v);
      }
      target_mass = mv.output[d];
    } else {
      mv.model.softmax(mv.buffers, b, true);
      w.code_weight.assign(static_cast<std::size_t>(C), 0.0);
      for (index_t j = 0; j < P; ++j) {
        const index_t v0 = w.layout.start[static_cast<std::size_t>(j)] + key_span;
        double a = 0;
        for (index_t i = 0; i < value_span; ++i) a += mv.model.token_mass(mv.buffers, v0 + i);
        w.code_weight[w.codes[static_cast<std::size_t>(j)]] += a;
        if (j == w.layout.target) target_mass = a;
      }
      // o·ν_c = Σ_c' B[c'] G[c', c]; decode = argmax (unit codebook: nearest vector)
      for (index_t c = 0; c < C; ++c) {
        double v = 0;
        for (index_t c2 = 0; c2 < C; ++c2) v += w.code_weight[static_cast<std::size_t>(c2)] * w.gram[static_cast<std::size_t>(c2 * C + c)];
        if (static_cast<std::uint32_t>(c) == ct) best_t = v;
        else best_o = std::max(best_o, v);
      }
    }
    trial_outcome o;
    o.hit = best_t > best_o;
    o.margin = best_t - best_o;
    o.mass = target_mass;
    return o;
  };
  oc = readout(env.compressed());
  of = readout(env.full());
}

inline const bool kv_pairs_registered = register_task<kv_pairs_config>();

}  // namespace kvphase::tasks

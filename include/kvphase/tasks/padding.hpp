#pragma once
/// \file tasks/padding.hpp
/// Prefix padding: the code-completion analogue. A fixed "code" of `code_length` tokens follows
/// L padding tokens; the query (the completion position) is token N = L + code_length. Two
/// evidence spans inside the code decide between answer A and answer B:
///  - A: `span_a` tokens at code offset `offset_a`, K rows = κ_A;
///  - B: `span_b` tokens at code offset `offset_b`, K rows = κ_B;
///  - every other token (padding and code) has a noise key x_i ~ N(0, I_d);
///  - κ_A, κ_B ~ N(0, I_d) normalised to length √d (so neither wins by its norm);
///  - query q = κ_A + λ·κ_B + σ·ε with λ = strength_b (< 1: full attention prefers A).
/// V: A's tokens carry answer A's payload, B's tokens answer B's; all others none. The output's
/// weights on the two payloads are mass_A and mass_B (softmax(β·score) times pooled slot weights).
/// Outcome: hit = A preferred (mass_A > mass_B), margin = mass_A − mass_B ∈ [−1, 1].
/// Sweep: L runs over `lengths` consecutive values from `pad_min` (4·S by default in the CLI), so
/// the evidence's phase moves through every residue four times; group g ↔ L = pad_min + g.

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <ostream>
#include <string_view>
#include <vector>

#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::tasks {

struct padding_config {
  index_t code_length = 512;
  index_t dim = 64;
  index_t pad_min = 24;     ///< first padding length
  index_t lengths = 16;     ///< number of consecutive padding lengths
  index_t offset_a = 128;   ///< A's evidence offset inside the code
  index_t span_a = 1;
  index_t offset_b = 258;   ///< B's evidence offset (≡ offset_a + 2 mod 4 and mod 8)
  index_t span_b = 1;
  double strength_b = 0.9;  ///< λ
  double query_noise = 0.0; ///< σ
  double logit_scale = 0.0; ///< β (0 → 1/√d)

  [[nodiscard]] double beta() const noexcept {
    return logit_scale > 0 ? logit_scale : 1.0 / std::sqrt(static_cast<double>(dim));
  }
  [[nodiscard]] index_t context(index_t group) const noexcept { return pad_min + group + code_length; }

  /// Bounds: code_length <= 2^28, pad_min <= 2^29, lengths <= 4096, so every context(g) =
  /// pad_min + g + code_length <= 2^30 (limits::max_tokens); spans and offsets are bounded by
  /// code_length before they are added.
  void validate() const {
    require(dim >= 1 && dim <= limits::max_dim, "dim", dim, "must be in [1, 65536]");
    require(code_length >= 8 && code_length <= (index_t(1) << 28), "code_length", code_length, "must be in [8, 2^28]");
    require(pad_min >= 0 && pad_min <= (index_t(1) << 29), "pad_min", pad_min, "must be in [0, 2^29]");
    require(lengths >= 1 && lengths <= 4096, "lengths", lengths, "must be in [1, 4096]");
    require(span_a >= 1 && span_a <= code_length, "span_a", span_a, "must be in [1, code_length]");
    require(span_b >= 1 && span_b <= code_length, "span_b", span_b, "must be in [1, code_length]");
    require(offset_a >= 0 && offset_a <= code_length && offset_a + span_a <= code_length, "offset_a", offset_a,
            "span A must lie inside the code");
    require(offset_b >= 0 && offset_b <= code_length && offset_b + span_b <= code_length, "offset_b", offset_b,
            "span B must lie inside the code");
    require(offset_b >= offset_a + span_a || offset_a >= offset_b + span_b, "offset_b", offset_b,
            "spans A and B must not overlap");
    require(std::isfinite(strength_b) && strength_b >= 0, "strength_b", strength_b, "must be finite and >= 0");
    require(std::isfinite(query_noise) && query_noise >= 0, "query_noise", query_noise, "must be finite and >= 0");
    require(std::isfinite(logit_scale) && logit_scale >= 0, "logit_scale", logit_scale, "must be finite and >= 0");
  }

  // ---- the task (tasks/task.hpp) ----------------------------------------------------------------
  static constexpr std::string_view task_name = "padding";
  template <class V>
  void visit_fields(V&& v) {
    v("code_length", code_length);
    v("dim", dim);
    v("pad_min", pad_min);
    v("lengths", lengths);
    v("offset_a", offset_a);
    v("span_a", span_a);
    v("offset_b", offset_b);
    v("span_b", span_b);
    v("strength_b", strength_b);
    v("query_noise", query_noise);
    v("logit_scale", logit_scale);
  }
  /// Groups are the padding lengths pad_min … pad_min + lengths − 1 (the sweep's modulus does
  /// not apply).
  [[nodiscard]] index_t groups(const sweep_geometry&) const noexcept { return lengths; }
  [[nodiscard]] index_t label(index_t g) const noexcept { return pad_min + g; }
  [[nodiscard]] std::string_view label_column() const noexcept { return "padding_length"; }
  [[nodiscard]] index_t key_dim() const noexcept { return dim; }
  [[nodiscard]] index_t context_tokens(index_t g) const noexcept { return context(g); }
  void validate(const sweep_geometry& g) const {
    validate();
    require(g.modulus == 0, "modulus", g.modulus, "does not apply to the padding task (groups = lengths)");
    require(code_length - std::max(offset_a + span_a, offset_b + span_b) >= g.reserve(), "window", g.raw_window,
            "the evidence spans must lie before the raw window and the last chunk");
  }
  struct state {
    std::vector<float> kappa, kappa_b, eps, q;
    std::vector<planted_span> planted;
  };
  /// One trial of padding length L = pad_min + group; hit = A preferred (mass_A > mass_B),
  /// margin = mass_A − mass_B, mass = mass_A.
  void run(trial_env& env, state& w, trial_outcome& comp, trial_outcome& full) const;

  friend std::ostream& operator<<(std::ostream& os, const padding_config& c) {
    return fields::print(os, c, "padding_config");
  }
};

inline void padding_config::run(trial_env& env, state& w, trial_outcome& oc, trial_outcome& of) const {
  const index_t L = pad_min + env.group(), N = context(env.group()), d = dim;
  auto& gen = env.normals();
  detail::fill(gen, w.kappa, d);
  detail::fill(gen, w.kappa_b, d);
  if (query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
  const double sd = std::sqrt(static_cast<double>(d));
  const double na = std::sqrt(detail::dot_d(w.kappa.data(), w.kappa.data(), d));
  const double nb = std::sqrt(detail::dot_d(w.kappa_b.data(), w.kappa_b.data(), d));
  for (index_t i = 0; i < d; ++i) {
    w.kappa[static_cast<std::size_t>(i)] = static_cast<float>(w.kappa[static_cast<std::size_t>(i)] * sd / na);
    w.kappa_b[static_cast<std::size_t>(i)] = static_cast<float>(w.kappa_b[static_cast<std::size_t>(i)] * sd / nb);
  }
  w.q.resize(static_cast<std::size_t>(d));
  for (index_t i = 0; i < d; ++i)
    w.q[static_cast<std::size_t>(i)] = w.kappa[static_cast<std::size_t>(i)] +
                                       static_cast<float>(strength_b) * w.kappa_b[static_cast<std::size_t>(i)] +
                                       static_cast<float>(query_noise) * w.eps[static_cast<std::size_t>(i)];
  const double qn = std::sqrt(detail::dot_d(w.q.data(), w.q.data(), d));
  const double sa = detail::dot_d(w.q.data(), w.kappa.data(), d);
  const double sb = detail::dot_d(w.q.data(), w.kappa_b.data(), d);
  sim::normal_state st = gen.state();
  const index_t a0 = L + offset_a, b0 = L + offset_b;
  static constexpr float val_a[2] = {1.0f, 0.0f}, val_b[2] = {0.0f, 1.0f};  // general path: A and B channels
  w.planted.assign({{a0, span_a, w.kappa.data(), 1.0f, static_cast<float>(sa), val_a},
                    {b0, span_b, w.kappa_b.data(), 1.0f, static_cast<float>(sb), val_b}});
  env.score(st, N, w.q.data(), qn, w.planted, 2, beta());
  const float b = static_cast<float>(beta());
  auto readout = [&](model_view mv) {
    double ma, mb;
    if (mv.output) {
      ma = mv.output[0];
      mb = mv.output[1];
    } else {
      mv.model.softmax(mv.buffers, b);
      ma = mv.model.span_mass(mv.buffers, a0, a0 + span_a);
      mb = mv.model.span_mass(mv.buffers, b0, b0 + span_b);
    }
    trial_outcome o;
    o.hit = ma > mb;
    o.margin = ma - mb;
    o.mass = ma;
    return o;
  };
  oc = readout(env.compressed());
  of = readout(env.full());
}

inline const bool padding_registered = register_task<padding_config>();

}  // namespace kvphase::tasks

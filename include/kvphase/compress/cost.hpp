#pragma once
/// \file compress/cost.hpp
/// The work of one compressor pass: the bytes it must move and the floating-point operations it
/// must do, as exact formulas of the spec, the parameters present, the input width d and the
/// token count N. Benchmarks divide them by a measured time (GB/s, GFLOP/s) and compare the
/// arithmetic intensity (FLOP per byte) with a machine's balance point (FMA peak / read
/// bandwidth) to decide which bound applies.
///
/// Bytes are the minimum traffic of a pass: every token an entry reads, once (T·d values); every
/// parameter tensor present, once; every output value, once (E·c). Intermediates the kernel may
/// materialise (the projected payload and logits) are not counted.
///
/// FLOPs: an add, multiply, compare, maximum, division, exp, sqrt or activation each count 1; a
/// fused multiply-add counts 2. With E complete entries, n_e unmasked slots of entry e and
/// U = Σ_e n_e, T the tokens read, c the output width, W the window:
///
///   | part                              | FLOPs                                                 |
///   |-----------------------------------|-------------------------------------------------------|
///   | each projection matrix d × k      | 2·T·d·k (W_C, W_Z; two_stream k = 2c)                 |
///   | mean, weights, bias-only slot gate| 2·U·c (one FMA per slot and channel, weights fixed)   |
///   | max                               | (U − E)·c                                             |
///   | identity                          | 0 (a copy)                                            |
///   | slot gate with content logits     | shared u: 2·T·d; per-slot U_r: 2·U·d; bias add U (when |
///   |                                   | a logit map and a bias are both present); softmax 5·U  |
///   |                                   | (max, subtract, exp, sum, divide); pool 2·U·c         |
///   | channel gate, two-stream          | per slot and channel: softmax 4 (max, subtract, exp,  |
///   |                                   | sum) + pool 2, plus 1 when logits and bias are both   |
///   |                                   | present; one divide per entry and channel:            |
///   |                                   | (6 + [z ∧ b])·U·c + E·c                               |
///   | mlp (hidden H)                    | position add U·d (when present), W1 2·U·d·H, b1 E·H,  |
///   |                                   | activation E·H, W2 2·E·H·c, b2 E·c                    |
///   | RMSNorm (spec.rmsnorm)            | E·(3c + 3), + E·c with a weight                       |
///   | RoPE (anchor ≠ none, R rotated)   | E·9·R/2 (angle, sin, cos, 4 multiplies, 2 adds a pair) |
///
/// The counts are per compression head (head_grid(head)); a spec with several heads costs the
/// sum over heads.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

/// Work of one compressor pass (one head). Byte counts in bytes, FLOP counts in FLOP.
struct pass_cost {
  index_t entries = 0;         ///< E: complete entries
  index_t tokens_read = 0;     ///< T: distinct tokens the entries read
  index_t slots = 0;           ///< U: unmasked (entry, slot) pairs
  index_t out_dim = 0;         ///< c
  double input_bytes = 0;      ///< T·d·sizeof(Real)
  double weight_bytes = 0;     ///< every parameter tensor present, once
  double output_bytes = 0;     ///< E·c·sizeof(Real)
  double projection_flops = 0; ///< token projections (W_C, W_Z, shared logit map u)
  double pool_flops = 0;       ///< pooling: gates, softmaxes, weighted sums, max, MLP
  double norm_flops = 0;       ///< RMSNorm
  double rope_flops = 0;       ///< RoPE

  [[nodiscard]] double bytes() const noexcept { return input_bytes + weight_bytes + output_bytes; }
  [[nodiscard]] double read_bytes() const noexcept { return input_bytes + weight_bytes; }
  [[nodiscard]] double flops() const noexcept { return projection_flops + pool_flops + norm_flops + rope_flops; }
  /// FLOP per byte (0 when no byte moves).
  [[nodiscard]] double intensity() const noexcept { return bytes() > 0 ? flops() / bytes() : 0.0; }

  template <class V>
  void visit_fields(V&& v) {
    v("entries", entries);
    v("tokens_read", tokens_read);
    v("slots", slots);
    v("out_dim", out_dim);
    v("input_bytes", input_bytes);
    v("weight_bytes", weight_bytes);
    v("output_bytes", output_bytes);
    v("projection_flops", projection_flops);
    v("pool_flops", pool_flops);
    v("norm_flops", norm_flops);
    v("rope_flops", rope_flops);
  }
  friend std::ostream& operator<<(std::ostream& os, const pass_cost& c) { return fields::print(os, c, "pass_cost"); }
  friend bool operator==(const pass_cost& a, const pass_cost& b) { return fields::equal(a, b); }
};

/// Which bound a pass with this cost meets on a machine with the given FMA peak (GFLOP/s) and
/// read bandwidth (GB/s): the one whose time is longer, flops / peak or the bytes it must read
/// (inputs and weights) / bandwidth. Outputs are not part of the read bound (the compressor
/// writes them with streaming stores while it reads; the project's read roofline, as in
/// benchmarks/bench_compress.cpp).
enum class pass_bound { memory, compute };

inline const char* to_string(pass_bound b) noexcept { return b == pass_bound::memory ? "memory" : "compute"; }

/// Seconds the bound allows for the pass: max((input + weight bytes) / bandwidth, flops / peak).
/// Throws kvphase::error unless both rates are finite and > 0.
inline double bound_seconds(const pass_cost& c, double peak_gflops, double bandwidth_gbs, pass_bound* which = nullptr) {
  require(std::isfinite(peak_gflops) && peak_gflops > 0, "peak_gflops", peak_gflops, "must be finite and > 0");
  require(std::isfinite(bandwidth_gbs) && bandwidth_gbs > 0, "bandwidth_gbs", bandwidth_gbs, "must be finite and > 0");
  const double tm = c.read_bytes() / (bandwidth_gbs * 1e9), tc = c.flops() / (peak_gflops * 1e9);
  if (which) *which = tc > tm ? pass_bound::compute : pass_bound::memory;
  return std::max(tm, tc);
}

/// Cost of compress_into(spec, p, x, out, head) for x of N tokens × d channels, in Real.
/// Throws kvphase::error as compress() does for an invalid spec, parameters, width or head.
template <class Real>
[[nodiscard]] pass_cost compress_cost(const operator_spec& spec, const pool_params<Real>& p, index_t d, index_t N,
                                      index_t head = 0) {
  (void)detail::validate_call(spec, p, N, d, head, compress_options{}, false);
  const chunk_grid g = spec.head_grid(head);
  const index_t W = g.window, E = g.num_entries(N), c = p.output_dim(spec, d);
  const double b = sizeof(Real);
  pass_cost r;
  r.entries = E;
  r.out_dim = c;
  if (E <= 0) return r;
  index_t masked = 0;
  for (index_t e = 0; e < E && g.masked_slots(e) > 0; ++e) masked += g.masked_slots(e);
  r.slots = E * W - masked;
  // W ≥ S (chunk_grid::validate): the entries' sources are one contiguous token range
  r.tokens_read = g.sources(E - 1).last - std::max<index_t>(0, g.sources(0).first) + 1;
  const double T = static_cast<double>(r.tokens_read), U = static_cast<double>(r.slots);
  const double Ed = static_cast<double>(E), dd = static_cast<double>(d), cd = static_cast<double>(c);
  r.input_bytes = T * dd * b;
  r.output_bytes = Ed * cd * b;
  const double weights = static_cast<double>(p.content_u.size() + p.slot_u.size() + p.w_c.size() + p.w_z.size() +
                                             p.slot_bias_c.size() + p.mlp_pos.size() + p.mlp_w1.size() +
                                             p.mlp_b1.size() + p.mlp_w2.size() + p.mlp_b2.size() + p.rms_weight.size());
  r.weight_bytes = weights * b;

  const bool projected = p.w_c.size() && (spec.pool == pool_kind::slot_gate || spec.pool == pool_kind::channel_gate ||
                                          spec.pool == pool_kind::two_stream);
  if (projected) r.projection_flops += 2.0 * T * dd * static_cast<double>(p.w_c.cols());
  if (p.w_z.size()) r.projection_flops += 2.0 * T * dd * static_cast<double>(p.w_z.cols());

  switch (spec.pool) {
    case pool_kind::identity: break;
    case pool_kind::mean:
    case pool_kind::weights: r.pool_flops = 2.0 * U * cd; break;
    case pool_kind::slot_gate: {
      const bool logits = p.content_u.size() || p.slot_u.size();
      if (logits) {
        if (p.content_u.size()) r.projection_flops += 2.0 * T * dd;
        if (p.slot_u.size()) r.pool_flops += 2.0 * U * dd;
        if (!spec.slot_bias.empty()) r.pool_flops += U;
        r.pool_flops += 5.0 * U;
      }
      r.pool_flops += 2.0 * U * cd;
      break;
    }
    case pool_kind::max: r.pool_flops = (U - Ed) * cd; break;
    case pool_kind::channel_gate:
    case pool_kind::two_stream: {
      const double both = (p.w_z.size() && p.slot_bias_c.size()) ? 1.0 : 0.0;
      r.pool_flops = (6.0 + both) * U * cd + Ed * cd;
      break;
    }
    case pool_kind::mlp: {
      const double H = static_cast<double>(p.mlp_w1.cols());
      if (p.mlp_pos.size()) r.pool_flops += U * dd;
      r.pool_flops += 2.0 * U * dd * H;
      if (p.mlp_b1.size()) r.pool_flops += Ed * H;
      r.pool_flops += Ed * H;
      r.pool_flops += 2.0 * Ed * H * cd;
      if (p.mlp_b2.size()) r.pool_flops += Ed * cd;
      break;
    }
  }
  if (spec.rmsnorm) r.norm_flops = Ed * (3.0 * cd + 3.0 + (p.rms_weight.size() ? cd : 0.0));
  if (spec.rope.anchor != rope_anchor::none) {
    const double R = static_cast<double>(spec.rope.rope_dim == 0 ? c : spec.rope.rope_dim);
    r.rope_flops = Ed * 9.0 * R / 2.0;
  }
  return r;
}

}  // namespace kvphase::compress

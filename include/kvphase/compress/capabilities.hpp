#pragma once
/// \file compress/capabilities.hpp
/// The one answer to "what can be done exactly with this operator?". Every engine, the theory
/// and the programs ask capabilities(spec) instead of testing pool kinds themselves.
///
///  | field               | true when                                                         |
///  |---------------------|-------------------------------------------------------------------|
///  | linear              | the pooled key is a weighted sum of its tokens' keys with weights  |
///  |                     | that do not depend on the keys: identity, mean, weights, slot_gate |
///  | content_gated       | slot_gate with random content logits (τ = content_std > 0): the    |
///  |                     | weights are random per token but independent of the keys           |
///  | fixed_weights       | linear and not content-gated: one slot-weight vector for all entries|
///  | plain               | one head on the spec's own grid, no RMSNorm, no RoPE, keys and     |
///  |                     | values pooled by the same weights                                  |
///  | score_exact         | linear and plain: a trial's item scores are the pooled token       |
///  |                     | scores, so the linear key engine and the score-space engine are    |
///  |                     | exact (sim/linear_model.hpp)                                       |
///  | theory_covered      | fixed_weights, plain and complete visibility: the Gaussian theory   |
///  |                     | (theory/gaussian.hpp) models it; tasks may add conditions          |
/// Each false answer carries the reason, naming the spec field that decides it.

#include <string>

#include "kvphase/compress/spec.hpp"

namespace kvphase::compress {

struct capability_set {
  bool linear = false;
  bool content_gated = false;
  bool fixed_weights = false;
  bool plain = false;
  bool score_exact = false;
  bool theory_covered = false;
  std::string not_linear_reason;     ///< why not linear ("" when linear)
  std::string not_plain_reason;      ///< why not plain
  std::string score_reason;          ///< why not score_exact
  std::string theory_reason;         ///< why not theory_covered
};

/// What can be done exactly with `spec` (see the file comment). Does not validate the spec.
[[nodiscard]] inline capability_set capabilities(const operator_spec& spec) {
  capability_set c;
  c.linear = spec.pool == pool_kind::identity || spec.pool == pool_kind::mean || spec.pool == pool_kind::weights ||
             spec.pool == pool_kind::slot_gate;
  if (!c.linear) c.not_linear_reason = std::string("pool ") + to_string(spec.pool) + " is not linear in the keys";
  c.content_gated = spec.pool == pool_kind::slot_gate && spec.content_std > 0.0;
  c.fixed_weights = c.linear && !c.content_gated;
  if (spec.rmsnorm) c.not_plain_reason = "rmsnorm makes the pooled key a non-linear function of its tokens";
  else if (spec.rope.anchor != rope_anchor::none) c.not_plain_reason = "rope.anchor is not none (RoPE on the entries)";
  else if (spec.heads != 1 || !spec.head_offsets.empty()) c.not_plain_reason = "several compression heads (heads, head_offsets)";
  else if (spec.separate_kv) c.not_plain_reason = "separate_kv: keys and values pooled by separate compressors";
  c.plain = c.not_plain_reason.empty();
  c.score_exact = c.linear && c.plain;
  if (!c.linear) c.score_reason = c.not_linear_reason;
  else if (!c.plain) c.score_reason = c.not_plain_reason;
  c.theory_covered = c.fixed_weights && c.plain && spec.grid.visibility == visibility_policy::complete;
  if (!c.linear) c.theory_reason = c.not_linear_reason + " (not a fixed linear pool)";
  else if (c.content_gated) c.theory_reason = "slot_gate with content logits (content_std > 0): see theory/gates.hpp";
  else if (!c.plain) c.theory_reason = c.not_plain_reason;
  else if (!c.theory_covered) c.theory_reason = "grid.visibility running_partial: partial entries are not modelled";
  return c;
}

}  // namespace kvphase::compress

#pragma once
/// \file compress/presets.hpp
/// Named operator specs (and matching parameter recipes) for the operators the library models.
///
///  | name      | grid                 | pool                        | post-processing                          |
///  |-----------|----------------------|-----------------------------|------------------------------------------|
///  | v4_csa    | W = 8, S = 4 (v4)    | two_stream channel gate     | RMSNorm (weight), RoPE at i·S, θ 160000, last 64 ch |
///  | v4_hca    | W = S = 128          | channel_gate                | same as v4_csa                           |
///  | v41       | W = S = 2            | channel_gate (2-way)        | same as v4_csa                           |
///  | nsa       | W = 32, S = 16 (nsa) | mlp with intra-block PE     | none                                     |
///  | paper_ref | W = S = 8            | slot_gate, per-slot logit maps, payload map; separate K and V | RMSNorm, RoPE at i·S, θ 10000, all ch |
///  | full      | W = S = 1            | identity                    | none                                     |
///
/// Gated presets set content_std = 1 so that make_params draws the logit projections (content
/// logits of unit scale for unit-variance inputs); set it to 0 for a content-free gate.
/// For separate_kv specs draw the value compressor's parameters with another seed, e.g.
/// make_preset_params(spec, d, rng::combine(seed, 1)).

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"

namespace kvphase::compress {

namespace detail {
inline rope_config v4_rope() { return rope_config{.anchor = rope_anchor::start, .theta = 160000.0, .rope_dim = 64}; }
}  // namespace detail

/// DeepSeek-V4 CSA compressor: entry i pools [(i−1)·4, i·4 + 3] through streams a and b.
inline operator_spec v4_csa() {
  return operator_spec{.grid = {.window = 8, .stride = 4},
                       .pool = pool_kind::two_stream,
                       .content_std = 1.0,
                       .rmsnorm = true,
                       .rms_eps = 1e-6,
                       .rope = detail::v4_rope(),
                       .name = "v4_csa"};
}

/// DeepSeek-V4 HCA compressor: non-overlapping windows of 128 tokens, channel-wise gate.
inline operator_spec v4_hca() {
  return operator_spec{.grid = {.window = 128, .stride = 128},
                       .pool = pool_kind::channel_gate,
                       .content_std = 1.0,
                       .rmsnorm = true,
                       .rms_eps = 1e-6,
                       .rope = detail::v4_rope(),
                       .name = "v4_hca"};
}

/// DeepSeek-V4.1 ratio-2 compressor: non-overlapping pairs, channel-wise 2-way softmax.
inline operator_spec v41() {
  return operator_spec{.grid = {.window = 2, .stride = 2},
                       .pool = pool_kind::channel_gate,
                       .content_std = 1.0,
                       .rmsnorm = true,
                       .rms_eps = 1e-6,
                       .rope = detail::v4_rope(),
                       .name = "v41"};
}

/// NSA compression branch: blocks of l = 32 tokens at stride d = 16 (only complete blocks of
/// real tokens), MLP over the flattened block with intra-block position encoding.
inline operator_spec nsa() {
  return operator_spec{.grid = {.window = 32, .stride = 16, .convention = grid_convention::nsa},
                       .pool = pool_kind::mlp,
                       .name = "nsa"};
}

/// The paper-reference operator as reproduced publicly: W = S = 8, scalar per-slot gates (a
/// logit map and bias per in-window offset, a payload map shared across offsets), separate K and
/// V compressors, RMSNorm then RoPE at the chunk's first token.
inline operator_spec paper_ref() {
  return operator_spec{.grid = {.window = 8, .stride = 8},
                       .pool = pool_kind::slot_gate,
                       .slot_bias = std::vector<double>(8, 0.0),
                       .content_std = 1.0,
                       .rmsnorm = true,
                       .rms_eps = 1e-6,
                       .rope = rope_config{.anchor = rope_anchor::start, .theta = 10000.0, .rope_dim = 0},
                       .name = "paper_ref",
                       .separate_kv = true};
}

/// Names accepted by preset().
inline constexpr std::array<std::string_view, 6> preset_names{"v4_csa", "v4_hca", "v41", "nsa", "paper_ref", "full"};

/// Preset by name; throws kvphase::error for an unknown name.
inline operator_spec preset(std::string_view name) {
  if (name == "v4_csa") return v4_csa();
  if (name == "v4_hca") return v4_hca();
  if (name == "v41") return v41();
  if (name == "nsa") return nsa();
  if (name == "paper_ref") return paper_ref();
  if (name == "full") return full();
  fail("preset", std::string(name), "unknown preset (known: v4_csa, v4_hca, v41, nsa, paper_ref, full)");
}

/// Parameter recipe matching a preset (by spec.name; other specs get the defaults): V4 presets
/// project the payload and learn an RMSNorm weight; paper_ref uses per-slot logit maps and a
/// payload map; nsa an MLP with hidden width 2·c.
inline param_init preset_init(const operator_spec& spec, std::uint64_t seed = 0) {
  param_init i{.seed = seed};
  if (spec.name == "v4_csa" || spec.name == "v4_hca" || spec.name == "v41") {
    i.project_payload = true;
    i.rms_weight = spec.rmsnorm;
  } else if (spec.name == "paper_ref") {
    i.project_payload = true;
    i.per_slot_logits = true;
  }
  return i;
}

/// Random parameters of the right shapes for a preset spec (see preset_init) and input width d.
template <class Real>
[[nodiscard]] pool_params<Real> make_preset_params(const operator_spec& spec, index_t d, std::uint64_t seed = 0,
                                                   index_t head = 0) {
  return make_params<Real>(spec, d, preset_init(spec, seed), head);
}

}  // namespace kvphase::compress

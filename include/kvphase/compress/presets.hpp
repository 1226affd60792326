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

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/compress/params_kind.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"

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

namespace kvphase::compress {

/// Slot-bias profile of a planted kind over W slots (zeros for identity).
inline std::vector<double> planted_profile(params_kind k, index_t W, double strength) {
  std::vector<double> b(static_cast<std::size_t>(W), 0.0);
  for (index_t r = 0; r < W; ++r) {
    const double x = static_cast<double>(r);
    double v = 0.0;
    if (k == params_kind::planted_early) v = -strength * x;
    else if (k == params_kind::planted_late) v = -strength * static_cast<double>(W - 1 - r);
    else if (k == params_kind::planted_middle) v = -strength * std::abs(x - 0.5 * static_cast<double>(W - 1));
    b[static_cast<std::size_t>(r)] = v;
  }
  return b;
}

/// Interpretable parameters of `spec` for input width d (see params_kind). Output width = d.
/// The MLP's small random part has std `mlp_noise` (relative to the mean weights' scale).
/// Pools with the profile in the spec (slot_gate: spec.slot_bias) or without parameters (mean,
/// max, weights, identity) get empty parameters: the profile is then the spec's. Throws
/// kvphase::error for params_kind random or file (use make_preset_params / params_loader).
template <class Real>
[[nodiscard]] pool_params<Real> planted_params(const operator_spec& spec, index_t d, params_kind kind,
                                               double strength = 2.0, std::uint64_t seed = 0, index_t head = 0,
                                               double mlp_noise = 0.05) {
  spec.validate();
  require(kind != params_kind::random && kind != params_kind::file, "params", to_string(kind),
          "planted_params makes identity or planted parameters only");
  require(std::isfinite(strength) && strength >= 0.0, "params_strength", strength, "must be finite and >= 0");
  require(std::isfinite(mlp_noise) && mlp_noise >= 0.0, "mlp_noise", mlp_noise, "must be finite and >= 0");
  require(d >= 1 && d <= limits::max_dim, "d", d, "input width must be in [1, 65536]");
  const index_t W = spec.grid.window, S = spec.grid.stride;
  const auto b = planted_profile(kind, W, strength);
  pool_params<Real> p;
  switch (spec.pool) {
    case pool_kind::channel_gate:
      p.slot_bias_c.resize(W, d);
      for (index_t r = 0; r < W; ++r)
        for (index_t k = 0; k < d; ++k) p.slot_bias_c(r, k) = static_cast<Real>(b[static_cast<std::size_t>(r)]);
      break;
    case pool_kind::two_stream:
      // bias row j of stream a = slot j (previous block), of stream b = slot S + j
      p.slot_bias_c.resize(S, 2 * d);
      for (index_t j = 0; j < S; ++j)
        for (index_t k = 0; k < d; ++k) {
          p.slot_bias_c(j, k) = static_cast<Real>(b[static_cast<std::size_t>(j)]);
          p.slot_bias_c(j, d + k) = static_cast<Real>(b[static_cast<std::size_t>(S + j)]);
        }
      break;
    case pool_kind::mlp: {
      // h = relu(W1ᵀ f) with W1 = [A, −A], out = W2ᵀ h with W2 = [I; −I]: relu(a) − relu(−a) = a,
      // a = Σ_r w_r x_r (w = softmax of the profile; uniform for identity) plus a small random part
      double mx = -INFINITY, s = 0;
      for (double v : b) mx = std::max(mx, v);
      std::vector<double> w(static_cast<std::size_t>(W));
      for (index_t r = 0; r < W; ++r) s += (w[static_cast<std::size_t>(r)] = std::exp(b[static_cast<std::size_t>(r)] - mx));
      for (auto& v : w) v /= s;
      p.activation = mlp_activation::relu;
      p.mlp_pos.setZero(W, d);
      p.mlp_w1.setZero(W * d, 2 * d);
      rng::philox_stream st(seed, rng::combine(rng::hash_text("planted_mlp"), static_cast<std::uint64_t>(head)));
      const double noise = mlp_noise / static_cast<double>(W);
      for (index_t r = 0; r < W; ++r)
        for (index_t k = 0; k < d; ++k)
          for (index_t j = 0; j < d; ++j) {
            const double a = (j == k ? w[static_cast<std::size_t>(r)] : 0.0) + noise * st.normal();
            p.mlp_w1(r * d + k, j) = static_cast<Real>(a);
            p.mlp_w1(r * d + k, d + j) = static_cast<Real>(-a);
          }
      p.mlp_b1.setZero(2 * d);
      p.mlp_w2.setZero(2 * d, d);
      for (index_t j = 0; j < d; ++j) {
        p.mlp_w2(j, j) = Real(1);
        p.mlp_w2(d + j, j) = Real(-1);
      }
      p.mlp_b2.setZero(d);
      break;
    }
    default:
      break;  // the spec holds the profile (slot_gate bias) or the pool has no parameters
  }
  p.validate(spec, d);
  return p;
}

/// Loader of compressor parameters from a file: (path, spec, input width d, head) → parameters.
/// The tensor readers register one (set_params_loader); until then load_params_file refuses
/// with an error naming the file and what is missing.
template <class Real>
using params_loader = std::function<pool_params<Real>(const std::string&, const operator_spec&, index_t, index_t)>;

template <class Real>
inline params_loader<Real>& params_loader_slot() {
  static params_loader<Real> f;
  return f;
}
/// Registers the loader used by load_params_file (replaces any previous one).
template <class Real>
inline void set_params_loader(params_loader<Real> f) {
  params_loader_slot<Real>() = std::move(f);
}
/// Parameters of head `head` of `spec` from `path` through the registered loader; throws
/// kvphase::error naming params_file when none is registered or the path is empty.
template <class Real>
[[nodiscard]] pool_params<Real> load_params_file(const std::string& path, const operator_spec& spec, index_t d,
                                                 index_t head = 0) {
  require(!path.empty(), "params_file", "(empty)", "must name a parameter file (params = file)");
  auto& f = params_loader_slot<Real>();
  if (!f)
    fail("params_file", path,
         "no parameter-file loader is registered in this build (the tensor readers io/npy and io/safetensors "
         "register one); use params random, identity or planted-*");
  pool_params<Real> p = f(path, spec, d, head);
  p.validate(spec, d);
  return p;
}

}  // namespace kvphase::compress

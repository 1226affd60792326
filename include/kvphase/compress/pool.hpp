#pragma once
/// \file compress/pool.hpp
/// The chunked compressor: pools a token-major matrix X (N tokens × d channels) into one row per
/// complete entry of an operator_spec's grid, then applies the spec's post-processing
/// (RMSNorm, RoPE at the entry's anchor position).
///
/// Pool kinds (W window, S stride, entry e with source slots r = 0 … W−1, token t_r; slots before
/// position 0 are masked: weight exactly 0, the others renormalised):
///  - identity  (W = S = 1): out_e = x_{t_0}.
///  - mean:        out_e = Σ_r x_{t_r} / (#unmasked slots).
///  - max:         out_e[k] = max_r x_{t_r}[k].
///  - weights:     out_e = Σ_r w_r x_{t_r}, w = spec.slot_weights renormalised over unmasked slots.
///  - slot_gate:   α_r = softmax_r(b_r + u·x_{t_r} + U_r·x_{t_r}), out_e = Σ_r α_r p_{t_r};
///                 b = spec.slot_bias (empty: 0), u = params.content_u (optional, shared),
///                 U = params.slot_u (optional, W × d: one logit map per slot, as in the paper
///                 reference), payload p_t = x_t · W_C when params.w_c is set, else x_t.
///  - channel_gate (DeepSeek-V4 HCA): payload C = X·W_C (identity when empty), logits Z = X·W_Z
///                 (zero when empty), bias B ∈ R^{W×c} (zero when empty); for every channel k
///                 separately α_{r,k} = softmax_r(Z_{t_r,k} + B_{r,k}), out_e[k] = Σ_r α_{r,k} C_{t_r,k}.
///  - two_stream (DeepSeek-V4 CSA, W = 2S): W_C, W_Z are d × 2c with stream a in columns
///                 [0, c) and stream b in [c, 2c); B is S × 2c laid out the same way. Slots
///                 r < S (previous stride block) use stream a with bias row r, slots r ≥ S (the
///                 entry's own block) use stream b with bias row r − S; i.e. the bias row is the
///                 token's slot in its own block. One channel-wise softmax over the 2S slots.
///                 Entry 0's a-half precedes position 0 and is masked (with the default origin).
///  - mlp (NSA):   f = concat_r (x_{t_r} + P_r) over the W slots (masked slots: all zero),
///                 h = act(W1ᵀ f + b1), out_e = W2ᵀ h + b2; W1 is (W·d) × H, W2 is H × c.
///
/// Content logits come from the parameters (content_u, slot_u, w_z); spec.content_std only tells
/// make_params how large to draw them (0: no logit map at all, i.e. a content-free gate).
///
/// Incremental use: compress_stream feeds the sequence in pieces and returns each entry once it is
/// complete, bit for bit equal to the one-shot result.
///
/// Parallel runs split entries statically over OpenMP threads; every output row is computed by
/// one thread in a fixed order, so results are bitwise identical for any thread count.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/detail/gemm.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kvphase::compress {

/// Activation of the MLP compressor's hidden layer.
enum class mlp_activation { relu, gelu };

inline const char* to_string(mlp_activation a) noexcept { return a == mlp_activation::relu ? "relu" : "gelu"; }

/// Learned parameters of one compression head. Every field is optional unless the pool kind
/// needs it; empty fields mean "absent" as documented per field. Shapes are checked by
/// validate(spec, d). Row-major throughout (projection W is d × c: out = x · W).
template <class Real>
struct pool_params {
  // -- slot_gate ------------------------------------------------------------------------------
  vector_t<Real> content_u;    ///< d: shared content logit z_t = u·x_t (empty: none)
  matrix_t<Real> slot_u;       ///< W × d: per-slot logit maps z_{t,r} = U_r·x_t (empty: none)
  // -- slot_gate (payload only), channel_gate, two_stream --------------------------------------
  matrix_t<Real> w_c;          ///< payload projection d × c (two_stream d × 2c, [a | b]); empty: identity
  matrix_t<Real> w_z;          ///< gate-logit projection d × c (two_stream d × 2c); empty: zero logits
  matrix_t<Real> slot_bias_c;  ///< per-slot per-channel bias W × c (two_stream S × 2c); empty: zero
  // -- mlp ------------------------------------------------------------------------------------
  matrix_t<Real> mlp_pos;      ///< W × d intra-block position encoding added to slot r (empty: none)
  matrix_t<Real> mlp_w1;       ///< (W·d) × H
  vector_t<Real> mlp_b1;       ///< H (empty: zero)
  matrix_t<Real> mlp_w2;       ///< H × c
  vector_t<Real> mlp_b2;       ///< c (empty: zero)
  mlp_activation activation = mlp_activation::gelu;
  // -- post-processing ------------------------------------------------------------------------
  vector_t<Real> rms_weight;   ///< c: RMSNorm weight (needs spec.rmsnorm; empty: no weight)

  /// Output channels c for input width d (assumes shapes valid).
  [[nodiscard]] index_t output_dim(const operator_spec& spec, index_t d) const noexcept {
    switch (spec.pool) {
      case pool_kind::slot_gate:
      case pool_kind::channel_gate: return w_c.size() ? w_c.cols() : d;
      case pool_kind::two_stream: return w_c.size() ? w_c.cols() / 2 : d;
      case pool_kind::mlp: return mlp_w2.cols();
      default: return d;
    }
  }

  /// Throws kvphase::error (naming the parameter) unless every field has the shape the spec's
  /// pool kind needs for input width d, unused fields are empty, and all values are finite.
  /// `mlp_w1_values = false` leaves W1's values out (its shape is still checked): for a caller
  /// whose kernel checks them while it packs W1 (compress_into on hardware-FMA paths).
  void validate(const operator_spec& spec, index_t d, bool mlp_w1_values = true) const {
    require(d >= 1 && d <= limits::max_dim, "d", d, "input width must be in [1, 65536]");
    const index_t W = spec.grid.window, S = spec.grid.stride;
    const pool_kind k = spec.pool;
    auto unused = [&](bool empty, const char* name) {
      require(empty, name, "(non-empty)", std::string("is not used by pool kind ") + to_string(k) + ": must be empty");
    };
    auto shape = [&](const auto& m, index_t r, index_t c, const std::string& name) {
      require(m.rows() == r, name + ".rows()", m.rows(), "must be " + std::to_string(r));
      require(m.cols() == c, name + ".cols()", m.cols(), "must be " + std::to_string(c));
    };
    auto length = [&](const auto& v, index_t n, const std::string& name) {
      require(v.size() == n, name + ".size()", v.size(), "must be " + std::to_string(n));
    };
    const bool sg = k == pool_kind::slot_gate, cg = k == pool_kind::channel_gate,
               ts = k == pool_kind::two_stream, ml = k == pool_kind::mlp;
    if (!sg) {
      unused(content_u.size() == 0, "params.content_u");
      unused(slot_u.size() == 0, "params.slot_u");
    }
    if (!(sg || cg || ts)) unused(w_c.size() == 0, "params.w_c");
    if (!(cg || ts)) {
      unused(w_z.size() == 0, "params.w_z");
      unused(slot_bias_c.size() == 0, "params.slot_bias_c");
    }
    if (!ml) {
      unused(mlp_pos.size() == 0, "params.mlp_pos");
      unused(mlp_w1.size() == 0, "params.mlp_w1");
      unused(mlp_b1.size() == 0, "params.mlp_b1");
      unused(mlp_w2.size() == 0, "params.mlp_w2");
      unused(mlp_b2.size() == 0, "params.mlp_b2");
    }
    if (sg) {
      if (content_u.size()) length(content_u, d, "params.content_u");
      if (slot_u.size()) shape(slot_u, W, d, "params.slot_u");
      if (w_c.size()) require(w_c.rows() == d, "params.w_c.rows()", w_c.rows(), "must be d = " + std::to_string(d));
    }
    if (cg || ts) {
      const index_t f = ts ? 2 : 1;
      if (w_c.size()) {
        require(w_c.rows() == d, "params.w_c.rows()", w_c.rows(), "must be d = " + std::to_string(d));
        if (ts) require(w_c.cols() % 2 == 0, "params.w_c.cols()", w_c.cols(), "two_stream needs 2c columns ([a | b])");
      }
      const index_t c = output_dim(spec, d);
      if (w_z.size()) shape(w_z, d, f * c, "params.w_z");
      if (slot_bias_c.size()) shape(slot_bias_c, ts ? S : W, f * c, "params.slot_bias_c");
    }
    if (ml) {
      require(mlp_w1.size() != 0, "params.mlp_w1", "(empty)", "the mlp pool needs W1 ((W·d) × H)");
      require(mlp_w2.size() != 0, "params.mlp_w2", "(empty)", "the mlp pool needs W2 (H × c)");
      require(mlp_w1.rows() == W * d, "params.mlp_w1.rows()", mlp_w1.rows(), "must be W·d = " + std::to_string(W * d));
      const index_t H = mlp_w1.cols();
      require(mlp_w2.rows() == H, "params.mlp_w2.rows()", mlp_w2.rows(), "must equal mlp_w1.cols() = " + std::to_string(H));
      if (mlp_b1.size()) length(mlp_b1, H, "params.mlp_b1");
      if (mlp_b2.size()) length(mlp_b2, mlp_w2.cols(), "params.mlp_b2");
      if (mlp_pos.size()) shape(mlp_pos, W, d, "params.mlp_pos");
    }
    if (rms_weight.size()) {
      require(spec.rmsnorm, "params.rms_weight", "(non-empty)", "needs spec.rmsnorm = true");
      length(rms_weight, output_dim(spec, d), "params.rms_weight");
    }
    auto finite = [](const auto& m, const char* name) {
      require_finite(std::span<const Real>(m.data(), static_cast<std::size_t>(m.size())), name);
    };
    finite(content_u, "params.content_u");
    finite(slot_u, "params.slot_u");
    finite(w_c, "params.w_c");
    finite(w_z, "params.w_z");
    finite(slot_bias_c, "params.slot_bias_c");
    finite(mlp_pos, "params.mlp_pos");
    if (mlp_w1_values) finite(mlp_w1, "params.mlp_w1");
    finite(mlp_b1, "params.mlp_b1");
    finite(mlp_w2, "params.mlp_w2");
    finite(mlp_b2, "params.mlp_b2");
    finite(rms_weight, "params.rms_weight");
  }

  friend std::ostream& operator<<(std::ostream& os, const pool_params& p) {
    auto sh = [&](const char* n, const auto& m) {
      if (m.size()) os << " " << n << "=" << m.rows() << "x" << m.cols();
    };
    os << "pool_params{";
    sh("content_u", p.content_u);
    sh("slot_u", p.slot_u);
    sh("w_c", p.w_c);
    sh("w_z", p.w_z);
    sh("slot_bias_c", p.slot_bias_c);
    sh("mlp_pos", p.mlp_pos);
    sh("mlp_w1", p.mlp_w1);
    sh("mlp_b1", p.mlp_b1);
    sh("mlp_w2", p.mlp_w2);
    sh("mlp_b2", p.mlp_b2);
    sh("rms_weight", p.rms_weight);
    return os << " activation=" << to_string(p.activation) << " }";
  }
};

/// Output channels of the compressor for input width d.
template <class Real>
[[nodiscard]] index_t output_dim(const operator_spec& spec, const pool_params<Real>& p, index_t d) noexcept {
  return p.output_dim(spec, d);
}

// ---- parameter factories -------------------------------------------------------------------------

/// How make_params draws parameters. Every tensor comes from its own counter-based stream keyed
/// by (seed, tensor name, head), so a head's parameters never depend on another's.
struct param_init {
  std::uint64_t seed = 0;
  bool project_payload = false;  ///< slot_gate/channel_gate/two_stream: draw W_C (else identity payload)
  index_t out_dim = 0;           ///< c when projecting (0: c = d)
  double bias_std = 0.0;         ///< std of slot_bias_c entries (0: zero bias of the right shape)
  bool per_slot_logits = false;  ///< slot_gate: per-slot logit maps U (W × d) instead of one shared u
  index_t mlp_hidden = 0;        ///< H (0: 2·c)
  double pos_std = 0.1;          ///< std of the MLP's intra-block position encoding
  mlp_activation activation = mlp_activation::gelu;
  bool rms_weight = false;       ///< draw an RMSNorm weight 1 + 0.1·N(0,1) (needs spec.rmsnorm)

  void validate() const {
    require(out_dim >= 0 && out_dim <= limits::max_dim, "init.out_dim", out_dim, "must be in [0, 65536]");
    require(project_payload || out_dim == 0, "init.out_dim", out_dim, "needs project_payload = true");
    require(bias_std >= 0.0 && std::isfinite(bias_std), "init.bias_std", bias_std, "must be finite and >= 0");
    require(mlp_hidden >= 0 && mlp_hidden <= limits::max_dim, "init.mlp_hidden", mlp_hidden, "must be in [0, 65536]");
    require(pos_std >= 0.0 && std::isfinite(pos_std), "init.pos_std", pos_std, "must be finite and >= 0");
  }
  friend std::ostream& operator<<(std::ostream& os, const param_init& i) {
    return os << "param_init{seed=" << i.seed << ", project_payload=" << i.project_payload
              << ", out_dim=" << i.out_dim << ", bias_std=" << i.bias_std
              << ", per_slot_logits=" << i.per_slot_logits << ", mlp_hidden=" << i.mlp_hidden
              << ", pos_std=" << i.pos_std << ", activation=" << to_string(i.activation)
              << ", rms_weight=" << i.rms_weight << "}";
  }
};

namespace detail {
/// Fills m (row-major order) with mean + std·N(0,1) from the stream of (seed, name, head).
template <class Real, class M>
void fill_normal(M& m, std::uint64_t seed, const char* name, index_t head, double std, double mean = 0.0) {
  rng::philox_stream s(seed, rng::combine(rng::hash_text(name), static_cast<std::uint64_t>(head)));
  Real* p = m.data();
  for (index_t i = 0; i < m.size(); ++i) p[i] = static_cast<Real>(mean + std * s.normal());
}
}  // namespace detail

/// Parameters of the right shapes for `spec` and input width d, drawn from counter-based
/// streams: projections N(0, 1/d) (W_C) and N(0, τ²/d) for the logit maps (τ = spec.content_std,
/// so u·x has std τ for unit-variance x; no logit map when τ = 0), slot biases N(0, bias_std²)
/// (zeros of the right shape when bias_std = 0), MLP weights N(0, 1/fan_in) with zero biases.
template <class Real>
[[nodiscard]] pool_params<Real> make_params(const operator_spec& spec, index_t d, const param_init& init = {},
                                            index_t head = 0) {
  spec.validate();
  init.validate();
  require(d >= 1 && d <= limits::max_dim, "d", d, "input width must be in [1, 65536]");
  (void)checked_elements(spec.grid.window, d, "window * d");  // the MLP's flattened block width
  require(head >= 0 && head < spec.heads, "head", head, "must be in [0, heads)");
  const index_t W = spec.grid.window, S = spec.grid.stride;
  const double tau = spec.content_std;
  const double sd = 1.0 / std::sqrt(static_cast<double>(d));
  const std::uint64_t seed = init.seed;
  pool_params<Real> p;
  p.activation = init.activation;
  const index_t c = init.out_dim > 0 ? init.out_dim : d;
  switch (spec.pool) {
    case pool_kind::slot_gate:
      if (tau > 0) {
        if (init.per_slot_logits) {
          p.slot_u.resize(W, d);
          detail::fill_normal<Real>(p.slot_u, seed, "slot_u", head, tau * sd);
        } else {
          p.content_u.resize(d);
          detail::fill_normal<Real>(p.content_u, seed, "content_u", head, tau * sd);
        }
      }
      if (init.project_payload) {
        p.w_c.resize(d, c);
        detail::fill_normal<Real>(p.w_c, seed, "w_c", head, sd);
      }
      break;
    case pool_kind::channel_gate:
    case pool_kind::two_stream: {
      const index_t f = spec.pool == pool_kind::two_stream ? 2 : 1;
      if (init.project_payload) {
        p.w_c.resize(d, f * c);
        detail::fill_normal<Real>(p.w_c, seed, "w_c", head, sd);
      }
      const index_t cc = init.project_payload ? c : d;
      if (tau > 0) {
        p.w_z.resize(d, f * cc);
        detail::fill_normal<Real>(p.w_z, seed, "w_z", head, tau * sd);
      }
      p.slot_bias_c.setZero(f == 2 ? S : W, f * cc);
      if (init.bias_std > 0) detail::fill_normal<Real>(p.slot_bias_c, seed, "slot_bias_c", head, init.bias_std);
      break;
    }
    case pool_kind::mlp: {
      require(init.project_payload || init.out_dim == 0, "init.out_dim", init.out_dim, "needs project_payload");
      const index_t H = init.mlp_hidden > 0 ? init.mlp_hidden : 2 * c;
      p.mlp_pos.resize(W, d);
      detail::fill_normal<Real>(p.mlp_pos, seed, "mlp_pos", head, init.pos_std);
      p.mlp_w1.resize(W * d, H);
      detail::fill_normal<Real>(p.mlp_w1, seed, "mlp_w1", head, 1.0 / std::sqrt(static_cast<double>(W * d)));
      p.mlp_b1.setZero(H);
      p.mlp_w2.resize(H, c);
      detail::fill_normal<Real>(p.mlp_w2, seed, "mlp_w2", head, 1.0 / std::sqrt(static_cast<double>(H)));
      p.mlp_b2.setZero(c);
      break;
    }
    default:
      require(!init.project_payload, "init.project_payload", true,
              std::string("pool kind ") + to_string(spec.pool) + " has no payload projection");
      break;
  }
  if (init.rms_weight) {
    require(spec.rmsnorm, "init.rms_weight", true, "needs spec.rmsnorm = true");
    p.rms_weight.resize(p.output_dim(spec, d));
    detail::fill_normal<Real>(p.rms_weight, seed, "rms_weight", head, 0.1, 1.0);
  }
  p.validate(spec, d);
  return p;
}

/// Parameters of every head (head h drawn with make_params(spec, d, init, h)).
template <class Real>
[[nodiscard]] std::vector<pool_params<Real>> make_head_params(const operator_spec& spec, index_t d,
                                                              const param_init& init = {}) {
  std::vector<pool_params<Real>> out;
  out.reserve(static_cast<std::size_t>(spec.heads));
  for (index_t h = 0; h < spec.heads; ++h) out.push_back(make_params<Real>(spec, d, init, h));
  return out;
}

// ---- run options -----------------------------------------------------------------------------------

/// How output rows are written.
enum class store_mode {
  automatic,  ///< non-temporal stores when the output is large (≥ 8 MiB) and aligned
  normal,     ///< ordinary stores
  streaming   ///< non-temporal stores whenever the output rows are 64-byte aligned
};

struct compress_options {
  int threads = 0;                      ///< 0: OpenMP's default for inputs ≥ 1 MiB, else 1
  store_mode stores = store_mode::automatic;
  /// Row ranges each thread walks in lockstep (more concurrent DRAM streams per core: faster when
  /// the input is not in cache, slower when it is). 0: automatic (4 when a thread's share of the
  /// input exceeds 96 MiB and entries do not overlap (W ≤ S), else 1). Max pools with W = 2S walk
  /// their entries in order whatever it says. Rows of ≤ 8 KiB of a max pool or a fixed-weight
  /// linear pool (hardware-FMA paths), W = S ≤ 8, no RMSNorm or RoPE, walk 4 ranges with their loads
  /// interleaved when it is > 1, and automatically when a thread's share is ≥ 8 MiB (0); 1 turns
  /// that off too. Results do not depend on it.
  int interleave = 0;
  void validate() const {
    require(threads >= 0, "options.threads", threads, "must be >= 0");
    require(interleave >= 0 && interleave <= 64, "options.interleave", interleave, "must be in [0, 64]");
  }
  friend std::ostream& operator<<(std::ostream& os, const compress_options& o) {
    static const char* n[] = {"automatic", "normal", "streaming"};
    return os << "compress_options{threads=" << o.threads << ", stores=" << n[static_cast<int>(o.stores)]
              << ", interleave=" << o.interleave << "}";
  }
};

/// Reusable buffers of the compressor: the token projections and each thread's scratch. Pass one
/// to compress_into when compressing many sequences (e.g. one per simulated trial): once sized by
/// the largest call it allocates nothing. Results do not depend on it.
template <class Real>
struct compress_workspace {
  std::vector<Real> pay, z;                       ///< projections X·W_C (or [x | x]), X·W_Z
  std::vector<std::vector<Real>> scratch;         ///< per thread: the entry kernel's scratch
  std::vector<std::vector<const Real*>> ptrs;     ///< per thread: slot pointers
  std::vector<std::vector<Real>> tiles;           ///< per thread: the MLP's entry tiles and GEMM padding
  /// RoPE of the entries, kept across calls: per entry of the last call, its anchor position and
  /// the cosines and sines at it (compress::rope_cos_sin), valid for the inverse frequencies
  /// rope_freq. A call whose entry has the same position and frequencies reuses them (a sweep
  /// compresses every trial's tokens at the same positions), any other recomputes them: the
  /// output is the same bit for bit either way.
  std::vector<double> rope_freq, rope_cs;
};

// ---- kernels -----------------------------------------------------------------------------------------

namespace detail {

// the non-temporal stores of every kernel here (core/simd.hpp)
using simd::stream_store;
using simd::store_fence;

/// out[0 … c) = Σ_{r < n} w[r] · rows[r·ld + 0 … c) (accumulated in slot order r = 0, 1, …; with
/// FMA on SIMD paths). `rows` holds n rows of ≥ c values with stride ld. With `nt`, `out` must be
/// aligned to the batch width and is written with non-temporal stores.
/// This is the memory-bound inner loop of every linear pool and of the projections: per output
/// block, up to 8 batch accumulators stay in registers and each source element costs one FMA.
template <class Real, class Arch>
inline void weighted_rows(const Real* rows, index_t ld, const Real* w, index_t n, index_t c, Real* out,
                          bool nt = false) noexcept {
  index_t k = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    constexpr index_t U = 8;
    for (; k + U * L <= c; k += U * L) {
      B acc[U];
      const B w0(w[0]);
      for (index_t u = 0; u < U; ++u) acc[u] = w0 * B::load_unaligned(rows + k + u * L);
      for (index_t r = 1; r < n; ++r) {
        const Real* src = rows + r * ld + k;
        const B wr(w[r]);
        for (index_t u = 0; u < U; ++u) acc[u] = simd::fma(wr, B::load_unaligned(src + u * L), acc[u]);
      }
      if (nt) {
        for (index_t u = 0; u < U; ++u) stream_store<Real, Arch>(out + k + u * L, acc[u]);
      } else {
        for (index_t u = 0; u < U; ++u) acc[u].store_unaligned(out + k + u * L);
      }
    }
    for (; k + L <= c; k += L) {
      B acc = B(w[0]) * B::load_unaligned(rows + k);
      for (index_t r = 1; r < n; ++r) acc = simd::fma(B(w[r]), B::load_unaligned(rows + r * ld + k), acc);
      if (nt) stream_store<Real, Arch>(out + k, acc);
      else acc.store_unaligned(out + k);
    }
  }
  for (; k < c; ++k) {
    Real acc = w[0] * rows[k];
    if constexpr (simd::fused_fma<Arch>()) {
      // the lanes' rounding, written out: `acc += w·x` would be contracted or not depending on
      // the context this loop is inlined into, and two callers of one entry must agree
      for (index_t r = 1; r < n; ++r) acc = std::fma(w[r], rows[r * ld + k], acc);
    } else {
      for (index_t r = 1; r < n; ++r) acc += w[r] * rows[r * ld + k];
    }
    out[k] = acc;
  }
}

/// out[k] = max_{r < n} rows[r·ld + k] (slot order r = 0, 1, …). One pass over the sources
/// with the running maxima in registers (blocks of 8 batches, as weighted_rows); with `nt`, out
/// is aligned and written with non-temporal stores.
template <class Real, class Arch>
inline void max_rows(const Real* rows, index_t ld, index_t n, index_t c, Real* out, bool nt = false) noexcept {
  index_t k = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    constexpr index_t U = 8;
    for (; k + U * L <= c; k += U * L) {
      B acc[U];
      for (index_t u = 0; u < U; ++u) acc[u] = B::load_unaligned(rows + k + u * L);
      for (index_t r = 1; r < n; ++r) {
        const Real* src = rows + r * ld + k;
        for (index_t u = 0; u < U; ++u) acc[u] = xsimd::max(B::load_unaligned(src + u * L), acc[u]);
      }
      if (nt) {
        for (index_t u = 0; u < U; ++u) stream_store<Real, Arch>(out + k + u * L, acc[u]);
      } else {
        for (index_t u = 0; u < U; ++u) acc[u].store_unaligned(out + k + u * L);
      }
    }
    for (; k + L <= c; k += L) {
      B acc = B::load_unaligned(rows + k);
      for (index_t r = 1; r < n; ++r) acc = xsimd::max(B::load_unaligned(rows + r * ld + k), acc);
      if (nt) stream_store<Real, Arch>(out + k, acc);
      else acc.store_unaligned(out + k);
    }
  }
  for (; k < c; ++k) {
    Real m = rows[k];
    for (index_t r = 1; r < n; ++r) m = std::max(m, rows[r * ld + k]);
    out[k] = m;
  }
}

/// Q entries of a fixed-weight linear pool (weights w, N rows each: weighted_rows) or of a max
/// pool (Max: max_rows) at once, their loads interleaved: for each block of 2 batches of
/// columns, entry 0's rows, then entry 1's, …; entry q reads rows[q] (stride ld) and writes
/// out[q] (with `nt`: aligned, non-temporal stores). Each output value is computed by the single-
/// entry kernel's operations in its order (columns past the last full block by that kernel
/// itself), so the bits are the same; what changes is that Q distant rows are in flight at once.
/// On narrow rows one entry's rows are a single sequential stream, which a core reads slower than
/// several concurrent streams (bench/roofline.hpp, read_once):
/// with Q = 4 sub-ranges walked this way mean and max (W = S = 4) at d = 128 and 512 ran 1.24–1.60×
/// faster on Zen 5, and no faster at d = 4096, where one entry's rows are already W streams
/// (docs/performance.md, "Narrow rows: four entries in flight"; bench_compress '_vs_entry').
template <class Real, class Arch, index_t Q, index_t N, bool Max>
inline void pool_rows_lockstep_n(const Real* const* rows, index_t ld, const Real* w, index_t c, Real* const* out,
                                 bool nt) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size;
  index_t k = 0;
  for (; k + 2 * L <= c; k += 2 * L) {
    B acc[Q][2];
    for (index_t q = 0; q < Q; ++q) {
      const Real* src = rows[q] + k;
      if constexpr (Max) {
        acc[q][0] = B::load_unaligned(src);
        acc[q][1] = B::load_unaligned(src + L);
        for (index_t r = 1; r < N; ++r) {
          acc[q][0] = xsimd::max(B::load_unaligned(src + r * ld), acc[q][0]);
          acc[q][1] = xsimd::max(B::load_unaligned(src + r * ld + L), acc[q][1]);
        }
      } else {
        const B w0(w[0]);
        acc[q][0] = w0 * B::load_unaligned(src);
        acc[q][1] = w0 * B::load_unaligned(src + L);
        for (index_t r = 1; r < N; ++r) {
          const B wr(w[r]);
          acc[q][0] = simd::fma(wr, B::load_unaligned(src + r * ld), acc[q][0]);
          acc[q][1] = simd::fma(wr, B::load_unaligned(src + r * ld + L), acc[q][1]);
        }
      }
    }
    for (index_t q = 0; q < Q; ++q) {
      Real* o = out[q] + k;
      if (nt) {
        stream_store<Real, Arch>(o, acc[q][0]);
        stream_store<Real, Arch>(o + L, acc[q][1]);
      } else {
        acc[q][0].store_unaligned(o);
        acc[q][1].store_unaligned(o + L);
      }
    }
  }
  if (k < c) {
    for (index_t q = 0; q < Q; ++q) {
      if constexpr (Max) max_rows<Real, Arch>(rows[q] + k, ld, N, c - k, out[q] + k, nt);
      else weighted_rows<Real, Arch>(rows[q] + k, ld, w, N, c - k, out[q] + k, nt);
    }
  }
}

/// pool_rows_lockstep_n for the window n (1 … 8: the memory-bound grids the library's presets
/// use); returns false for another n (the caller pools entry by entry).
template <class Real, class Arch, index_t Q>
inline bool pool_rows_lockstep(const Real* const* rows, index_t ld, const Real* w, index_t n, index_t c,
                               Real* const* out, bool nt) noexcept {
  auto go = [&]<index_t N>(std::integral_constant<index_t, N>) {
    if (w) pool_rows_lockstep_n<Real, Arch, Q, N, false>(rows, ld, w, c, out, nt);
    else pool_rows_lockstep_n<Real, Arch, Q, N, true>(rows, ld, w, c, out, nt);
    return true;
  };
  switch (n) {
    case 1: return go(std::integral_constant<index_t, 1>{});
    case 2: return go(std::integral_constant<index_t, 2>{});
    case 3: return go(std::integral_constant<index_t, 3>{});
    case 4: return go(std::integral_constant<index_t, 4>{});
    case 5: return go(std::integral_constant<index_t, 5>{});
    case 6: return go(std::integral_constant<index_t, 6>{});
    case 7: return go(std::integral_constant<index_t, 7>{});
    case 8: return go(std::integral_constant<index_t, 8>{});
    default: return false;
  }
}

/// One entry of a max pool on a grid with W = 2S, reading only its second block: `rows` are
/// that block's S rows (stride ld), `ring` holds max_rows of the entry's first block (computed
/// when that block was the previous entry's second one). out = max_rows of all 2S rows, bit for
/// bit, and ring becomes max_rows of this second block, for the next entry. So every token row
/// is read once instead of twice: 2–17 % faster than max_rows over the 2S rows in paired runs
/// on Zen 5 (W = 8, S = 4, d = 512 and 4096; docs/performance.md).
///
/// Why the bits agree: max_rows' chain acc ← max(x_r, acc) (x86's max: x_r > acc ? x_r : acc)
/// returns NaN when x_0 is NaN and otherwise the first of the largest non-NaN values. Here the
/// second block's chain starts at −∞, so m2 is the first largest non-NaN value of x_S … x_2S−1
/// (or −∞); max(m2, m1) then gives what the chain over all 2S rows gives (m1 NaN stays NaN; a
/// tie keeps the earlier m1), and max(m2, x_S) is that block's own chain from x_S (x_S NaN:
/// NaN; otherwise the first largest value, x_S itself on a tie).
template <class Real, class Arch>
inline void max_rows_second_block(const Real* rows, index_t ld, index_t S, index_t c, Real* ring, Real* out,
                                  bool nt = false) noexcept {
  index_t k = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    constexpr index_t U = 8;
    const B lowest(-std::numeric_limits<Real>::infinity());
    for (; k + U * L <= c; k += U * L) {
      B acc[U];
      for (index_t u = 0; u < U; ++u) acc[u] = lowest;
      for (index_t r = 0; r < S; ++r) {
        const Real* src = rows + r * ld + k;
        for (index_t u = 0; u < U; ++u) acc[u] = xsimd::max(B::load_unaligned(src + u * L), acc[u]);
      }
      for (index_t u = 0; u < U; ++u) {
        const B o = xsimd::max(acc[u], B::load_unaligned(ring + k + u * L));
        xsimd::max(acc[u], B::load_unaligned(rows + k + u * L)).store_unaligned(ring + k + u * L);
        if (nt) stream_store<Real, Arch>(out + k + u * L, o);
        else o.store_unaligned(out + k + u * L);
      }
    }
    for (; k + L <= c; k += L) {
      B acc = lowest;
      for (index_t r = 0; r < S; ++r) acc = xsimd::max(B::load_unaligned(rows + r * ld + k), acc);
      const B o = xsimd::max(acc, B::load_unaligned(ring + k));
      xsimd::max(acc, B::load_unaligned(rows + k)).store_unaligned(ring + k);
      if (nt) stream_store<Real, Arch>(out + k, o);
      else o.store_unaligned(out + k);
    }
  }
  for (; k < c; ++k) {
    Real m = -std::numeric_limits<Real>::infinity();
    for (index_t r = 0; r < S; ++r) m = std::max(m, rows[r * ld + k]);
    out[k] = std::max(ring[k], m);
    ring[k] = std::max(rows[k], m);
  }
}

/// Channel-wise softmax pooling of one entry. For slot r (of n): payload pay[r][0 … c), logits
/// z[r] (null: zero) plus bias b[r] (null: zero). For each channel k:
/// out[k] = Σ_r exp(e_{r,k} − m_k) pay[r][k] / Σ_r exp(e_{r,k} − m_k), e = z + b, m_k = max_r e_{r,k}.
/// `scratch` holds n·L values.
template <class Real, class Arch>
inline void channel_softmax_pool(const Real* const* pay, const Real* const* z, const Real* const* b, index_t n,
                                 index_t c, Real* out, Real* scratch) noexcept;

/// The unnormalised weights of channel_softmax_pool with no content logits (z all null): for
/// slot r of n and channel k, pw[r·c + k] = exp(b_{r,k} − m_k), and ps[k] = Σ_r pw[r·c + k], each
/// value computed by the same operations in the same order as channel_softmax_pool computes it.
/// With them, channel_weighted_pool gives channel_softmax_pool's output bit for bit: a gate
/// whose logits are its position bias alone has the same weights in every complete entry, so
/// the exponentials are computed once per call instead of once per entry.
template <class Real, class Arch>
inline void channel_softmax_weights(const Real* const* b, index_t n, index_t c, Real* pw, Real* ps) noexcept {
  index_t k = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    for (; k + L <= c; k += L) {
      B m(-std::numeric_limits<Real>::infinity());
      for (index_t r = 0; r < n; ++r) {
        B e(Real(0));
        if (b[r]) e += B::load_unaligned(b[r] + k);
        e.store_unaligned(pw + r * c + k);
        m = xsimd::max(m, e);
      }
      B s(Real(0));
      for (index_t r = 0; r < n; ++r) {
        const B p = xsimd::exp(B::load_unaligned(pw + r * c + k) - m);
        p.store_unaligned(pw + r * c + k);
        s += p;
      }
      s.store_unaligned(ps + k);
    }
  }
  for (; k < c; ++k) {
    auto logit = [&](index_t r) -> Real {
      Real e = 0;
      if (b[r]) e += b[r][k];
      return e;
    };
    Real m = -std::numeric_limits<Real>::infinity();
    for (index_t r = 0; r < n; ++r) m = std::max(m, logit(r));
    Real s = 0;
    for (index_t r = 0; r < n; ++r) {
      const Real p = std::exp(logit(r) - m);
      pw[r * c + k] = p;
      s += p;
    }
    ps[k] = s;
  }
}

/// Channels [k, k + U·L) of P consecutive entries of channel_weighted_entries: P·U batch
/// accumulators in registers, the slots in the inner loop, each weight batch loaded once for the
/// P entries, so P·U independent FMA chains are in flight.
template <index_t P, index_t U, class Real, class Arch>
inline void channel_weighted_group(const Real* rows, index_t ld, index_t step_ld, index_t split, index_t off,
                                   const Real* pw, const Real* ps, index_t n, index_t c, index_t k,
                                   Real* out) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size;
  B acc[P][U];
  for (index_t e = 0; e < P; ++e)
    for (index_t u = 0; u < U; ++u) acc[e][u] = B(Real(0));
  for (index_t r = 0; r < n; ++r) {
    const Real* src = rows + r * ld + (r >= split ? off : 0) + k;
    const Real* w = pw + r * c + k;
    for (index_t u = 0; u < U; ++u) {
      const B wu = B::load_unaligned(w + u * L);
      for (index_t e = 0; e < P; ++e) acc[e][u] = simd::fma(wu, B::load_unaligned(src + e * step_ld + u * L), acc[e][u]);
    }
  }
  for (index_t u = 0; u < U; ++u) {
    const B q = B::load_unaligned(ps + k + u * L);
    for (index_t e = 0; e < P; ++e) (acc[e][u] / q).store_unaligned(out + e * c + k + u * L);
  }
}

/// Channels [k0, c) of P consecutive entries (channel_weighted_entries).
template <index_t P, class Real, class Arch>
inline void channel_weighted_row_group(const Real* rows, index_t ld, index_t step_ld, index_t split, index_t off,
                                       const Real* pw, const Real* ps, index_t n, index_t c, Real* out,
                                       index_t k0 = 0) noexcept {
  index_t k = k0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    constexpr index_t L = simd::lanes<Real, Arch>();
    for (; k + 4 * L <= c; k += 4 * L)
      channel_weighted_group<P, 4, Real, Arch>(rows, ld, step_ld, split, off, pw, ps, n, c, k, out);
    for (; k + L <= c; k += L) channel_weighted_group<P, 1, Real, Arch>(rows, ld, step_ld, split, off, pw, ps, n, c, k, out);
  }
  for (; k < c; ++k) {
    for (index_t e = 0; e < P; ++e) {
      Real acc = 0;
      // std::fma, as channel_softmax_pool: a*b + c would be contracted or not by the compiler
      // depending on each loop's shape (-march=native on Zen 4 does one and not the other)
      for (index_t r = 0; r < n; ++r)
        acc = std::fma(pw[r * c + k], rows[e * step_ld + r * ld + (r >= split ? off : 0) + k], acc);
      out[e * c + k] = acc / ps[k];
    }
  }
}

/// channel_weighted_entries on V4-CSA's grid (W = 8, S = 4) when every slot reads the same
/// columns (off = 0: the payload is not split into two streams), for the channels [0, k) it
/// returns (whole groups of U batches; U = 2 on 512-bit batches, 1 below, so the weights stay in
/// registers). Each 4-row block of the run is loaded once and serves two entries: as slots 4–7
/// of the entry before it (whose chain it ends) and slots 0–3 of its own entry (whose chain it
/// starts). Every entry's sum is still the slot-ordered chain of FMAs the general kernel forms,
/// so the bits are the same; the general kernel loads every shared row twice and each weight
/// batch once per two entries.
template <class Real, class Arch>
inline index_t channel_weighted_entries_w8s4(const Real* rows, index_t ld, const Real* pw, const Real* ps, index_t c,
                                             index_t m, Real* out) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size, U = sizeof(B) == 64 ? 2 : 1;
  index_t k = 0;
  for (; k + U * L <= c; k += U * L) {
    B w[8][U], q[U], open[U];
    for (index_t r = 0; r < 8; ++r)
      for (index_t u = 0; u < U; ++u) w[r][u] = B::load_unaligned(pw + r * c + k + u * L);
    for (index_t u = 0; u < U; ++u) {
      q[u] = B::load_unaligned(ps + k + u * L);
      B a(Real(0));
      for (index_t r = 0; r < 4; ++r) a = simd::fma(w[r][u], B::load_unaligned(rows + r * ld + k + u * L), a);
      open[u] = a;  // entry 0 after its slots 0–3
    }
    for (index_t i = 1; i <= m; ++i) {  // block i: rows 4i … 4i + 3
      const Real* x = rows + 4 * i * ld + k;
      for (index_t u = 0; u < U; ++u) {
        B xr[4];
        for (index_t r = 0; r < 4; ++r) xr[r] = B::load_unaligned(x + r * ld + u * L);
        B a = open[u];
        for (index_t r = 0; r < 4; ++r) a = simd::fma(w[4 + r][u], xr[r], a);
        (a / q[u]).store_unaligned(out + (i - 1) * c + k + u * L);
        if (i < m) {
          B b(Real(0));
          for (index_t r = 0; r < 4; ++r) b = simd::fma(w[r][u], xr[r], b);
          open[u] = b;
        }
      }
    }
  }
  return k;
}

/// out_i[k] = Σ_r pw[r·c + k]·pay_{i,r}[k] / ps[k] (channel_softmax_weights) for m consecutive
/// entries i of a grid of stride `step` rows, accumulated as channel_softmax_pool accumulates:
/// slot r of entry i reads rows + (i·step + r)·ld, plus `off` columns for the slots r ≥ split (a
/// two-stream entry's own block reads stream b); entry i is written to out + i·c. Entries go in
/// pairs, so two entries' FMA chains overlap instead of one entry's chains running one after
/// another (groups of four were no faster on an AVX-512 Zen 5 core); every channel's sum is the
/// same slot-ordered chain of FMAs whatever the group, so the bits do not depend on it. On
/// V4-CSA's grid with off = 0, channel_weighted_entries_w8s4 does the whole channel groups first.
template <class Real, class Arch>
inline void channel_weighted_entries(const Real* rows, index_t ld, index_t step, index_t split, index_t off,
                                     const Real* pw, const Real* ps, index_t n, index_t c, index_t m,
                                     Real* out) noexcept {
  constexpr index_t P = 2;
  index_t k0 = 0;  // channels [0, k0) done by the shared-row kernel
  // (hardware-FMA paths only: on sse2 simd::fma is a·b + c, contracted or not by the compiler
  // depending on the loop, so two kernels' chains need not round alike there)
  if constexpr (simd::fused_fma<Arch>()) {
    if (off == 0 && n == 8 && step == 4 && m > 0) k0 = channel_weighted_entries_w8s4<Real, Arch>(rows, ld, pw, ps, c, m, out);
  }
  if (k0 == c) return;
  index_t i = 0;
  for (; i + P <= m; i += P)
    channel_weighted_row_group<P, Real, Arch>(rows + i * step * ld, ld, step * ld, split, off, pw, ps, n, c, out + i * c, k0);
  for (; i < m; ++i)
    channel_weighted_row_group<1, Real, Arch>(rows + i * step * ld, ld, 0, split, off, pw, ps, n, c, out + i * c, k0);
}

/// channel_weighted_entries of one entry.
template <class Real, class Arch>
inline void channel_weighted_pool(const Real* rows, index_t ld, index_t split, index_t off, const Real* pw,
                                  const Real* ps, index_t n, index_t c, Real* out) noexcept {
  channel_weighted_row_group<1, Real, Arch>(rows, ld, 0, split, off, pw, ps, n, c, out);
}

template <class Real, class Arch>
inline void channel_softmax_pool(const Real* const* pay, const Real* const* z, const Real* const* b, index_t n,
                                 index_t c, Real* out, Real* scratch) noexcept {
  auto logit = [&](index_t r, index_t k) -> Real {
    Real e = 0;
    if (z[r]) e = z[r][k];
    if (b[r]) e += b[r][k];
    return e;
  };
  index_t k = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    for (; k + L <= c; k += L) {
      B m(-std::numeric_limits<Real>::infinity());
      for (index_t r = 0; r < n; ++r) {
        B e(Real(0));
        if (z[r]) e = B::load_unaligned(z[r] + k);
        if (b[r]) e += B::load_unaligned(b[r] + k);
        e.store_unaligned(scratch + r * L);
        m = xsimd::max(m, e);
      }
      B s(Real(0)), acc(Real(0));
      for (index_t r = 0; r < n; ++r) {
        const B p = xsimd::exp(B::load_unaligned(scratch + r * L) - m);
        s += p;
        acc = simd::fma(p, B::load_unaligned(pay[r] + k), acc);
      }
      (acc / s).store_unaligned(out + k);
    }
  }
  for (; k < c; ++k) {
    Real m = -std::numeric_limits<Real>::infinity();
    for (index_t r = 0; r < n; ++r) m = std::max(m, logit(r, k));
    Real s = 0, acc = 0;
    for (index_t r = 0; r < n; ++r) {
      const Real p = std::exp(logit(r, k) - m);
      s += p;
      acc = std::fma(p, pay[r][k], acc);  // one rounding on every compiler and target (see channel_weighted_pool)
    }
    out[k] = acc / s;
  }
}

inline double gelu(double v) noexcept { return 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)); }

/// h[j] = act(h[j] + b1[j]) for j < H (b1 null: no bias). In float, on SIMD batches: the bias
/// add, then GELU 0.5·v·(1 + erf(v·(1/√2))) with xsimd's float erf, ReLU max(0, v). xsimd 8.1's
/// float erf is within 2.43 ulp of erf on every finite float (checked exhaustively against erf in
/// double on AVX-512 and AVX2, and over [-8, 8] on SSE4.2; tests/test_compress_pool.cpp's MLP
/// bound uses 3 ulp). Doubles, the scalar path and the tail evaluate the formula in double with
/// std::erf (xsimd's double erf is off by up to 68 ulp). Both MLP paths (mlp_entries, the
/// per-entry engine) call it.
template <class Real, class Arch>
inline void mlp_activate(Real* h, const Real* b1, index_t H, mlp_activation act) noexcept {
  index_t j = 0;
  if constexpr (std::is_same_v<Real, float> && !simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    const B half(Real(0.5)), one(Real(1)), rsqrt2(Real(0.70710678118654752440)), zero(Real(0));
    for (; j + L <= H; j += L) {
      B v = B::load_unaligned(h + j);
      if (b1) v = v + B::load_unaligned(b1 + j);
      v = act == mlp_activation::relu ? xsimd::max(zero, v) : half * v * (one + xsimd::erf(v * rsqrt2));
      v.store_unaligned(h + j);
    }
  }
  for (; j < H; ++j) {
    double v = static_cast<double>(h[j]) + (b1 ? static_cast<double>(b1[j]) : 0.0);
    v = act == mlp_activation::relu ? std::max(0.0, v) : gelu(v);
    h[j] = static_cast<Real>(v);
  }
}

/// Resolved per-call state of the compressor for one head: everything the per-entry kernels need,
/// computed once at the API boundary.
template <class Real, class Arch>
struct engine {
  const operator_spec* spec = nullptr;
  const pool_params<Real>* p = nullptr;
  chunk_grid g;
  index_t d = 0, c = 0, W = 0, S = 0;
  std::vector<Real> w_full;        ///< linear pools: weights with no masked slot
  bool linear = false;             ///< identity / mean / weights / slot_gate without content logits
  bool post = false;               ///< RMSNorm or RoPE requested
  rope_frequencies rope;
  bool do_rope = false;
  index_t scratch_size = 0;        ///< Reals of per-thread scratch
  std::vector<Real> gate_w, gate_s; ///< bias-only channel gates: channel_softmax_weights of a complete entry
  /// A max pool with W = 2S on a SIMD path: block_entries, each token row read once. (The same
  /// scheme for fixed-weight linear pools, each loaded value feeding the ending and the starting
  /// FMA chain, was measured and left out: 10 % faster at d = 512 but 13 % slower at d = 4096;
  /// docs/performance.md.)
  bool pair_blocks = false;
  /// Narrow rows (c ≤ lockstep_max_bytes) of a fixed-weight linear pool on a hardware-FMA path or
  /// of a max pool, entries without overlap (W ≤ S, W ≤ 8), no post-processing: entries_lockstep
  /// can walk Q sub-ranges with their loads interleaved (pool_rows_lockstep), the same bits as
  /// entry(). (With overlap, W = 8, S = 4 fixed weights, it was 3–17 % slower at d = 64–512.)
  bool lockstep_rows = false;
  static constexpr index_t lockstep_q = 4;  // 8 was slower at d = 128–2048 (docs/performance.md)
  static constexpr std::size_t lockstep_max_bytes = 8192;  // 1.15–1.31× at 4–8 KiB rows, none at 16 KiB

  engine(const operator_spec& s, const pool_params<Real>& prm, index_t d_, index_t head)
      : spec(&s), p(&prm), g(s.head_grid(head)), d(d_), c(prm.output_dim(s, d_)), W(s.grid.window),
        S(s.grid.stride) {
    const pool_kind k = s.pool;
    // the fixed-weight fast path: a pool linear in its tokens (capabilities) whose gate has no
    // content-logit parameters
    linear = capabilities(s).linear && prm.content_u.size() == 0 && prm.slot_u.size() == 0;
    if (linear) {
      const auto w = s.linear_slot_weights(0);
      w_full.assign(w.begin(), w.end());
    }
    do_rope = s.rope.anchor != rope_anchor::none;
    if (do_rope) rope = rope_frequencies(s.rope, c);
    post = s.rmsnorm || do_rope;
    constexpr index_t L = simd::lanes<Real, Arch>();
    index_t sc = c;                                   // row buffer for post-processing
    sc += W;                                          // slot weights / logits
    if (k == pool_kind::channel_gate || k == pool_kind::two_stream) sc += W * L;
    if (k == pool_kind::mlp) sc += W * d + 2 * prm.mlp_w1.cols();
    pair_blocks = !simd::is_scalar_v<Arch> && W == 2 * S && k == pool_kind::max;
    if (pair_blocks) sc += c;                         // the ring: the previous block's maxima
    // Fixed-weight linear pools only where both kernels' multiply-adds round once (hardware FMA;
    // on sse2 a*b + c may be contracted differently in the two loops).
    lockstep_rows = !simd::is_scalar_v<Arch> && !post && !pair_blocks &&
                    ((linear && simd::fused_fma<Arch>()) || k == pool_kind::max) &&
                    W <= S && W <= 8 && static_cast<std::size_t>(c) * sizeof(Real) <= lockstep_max_bytes;
    scratch_size = sc + 64;
    // The once-per-call weights give the per-entry kernel's bits only where both kernels' multiply-
    // adds round once: hardware-FMA paths and the scalar path (std::fma). On sse2, simd::fma is
    // a*b + c, which the compiler contracts into an FMA or not depending on the loop's shape, so
    // that path keeps the per-entry kernel.
    constexpr bool one_rounding = simd::is_scalar_v<Arch> || simd::fused_fma<Arch>();
    if (one_rounding && (k == pool_kind::channel_gate || k == pool_kind::two_stream) && prm.w_z.size() == 0) {
      std::vector<const Real*> bp(static_cast<std::size_t>(W), nullptr);
      for (index_t r = 0; r < W; ++r) bp[static_cast<std::size_t>(r)] = bias_row(r);
      gate_w.resize(static_cast<std::size_t>(W * c));
      gate_s.resize(static_cast<std::size_t>(c));
      channel_softmax_weights<Real, Arch>(bp.data(), W, c, gate_w.data(), gate_s.data());
    }
  }

  /// The position-bias row of slot r of a channel_gate / two_stream entry (null: no bias).
  [[nodiscard]] const Real* bias_row(index_t r) const noexcept {
    if (!p->slot_bias_c.size()) return nullptr;
    const bool ts = spec->pool == pool_kind::two_stream;
    return p->slot_bias_c.data() + (ts ? (r % S) : r) * p->slot_bias_c.cols() + ((ts && r >= S) ? c : 0);
  }

  /// Payload / logit source row pointer for token position t of a window [pos0, …) of rows.
  struct rows_t {
    const Real* x;    ///< input rows (position pos0 at row 0)
    index_t ldx;
    const Real* pay;  ///< payload rows (x or the projection X·W_C)
    index_t ldp;
    const Real* z;    ///< logit rows (null: none)
    index_t ldz;
    index_t pos0;
    index_t pay_b = 0;  ///< two_stream: column of stream b's payload in a payload row (0: x serves both)
  };

  /// Computes entry e into `dst` (c values); with nt, dst is aligned and written with
  /// non-temporal stores when no post-processing follows.
  /// `rc`: this entry's slot of the workspace's RoPE cache (rope_slot), or null.
  void entry(const rows_t& R, index_t e, Real* dst, bool nt, Real* scratch, const Real** ptrs,
             double* rc = nullptr) const noexcept {
    Real* row = post ? scratch : dst;
    pool(R, e, row, nt && !post, scratch + c, ptrs);
    if (post) finish(row, e, dst, nt, rc);
  }

  /// Rows of a tile of entries_tiled.
  static constexpr index_t tile_rows = 16;

  /// Entries [e, e + m) (m ≤ tile_rows) pooled into `tile` (m rows of c values), then post-
  /// processed (finish_tile) and stored to dst (m rows). Every row gets entry()'s operations
  /// and bits; the tile only lets the rows' latency chains (RMSNorm's reduction, square root and
  /// division) overlap instead of running one after another.
  void entries_tiled(const rows_t& R, index_t e, index_t m, Real* tile, Real* dst, bool nt, Real* scratch,
                     const Real** ptrs, double* rc = nullptr) const noexcept {
    index_t i = 0;
    if (!gate_w.empty() && !R.z) {
      // a channel gate with fixed weights: the entries with masked slots one by one, the rest in
      // one loop (their first sources are S rows apart)
      for (; i < m && g.sources(e + i).first < 0; ++i) pool(R, e + i, tile + i * c, false, scratch + c, ptrs);
      if (i < m) {
        const bool ts = spec->pool == pool_kind::two_stream;
        channel_weighted_entries<Real, Arch>(R.pay + (g.sources(e + i).first - R.pos0) * R.ldp, R.ldp, S, ts ? S : W,
                                             R.pay_b, gate_w.data(), gate_s.data(), W, c, m - i, tile + i * c);
        i = m;
      }
    }
    for (; i < m; ++i) pool(R, e + i, tile + i * c, false, scratch + c, ptrs);
    finish_tile(tile, m, e, dst, nt, rc);
  }

  /// Entries [a, b) of a max pool with W = 2S (pair_blocks) into dst (row i = entry a + i), each
  /// with entry()'s bits: entries with masked leading slots one by one, then the rest from their
  /// second blocks (max_rows_second_block), the first entry's first block pooled once into the
  /// ring. `scratch`: the post-processing row buffer, then the ring (c values each).
  void block_entries(const rows_t& R, index_t a, index_t b, Real* dst, bool nt, Real* scratch, const Real** ptrs,
                     double* rc = nullptr) const noexcept {
    index_t e = a;
    for (; e < b && g.sources(e).first < 0; ++e)
      entry(R, e, dst + (e - a) * c, nt, scratch, ptrs, rope_slot(rc, e - a));
    if (e == b) return;
    Real* ring = scratch + c;
    const Real* first = R.x + (g.sources(e).first - R.pos0) * R.ldx;
    max_rows<Real, Arch>(first, R.ldx, S, c, ring);
    for (; e < b; ++e, first += S * R.ldx) {
      Real* d_e = dst + (e - a) * c;
      Real* row = post ? scratch : d_e;
      max_rows_second_block<Real, Arch>(first + S * R.ldx, R.ldx, S, c, ring, row, nt && !post);
      if (post) finish(row, e, d_e, nt, rope_slot(rc, e - a));
    }
  }

  /// Entries [a, b) (lockstep_rows) into dst (row i = entry a + i), each with entry()'s bits:
  /// entries with masked leading slots one by one, the rest as lockstep_q contiguous sub-ranges
  /// walked together (pool_rows_lockstep), the remainder of the split one by one.
  void entries_lockstep(const rows_t& R, index_t a, index_t b, Real* dst, bool nt, Real* scratch,
                        const Real** ptrs) const noexcept {
    if constexpr (!simd::is_scalar_v<Arch>) {
      constexpr index_t Q = lockstep_q;
      index_t e = a;
      for (; e < b && g.sources(e).first < 0; ++e) entry(R, e, dst + (e - a) * c, nt, scratch, ptrs);
      const bool mx = spec->pool == pool_kind::max;
      const Real* base = mx ? R.x : R.pay;
      const index_t ld = mx ? R.ldx : R.ldp;
      const Real* w = mx ? nullptr : w_full.data();
      const index_t step = (b - e) / Q;
      const Real* rows[Q];
      Real* outs[Q];
      for (index_t i = 0; i < step; ++i) {
        for (index_t q = 0; q < Q; ++q) {
          const index_t eq = e + q * step + i;
          rows[q] = base + (g.sources(eq).first - R.pos0) * ld;
          outs[q] = dst + (eq - a) * c;
        }
        if (!pool_rows_lockstep<Real, Arch, Q>(rows, ld, w, W, c, outs, nt))
          for (index_t q = 0; q < Q; ++q) entry(R, e + q * step + i, outs[q], nt, scratch, ptrs);
      }
      e += Q * step;
      for (; e < b; ++e) entry(R, e, dst + (e - a) * c, nt, scratch, ptrs);
    } else {
      for (index_t e = a; e < b; ++e) entry(R, e, dst + (e - a) * c, nt, scratch, ptrs);
    }
  }

  /// Pools entry e (no post-processing) into `row` (c values; with direct_nt aligned and written
  /// with non-temporal stores). `work`: the scratch after the post-processing row buffer.
  void pool(const rows_t& R, index_t e, Real* row, bool direct_nt, Real* work, const Real** ptrs) const noexcept {
    const token_range src = g.sources(e);
    const index_t m0 = std::max<index_t>(0, -src.first);  // masked leading slots
    const index_t n = W - m0;
    const index_t t0 = src.first + m0 - R.pos0;          // row of the first unmasked slot
    switch (spec->pool) {
      case pool_kind::identity:
      case pool_kind::mean:
      case pool_kind::weights:
      case pool_kind::slot_gate: {
        const Real* w = w_full.data() + m0;
        if (linear && m0 > 0) {
          masked_linear_weights(m0, work);
          w = work;
        } else if (!linear) {
          // scalar slot gate with content logits: α = softmax(b_r + u·x_t + U_r·x_t)
          for (index_t r = 0; r < n; ++r) {
            const Real* xt = R.x + (t0 + r) * R.ldx;
            Real l = spec->slot_bias.empty() ? Real(0) : static_cast<Real>(spec->slot_bias[static_cast<std::size_t>(m0 + r)]);
            if (p->content_u.size()) l += simd::dot<Real, Arch>(p->content_u.data(), xt, d);
            if (p->slot_u.size()) l += simd::dot<Real, Arch>(p->slot_u.row(m0 + r).data(), xt, d);
            work[r] = l;
          }
          simd::softmax_inplace<Real, Arch>(work, n);
          w = work;
        }
        weighted_rows<Real, Arch>(R.pay + t0 * R.ldp, R.ldp, w, n, c, row, direct_nt);
        break;
      }
      case pool_kind::max:
        max_rows<Real, Arch>(R.x + t0 * R.ldx, R.ldx, n, c, row, direct_nt);
        break;
      case pool_kind::channel_gate:
      case pool_kind::two_stream: {
        const bool ts = spec->pool == pool_kind::two_stream;
        Real* sbuf = work;
        const Real** P = ptrs;
        const Real** Z = ptrs + W;
        const Real** Bp = ptrs + 2 * W;
        if (m0 == 0 && !gate_w.empty() && !R.z) {  // the once-per-call weights apply
          channel_weighted_pool<Real, Arch>(R.pay + t0 * R.ldp, R.ldp, ts ? S : n, R.pay_b, gate_w.data(),
                                            gate_s.data(), n, c, row);
          break;
        }
        for (index_t i = 0; i < n; ++i) {
          const index_t r = m0 + i;
          const index_t half = (ts && r >= S) ? c : 0;
          const index_t t = t0 + i;
          P[i] = R.pay + t * R.ldp + (half ? R.pay_b : 0);
          Z[i] = R.z ? R.z + t * R.ldz + half : nullptr;
          Bp[i] = bias_row(r);
        }
        channel_softmax_pool<Real, Arch>(P, Z, Bp, n, c, row, sbuf);
        break;
      }
      case pool_kind::mlp: {
        const index_t H = p->mlp_w1.cols();
        Real* f = work;            // W·d (only the unmasked part used)
        Real* h = work + W * d;    // H
        for (index_t i = 0; i < n; ++i) {
          const Real* xt = R.x + (t0 + i) * R.ldx;
          Real* fr = f + i * d;
          if (p->mlp_pos.size()) {
            const Real* pr = p->mlp_pos.row(m0 + i).data();
            for (index_t k = 0; k < d; ++k) fr[k] = xt[k] + pr[k];
          } else {
            std::memcpy(fr, xt, static_cast<std::size_t>(d) * sizeof(Real));
          }
        }
        weighted_rows<Real, Arch>(p->mlp_w1.data() + m0 * d * H, H, f, n * d, H, h);
        mlp_activate<Real, Arch>(h, p->mlp_b1.size() ? p->mlp_b1.data() : nullptr, H, p->activation);
        weighted_rows<Real, Arch>(p->mlp_w2.data(), c, h, H, c, row);
        if (p->mlp_b2.size()) {
          for (index_t k = 0; k < c; ++k) row[k] += p->mlp_b2[k];
        }
        break;
      }
    }
  }

  /// Doubles per entry of the RoPE cache: the anchor position, then a cosine and a sine per pair.
  [[nodiscard]] index_t rope_stride() const noexcept { return 1 + rope.rotated; }
  /// Slot of entry number `rel` (counted from the call's first entry) in the cache `base` (null: none).
  [[nodiscard]] double* rope_slot(double* base, index_t rel) const noexcept {
    return base ? base + rel * rope_stride() : nullptr;
  }

  /// Post-processing of entry e's pooled row (in place: RMSNorm, then RoPE at its anchor), then
  /// the store to dst; the same pass that pooled the row, while it is in L1.
  void finish(Real* row, index_t e, Real* dst, bool nt, double* rc = nullptr) const noexcept {
    if (spec->rmsnorm) {
      rms_norm_inplace<Real, Arch>(row, c, spec->rms_eps, p->rms_weight.size() ? p->rms_weight.data() : nullptr);
    }
    if (do_rope) rope_row(row, e, rc);
    copy_row(row, dst, nt);
  }

  /// finish() of m consecutive entries e, e + 1, … held in `tile` (row i at tile + i·c), stage
  /// by stage across the rows, then stored to dst (row i at dst + i·c). `rc`: entry e's RoPE
  /// cache slot (the next entries' follow it), or null. Rows are bitwise finish()'s.
  void finish_tile(Real* tile, index_t m, index_t e, Real* dst, bool nt, double* rc = nullptr) const noexcept {
    // cached stores: each row scaled straight into dst and rotated there while it is in L1 (one
    // pass over the tile); streaming stores: finished in the tile, then streamed out
    Real* fin = nt ? tile : dst;
    if (spec->rmsnorm) {
      const Real* w = p->rms_weight.size() ? p->rms_weight.data() : nullptr;
      for (index_t i0 = 0; i0 < m; i0 += tile_rows) {
        const index_t m1 = std::min(tile_rows, m - i0);
        Real inv[tile_rows];
        rms_inverses<Real, Arch>(tile + i0 * c, c, m1, c, spec->rms_eps, inv);
        for (index_t i = 0; i < m1; ++i) rms_scale_to<Real, Arch>(tile + (i0 + i) * c, fin + (i0 + i) * c, c, inv[i], w);
      }
    } else if (!nt) {
      for (index_t i = 0; i < m; ++i) copy_row(tile + i * c, dst + i * c, false);
    }
    if (do_rope) {
      for (index_t i = 0; i < m; ++i) rope_row(fin + i * c, e + i, rope_slot(rc, i));
    }
    if (nt) {
      for (index_t i = 0; i < m; ++i) copy_row(tile + i * c, dst + i * c, true);
    }
  }

  /// RoPE of entry e's row at its anchor, from the cache slot rc (filled when it holds another
  /// position) or, without one, computed here.
  void rope_row(Real* row, index_t e, double* rc) const noexcept {
    const double pos = anchor_position(g, e, spec->rope.anchor);
    if (rc) {
      if (!(rc[0] == pos)) {  // a new slot holds NaN
        rc[0] = pos;
        rope_cos_sin(pos, rope, rc + 1);
      }
      apply_rope_cs<Real, Arch>(row, rc + 1, rope);
    } else {
      apply_rope(row, pos, rope);
    }
  }

  /// Weights of a linear pool renormalised over slots m0 … W−1 (as operator_spec::
  /// linear_slot_weights, without allocating): computed in double, rounded once to Real.
  void masked_linear_weights(index_t m0, Real* w) const noexcept {
    const index_t n = W - m0;
    const auto& sw = spec->slot_weights;
    const auto& sb = spec->slot_bias;
    double mx = 0.0;
    if (spec->pool == pool_kind::slot_gate && !sb.empty()) {
      mx = sb[static_cast<std::size_t>(m0)];
      for (index_t r = m0; r < W; ++r) mx = std::max(mx, sb[static_cast<std::size_t>(r)]);
    }
    auto raw = [&](index_t r) -> double {
      if (spec->pool == pool_kind::weights) return sw[static_cast<std::size_t>(r)];
      if (spec->pool == pool_kind::slot_gate && !sb.empty()) return std::exp(sb[static_cast<std::size_t>(r)] - mx);
      return 1.0;
    };
    double tot = 0.0;
    for (index_t r = m0; r < W; ++r) tot += raw(r);
    for (index_t i = 0; i < n; ++i) w[i] = static_cast<Real>(raw(m0 + i) / tot);
  }

  void copy_row(const Real* src, Real* dst, bool nt) const noexcept {
    index_t k = 0;
    if constexpr (!simd::is_scalar_v<Arch>) {
      using B = xsimd::batch<Real, Arch>;
      constexpr index_t L = B::size;
      if (nt) {
        for (; k + L <= c; k += L) stream_store<Real, Arch>(dst + k, B::load_unaligned(src + k));
      }
    }
    for (; k < c; ++k) dst[k] = src[k];
  }
};

/// Rows per piece of project_rows on SIMD paths, for d input and `cols` output columns in all
/// (both maps): 0 (the thread's rows in one product) when the maps exceed 256 KiB, as every piece
/// packs them again; otherwise the multiple of row_group (≥ 64) whose input and output rows fill
/// about 512 KiB, so a piece's input rows are read from memory once and stay in L2 for both maps.
template <class Real>
[[nodiscard]] inline index_t projection_piece_rows(index_t d, index_t cols) noexcept {
  constexpr std::size_t maps_max = std::size_t{256} << 10, piece_bytes = std::size_t{512} << 10;
  if (static_cast<std::size_t>(d * cols) * sizeof(Real) > maps_max) return 0;
  const index_t rows = static_cast<index_t>(piece_bytes / (static_cast<std::size_t>(d + cols) * sizeof(Real)));
  return std::max<index_t>(8 * row_group, rows / row_group * row_group);
}

/// Token projections out[t] = x[t] · M and, with M2, out2[t] = x[t] · M2, for t in [0, n) (out is
/// n × M.cols(), out2 n × M2.cols()). SIMD paths: the blocked GEMM of detail/gemm.hpp (the
/// library's packed FMA kernel, Eigen's on SSE2: gemm_rows_on) on row groups split statically
/// over threads, each thread's rows in pieces (projection_piece_rows)
/// projected by M and then M2 while they are in cache; each row's bits are independent of the
/// split and of the pieces (whole row groups). The scalar path: one weighted_rows pass per token
/// and map (the reference order: k = 0, 1, … accumulated in turn).
template <class Real, class Arch>
inline void project_rows(const Real* x, index_t ldx, index_t n, index_t d, const matrix_t<Real>& M, Real* out,
                         int threads, const matrix_t<Real>* M2 = nullptr, Real* out2 = nullptr) {
  const index_t cols = M.cols(), cols2 = M2 ? M2->cols() : 0;
  if constexpr (simd::is_scalar_v<Arch>) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
#endif
    for (index_t t = 0; t < n; ++t) {
      weighted_rows<Real, Arch>(M.data(), cols, x + t * ldx, d, cols, out + t * cols);
      if (M2) weighted_rows<Real, Arch>(M2->data(), cols2, x + t * ldx, d, cols2, out2 + t * cols2);
    }
    (void)threads;
  } else {
    const index_t groups = (n + row_group - 1) / row_group;
    const index_t piece = projection_piece_rows<Real>(d, cols + cols2);
    auto run = [&](int tid, int nth) {
      const index_t r0 = std::min(n, groups * tid / nth * row_group);
      const index_t r1 = std::min(n, groups * (tid + 1) / nth * row_group);
      std::vector<Real> pad;
      const index_t step = piece > 0 ? piece : std::max<index_t>(1, r1 - r0);
      for (index_t a = r0; a < r1; a += step) {
        const index_t m = std::min(step, r1 - a);
        gemm_rows_on<Real, Arch>(x + a * ldx, ldx, M.data(), cols, m, d, cols, out + a * cols, cols, pad);
        if (M2) gemm_rows_on<Real, Arch>(x + a * ldx, ldx, M2->data(), cols2, m, d, cols2, out2 + a * cols2, cols2, pad);
      }
    };
#if defined(_OPENMP)
    if (threads > 1 && groups > 1) {
#pragma omp parallel num_threads(threads)
      run(omp_get_thread_num(), omp_get_num_threads());
      return;
    }
#endif
    (void)threads;
    run(0, 1);
  }
}

/// Entries per tile of the MLP's in-place form (mlp_entries): W1 is packed once per tile, and the
/// depth blocks of each block of W1's columns (detail::gemm_block_columns) accumulate into the
/// tile's rows of the first layer's output.
inline constexpr index_t mlp_tile = 1024;

/// The first layer's bias in the in-place form (mlp_entries): bias1 = P·W1 + b1, with pw = P·W1
/// (ignored when there is no position encoding) and b1 (zero when absent). Returns bias1, or
/// null when there is neither.
template <class Real>
const Real* mlp_in_place_bias(const pool_params<Real>& p, const Real* pw, Real* bias1) noexcept {
  const bool pos = p.mlp_pos.size() != 0, b1 = p.mlp_b1.size() != 0;
  if (!pos && !b1) return nullptr;
  for (index_t j = 0; j < p.mlp_w1.cols(); ++j) bias1[j] = (pos ? pw[j] : Real(0)) + (b1 ? p.mlp_b1[j] : Real(0));
  return bias1;
}

/// The MLP's second layer and the rest of a tile of m entries starting at t0: Hm (m × H, the
/// first layer's product) += bias1 (null: none) and activated, O = Hm·W2 + b2, then each row's
/// post-processing and store to out (row t − e0).
template <class Real, class Arch>
void mlp_finish_tile(const engine<Real, Arch>& eng, index_t t0, index_t m, index_t e0, Real* Hm, const Real* bias1,
                     Real* O, Real* out, bool nt, std::vector<Real>& pad, double* rc) {
  const pool_params<Real>& p = *eng.p;
  const index_t c = eng.c, H = p.mlp_w1.cols();
  for (index_t i = 0; i < m; ++i) mlp_activate<Real, Arch>(Hm + i * H, bias1, H, p.activation);
  gemm_rows_on<Real, Arch>(Hm, H, p.mlp_w2.data(), c, m, H, c, O, c, pad);
  if (p.mlp_b2.size()) {
    for (index_t i = 0; i < m; ++i)
      for (index_t k = 0; k < c; ++k) O[i * c + k] += p.mlp_b2[k];
  }
  Real* dst = out + (t0 - e0) * c;
  if (eng.post) {
    eng.finish_tile(O, m, t0, dst, nt, eng.rope_slot(rc, t0 - e0));
  } else {
    for (index_t i = 0; i < m; ++i) eng.copy_row(O + i * c, dst + i * c, nt);
  }
}

/// The MLP pool on SIMD paths, entries [a, b) of one thread (x: rows of d values, ldx = d).
///
/// Entries whose W slots are all real tokens (every entry of NSA's grid) read their flattened
/// blocks in place: entry e's block is x's rows sources(e).first … + W − 1, W·d consecutive
/// values, and consecutive entries' blocks start S·d apart, so the first layer is ONE product
/// of x viewed as rows S·d apart (lda) with W1, in tiles of mlp_tile entries: W1 is packed once
/// per tile of 1024 entries (the copied form below repacked it per 256 at d = 4096 and copied
/// every block: 0.63–0.67 of the FMA peak there, kvphase-bench compress --preset nsa --dim 4096;
/// docs/performance.md). The position encoding P (mlp_pos, flattened W·d) enters as its own
/// product P·W1, one more row of the same GEMM (every element one FMA chain, whatever the
/// split), added with b1: h = act(X·W1 + (P·W1 + b1)). On the hardware-FMA paths.
///
/// Entries with masked leading slots, and every entry on the other SIMD paths, go through the
/// copied form: tiles of T entries, each three passes over cache-resident data: F = the
/// flattened blocks (T × W·d, masked slots zero, plus the position encoding), H = act(F·W1 +
/// b1) and O = H·W2 + b2 (every weight read once per tile instead of once per entry).
///
/// Either way a row's bits depend only on its entry (and on which form it takes, which depends
/// only on the entry), not on the tiling or the thread split (detail/gemm.hpp).
/// `w1_nonfinite` (null: no check): set to true when W1 holds an infinite or NaN value, checked
/// by the first tile's product while it packs W1 (where gemm_checks_b<Arch>(); see run_entries).
template <class Real, class Arch>
void mlp_entries(const engine<Real, Arch>& eng, const Real* x, index_t ldx, index_t pos0, index_t a, index_t b,
                 index_t e0, Real* out, bool nt, std::vector<Real>& buf, double* rc = nullptr,
                 bool* w1_nonfinite = nullptr) {
  const pool_params<Real>& p = *eng.p;
  const index_t W = eng.W, d = eng.d, c = eng.c, H = p.mlp_w1.cols(), Wd = W * d;
  std::vector<Real> pad;
  index_t a_direct = b;  // the first entry of the in-place form
  if constexpr (simd::fused_fma<Arch>()) {
    if (ldx == d) {
      a_direct = a;
      while (a_direct < b && eng.g.sources(a_direct).first < 0) ++a_direct;
    }
  }
  if (a_direct < b) {
    constexpr index_t T = mlp_tile;
    const index_t tile = std::min(T, b - a_direct);
    buf.resize(static_cast<std::size_t>(tile * (H + c) + 2 * H));
    Real* Hm = buf.data();
    Real* O = Hm + tile * H;
    Real* pw = O + tile * c;  // P·W1, computed with the first tile
    Real* bias_buf = pw + H;
    const Real* bias1 = nullptr;
    const index_t lda = eng.S * d;
    for (index_t t0 = a_direct; t0 < b; t0 += T) {
      const index_t m = std::min(T, b - t0);
      const Real* A = x + (eng.g.sources(t0).first - pos0) * d;
      const bool first_tile = t0 == a_direct;
      gemm_rows_fma<Real, Arch>(A, lda, p.mlp_w1.data(), H, m, Wd, H, Hm, H, pad,
                                p.mlp_pos.size() && first_tile ? p.mlp_pos.data() : nullptr, pw,
                                first_tile ? w1_nonfinite : nullptr);
      if (first_tile) bias1 = mlp_in_place_bias(p, pw, bias_buf);
      mlp_finish_tile<Real, Arch>(eng, t0, m, e0, Hm, bias1, O, out, nt, pad, rc);
    }
    b = a_direct;
  }
  if (a >= b) return;
  // a tile of F holds ≤ 32 Mi values (128 MiB in float), T ≤ 1024 a multiple of the GEMM row group:
  // the GEMM packs W1 once per tile, so larger tiles amortise it
  const index_t T = std::clamp<index_t>((index_t(1) << 25) / Wd / row_group * row_group, row_group, 1024);
  const index_t tile = std::min(T, b - a);
  buf.resize(static_cast<std::size_t>(tile * (Wd + H + c)));
  Real* F = buf.data();
  Real* Hm = F + tile * Wd;
  Real* O = Hm + tile * H;
  for (index_t t0 = a; t0 < b; t0 += T) {
    const index_t m = std::min(T, b - t0);
    for (index_t i = 0; i < m; ++i) {
      const token_range src = eng.g.sources(t0 + i);
      const index_t m0 = std::max<index_t>(0, -src.first);
      Real* f = F + i * Wd;
      std::fill(f, f + m0 * d, Real(0));
      for (index_t r = m0; r < W; ++r) {
        const Real* xt = x + (src.first + r - pos0) * ldx;
        Real* fr = f + r * d;
        if (p.mlp_pos.size()) {
          const Real* pr = p.mlp_pos.row(r).data();
          for (index_t k = 0; k < d; ++k) fr[k] = xt[k] + pr[k];
        } else {
          std::memcpy(fr, xt, static_cast<std::size_t>(d) * sizeof(Real));
        }
      }
    }
    gemm_rows_on<Real, Arch>(F, Wd, p.mlp_w1.data(), H, m, Wd, H, Hm, H, pad, t0 == a ? w1_nonfinite : nullptr);
    mlp_finish_tile<Real, Arch>(eng, t0, m, e0, Hm, p.mlp_b1.size() ? p.mlp_b1.data() : nullptr, O, out, nt, pad, rc);
  }
}

#if defined(_OPENMP)
/// The MLP pool's in-place form with the first layer split by columns instead of entries: each
/// of `threads` threads computes a contiguous range of whole panels of H (its part of X·W1 and
/// of P·W1) for ALL entries [e0, e0 + E), then, after a barrier, the rest of its own entries
/// (mlp_finish_tile). Used when every entry fits one tile per thread (E ≤ threads·mlp_tile) and
/// none has masked slots: split by entries, each thread would stream all of W1 for few entries
/// (2m FLOP per 4-byte weight); split by columns each streams its share of W1 once. Every value
/// is the one FMA chain the entry split computes (detail/gemm.hpp), so the bits are the same.
/// Thread t sets w1_nonfinite_per_thread[t] when its columns of W1 hold an infinite or NaN value.
template <class Real, class Arch>
void mlp_entries_shared(const engine<Real, Arch>& eng, const Real* x, index_t pos0, index_t e0, index_t E, Real* out,
                        bool nt, int threads, std::vector<std::vector<Real>>& tiles, double* rc,
                        bool* w1_nonfinite_per_thread) {
  const pool_params<Real>& p = *eng.p;
  const index_t d = eng.d, c = eng.c, H = p.mlp_w1.cols(), Wd = eng.W * d;
  constexpr index_t NC = gemm_tile<Real, Arch>::NC;
  std::vector<Real> hm(static_cast<std::size_t>(E * H)), pw(static_cast<std::size_t>(H));
  const Real* A = x + (eng.g.sources(e0).first - pos0) * d;
  const bool pos = p.mlp_pos.size() != 0;
#pragma omp parallel num_threads(threads)
  {
    const index_t tid = omp_get_thread_num(), n = omp_get_num_threads();
    const index_t panels = (H + NC - 1) / NC;
    const index_t h0 = std::min(H, panels * tid / n * NC), h1 = std::min(H, panels * (tid + 1) / n * NC);
    std::vector<Real> pad;
    if (h1 > h0)
      gemm_rows_fma<Real, Arch>(A, eng.S * d, p.mlp_w1.data() + h0, H, E, Wd, h1 - h0, hm.data() + h0, H, pad,
                                pos ? p.mlp_pos.data() : nullptr, pw.data() + h0, w1_nonfinite_per_thread + tid);
#pragma omp barrier
    const index_t a = E * tid / n, b = E * (tid + 1) / n;
    if (b > a) {
      auto& buf = tiles[static_cast<std::size_t>(tid)];
      buf.resize(static_cast<std::size_t>((b - a) * c + H));
      Real* O = buf.data();
      const Real* bias1 = mlp_in_place_bias(p, pw.data(), O + (b - a) * c);
      mlp_finish_tile<Real, Arch>(eng, e0 + a, b - a, e0, hm.data() + a * H, bias1, O, out, nt, pad, rc);
      if (nt) store_fence();
    }
  }
}
#endif

inline int resolve_threads(const compress_options& o, std::size_t input_bytes) noexcept {
  if (o.threads > 0) return o.threads;
#if defined(_OPENMP)
  if (input_bytes >= (std::size_t(1) << 20) && !omp_in_parallel()) return omp_get_max_threads();
#endif
  (void)input_bytes;
  return 1;
}

}  // namespace detail

// ---- the API ---------------------------------------------------------------------------------------

namespace detail {

/// Checks everything at the API boundary for input width d and N tokens; returns the number of
/// complete entries. With `kernel_checks_w1` (a caller that runs its entries through run_entries
/// on a path where gemm_checks_b<Arch>()), an MLP pool's W1 values are left to the kernel, which
/// checks them while it packs W1, when at least one entry is complete (else they are checked
/// here): the same error, without a pass over the 64 MiB of NSA's W1 per call.
template <class Real>
index_t validate_call(const operator_spec& spec, const pool_params<Real>& p, index_t N, index_t d, index_t head,
                      const compress_options& opt, bool need_entry = true, bool kernel_checks_w1 = false) {
  static_assert(is_real_v<Real>, "Real must be float or double");
  spec.validate();
  opt.validate();
  require(head >= 0 && head < spec.heads, "head", head, "must be in [0, heads = " + std::to_string(spec.heads) + ")");
  require(d >= 1 && d <= limits::max_dim, "x.cols()", d, "input width must be in [1, 65536]");
  require(N >= 0 && N < chunk_grid::max_extent, "x.rows()", N, "must be in [0, 2^40)");
  p.validate(spec, d, !kernel_checks_w1);
  const chunk_grid g = spec.head_grid(head);
  const index_t E = g.num_entries(N);
  if (kernel_checks_w1 && E == 0)
    require_finite(std::span<const Real>(p.mlp_w1.data(), static_cast<std::size_t>(p.mlp_w1.size())), "params.mlp_w1");
  if (need_entry) {
    require(E >= 1, "x.rows()", N,
            "too few tokens for one complete entry (the first entry ends at position " +
                std::to_string(g.sources(0).last) + ")");
  }
  if (spec.pool == pool_kind::weights) {
    // entries with masked leading slots renormalise over the rest: that rest must carry weight
    for (index_t e = 0; g.masked_slots(e) > 0; ++e) {
      const index_t m0 = g.masked_slots(e);
      double tot = 0.0;
      for (index_t r = m0; r < spec.grid.window; ++r) tot += spec.slot_weights[static_cast<std::size_t>(r)];
      require(tot > 0.0, "slot_weights", tot,
              "the unmasked slots " + std::to_string(m0) + "… of entry " + std::to_string(e) +
                  " (before position 0 the rest is masked) must not all have zero weight");
    }
  }
  if (spec.rope.anchor != rope_anchor::none) {
    const index_t c = p.output_dim(spec, d);
    const index_t rd = spec.rope.rope_dim == 0 ? c : spec.rope.rope_dim;
    require(rd <= c && rd % 2 == 0, "rope.rope_dim", spec.rope.rope_dim,
            "rotated channels must be even and <= the output width " + std::to_string(c));
  }
  return E;
}

/// Computes entries [e0, e1) of eng's head from the rows x[0 … nrows) (row i = absolute position
/// pos0 + i; every source of those entries must lie in [pos0, pos0 + nrows)) into out (row 0 =
/// entry e0). No checks: callers validate.
template <class Real, class Arch>
void run_entries(const engine<Real, Arch>& eng, const Real* x, index_t nrows, index_t pos0, index_t e0, index_t e1,
                 Real* out, const compress_options& opt, compress_workspace<Real>* workspace = nullptr) {
  const operator_spec& spec = *eng.spec;
  const pool_params<Real>& p = *eng.p;
  const index_t d = eng.d, c = eng.c, E = e1 - e0;
  if (E <= 0) return;
  const int nt = resolve_threads(opt, static_cast<std::size_t>(nrows * d) * sizeof(Real));
  compress_workspace<Real> local;
  compress_workspace<Real>& ws = workspace ? *workspace : local;

  // Projections (token-wise, computed once per token).
  std::vector<Real>& pay_buf = ws.pay;
  std::vector<Real>& z_buf = ws.z;
  typename engine<Real, Arch>::rows_t R{x, d, x, d, nullptr, 0, pos0};
  const bool projected = p.w_c.size() && (spec.pool == pool_kind::slot_gate || spec.pool == pool_kind::channel_gate ||
                                          spec.pool == pool_kind::two_stream);
  if (projected) {
    pay_buf.resize(static_cast<std::size_t>(nrows * p.w_c.cols()));
    R.pay = pay_buf.data();
    R.ldp = p.w_c.cols();
    R.pay_b = spec.pool == pool_kind::two_stream ? c : 0;  // [stream a | stream b]
  }
  // two_stream without W_C: the identity payload [x | x] is x itself for both streams (pay_b = 0)
  if (p.w_z.size()) {
    z_buf.resize(static_cast<std::size_t>(nrows * p.w_z.cols()));
    R.z = z_buf.data();
    R.ldz = p.w_z.cols();
  }
  // both maps in one pass over the token rows when both are present
  if (projected && p.w_z.size()) {
    project_rows<Real, Arch>(x, d, nrows, d, p.w_c, pay_buf.data(), nt, &p.w_z, z_buf.data());
  } else if (projected) {
    project_rows<Real, Arch>(x, d, nrows, d, p.w_c, pay_buf.data(), nt);
  } else if (p.w_z.size()) {
    project_rows<Real, Arch>(x, d, nrows, d, p.w_z, z_buf.data(), nt);
  }

  bool nt_store = false;
  if constexpr (!simd::is_scalar_v<Arch>) {
    const bool aligned = (reinterpret_cast<std::uintptr_t>(out) % 64 == 0) &&
                         ((static_cast<std::size_t>(c) * sizeof(Real)) % 64 == 0);
    const std::size_t out_bytes = static_cast<std::size_t>(E * c) * sizeof(Real);
    nt_store = aligned && (opt.stores == store_mode::streaming ||
                           (opt.stores == store_mode::automatic && out_bytes >= (std::size_t(8) << 20)));
  }

  auto& scratch = ws.scratch;
  auto& ptrs = ws.ptrs;
  if (scratch.size() < static_cast<std::size_t>(nt)) scratch.resize(static_cast<std::size_t>(nt));
  if (ptrs.size() < static_cast<std::size_t>(nt)) ptrs.resize(static_cast<std::size_t>(nt));
  for (auto& s : scratch)
    if (s.size() < static_cast<std::size_t>(eng.scratch_size)) s.resize(static_cast<std::size_t>(eng.scratch_size));
  for (auto& s : ptrs)
    if (s.size() < static_cast<std::size_t>(3 * spec.grid.window)) s.resize(static_cast<std::size_t>(3 * spec.grid.window));
  const std::size_t share = static_cast<std::size_t>(nrows * d) * sizeof(Real) / static_cast<std::size_t>(nt);
  // automatic lockstep only on grids without overlap: with W > S it was slower on Zen 5 in 8 of 9
  // in-process rounds (fixed weights, W = 8, S = 4, N = 16384, d = 4096 and 512, 1 and 2 threads:
  // 1–6 %) and no faster on the Xeon (docs/performance.md)
  const index_t q = opt.interleave > 0 ? opt.interleave
                                       : (share > (std::size_t(96) << 20) && eng.W <= eng.S ? 4 : 1);
  // narrow rows: the loads of four sub-ranges interleaved (entries_lockstep) when asked for
  // (interleave > 1) or automatically once a thread's share is out of cache (≥ 8 MiB)
  const bool lockstep_loads =
      eng.lockstep_rows && (opt.interleave > 1 || (opt.interleave == 0 && share >= (std::size_t(8) << 20)));
  auto& tiles = ws.tiles;
  if (tiles.size() < static_cast<std::size_t>(nt)) tiles.resize(static_cast<std::size_t>(nt));
  // the entries' RoPE cache: only a caller's workspace outlives the call
  double* rc = nullptr;
  if (workspace && eng.do_rope) {
    if (ws.rope_freq != eng.rope.inv_freq) {
      ws.rope_freq = eng.rope.inv_freq;
      ws.rope_cs.clear();
    }
    const auto need = static_cast<std::size_t>(E * eng.rope_stride());
    if (ws.rope_cs.size() < need) ws.rope_cs.resize(need, std::numeric_limits<double>::quiet_NaN());
    rc = ws.rope_cs.data();
  }
  // W1's values: on the paths whose product kernel checks what it packs (gemm_checks_b), the MLP's
  // first layer reports a non-finite weight here and the call throws after its threads have
  // joined, naming the element (callers may leave W1's values out of their validation: see
  // validate_call); elsewhere the flags stay false
  std::unique_ptr<bool[]> w1_bad(spec.pool == pool_kind::mlp ? new bool[static_cast<std::size_t>(nt)]() : nullptr);
  auto check_w1 = [&] {
    if (!w1_bad) return;
    for (int t = 0; t < nt; ++t)
      if (w1_bad[static_cast<std::size_t>(t)])
        require_finite(std::span<const Real>(p.mlp_w1.data(), static_cast<std::size_t>(p.mlp_w1.size())), "params.mlp_w1");
  };
  auto run = [&](int tid, int n_thr) {
    const index_t a = e0 + E * tid / n_thr, b = e0 + E * (tid + 1) / n_thr;
    if constexpr (!simd::is_scalar_v<Arch>) {
      if (spec.pool == pool_kind::mlp) {
        mlp_entries<Real, Arch>(eng, x, d, pos0, a, b, e0, out, nt_store, tiles[static_cast<std::size_t>(tid)], rc,
                                w1_bad.get() + tid);
        if (nt_store) store_fence();
        return;
      }
    }
    Real* sc = scratch[static_cast<std::size_t>(tid)].data();
    const Real** pt = ptrs[static_cast<std::size_t>(tid)].data();
    if (eng.pair_blocks) {
      eng.block_entries(R, a, b, out + (a - e0) * c, nt_store, sc, pt, eng.rope_slot(rc, a - e0));
    } else if (lockstep_loads && b - a >= 4 * engine<Real, Arch>::lockstep_q) {
      eng.entries_lockstep(R, a, b, out + (a - e0) * c, nt_store, sc, pt);
    } else if ((q <= 1 || b - a < 4 * q) && eng.post) {
      constexpr index_t T = engine<Real, Arch>::tile_rows;
      auto& tile = tiles[static_cast<std::size_t>(tid)];
      if (tile.size() < static_cast<std::size_t>(T * c)) tile.resize(static_cast<std::size_t>(T * c));
      for (index_t e = a; e < b; e += T)
        eng.entries_tiled(R, e, std::min(T, b - e), tile.data(), out + (e - e0) * c, nt_store, sc, pt,
                          eng.rope_slot(rc, e - e0));
    } else if (q <= 1 || b - a < 4 * q) {
      for (index_t e = a; e < b; ++e) eng.entry(R, e, out + (e - e0) * c, nt_store, sc, pt, eng.rope_slot(rc, e - e0));
    } else {
      // q contiguous sub-ranges walked in lockstep: q concurrent read streams
      const index_t len = b - a, step = (len + q - 1) / q;
      for (index_t i = 0; i < step; ++i) {
        for (index_t j = 0; j < q; ++j) {
          const index_t e = a + j * step + i;
          if (e < std::min(b, a + (j + 1) * step))
            eng.entry(R, e, out + (e - e0) * c, nt_store, sc, pt, eng.rope_slot(rc, e - e0));
        }
      }
    }
    if (nt_store) store_fence();
  };
#if defined(_OPENMP)
  if constexpr (simd::fused_fma<Arch>()) {
    if (spec.pool == pool_kind::mlp && nt > 1 && E <= nt * mlp_tile && eng.g.sources(e0).first >= 0) {
      if (tiles.size() < static_cast<std::size_t>(nt)) tiles.resize(static_cast<std::size_t>(nt));
      mlp_entries_shared<Real, Arch>(eng, x, pos0, e0, E, out, nt_store, nt, tiles, rc, w1_bad.get());
      check_w1();
      return;
    }
  }
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    run(omp_get_thread_num(), omp_get_num_threads());
    check_w1();
    return;
  }
#endif
  run(0, 1);
  check_w1();
}

}  // namespace detail

/// The token-wise projections of a token block, as the compressor computes them: the payload
/// C = X·W_C and the gate logits Z = X·W_Z (N rows each).
template <class Real>
struct token_projection {
  matrix_t<Real> payload;  ///< N × c (two_stream: N × 2c, [stream a | stream b]); W_C empty: X (two_stream: [X | X])
  matrix_t<Real> logits;   ///< same shape as payload; W_Z empty: zeros
};

/// Projects x (N × d) with the payload and gate-logit maps of a channel_gate, two_stream or
/// slot_gate pool (slot_gate: payload only, logits N × 0), with the kernel the compressor uses,
/// so the rows equal the compressor's intermediate values bit for bit. Throws kvphase::error for
/// another pool kind or invalid parameters (as compress()).
template <class Real, class Arch = simd::default_arch>
[[nodiscard]] token_projection<Real> project_tokens(const operator_spec& spec, const pool_params<Real>& p,
                                                    matrix_view<Real> x, index_t head = 0,
                                                    const compress_options& opt = {}) {
  require(spec.pool == pool_kind::channel_gate || spec.pool == pool_kind::two_stream || spec.pool == pool_kind::slot_gate,
          "pool", to_string(spec.pool), "has no token projections (channel_gate, two_stream or slot_gate only)");
  const index_t N = x.rows(), d = x.cols();
  detail::validate_call(spec, p, N, d, head, opt, false);
  const index_t c = p.output_dim(spec, d);
  const index_t w = spec.pool == pool_kind::two_stream ? 2 * c : c;
  const int nt = detail::resolve_threads(opt, static_cast<std::size_t>(N * d) * sizeof(Real));
  token_projection<Real> out;
  out.payload.resize(N, w);
  const bool logits = spec.pool != pool_kind::slot_gate;
  const bool both = p.w_c.size() && logits && p.w_z.size();
  if (logits) {
    if (p.w_z.size()) out.logits.resize(N, w);
    else out.logits = matrix_t<Real>::Zero(N, w);
  } else {
    out.logits.resize(N, 0);
  }
  if (both) {
    detail::project_rows<Real, Arch>(x.data(), d, N, d, p.w_c, out.payload.data(), nt, &p.w_z, out.logits.data());
    return out;
  }
  if (p.w_c.size()) {
    detail::project_rows<Real, Arch>(x.data(), d, N, d, p.w_c, out.payload.data(), nt);
  } else {
    for (index_t t = 0; t < N; ++t)
      for (index_t k = 0; k < w; ++k) out.payload(t, k) = x(t, k % d);
  }
  if (logits && p.w_z.size()) detail::project_rows<Real, Arch>(x.data(), d, N, d, p.w_z, out.logits.data(), nt);
  return out;
}

/// Form taking a matrix.
template <class Real, class Arch = simd::default_arch>
[[nodiscard]] token_projection<Real> project_tokens(const operator_spec& spec, const pool_params<Real>& p,
                                                    const matrix_t<Real>& x, index_t head = 0,
                                                    const compress_options& opt = {}) {
  return project_tokens<Real, Arch>(spec, p, matrix_view<Real>(x.data(), x.rows(), x.cols()), head, opt);
}

/// Compresses x (N × d, token-major) for head `head` of `spec` with that head's parameters `p`
/// into out (num_entries(N) × output_dim). The head's grid is spec.head_grid(head). A sequence
/// with no complete entry gives zero rows (as the reference compressors do).
/// Throws kvphase::error (naming the parameter) for an invalid spec, parameters of the wrong
/// shape or non-finite, a head outside [0, heads), or an output of the wrong shape; every check
/// comes before out is written but one: a non-finite W1 value of an MLP pool is found by the
/// product that packs W1 on hardware-FMA paths (no pass of its own), and out's contents are then
/// unspecified. Deterministic: bitwise identical for any thread count. With a
/// workspace, its buffers are reused (no allocation once sized).
template <class Real, class Arch = simd::default_arch>
void compress_into(const operator_spec& spec, const pool_params<Real>& p, matrix_view<Real> x,
                   matrix_mut_view<Real> out, index_t head = 0, const compress_options& opt = {},
                   compress_workspace<Real>* workspace = nullptr) {
  const index_t N = x.rows(), d = x.cols();
  const index_t E = detail::validate_call(spec, p, N, d, head, opt, false, detail::gemm_checks_b<Arch>());
  const index_t c = p.output_dim(spec, d);
  require(out.rows() == E, "out.rows()", out.rows(), "must equal the number of complete entries " + std::to_string(E));
  require(out.cols() == c, "out.cols()", out.cols(), "must equal the output width " + std::to_string(c));
  const detail::engine<Real, Arch> eng(spec, p, d, head);
  detail::run_entries<Real, Arch>(eng, x.data(), N, 0, 0, E, out.data(), opt, workspace);
}

/// Allocating form: returns num_entries(N) × output_dim (0 rows when no entry is complete).
template <class Real, class Arch = simd::default_arch>
[[nodiscard]] matrix_t<Real> compress(const operator_spec& spec, const pool_params<Real>& p, matrix_view<Real> x,
                                      index_t head = 0, const compress_options& opt = {}) {
  const index_t N = x.rows(), d = x.cols();
  const index_t E = detail::validate_call(spec, p, N, d, head, opt, false, detail::gemm_checks_b<Arch>());
  matrix_t<Real> out(E, p.output_dim(spec, d));
  const detail::engine<Real, Arch> eng(spec, p, d, head);
  detail::run_entries<Real, Arch>(eng, x.data(), N, 0, 0, E, out.data(), opt);
  return out;
}

template <class Real, class Arch = simd::default_arch>
[[nodiscard]] matrix_t<Real> compress(const operator_spec& spec, const pool_params<Real>& p, const matrix_t<Real>& x,
                                      index_t head = 0, const compress_options& opt = {}) {
  return compress<Real, Arch>(spec, p, matrix_view<Real>(x.data(), x.rows(), x.cols()), head, opt);
}

/// Parameter-free pools (identity, mean, max, weights, slot_gate without content logits).
template <class Real, class Arch = simd::default_arch>
[[nodiscard]] matrix_t<Real> compress(const operator_spec& spec, const matrix_t<Real>& x, index_t head = 0,
                                      const compress_options& opt = {}) {
  return compress<Real, Arch>(spec, pool_params<Real>{}, x, head, opt);
}

/// Every head: element h is compress(spec, params[h], x, h). params.size() must equal spec.heads.
template <class Real, class Arch = simd::default_arch>
[[nodiscard]] std::vector<matrix_t<Real>> compress_heads(const operator_spec& spec,
                                                         std::span<const pool_params<Real>> params,
                                                         const matrix_t<Real>& x, const compress_options& opt = {}) {
  spec.validate();
  require(static_cast<index_t>(params.size()) == spec.heads, "params.size()", params.size(),
          "must equal heads = " + std::to_string(spec.heads));
  std::vector<matrix_t<Real>> out;
  out.reserve(params.size());
  for (index_t h = 0; h < spec.heads; ++h) out.push_back(compress<Real, Arch>(spec, params[static_cast<std::size_t>(h)], x, h, opt));
  return out;
}

/// Incremental (cache) form of the compressor: feed the sequence in pieces of any size; each
/// append returns the entries the new tokens complete (possibly none). The rows returned over all
/// appends equal compress() of the whole sequence bit for bit, because every entry is a pure
/// function of its source tokens computed by the same kernel. Only the tokens that entries not
/// yet emitted still need are kept (fewer than W + the last piece).
template <class Real, class Arch = simd::default_arch>
class compress_stream {
 public:
  /// Throws kvphase::error for an invalid spec, parameters, head or options (as compress()).
  compress_stream(operator_spec spec, pool_params<Real> params, index_t d, index_t head = 0,
                  const compress_options& opt = {})
      : spec_(std::move(spec)), p_(std::move(params)), d_(d), head_(head), opt_(opt) {
    detail::validate_call(spec_, p_, 0, d_, head_, opt_, false);
    grid_ = spec_.head_grid(head_);
    c_ = p_.output_dim(spec_, d_);
  }

  /// Appends tokens (k × d, the next k positions) and returns the newly completed entries
  /// (rows entries_emitted() before … after the call) as a matrix of width output_dim().
  matrix_t<Real> append(matrix_view<Real> tokens) {
    require(tokens.cols() == d_, "tokens.cols()", tokens.cols(), "must equal d = " + std::to_string(d_));
    const index_t k = tokens.rows();
    require(k <= chunk_grid::max_extent - 1 - n_, "tokens.rows()", k, "the stream must stay below 2^40 tokens");
    buf_.insert(buf_.end(), tokens.data(), tokens.data() + k * d_);
    n_ += k;
    const index_t E = grid_.num_entries(n_);
    matrix_t<Real> out(std::max<index_t>(0, E - next_), c_);
    if (E > next_) {
      const detail::engine<Real, Arch> eng(spec_, p_, d_, head_);
      detail::run_entries<Real, Arch>(eng, buf_.data(), n_ - pos0_, pos0_, next_, E, out.data(), opt_);
      next_ = E;
    }
    // keep the tokens from the first source of the next entry on
    const index_t keep = std::min(n_, std::max<index_t>(pos0_, grid_.sources(next_).first));
    if (keep > pos0_) {
      buf_.erase(buf_.begin(), buf_.begin() + (keep - pos0_) * d_);
      pos0_ = keep;
    }
    return out;
  }
  matrix_t<Real> append(const matrix_t<Real>& tokens) {
    return append(matrix_view<Real>(tokens.data(), tokens.rows(), tokens.cols()));
  }

  [[nodiscard]] index_t tokens_seen() const noexcept { return n_; }
  [[nodiscard]] index_t entries_emitted() const noexcept { return next_; }
  [[nodiscard]] index_t buffered_tokens() const noexcept { return n_ - pos0_; }
  [[nodiscard]] index_t output_dim() const noexcept { return c_; }
  [[nodiscard]] const chunk_grid& grid() const noexcept { return grid_; }

 private:
  operator_spec spec_;
  pool_params<Real> p_;
  index_t d_ = 0, head_ = 0, c_ = 0;
  compress_options opt_;
  chunk_grid grid_;
  std::vector<Real> buf_;  ///< tokens pos0_ … n_ − 1, row-major
  index_t pos0_ = 0, n_ = 0, next_ = 0;
};

}  // namespace kvphase::compress

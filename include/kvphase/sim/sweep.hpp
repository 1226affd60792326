#pragma once
/// \file sim/sweep.hpp
/// Phase sweeps: every phase group × trials, for a compressed model and the full-attention
/// control on the same inputs (same keys, same query, same layout), with counter-based
/// randomness so the counts are bitwise identical for any thread count and any shard split.
///
/// Trial k of group g draws everything from streams keyed by (seed, config_id, g, k):
///   stream = rng::combine(config_id, rng::combine(g, k));
///   layout / placement: rng::philox_stream(seed, stream);
///   vectors and noise:  normal generator seeded by (seed, rng::combine(stream, normal_tag)).
/// config_id hashes everything that defines a trial (task, operator, window, engine, modulus)
/// but not trials, threads or shard, so more trials extend a sample and shards partition it.
/// Shard i of n runs trials [⌊i·T/n⌋, ⌊(i+1)·T/n⌋) of every group. Counts are integers and
/// mass/margin sums are fixed-point integers, so merging is exact and order-free.
///
/// Engines (both exact for iid Gaussian keys and linear pools, see sim/linear_model.hpp):
///  - key: keys generated and scored in one fused pass (sim/noise_scores.hpp), d normals/token;
///  - score: token scores sampled directly, one normal per token.
/// Operators that are not linear in the keys (sweep_config::general()) take the general
/// key-space path on every task: the same normals are drawn in the same order, but the keys are
/// materialised, the planted rows written over them and the keys compressed by the operator
/// (sim/general_model.hpp; values pooled by the uniform mean over an entry's slots). The full
/// control is scored from the same materialised keys.
/// The task layouts and outcomes are documented in tasks/needle.hpp, tasks/kv_pairs.hpp and
/// tasks/padding.hpp.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/parallel.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/general_model.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/noise_scores.hpp"
#include "kvphase/sim/normal.hpp"
#include "kvphase/sim/shard.hpp"
#include "kvphase/tasks/kv_pairs.hpp"
#include "kvphase/tasks/needle.hpp"
#include "kvphase/tasks/padding.hpp"

namespace kvphase::sim {

enum class engine_kind { key, score };
enum class task_kind { needle, kv_pairs, padding };

inline const char* to_string(engine_kind e) noexcept { return e == engine_kind::key ? "key" : "score"; }
inline const char* to_string(task_kind t) noexcept {
  switch (t) {
    case task_kind::needle: return "needle";
    case task_kind::kv_pairs: return "kv-pairs";
    case task_kind::padding: return "padding";
  }
  return "?";
}
inline engine_kind parse_engine(std::string_view s) {
  if (s == "key") return engine_kind::key;
  if (s == "score") return engine_kind::score;
  fail("engine", std::string(s), "must be key or score");
}
inline task_kind parse_task(std::string_view s) {
  if (s == "needle") return task_kind::needle;
  if (s == "kv-pairs" || s == "kv_pairs") return task_kind::kv_pairs;
  if (s == "padding") return task_kind::padding;
  fail("task", std::string(s), "must be needle, kv-pairs or padding");
}

/// Stream tag of the normal generator inside a trial.
inline constexpr std::uint64_t normal_tag = rng::hash_text("kvphase.sim.normals");
/// Fixed-point scale of the mass and margin sums.
inline constexpr double mass_unit = 0x1.0p32;
inline constexpr double margin_unit = 0x1.0p20;

struct sweep_config {
  task_kind task = task_kind::needle;
  tasks::needle_config needle{};
  tasks::kv_pairs_config kv_pairs{};
  tasks::padding_config padding{};
  compress::operator_spec op{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean, .name = "mean"};
  index_t window = 0;        ///< raw window of the compressed model (joint softmax)
  engine_kind engine = engine_kind::key;
  index_t modulus = 0;       ///< phase groups for needle / kv-pairs (0: the operator's stride)
  index_t trials = 1000;     ///< trials per group (before sharding)
  std::uint64_t seed = 1;
  int threads = 0;           ///< 0: all available
  shard_spec shard{};
  std::uint64_t params_seed = 0;  ///< parameters of non-linear operators (general key-space path)
  bool compute_mass = true;  ///< needle: also the attention mass (padding and kv-pairs always need it);
                             ///< does not change any draw or hit

  /// Number of groups: the modulus (needle, kv-pairs) or the padding lengths.
  [[nodiscard]] index_t groups() const noexcept {
    if (task == task_kind::padding) return padding.lengths;
    return modulus > 0 ? modulus : op.grid.stride;
  }
  /// Label of group g: the phase g, or the padding length.
  [[nodiscard]] index_t label(index_t g) const noexcept { return task == task_kind::padding ? padding.pad_min + g : g; }
  [[nodiscard]] index_t dim() const noexcept {
    switch (task) {
      case task_kind::needle: return needle.dim;
      case task_kind::kv_pairs: return kv_pairs.dim;
      case task_kind::padding: return padding.dim;
    }
    return 0;
  }

  /// Whether the operator needs the general key-space path (materialised keys + compressor).
  [[nodiscard]] bool general() const noexcept { return !linear_engine_supports(op); }

  void validate() const {
    op.validate();
    if (general()) {
      require(engine == engine_kind::key, "engine", to_string(engine),
              "operator " + (op.name.empty() ? std::string(compress::to_string(op.pool)) : op.name) +
                  " is not linear in the keys: only the key engine models it exactly");
      require(op.heads == 1, "heads", op.heads, "sweeps model one compression head");
    }
    require(window >= 0 && window <= (index_t(1) << 30), "window", window, "must be in [0, 2^30]");
    require(modulus >= 0 && modulus <= 4096, "modulus", modulus, "must be in [0, 4096] (0: the stride)");
    require(trials >= 1 && trials <= (index_t(1) << 40), "trials", trials, "must be in [1, 2^40]");
    require(threads >= 0 && threads <= 1024, "threads", threads, "must be in [0, 1024]");
    shard.validate();
    const index_t M = groups();
    switch (task) {
      case task_kind::needle:
        needle.validate();
        require(needle.context >= window + op.grid.window + 4 * M + 2 * needle.span() + 16, "context",
                needle.context, "too short for the window, the chunk window and the modulus");
        break;
      case task_kind::kv_pairs:
        kv_pairs.validate(M);
        break;
      case task_kind::padding:
        padding.validate();
        require(padding.code_length - std::max(padding.offset_a + padding.span_a, padding.offset_b + padding.span_b) >=
                    window + op.grid.window,
                "window", window, "the evidence spans must lie before the raw window and the last chunk");
        break;
    }
    if (general()) {
      const index_t n_min = task == task_kind::padding    ? padding.context(0)
                            : task == task_kind::kv_pairs ? kv_pairs.context
                                                          : needle.context;
      require(op.grid.num_entries(n_min) >= 1, "context", n_min,
              "too short for one complete entry of the operator (window " + std::to_string(op.grid.window) + ")");
    }
  }

  /// Canonical text of everything that defines the draws (not trials, threads or shard).
  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os.precision(17);
    os << "task=" << to_string(task) << ";";
    switch (task) {
      case task_kind::needle: os << needle; break;
      case task_kind::kv_pairs: os << kv_pairs; break;
      case task_kind::padding: os << padding; break;
    }
    os << ";" << op << (general() ? ";params_seed=" + std::to_string(params_seed) : std::string()) << ";window=" << window << ";engine=" << to_string(engine) << ";groups=" << groups();
    return os.str();
  }
  [[nodiscard]] std::uint64_t config_id() const { return rng::hash_text(describe()); }

  friend std::ostream& operator<<(std::ostream& os, const sweep_config& c) {
    return os << "sweep_config{" << c.describe() << ";trials=" << c.trials << ";seed=" << c.seed
              << ";threads=" << c.threads << ";shard=" << c.shard << "}";
  }
};

/// Counts of one (model, group) cell. Sums of mass and margin are fixed-point (see mass_unit,
/// margin_unit) so that any split merges exactly.
struct group_stats {
  std::int64_t trials = 0;
  std::int64_t hits = 0;
  std::int64_t mass_fx = 0;
  std::int64_t margin_fx = 0;

  [[nodiscard]] double mean_mass() const noexcept { return trials ? static_cast<double>(mass_fx) / mass_unit / static_cast<double>(trials) : 0.0; }
  [[nodiscard]] double mean_margin() const noexcept {
    return trials ? static_cast<double>(margin_fx) / margin_unit / static_cast<double>(trials) : 0.0;
  }
  void add(const tasks::trial_outcome& o) noexcept {
    ++trials;
    hits += o.hit ? 1 : 0;
    mass_fx += std::llround(std::clamp(o.mass, 0.0, 1.0) * mass_unit);
    margin_fx += std::llround(std::clamp(o.margin, -1e6, 1e6) * margin_unit);
  }
  group_stats& operator+=(const group_stats& o) noexcept {
    trials += o.trials;
    hits += o.hits;
    mass_fx += o.mass_fx;
    margin_fx += o.margin_fx;
    return *this;
  }
  friend bool operator==(const group_stats&, const group_stats&) = default;
};

struct sweep_result {
  sweep_config config;
  std::vector<index_t> labels;          ///< per group: phase, or padding length
  std::vector<group_stats> compressed;  ///< per group
  std::vector<group_stats> full;        ///< per group (the control, same inputs)
  double seconds = 0;

  [[nodiscard]] std::int64_t total_trials() const noexcept {
    std::int64_t n = 0;
    for (const auto& g : compressed) n += g.trials;
    return n;
  }
};

/// Called from the calling thread about every `interval` seconds with (trials done, total).
struct sweep_progress {
  std::function<void(std::int64_t, std::int64_t)> report;
  double interval = 0.5;
};

namespace detail {

/// A span a task writes over the noise: tokens [first, first + count) carry the key coef·v
/// (general path: written into the materialised keys) or the score `score` (linear engines:
/// written into the token scores, as the task computes it).
struct planted_span {
  index_t first = 0, count = 0;
  const float* v = nullptr;
  float coef = 1.0f, score = 0.0f;
};

struct trial_workspace {
  std::vector<float> s, z, pair_s, kappa, kappa_b, eps, q, codebook;
  general_workspace gen;  ///< general path: keys, projections, entries
  std::vector<planted_span> planted;
  std::vector<std::uint32_t> codes;
  std::vector<double> code_weight;
  tasks::kv_layout layout;
  linear_buffers comp, full;
  Eigen::MatrixXf gram;
};

inline double dot_d(const float* a, const float* b, index_t n) noexcept {
  double s = 0;
  for (index_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

/// Draws the noise scores of n tokens for query q (|q| = qnorm) with the configured engine.
inline void noise(engine_kind eng, normal_state& st, const float* q, index_t d, double qnorm, float* out, index_t n) {
  if (eng == engine_kind::key) {
    key_space_scores(st, q, d, out, n);
  } else {
    score_space_scores(st, static_cast<float>(qnorm), out, n);
  }
}

/// Query q = κ + extra; returns |q|.
inline double make_query(std::vector<float>& q, const std::vector<float>& base, const std::vector<float>& eps,
                         double sigma, index_t d) {
  q.resize(static_cast<std::size_t>(d));
  for (index_t i = 0; i < d; ++i)
    q[static_cast<std::size_t>(i)] =
        base[static_cast<std::size_t>(i)] + static_cast<float>(sigma) * eps[static_cast<std::size_t>(i)];
  return std::sqrt(dot_d(q.data(), q.data(), d));
}

inline void fill(normal_generator& g, std::vector<float>& v, index_t n) {
  v.resize(static_cast<std::size_t>(n));
  g.fill(v.data(), n);
}
/// The same draws times scale (normal_generator::fill_scaled).
inline void fill(normal_generator& g, std::vector<float>& v, index_t n, float scale) {
  v.resize(static_cast<std::size_t>(n));
  g.fill_scaled(v.data(), n, scale);
}

/// Needle outcome for one model whose item scores are in buf (pooled, or scored by the general
/// model); m gives the geometry and the per-token value weights.
inline tasks::trial_outcome needle_readout(const linear_model& m, linear_buffers& buf, index_t a, index_t b, float beta,
                                           bool mass) {
  float bt, bo;
  m.best_scores(buf, a, b, bt, bo);
  tasks::trial_outcome o;
  o.hit = bt > bo;
  o.margin = static_cast<double>(bt) - static_cast<double>(bo);
  if (mass) {
    m.softmax(buf, beta, false, std::max(bt, bo));
    o.mass = m.span_mass(buf, a, b);
  }
  return o;
}

}  // namespace detail

/// Runs one trial (group g, trial k) and returns the outcomes of the compressed and full models.
/// Exposed for tests; run_sweep calls it for every (g, k) of its shard.
class trial_runner {
 public:
  explicit trial_runner(const sweep_config& c) : c_(c), cid_(c.config_id()), full_(linear_model::full()) {
    if (c.general()) general_ = general_model(c.op, c.dim(), c.window, c.params_seed);
    else comp_ = linear_model(c.op, c.window);
  }

  void run(index_t g, index_t k, tasks::trial_outcome& comp, tasks::trial_outcome& full) {
    const std::uint64_t stream = rng::combine(cid_, rng::combine(static_cast<std::uint64_t>(g), static_cast<std::uint64_t>(k)));
    rng::philox_stream ps(c_.seed, stream);
    normal_generator gen(c_.seed, rng::combine(stream, normal_tag));
    switch (c_.task) {
      case task_kind::needle: needle(g, ps, gen, comp, full); break;
      case task_kind::kv_pairs: kv(g, ps, gen, comp, full); break;
      case task_kind::padding: padding(g, gen, comp, full); break;
    }
  }

 private:
  void content(normal_generator& gen, index_t N) {
    if (!comp_.content_gated()) return;
    auto& w = ws_;
    detail::fill(gen, w.z, N, comp_.content_std());
  }

  void needle(index_t g, rng::philox_stream& ps, normal_generator& gen, tasks::trial_outcome& oc,
              tasks::trial_outcome& of) {
    const auto& t = c_.needle;
    auto& w = ws_;
    const index_t N = t.context, d = t.dim;
    const index_t reserve = c_.window + c_.op.grid.window;
    const index_t p = tasks::needle_position(t, c_.groups(), g, c_.op.grid.origin, reserve, ps);
    detail::fill(gen, w.kappa, d);
    if (t.query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
    const double qn = detail::make_query(w.q, w.kappa, w.eps, t.query_noise, d);
    const double qk = detail::dot_d(w.q.data(), w.kappa.data(), d);
    normal_state st = gen.state();
    const float beta = static_cast<float>(t.beta());
    w.planted.assign({{p, t.key_span, w.kappa.data(), 1.0f, static_cast<float>(qk)},
                      {p + t.key_span, t.value_span, w.kappa.data(), static_cast<float>(t.value_key_weight),
                       static_cast<float>(t.value_key_weight * qk)}});
    const linear_model& m = score_models(st, N, qn);
    oc = detail::needle_readout(m, w.comp, p, p + t.span(), beta, c_.compute_mass);
    of = detail::needle_readout(full_, w.full, p, p + t.span(), beta, c_.compute_mass);
  }

  /// The items of both models from the trial's noise and its planted spans (ws_.planted):
  /// general path — materialised keys, spans written as rows, compressed by the operator; linear
  /// engines — token scores, spans written as scores, pooled. Fills ws_.comp (compressed) and
  /// ws_.full (full attention: the token scores) and returns the model that reads the compressed
  /// items (their geometry and value weights).
  const linear_model& score_models(normal_state& st, index_t N, double qn) {
    auto& w = ws_;
    const index_t d = c_.dim();
    const linear_model* m = &comp_;
    if (c_.general()) {
      float* K = noise_keys(st, N);
      for (const auto& r : w.planted)
        for (index_t i = 0; i < r.count; ++i) plant_row(K + (r.first + i) * d, r.v, r.coef);
      key_scores(N);
      m = &general_items(N);
    } else {
      w.s.resize(static_cast<std::size_t>(N));
      detail::noise(c_.engine, st, w.q.data(), d, qn, w.s.data(), N);
      normal_generator rest(st);
      content(rest, N);
      for (const auto& r : w.planted)
        for (index_t i = 0; i < r.count; ++i) w.s[static_cast<std::size_t>(r.first + i)] = r.score;
      comp_.pool(w.s.data(), w.z.data(), N, w.comp);
    }
    full_.pool(w.s.data(), nullptr, N, w.full);
    return *m;
  }

  // ---- general path (operators not linear in the keys): materialised keys ----------------------

  /// The n noise keys the key engine would score from `st` (same normals, same order), into the
  /// reused key buffer; advances st as key_space_scores does.
  float* noise_keys(normal_state& st, index_t n) {
    auto& gw = ws_.gen;
    const index_t d = c_.dim();
    gw.keys.resize(static_cast<std::size_t>(n * d));
    key_space_keys(st, d, gw.keys.data(), n, gw.blocks);
    return gw.keys.data();
  }
  /// row = coef · v (d floats).
  void plant_row(float* row, const float* v, float coef) const noexcept {
    const index_t d = c_.dim();
    for (index_t j = 0; j < d; ++j) row[j] = coef * v[j];
  }
  /// Token scores s_t = q·k_t of the n materialised keys (the full model's items).
  void key_scores(index_t n) {
    auto& w = ws_;
    const index_t d = c_.dim();
    w.s.resize(static_cast<std::size_t>(n));
    const float* K = w.gen.keys.data();
    for (index_t i = 0; i < n; ++i) w.s[static_cast<std::size_t>(i)] = simd::dot<float>(K + i * d, w.q.data(), d);
  }
  /// Scores the compressed model's items into ws_.comp; returns the model of its geometry and
  /// value weights.
  const linear_model& general_items(index_t n) {
    auto& w = ws_;
    general_.score(w.gen.keys.data(), n, w.q.data(), w.s.data(), w.comp, w.gen);
    return general_.geometry();
  }

  void kv(index_t g, rng::philox_stream& ps, normal_generator& gen, tasks::trial_outcome& oc, tasks::trial_outcome& of) {
    const auto& t = c_.kv_pairs;
    auto& w = ws_;
    const index_t N = t.context, d = t.dim, P = t.pairs, C = t.codes;
    tasks::kv_pairs_layout(t, c_.groups(), g, c_.op.grid.origin, ps, w.layout);
    const std::uint64_t code_key = ps.next_u64();
    detail::fill(gen, w.kappa, d);
    if (t.query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
    detail::fill(gen, w.codebook, C * d);
    const double qn = detail::make_query(w.q, w.kappa, w.eps, t.query_noise, d);
    const double qk = detail::dot_d(w.q.data(), w.kappa.data(), d);
    // unit-length codebook and its Gram matrix
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> nu(w.codebook.data(), C, d);
    for (index_t c = 0; c < C; ++c) nu.row(c) /= nu.row(c).norm();
    w.gram.resize(C, C);
    w.gram.noalias() = nu * nu.transpose();
    normal_state st = gen.state();
    w.codes.resize(static_cast<std::size_t>(P));
    for (index_t j = 0; j < P; ++j)
      w.codes[static_cast<std::size_t>(j)] = static_cast<std::uint32_t>(
          tasks::hashed_below(code_key, static_cast<std::uint64_t>(j), static_cast<std::uint64_t>(C)));
    const float beta = static_cast<float>(t.beta());
    // pair j: its key vector κ_j (general path: the P keys the key engine draws for the pair
    // scores; the target's is κ) or its score q·κ_j (linear engines)
    const float cv = static_cast<float>(t.value_key_weight);
    const float* pk = nullptr;
    if (c_.general()) {
      auto& keys = w.gen.aux_keys;
      keys.resize(static_cast<std::size_t>(P * d));
      key_space_keys(st, d, keys.data(), P, w.gen.blocks);
      plant_row(keys.data() + w.layout.target * d, w.kappa.data(), 1.0f);
      pk = keys.data();
    } else {
      w.pair_s.resize(static_cast<std::size_t>(P));
      detail::noise(c_.engine, st, w.q.data(), d, qn, w.pair_s.data(), P);
      w.pair_s[static_cast<std::size_t>(w.layout.target)] = static_cast<float>(qk);
    }
    w.planted.clear();
    for (index_t j = 0; j < P; ++j) {
      const index_t st0 = w.layout.start[static_cast<std::size_t>(j)];
      const float* kj = pk ? pk + j * d : nullptr;
      const float sj = pk ? 0.0f : w.pair_s[static_cast<std::size_t>(j)];
      w.planted.push_back({st0, t.key_span, kj, 1.0f, sj});
      w.planted.push_back({st0 + t.key_span, t.value_span, kj, cv, cv * sj});
    }
    const linear_model& m = score_models(st, N, qn);
    oc = kv_readout(m, w.comp, beta);
    of = kv_readout(full_, w.full, beta);
  }

  /// kv-pairs readout of one model whose item scores are in buf: value codes weighted by the
  /// output weight of their value tokens, decoded to the nearest unit codebook vector.
  tasks::trial_outcome kv_readout(const linear_model& m, linear_buffers& buf, float beta) {
    const auto& t = c_.kv_pairs;
    auto& w = ws_;
    const index_t P = t.pairs, C = t.codes;
    m.softmax(buf, beta, true);
    w.code_weight.assign(static_cast<std::size_t>(C), 0.0);
    double target_mass = 0;
    for (index_t j = 0; j < P; ++j) {
      const index_t v0 = w.layout.start[static_cast<std::size_t>(j)] + t.key_span;
      double a = 0;
      for (index_t i = 0; i < t.value_span; ++i) a += m.token_mass(buf, v0 + i);
      w.code_weight[w.codes[static_cast<std::size_t>(j)]] += a;
      if (j == w.layout.target) target_mass = a;
    }
    // o·ν_c = Σ_c' B[c'] G[c', c]; decode = argmax (unit codebook: nearest vector)
    const std::uint32_t ct = w.codes[static_cast<std::size_t>(w.layout.target)];
    double best_t = 0, best_o = -std::numeric_limits<double>::infinity();
    for (index_t c = 0; c < C; ++c) {
      double v = 0;
      for (index_t c2 = 0; c2 < C; ++c2) v += w.code_weight[static_cast<std::size_t>(c2)] * w.gram(c2, c);
      if (static_cast<std::uint32_t>(c) == ct) best_t = v;
      else best_o = std::max(best_o, v);
    }
    tasks::trial_outcome o;
    o.hit = best_t > best_o;
    o.margin = best_t - best_o;
    o.mass = target_mass;
    return o;
  }

  void padding(index_t g, normal_generator& gen, tasks::trial_outcome& oc, tasks::trial_outcome& of) {
    const auto& t = c_.padding;
    auto& w = ws_;
    const index_t L = t.pad_min + g, N = t.context(g), d = t.dim;
    detail::fill(gen, w.kappa, d);
    detail::fill(gen, w.kappa_b, d);
    if (t.query_noise > 0) detail::fill(gen, w.eps, d); else w.eps.assign(static_cast<std::size_t>(d), 0.0f);
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
                                         static_cast<float>(t.strength_b) * w.kappa_b[static_cast<std::size_t>(i)] +
                                         static_cast<float>(t.query_noise) * w.eps[static_cast<std::size_t>(i)];
    const double qn = std::sqrt(detail::dot_d(w.q.data(), w.q.data(), d));
    const double sa = detail::dot_d(w.q.data(), w.kappa.data(), d);
    const double sb = detail::dot_d(w.q.data(), w.kappa_b.data(), d);
    normal_state st = gen.state();
    const index_t a0 = L + t.offset_a, b0 = L + t.offset_b;
    const float beta = static_cast<float>(t.beta());
    auto readout = [&](const linear_model& m, linear_buffers& buf) {
      m.softmax(buf, beta);
      const double ma = m.span_mass(buf, a0, a0 + t.span_a);
      const double mb = m.span_mass(buf, b0, b0 + t.span_b);
      tasks::trial_outcome o;
      o.hit = ma > mb;
      o.margin = ma - mb;
      o.mass = ma;
      return o;
    };
    w.planted.assign({{a0, t.span_a, w.kappa.data(), 1.0f, static_cast<float>(sa)},
                      {b0, t.span_b, w.kappa_b.data(), 1.0f, static_cast<float>(sb)}});
    const linear_model& m = score_models(st, N, qn);
    oc = readout(m, w.comp);
    of = readout(full_, w.full);
  }

  const sweep_config& c_;
  std::uint64_t cid_;
  linear_model comp_, full_;
  general_model general_;
  detail::trial_workspace ws_;
};

/// Runs the sweep of `c` (its shard only). Throws kvphase::error on an invalid config.
inline sweep_result run_sweep(const sweep_config& c, const sweep_progress& progress = {}) {
  c.validate();
  const auto t0 = std::chrono::steady_clock::now();
  const index_t M = c.groups();
  const auto range = c.shard.range(c.trials);
  const index_t per = range.second - range.first;
  const std::int64_t total = static_cast<std::int64_t>(per) * M;
  sweep_result r;
  r.config = c;
  r.labels.resize(static_cast<std::size_t>(M));
  for (index_t g = 0; g < M; ++g) r.labels[static_cast<std::size_t>(g)] = c.label(g);
  r.compressed.assign(static_cast<std::size_t>(M), {});
  r.full.assign(static_cast<std::size_t>(M), {});
  std::atomic<std::int64_t> done{0};
  const int nthreads = parallel::thread_count(c.threads);
  parallel::for_each_index(
      total, nthreads,
      [&](auto& local, std::int64_t idx) {
        const index_t g = static_cast<index_t>(idx / std::max<index_t>(per, 1));
        const index_t k = range.first + static_cast<index_t>(idx % std::max<index_t>(per, 1));
        tasks::trial_outcome oc, of;
        local.runner.run(g, k, oc, of);
        local.comp[static_cast<std::size_t>(g)].add(oc);
        local.full[static_cast<std::size_t>(g)].add(of);
        done.fetch_add(1, std::memory_order_relaxed);
      },
      [&] {
        struct local_state {
          trial_runner runner;
          std::vector<group_stats> comp, full;
        };
        return local_state{trial_runner(c), std::vector<group_stats>(static_cast<std::size_t>(M)),
                           std::vector<group_stats>(static_cast<std::size_t>(M))};
      },
      [&](auto& local) {
        for (index_t g = 0; g < M; ++g) {
          r.compressed[static_cast<std::size_t>(g)] += local.comp[static_cast<std::size_t>(g)];
          r.full[static_cast<std::size_t>(g)] += local.full[static_cast<std::size_t>(g)];
        }
      },
      [&] {
        if (progress.report) progress.report(done.load(std::memory_order_relaxed), total);
      },
      progress.interval);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kvphase::sim

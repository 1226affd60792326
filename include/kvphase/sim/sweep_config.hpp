#pragma once
/// \file sim/sweep_config.hpp
/// What a phase sweep is (sweep_config) and what it returns (sweep_result): the types every
/// room shares — the engine (sim/sweep.hpp) runs them, the theory column (sim/report.hpp) and the
/// output (io/) read them. No engine code here.
///
/// Random streams. Trial k of group g draws everything from streams keyed by
/// (seed, config_id, g, k), config_id = rng::hash_text(stream_key()), where stream_key() is the
/// canonical text (core/fields.hpp) of every keyed field — the task and its config, the operator,
/// the raw window, the engine actually used, the modulus (0 resolved to the stride), params_seed —
/// under the schema name
/// "kvphase.sweep_config/2". Trials, threads, shard, seed and compute_mass are not keyed: more
/// trials extend a sample and shards partition it. The key never goes through printed text, so a
/// change of any log format changes no stream; a change of schema is a deliberate, versioned one.
///
/// Engines: `automatic` (the default) picks the score-space engine when capabilities(op) says it
/// is exact (score_exact) and the key engine otherwise; resolved_engine() says which, and the
/// stream key uses the resolved engine, so `automatic` and the engine it picks give the same
/// bytes. An explicit engine that cannot model the operator exactly is refused.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/design.hpp"
#include "kvphase/sim/model_config.hpp"
#include "kvphase/sim/shard.hpp"
#include "kvphase/stats/paired_counts.hpp"
#include "kvphase/tasks/kv_pairs.hpp"
#include "kvphase/tasks/needle.hpp"
#include "kvphase/tasks/padding.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::sim {

/// Engine of the linear shortcut, or the general key-space path:
///  - key: keys generated (and, for operators that are not linear in the keys, materialised and
///    compressed by the operator: the general path);
///  - score: token scores sampled directly, one normal per token (exact for linear pools);
///  - automatic: score where capabilities(op).score_exact, key otherwise.
enum class engine_kind { automatic, key, score };

inline const char* to_string(engine_kind e) noexcept {
  switch (e) {
    case engine_kind::automatic: return "auto";
    case engine_kind::key: return "key";
    case engine_kind::score: return "score";
  }
  return "?";
}
inline void parse(std::string_view s, engine_kind& out) {
  if (s == "auto") out = engine_kind::automatic;
  else if (s == "key") out = engine_kind::key;
  else if (s == "score") out = engine_kind::score;
  else fail("engine", std::string(s), "must be auto, key or score");
}
inline engine_kind parse_engine(std::string_view s) {
  engine_kind e{};
  parse(s, e);
  return e;
}

/// Fixed-point scale of the mass and margin sums.
inline constexpr double mass_unit = 0x1.0p32;
inline constexpr double margin_unit = 0x1.0p20;

/// Schema name of the stream key (bump it, and say so in CHANGELOG.md, to change streams).
inline constexpr std::string_view sweep_schema = "kvphase.sweep_config/2";
/// Schema of the general path's stream key (the faithful models: keys, values, attention).
inline constexpr std::string_view sweep_schema_general = "kvphase.sweep_config/3";

struct sweep_config {
  tasks::any_task task = tasks::needle_config{};  ///< the task and its config (tasks/*.hpp)
  compress::operator_spec op = compress::operator_spec{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean, .name = "mean"};
  index_t window = 0;        ///< raw window of the compressed model (joint softmax)
  engine_kind engine = engine_kind::automatic;
  index_t modulus = 0;       ///< phase groups of phase tasks (0: the operator's stride)
  index_t trials = 1000;     ///< trials per group (before sharding)
  std::uint64_t seed = 1;
  int threads = 0;           ///< 0: all available
  shard_spec shard{};
  std::uint64_t params_seed = 0;  ///< parameters of non-linear operators (general key-space path)
  model_config model{};      ///< the attention model and compressor parameters (sim/model_config.hpp)
  bool compute_mass = true;  ///< needle: also the attention mass (padding and kv-pairs always need it);
                             ///< does not change any draw or hit
  design_kind design = design_kind::independent;  ///< sim/design.hpp; not keyed: its streams have their own tag

  /// The field list (core/fields.hpp).
  template <class V>
  void visit_fields(V&& v) {
    v("task", task);
    v("op", op);
    v("window", window);
    v("engine", engine);
    v("modulus", modulus);
    v("params_seed", params_seed);
    // keyed on the general path only: the exact engines run the default model and keep their key
    v("model", model, general() ? fields::none : fields::not_keyed);
    v("trials", trials, fields::not_keyed);
    v("seed", seed, fields::not_keyed);
    v("threads", threads, fields::not_keyed);
    v("shard", shard, fields::not_keyed);
    v("compute_mass", compute_mass, fields::not_keyed);
    v("design", design, fields::not_keyed);
  }

  /// What a task sees of the sweep.
  [[nodiscard]] tasks::sweep_geometry geometry() const noexcept {
    return {.modulus = modulus, .stride = op.grid.stride, .origin = op.grid.origin, .chunk_window = op.grid.window,
            .raw_window = window};
  }
  /// Number of groups (the task decides: the modulus, or e.g. the padding lengths).
  [[nodiscard]] index_t groups() const { return task.groups(geometry()); }
  /// The shortest context over the phase groups (the fewest entries a trial's compressor makes).
  [[nodiscard]] index_t min_context_tokens() const {
    index_t n = task.context_tokens(0);
    for (index_t g = 1, M = groups(); g < M; ++g) n = std::min(n, task.context_tokens(g));
    return n;
  }
  /// Label of group g: the phase g, or e.g. the padding length.
  [[nodiscard]] index_t label(index_t g) const { return task.label(g); }
  [[nodiscard]] index_t dim() const { return task.key_dim(); }

  /// What can be done exactly with the operator.
  [[nodiscard]] compress::capability_set capabilities() const { return compress::capabilities(op); }
  /// Whether the operator needs the general key-space path (materialised keys + compressor).
  /// An operator that is not score-exact, or any model other than the default.
  [[nodiscard]] bool general() const { return !capabilities().score_exact || !model.is_default(); }
  /// The engine that runs: `automatic` resolved (see the file comment).
  [[nodiscard]] engine_kind resolved_engine() const {
    if (engine != engine_kind::automatic) return engine;
    return general() ? engine_kind::key : engine_kind::score;
  }
  /// Schema of the stream key: kvphase.sweep_config/3 on the general path (its key includes the
  /// model), /2 on the exact engines (their key, and so their streams, are those of 0.3.0).
  [[nodiscard]] std::string_view schema() const { return general() ? sweep_schema_general : sweep_schema; }

  void validate() const {
    op.validate();
    const auto caps = capabilities();
    if (!caps.score_exact) {
      require(engine != engine_kind::score, "engine", to_string(engine),
              "operator " + (op.name.empty() ? std::string(compress::to_string(op.pool)) : op.name) +
                  " is not exact on the score engine (" + caps.score_reason + "): use key or auto");
    }
    model.validate();
    if (general() && op.rope.anchor != compress::rope_anchor::none)
      require((op.rope.rope_dim == 0 && op.separate_kv) || (op.rope.rope_dim >= 1 && op.rope.rope_dim <= dim()),
              "op.rope.rope_dim", op.rope.rope_dim,
              "the general path rotates the last rope_dim channels of the keys: must be in [1, dim = " +
                  std::to_string(dim()) + "] (0, all channels, only with separate_kv)");
    if (!model.is_default())
      require(engine != engine_kind::score, "engine", to_string(engine),
              "the model " + fields::canonical(model) + " runs on the general key-space path: use key or auto");
    require(window >= 0 && window <= (index_t(1) << 30), "window", window, "must be in [0, 2^30]");
    require(modulus >= 0 && modulus <= 4096, "modulus", modulus, "must be in [0, 4096] (0: the stride)");
    require(trials >= 1 && trials <= (index_t(1) << 40), "trials", trials, "must be in [1, 2^40]");
    require(threads >= 0 && threads <= 1024, "threads", threads, "must be in [0, 1024]");
    shard.validate();
    const auto geo = geometry();
    task.validate(geo);
    const index_t M = groups();
    require(M >= 1 && M <= 4096, "groups", M, "must be in [1, 4096]");
    validate_design(design, M, task.label_column());
    if (general()) {
      const index_t n_min = min_context_tokens();
      require(op.grid.num_entries(n_min) >= 1, "context", n_min,
              "too short for one complete entry of the operator (window " + std::to_string(op.grid.window) + ")");
    }
  }

  /// Canonical text of everything that defines the draws (see the file comment).
  [[nodiscard]] std::string stream_key() const {
    sweep_config c = *this;
    c.engine = resolved_engine();
    c.modulus = geometry().phase_groups();  // 0 means the stride: the same stream as naming it
    return fields::canonical(c, schema());
  }
  [[nodiscard]] std::uint64_t config_id() const { return rng::hash_text(stream_key()); }
  /// Everything, for logs (follows the stream's number format; keys nothing).
  [[nodiscard]] std::string describe() const;

  friend std::ostream& operator<<(std::ostream& os, const sweep_config& c) { return fields::print(os, c, "sweep_config"); }
};

inline std::string sweep_config::describe() const {
  std::ostringstream os;
  os.precision(17);
  os << *this;
  return os.str();
}

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

/// The counts of one sweep (its shard): per group, the compressed model and the full control.
struct sweep_result {
  sweep_config config;
  std::vector<index_t> labels;          ///< per group: phase, or e.g. padding length
  std::vector<group_stats> compressed;  ///< per group
  std::vector<group_stats> full;        ///< per group (the control, same inputs)
  /// design shifted: the per-trial outcomes of every group reduced to paired counts.
  std::optional<stats::paired_counts> compressed_paired, full_paired;
  double seconds = 0;

  [[nodiscard]] std::int64_t total_trials() const noexcept {
    std::int64_t n = 0;
    for (const auto& g : compressed) n += g.trials;
    return n;
  }
};

/// Called from the calling thread about every `interval` seconds with (trials done, total).
/// `cancel`, polled at the same moments, stops the sweep when it returns true: the trials not yet
/// started are skipped and run_sweep throws sweep_cancelled (e.g. the Python module's Ctrl-C).
struct sweep_progress {
  std::function<void(std::int64_t, std::int64_t)> report;
  double interval = 0.5;
  std::function<bool()> cancel;
};

/// Thrown by run_sweep when sweep_progress::cancel asked it to stop (no result).
struct sweep_cancelled : std::runtime_error {
  sweep_cancelled() : std::runtime_error("kvphase: sweep cancelled") {}
};

/// The task registered under `name` (needle, kv-pairs, padding, or any registered task) with its
/// defaults; throws kvphase::error naming the known tasks.
inline tasks::any_task make_task(std::string_view name) {
  if (name == "kv_pairs") name = "kv-pairs";
  return tasks::registry().make(name);
}

}  // namespace kvphase::sim

#pragma once
/// \file tasks/task.hpp
/// What a task is, and the one place tasks are registered.
///
/// A task owns everything about itself: its config (fields with a field list), its validation,
/// its groups and their labels, the layout of a trial (where target, keys and values go, drawn
/// from the trial's streams) and its readout (hit, mass, margin) from the scored models. The
/// sweep's trial loop (sim/sweep.hpp) only dispatches to it. A task is a struct T with
///
///   static constexpr std::string_view task_name;   // "needle", as on the command line
///   template <class V> void visit_fields(V&& v);   // its config fields (core/fields.hpp)
///   index_t groups(const sweep_geometry&) const;   // phase groups (or e.g. padding lengths)
///   index_t label(index_t g) const;                // label of group g (its phase, or a length)
///   std::string_view label_column() const;         // "" when the label is the phase, else a name
///   index_t key_dim() const;                       // key dimension d
///   index_t context_tokens(index_t g) const;       // context tokens of a trial of group g
///   void validate(const sweep_geometry&) const;    // throws kvphase::error naming the field
///   struct state { ... };                          // per-thread scratch, reused across trials
///   void run(trial_env&, state&, trial_outcome& compressed, trial_outcome& full) const;
///
/// and is registered once (by a header-level `inline const bool x = register_task<T>();`), which
/// makes it reachable by name: sweep configs read from JSON, the CLI's --task. tasks::any_task
/// holds any registered task by value; it has a field list of its own ("kind", then the task's
/// fields), so printing, JSON, equality and the stream key treat every task alike.
///
/// The trial environment (trial_env, implemented by sim/sweep.hpp) gives a task its random
/// streams and the two models (compressed, full) on the same inputs:
///  1. the task draws its vectors from env.normals() and its placement from env.layout();
///  2. it calls env.score(...) with the query and the spans it plants (planted_span): the engine
///     draws the noise of the N context tokens, writes the spans over it and scores both models;
///  3. it reads the outcome from env.compressed() and env.full() (sim::linear_model readouts:
///     best_scores, softmax, token_mass, span_mass; on the general path the attention output
///     model_view::output and model_view::best_scores over the attended items).
/// Task fields may be bool, integers, double, std::string and vectors of double or index_t.

#include <cmath>
#include <cstdint>
#include <typeinfo>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/normal.hpp"

namespace kvphase::tasks {

/// Outcome of one trial for one model.
struct trial_outcome {
  bool hit = false;
  double mass = 0.0;
  double margin = 0.0;
};

/// What a task knows of the sweep it runs in (fixed for the sweep).
struct sweep_geometry {
  index_t modulus = 0;       ///< requested phase groups (0: the stride)
  index_t stride = 1;        ///< S of the operator
  index_t origin = 0;        ///< φ0 of the operator's grid
  index_t chunk_window = 1;  ///< W of the operator
  index_t raw_window = 0;    ///< raw window of the compressed model
  /// Groups of a phase task: the modulus, or the stride when it is 0.
  [[nodiscard]] index_t phase_groups() const noexcept { return modulus > 0 ? modulus : stride; }
  /// Tokens at the end of the context a target must stay out of (raw window + last chunk).
  [[nodiscard]] index_t reserve() const noexcept { return raw_window + chunk_window; }
};

/// A span a task writes over the noise: tokens [first, first + count) carry the key coef·v
/// (general path: written into the materialised keys) or the score `score` (linear engines:
/// written into the token scores, as the task computes it).
struct planted_span {
  index_t first = 0, count = 0;
  const float* v = nullptr;
  float coef = 1.0f, score = 0.0f;
  const float* val = nullptr;  ///< general path: the value payload of these tokens (value_dim floats; null: 0)
};

/// The general path's attended items of a model (sim/general_model.hpp implements it).
class item_scores {
 public:
  virtual ~item_scores() = default;
  /// Best attended item meeting tokens [a, b) and best other one.
  virtual void best(index_t a, index_t b, float& target, float& other) const = 0;
};

/// One model's scored items in a trial: its geometry and value weights, and its buffers.
/// On the general path also the attention output (value_dim floats: the task's payload
/// channels of o = Σ softmax · pooled V) and the attended items; readouts use them when set.
struct model_view {
  const sim::linear_model& model;
  sim::linear_buffers& buffers;
  const float* output = nullptr;       ///< general path: the attention output, else null
  const item_scores* items = nullptr;  ///< general path: the attended items, else null
  /// Best item meeting [a, b) and best other one: the attended items on the general path,
  /// else model.best_scores on the buffers.
  void best_scores(index_t a, index_t b, float& target, float& other) const {
    if (items) items->best(a, b, target, other);
    else model.best_scores(buffers, a, b, target, other);
  }
};

/// The engine side of a trial (implemented by sim::trial_runner).
class trial_env {
 public:
  virtual ~trial_env() = default;
  /// Group of this trial (0 … groups − 1) and the sweep's geometry.
  [[nodiscard]] virtual index_t group() const = 0;
  [[nodiscard]] virtual const sweep_geometry& geometry() const = 0;
  /// Whether the sweep wants the attention mass of tasks for which it is optional.
  [[nodiscard]] virtual bool want_mass() const = 0;
  /// Placement stream of this trial (Philox, keyed by seed, config and (group, trial)).
  virtual rng::philox_stream& layout() = 0;
  /// Gaussian stream of this trial.
  virtual sim::normal_generator& normals() = 0;
  /// True on the general path: planted spans are key rows (planted_span::v, coef) and
  /// identities() returns keys; false on the linear engines: spans are scores.
  [[nodiscard]] virtual bool key_rows() const = 0;
  /// n item identities drawn from st for the query q (|q| = qn): keys (n × d, general path) or
  /// their scores q·k (linear engines). The buffer is the engine's; it stays valid until the
  /// next call.
  virtual float* identities(sim::normal_state& st, const float* q, double qn, index_t n) = 0;
  /// Draws the noise of the N context tokens from st, writes `spans` over it and scores both
  /// models for the query q (|q| = qn). General path: the spans' value payloads (value_dim
  /// floats each, planted_span::val) are the tokens' values and the attention runs with logit
  /// scale `beta`; the linear engines ignore both.
  virtual void score(sim::normal_state& st, index_t N, const float* q, double qn, std::span<const planted_span> spans,
                     index_t value_dim = 1, double beta = 0.0) = 0;
  virtual model_view compressed() = 0;
  virtual model_view full() = 0;
};

namespace detail {

/// v = n draws of the generator (the vector is resized, then filled).
inline void fill(sim::normal_generator& g, std::vector<float>& v, index_t n) {
  v.resize(static_cast<std::size_t>(n));
  g.fill(v.data(), n);
}
/// Σ a_i b_i in double.
inline double dot_d(const float* a, const float* b, index_t n) noexcept {
  double s = 0;
  for (index_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
/// Query q = base + sigma·eps (d channels); returns |q|.
inline double make_query(std::vector<float>& q, const std::vector<float>& base, const std::vector<float>& eps,
                         double sigma, index_t d) {
  q.resize(static_cast<std::size_t>(d));
  for (index_t i = 0; i < d; ++i)
    q[static_cast<std::size_t>(i)] =
        base[static_cast<std::size_t>(i)] + static_cast<float>(sigma) * eps[static_cast<std::size_t>(i)];
  return std::sqrt(dot_d(q.data(), q.data(), d));
}

/// Runtime visitor over a task's fields (what any_task needs to walk a task it does not know).
struct field_sink {
  virtual ~field_sink() = default;
  virtual void on(const char* n, bool& v, unsigned f) = 0;
  virtual void on(const char* n, int& v, unsigned f) = 0;
  virtual void on(const char* n, std::int64_t& v, unsigned f) = 0;
  virtual void on(const char* n, std::uint64_t& v, unsigned f) = 0;
  virtual void on(const char* n, double& v, unsigned f) = 0;
  virtual void on(const char* n, std::string& v, unsigned f) = 0;
  virtual void on(const char* n, std::vector<double>& v, unsigned f) = 0;
  virtual void on(const char* n, std::vector<std::int64_t>& v, unsigned f) = 0;
};

template <class V>
struct sink_adapter final : field_sink {
  V& v;
  explicit sink_adapter(V& vis) : v(vis) {}
  void on(const char* n, bool& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, int& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, std::int64_t& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, std::uint64_t& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, double& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, std::string& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, std::vector<double>& x, unsigned f) override { v(n, x, f); }
  void on(const char* n, std::vector<std::int64_t>& x, unsigned f) override { v(n, x, f); }
};

struct task_state_base {
  virtual ~task_state_base() = default;
};

struct task_concept {
  virtual ~task_concept() = default;
  [[nodiscard]] virtual std::unique_ptr<task_concept> clone() const = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  virtual void visit(field_sink& s) = 0;
  [[nodiscard]] virtual index_t groups(const sweep_geometry& g) const = 0;
  [[nodiscard]] virtual index_t label(index_t g) const = 0;
  [[nodiscard]] virtual std::string_view label_column() const = 0;
  [[nodiscard]] virtual index_t key_dim() const = 0;
  [[nodiscard]] virtual index_t context_tokens(index_t g) const = 0;
  virtual void validate(const sweep_geometry& g) const = 0;
  [[nodiscard]] virtual std::unique_ptr<task_state_base> make_state() const = 0;
  virtual void run(trial_env& env, task_state_base& st, trial_outcome& comp, trial_outcome& full) const = 0;
  [[nodiscard]] virtual const void* target(const std::type_info& t) const noexcept = 0;
};

template <class T>
struct task_model final : task_concept {
  T t;
  explicit task_model(T x) : t(std::move(x)) {}
  struct state_holder final : task_state_base {
    typename T::state s;
  };
  std::unique_ptr<task_concept> clone() const override { return std::make_unique<task_model>(t); }
  std::string_view name() const noexcept override { return T::task_name; }
  void visit(field_sink& s) override {
    t.visit_fields([&](const char* n, auto& x, unsigned f = fields::none) { s.on(n, x, f); });
  }
  index_t groups(const sweep_geometry& g) const override { return t.groups(g); }
  index_t label(index_t g) const override { return t.label(g); }
  std::string_view label_column() const override { return t.label_column(); }
  index_t key_dim() const override { return t.key_dim(); }
  index_t context_tokens(index_t g) const override { return t.context_tokens(g); }
  void validate(const sweep_geometry& g) const override { t.validate(g); }
  std::unique_ptr<task_state_base> make_state() const override { return std::make_unique<state_holder>(); }
  void run(trial_env& env, task_state_base& st, trial_outcome& comp, trial_outcome& full) const override {
    t.run(env, static_cast<state_holder&>(st).s, comp, full);
  }
  const void* target(const std::type_info& ti) const noexcept override { return ti == typeid(T) ? &t : nullptr; }
};

}  // namespace detail

class any_task;

/// Registered tasks by name (see the file comment).
class task_registry {
 public:
  using factory = std::function<any_task()>;
  void add(std::string_view name, factory f) { map_[std::string(name)] = std::move(f); }
  [[nodiscard]] bool contains(std::string_view name) const { return map_.contains(std::string(name)); }
  /// The task `name` with its default config; throws kvphase::error naming the known tasks.
  [[nodiscard]] any_task make(std::string_view name) const;
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& [k, f] : map_) n.push_back(k);
    return n;
  }

 private:
  std::map<std::string, factory> map_;
};

inline task_registry& registry() {
  static task_registry r;
  return r;
}

/// A task held by value: copyable, printable, comparable, with a field list.
class any_task {
 public:
  template <class T>
    requires(!std::is_same_v<std::remove_cvref_t<T>, any_task>)
  any_task(T t) : p_(std::make_unique<detail::task_model<T>>(std::move(t))) {}  // NOLINT: implicit by design
  any_task(const any_task& o) : p_(o.p_->clone()) {}
  any_task(any_task&&) noexcept = default;
  any_task& operator=(const any_task& o) {
    if (this != &o) p_ = o.p_->clone();
    return *this;
  }
  any_task& operator=(any_task&&) noexcept = default;

  [[nodiscard]] std::string_view name() const noexcept { return p_->name(); }
  /// The task as a T, or nullptr when it is another task.
  template <class T>
  [[nodiscard]] const T* get_if() const noexcept {
    return static_cast<const T*>(p_->target(typeid(T)));
  }
  template <class T>
  [[nodiscard]] T* get_if() noexcept {
    return const_cast<T*>(static_cast<const T*>(p_->target(typeid(T))));
  }
  /// The task as a T; throws kvphase::error when it is another task.
  template <class T>
  [[nodiscard]] const T& get() const {
    const T* t = get_if<T>();
    if (!t) fail("task", std::string(name()), "is not the task " + std::string(T::task_name));
    return *t;
  }
  template <class T>
  [[nodiscard]] T& get() {
    T* t = get_if<T>();
    if (!t) fail("task", std::string(name()), "is not the task " + std::string(T::task_name));
    return *t;
  }
  template <class T>
  [[nodiscard]] bool is() const noexcept {
    return get_if<T>() != nullptr;
  }

  [[nodiscard]] index_t groups(const sweep_geometry& g) const { return p_->groups(g); }
  [[nodiscard]] index_t label(index_t g) const { return p_->label(g); }
  [[nodiscard]] std::string_view label_column() const { return p_->label_column(); }
  [[nodiscard]] index_t key_dim() const { return p_->key_dim(); }
  [[nodiscard]] index_t context_tokens(index_t g) const { return p_->context_tokens(g); }
  void validate(const sweep_geometry& g) const { p_->validate(g); }
  [[nodiscard]] std::unique_ptr<detail::task_state_base> make_state() const { return p_->make_state(); }
  void run(trial_env& env, detail::task_state_base& st, trial_outcome& comp, trial_outcome& full) const {
    p_->run(env, st, comp, full);
  }

  /// Field list: "kind" (the task's name; setting another registered name switches the task to
  /// that task's defaults), then the task's own fields.
  template <class V>
  void visit_fields(V&& v) {
    std::string kind(name());
    v("kind", kind);
    if (kind != name()) *this = registry().make(kind);
    detail::sink_adapter<std::remove_reference_t<V>> a(v);
    p_->visit(a);
  }
  friend std::ostream& operator<<(std::ostream& os, const any_task& t) { return fields::print(os, t, "task"); }
  friend bool operator==(const any_task& a, const any_task& b) { return fields::equal(a, b); }

 private:
  std::unique_ptr<detail::task_concept> p_;
};

inline any_task task_registry::make(std::string_view name) const {
  const auto it = map_.find(std::string(name));
  if (it == map_.end()) {
    std::string known;
    for (const auto& [k, f] : map_) known += (known.empty() ? "" : ", ") + k;
    fail("task", std::string(name), "is not a registered task (known: " + known + ")");
  }
  return it->second();
}

/// Registers T under T::task_name (its default config); returns true. Use as
/// `inline const bool my_task_registered = kvphase::tasks::register_task<my_task>();`.
template <class T>
bool register_task() {
  registry().add(T::task_name, [] { return any_task(T{}); });
  return true;
}

}  // namespace kvphase::tasks

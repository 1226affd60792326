// _kvphase: the pybind11 extension behind `import kvphase` (python/kvphase/__init__.py is the
// public face; this file only converts arguments, releases the GIL and maps errors).
//
// One translation unit on purpose (compile cost). Configs cross the boundary as JSON-like
// Python values (dict/list/str/int/float/bool) read by io/fields_json.hpp's strict reader, so a
// field added to a config struct's visit_fields is a keyword argument without binding code.
// Arrays: float32/float64, 2-D, C-contiguous, read in place (never copied); results are NumPy
// arrays that own the library's output buffer (no copy either).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvphase/attention/compressed.hpp>
#include <kvphase/attention/full.hpp>
#include <kvphase/attention/multihead.hpp>
#include <kvphase/compress/checkpoint.hpp>
#include <kvphase/compress/presets.hpp>
#include <kvphase/io/evaluation.hpp>
#include <kvphase/io/fields_json.hpp>
#include <kvphase/sim/report.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/stats/gap.hpp>
#include <kvphase/stats/intervals.hpp>
#include <kvphase/stats/paired.hpp>
#include <kvphase/stats/periodicity.hpp>
#include <kvphase/stats/summary.hpp>
#include <kvphase/stats/uniformity.hpp>
#include <kvphase/theory/sweep_column.hpp>
#include <kvphase/version.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace py = pybind11;
using json = nlohmann::ordered_json;
using kvphase::index_t;
namespace compress = kvphase::compress;
namespace attention = kvphase::attention;
namespace sim = kvphase::sim;
namespace stats = kvphase::stats;

namespace {

// ---- Python value <-> JSON ----------------------------------------------------------------------

json to_json(py::handle h, const std::string& where) {
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    // Python ints are unbounded: keep the sign and let the field reader check the range
    const auto big = h.cast<py::int_>();
    if (big < py::int_(0)) {
      if (big < py::int_(std::numeric_limits<std::int64_t>::min()))
        kvphase::fail(where, py::str(h).cast<std::string>(), "is out of range for this field");
      return h.cast<std::int64_t>();
    }
    if (big > py::int_(std::numeric_limits<std::uint64_t>::max()))
      kvphase::fail(where, py::str(h).cast<std::string>(), "is out of range for this field");
    return h.cast<std::uint64_t>();
  }
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::dict>(h)) {
    json j = json::object();
    for (auto kv : h.cast<py::dict>()) {
      const auto key = py::str(kv.first).cast<std::string>();
      j[key] = to_json(kv.second, where.empty() ? key : where + "." + key);
    }
    return j;
  }
  if (py::isinstance<py::array>(h)) return to_json(h.attr("tolist")(), where);
  // NumPy scalars (numpy.int64, numpy.float32, ...) and other numbers
  if (py::hasattr(h, "item") && !py::isinstance<py::list>(h) && !py::isinstance<py::tuple>(h))
    return to_json(h.attr("item")(), where);
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    json j = json::array();
    std::size_t i = 0;
    for (auto x : h) j.push_back(to_json(x, where + "[" + std::to_string(i++) + "]"));
    return j;
  }
  throw py::type_error(where + ": cannot be " + py::str(py::type::of(h).attr("__name__")).cast<std::string>() +
                       " (expected a number, string, bool, list or dict)");
}

py::object from_json(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return py::none();
    case json::value_t::boolean: return py::bool_(j.get<bool>());
    case json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case json::value_t::number_float: return py::float_(j.get<double>());
    case json::value_t::string: return py::str(j.get<std::string>());
    case json::value_t::array: {
      py::list l;
      for (const auto& x : j) l.append(from_json(x));
      return l;
    }
    case json::value_t::object: {
      py::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[py::str(it.key())] = from_json(it.value());
      return d;
    }
    default: return py::none();
  }
}
py::object from_json(const nlohmann::json& j) { return from_json(json::parse(j.dump())); }

// ---- arrays -------------------------------------------------------------------------------------

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

/// NumPy type number of an array (NPY_FLOAT, NPY_DOUBLE, ...).
int type_num(const py::array& a) { return a.dtype().num(); }
constexpr int npy_float = py::detail::npy_api::NPY_FLOAT_;
constexpr int npy_double = py::detail::npy_api::NPY_DOUBLE_;

/// The array argument `name` as a 2-D C-contiguous float32 or float64 array (never copied).
py::array require_matrix(py::handle h, const char* name) {
  if (!py::isinstance<py::array>(h))
    throw py::type_error(std::string(name) + ": expected a numpy.ndarray of float32 or float64, got " +
                         py::str(py::type::of(h).attr("__name__")).cast<std::string>());
  auto a = py::reinterpret_borrow<py::array>(h);
  const int t = type_num(a);
  if (t != npy_float && t != npy_double)
    throw py::type_error(std::string(name) + ": dtype must be float32 or float64, got " + dtype_name(a));
  if (a.ndim() != 2)
    throw py::value_error(std::string(name) + ": must be 2-D (tokens x channels), got " + std::to_string(a.ndim()) +
                          "-D");
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + ": must be C-contiguous (numpy.ascontiguousarray makes a copy)");
  return a;
}
bool is_f32(const py::array& a) { return type_num(a) == npy_float; }

template <class Real>
kvphase::matrix_view<Real> view_of(const py::array& a) {
  return {static_cast<const Real*>(a.data()), static_cast<index_t>(a.shape(0)), static_cast<index_t>(a.shape(1))};
}

/// A NumPy array owning `m` (moved, not copied).
template <class Real>
py::array to_numpy(kvphase::matrix_t<Real>&& m) {
  auto* heap = new kvphase::matrix_t<Real>(std::move(m));
  py::capsule owner(heap, [](void* p) { delete static_cast<kvphase::matrix_t<Real>*>(p); });
  const auto r = static_cast<py::ssize_t>(heap->rows()), c = static_cast<py::ssize_t>(heap->cols());
  return py::array_t<Real>({r, c}, {c * static_cast<py::ssize_t>(sizeof(Real)), static_cast<py::ssize_t>(sizeof(Real))},
                           heap->data(), owner);
}
template <class T>
py::array to_numpy(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(heap->size())}, {static_cast<py::ssize_t>(sizeof(T))}, heap->data(),
                        owner);
}

/// 1-D integer sequence argument (list or array) as int64 values.
std::vector<std::int64_t> int_vector(py::handle h, const char* name) {
  if (py::isinstance<py::array>(h)) {
    auto a = py::reinterpret_borrow<py::array>(h);
    if (a.ndim() != 1) throw py::value_error(std::string(name) + ": must be 1-D, got " + std::to_string(a.ndim()) + "-D");
    if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u' && a.dtype().kind() != 'b')
      throw py::type_error(std::string(name) + ": dtype must be an integer type, got " + dtype_name(a));
  }
  try {
    return h.cast<std::vector<std::int64_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(name) + ": expected a sequence of integers");
  }
}

// ---- operator specs -----------------------------------------------------------------------------

compress::operator_spec spec_from_json(const json& j) {
  compress::operator_spec s{};
  kvphase::io::fields_from_json(j, s);
  s.validate();
  return s;
}

/// Learned parameters of one compression head, in the dtype they were made for.
struct params_holder {
  std::variant<compress::pool_params<float>, compress::pool_params<double>> p;
  index_t d = 0;
  index_t head = 0;
  [[nodiscard]] bool f32() const { return p.index() == 0; }
};

template <class Real>
py::array compress_impl(const compress::operator_spec& spec, const py::array& x, const params_holder* params,
                        index_t head) {
  static const compress::pool_params<Real> none{};
  const compress::pool_params<Real>& p = params ? std::get<compress::pool_params<Real>>(params->p) : none;
  const auto xv = view_of<Real>(x);
  kvphase::matrix_t<Real> out;
  if (x.size() >= 65536) {
    py::gil_scoped_release release;
    out = compress::compress<Real>(spec, p, xv, head);
  } else {
    out = compress::compress<Real>(spec, p, xv, head);
  }
  return to_numpy<Real>(std::move(out));
}

py::array compress_py(const compress::operator_spec& spec, py::handle x_obj, const params_holder* params,
                      index_t head) {
  const py::array x = require_matrix(x_obj, "x");
  const bool f32 = is_f32(x);
  if (params && params->f32() != f32)
    throw py::type_error(std::string("params: made for ") + (params->f32() ? "float32" : "float64") +
                         " but x is " + dtype_name(x) + " (make_params(..., dtype=x.dtype))");
  return f32 ? compress_impl<float>(spec, x, params, head) : compress_impl<double>(spec, x, params, head);
}

py::dict entries_py(const compress::operator_spec& spec, index_t n_tokens, index_t head) {
  spec.validate();
  kvphase::require(n_tokens >= 0 && n_tokens <= (index_t(1) << 30), "n_tokens", n_tokens, "must be in [0, 2^30]");
  const auto g = spec.head_grid(head);
  const index_t E = g.num_entries(n_tokens);
  std::vector<std::int64_t> first(E), last(E), masked(E), visible_from(E), phase(E);
  for (index_t e = 0; e < E; ++e) {
    const auto r = g.sources(e);
    first[e] = r.first;
    last[e] = r.last;
    masked[e] = g.masked_slots(e);
    visible_from[e] = g.visibility == compress::visibility_policy::complete ? r.last : std::max<index_t>(r.first, 0);
    phase[e] = g.phase(std::max<index_t>(r.first, 0));
  }
  py::dict d;
  d["first"] = to_numpy(std::move(first));
  d["last"] = to_numpy(std::move(last));
  d["masked"] = to_numpy(std::move(masked));
  d["visible_from"] = to_numpy(std::move(visible_from));
  d["phase_of_first"] = to_numpy(std::move(phase));
  return d;
}

// ---- attention ----------------------------------------------------------------------------------

attention::attention_params attn_params(double scale, std::optional<double> sink, int threads) {
  attention::attention_params p;
  p.scale = scale;
  if (sink) p.sink = *sink;
  p.threads = threads;
  return p;
}

/// All arrays of an attention call in one dtype (TypeError naming the first that differs).
bool same_dtype(std::initializer_list<std::pair<const char*, const py::array*>> arrays) {
  const bool f32 = is_f32(*arrays.begin()->second);
  for (const auto& [name, a] : arrays)
    if (is_f32(*a) != f32)
      throw py::type_error(std::string(name) + ": dtype " + dtype_name(*a) + " differs from " +
                           arrays.begin()->first + "'s " + dtype_name(*arrays.begin()->second));
  return f32;
}

std::vector<index_t> positions(py::handle pos) {
  if (pos.is_none()) return {};
  const auto v = int_vector(pos, "pos");
  return {v.begin(), v.end()};
}

template <class Real>
using cref = attention::cref<Real>;

py::array full_attention_py(py::handle q_obj, py::handle k_obj, py::handle v_obj, py::handle pos_obj, double scale,
                            std::optional<double> sink, int threads) {
  const auto q = require_matrix(q_obj, "q"), k = require_matrix(k_obj, "k"), v = require_matrix(v_obj, "v");
  const bool f32 = same_dtype({{"q", &q}, {"k", &k}, {"v", &v}});
  const auto pos = positions(pos_obj);
  const auto p = attn_params(scale, sink, threads);
  auto run = [&](auto tag) -> py::array {
    using Real = decltype(tag);
    kvphase::matrix_t<Real> O(q.shape(0), v.shape(1));
    {
      py::gil_scoped_release release;
      attention::full_attention<Real>(view_of<Real>(q), view_of<Real>(k), view_of<Real>(v), pos, p, O);
    }
    return to_numpy<Real>(std::move(O));
  };
  return f32 ? run(float{}) : run(double{});
}

py::array compressed_attention_py(py::handle q_obj, py::handle kc_obj, py::handle vc_obj,
                                  const compress::operator_spec& spec, py::handle k_obj, py::handle v_obj,
                                  py::handle pos_obj, const py::dict& kw, index_t head) {
  const auto q = require_matrix(q_obj, "q"), kc = require_matrix(kc_obj, "kc"), vc = require_matrix(vc_obj, "vc"),
             k = require_matrix(k_obj, "k"), v = require_matrix(v_obj, "v");
  const bool f32 = same_dtype({{"q", &q}, {"kc", &kc}, {"vc", &vc}, {"k", &k}, {"v", &v}});
  const auto pos = positions(pos_obj);
  attention::compressed_params p;
  std::optional<attention::index_lists> entries;
  for (auto item : kw) {
    const auto key = py::str(item.first).cast<std::string>();
    auto val = py::reinterpret_borrow<py::object>(item.second);
    if (key == "window") p.window = val.cast<index_t>();
    else if (key == "compressed") p.compressed = val.cast<bool>();
    else if (key == "scale") p.attn.scale = val.cast<double>();
    else if (key == "sink") p.attn.sink = val.is_none() ? -std::numeric_limits<double>::infinity() : val.cast<double>();
    else if (key == "threads") p.attn.threads = val.cast<int>();
    else if (key == "entries") {  // selected attention: the entries each query attends
      entries.emplace();
      std::size_t i = 0;
      for (auto row : val) {
        const auto l = int_vector(row, ("entries[" + std::to_string(i++) + "]").c_str());
        const std::vector<index_t> li(l.begin(), l.end());
        entries->push(li);
      }
    } else throw py::type_error("compressed_attention: unknown keyword argument '" + key +
                              "' (known: window, compressed, scale, sink, threads, entries)");
  }
  spec.validate();
  const auto grid = spec.head_grid(head);
  auto run = [&](auto tag) -> py::array {
    using Real = decltype(tag);
    kvphase::matrix_t<Real> O(q.shape(0), v.shape(1));
    {
      py::gil_scoped_release release;
      attention::compressed_selection<Real> sel;
      if (entries) sel.entries = &*entries;
      attention::compressed_attention<Real>(view_of<Real>(q), pos, view_of<Real>(kc), view_of<Real>(vc), grid,
                                            view_of<Real>(k), view_of<Real>(v), p, O, sel);
    }
    return to_numpy<Real>(std::move(O));
  };
  return f32 ? run(float{}) : run(double{});
}

attention::multihead_config multihead_from(const py::dict& cfg) {
  attention::multihead_config c;
  for (auto item : cfg) {
    const auto key = py::str(item.first).cast<std::string>();
    auto val = py::reinterpret_borrow<py::object>(item.second);
    if (key == "heads") c.heads = val.cast<index_t>();
    else if (key == "kv_heads") c.kv_heads = val.cast<index_t>();
    else if (key == "head_dim") c.head_dim = val.cast<index_t>();
    else if (key == "value_dim") c.value_dim = val.cast<index_t>();
    else if (key == "sinks") c.sinks = val.cast<std::vector<double>>();
    else if (key == "gates") c.gates = val.cast<std::vector<double>>();
    else if (key == "rope") kvphase::io::fields_from_json(to_json(val, "rope"), c.rope, "rope");
    else throw py::type_error("multihead: unknown keyword argument '" + key +
                              "' (known: heads, kv_heads, head_dim, value_dim, sinks, gates, rope)");
  }
  c.validate();
  return c;
}

py::array multihead_attention_py(py::handle q_obj, py::handle kc_obj, py::handle vc_obj, py::handle spec_obj,
                                 py::handle k_obj, py::handle v_obj, py::handle pos_obj, const py::dict& heads,
                                 index_t window, double scale, int threads) {
  const auto q = require_matrix(q_obj, "q"), k = require_matrix(k_obj, "k"), v = require_matrix(v_obj, "v");
  const auto cfg = multihead_from(heads);
  const auto pos = positions(pos_obj);
  if (spec_obj.is_none()) {  // full causal control
    const bool f32 = same_dtype({{"q", &q}, {"k", &k}, {"v", &v}});
    const auto p = attn_params(scale, std::nullopt, threads);
    auto run = [&](auto tag) -> py::array {
      using Real = decltype(tag);
      kvphase::matrix_t<Real> O(q.shape(0), cfg.heads * cfg.dv());
      {
        py::gil_scoped_release release;
        attention::multihead_full_attention<Real>(view_of<Real>(q), pos, view_of<Real>(k), view_of<Real>(v), cfg, p, O);
      }
      return to_numpy<Real>(std::move(O));
    };
    return f32 ? run(float{}) : run(double{});
  }
  const auto& spec = spec_obj.cast<const compress::operator_spec&>();
  spec.validate();
  const auto kc = require_matrix(kc_obj, "kc"), vc = require_matrix(vc_obj, "vc");
  const bool f32 = same_dtype({{"q", &q}, {"kc", &kc}, {"vc", &vc}, {"k", &k}, {"v", &v}});
  attention::compressed_params p;
  p.window = window;
  p.attn.scale = scale;
  p.attn.threads = threads;
  auto run = [&](auto tag) -> py::array {
    using Real = decltype(tag);
    kvphase::matrix_t<Real> O(q.shape(0), cfg.heads * cfg.dv());
    {
      py::gil_scoped_release release;
      attention::multihead_attention<Real>(view_of<Real>(q), pos, view_of<Real>(kc), view_of<Real>(vc), spec.grid,
                                           view_of<Real>(k), view_of<Real>(v), cfg, p, O);
    }
    return to_numpy<Real>(std::move(O));
  };
  return f32 ? run(float{}) : run(double{});
}

/// Scaled scores ℓ = scale·Q·Kᵀ (scale 0: 1/√d), M × n, in the inputs' dtype.
py::array scores_py(py::handle q_obj, py::handle k_obj, double scale) {
  const auto q = require_matrix(q_obj, "q"), k = require_matrix(k_obj, "k");
  const bool f32 = same_dtype({{"q", &q}, {"k", &k}});
  kvphase::require(std::isfinite(scale) && scale >= 0.0, "scale", scale, "must be finite and >= 0 (0 = 1/sqrt(d))");
  kvphase::require(q.shape(1) == k.shape(1), "k.shape[1]", k.shape(1),
                   "must equal q.shape[1] (" + std::to_string(q.shape(1)) + ")");
  auto run = [&](auto tag) -> py::array {
    using Real = decltype(tag);
    const Real s = scale > 0.0 ? static_cast<Real>(scale) : attention::default_scale<Real>(q.shape(1));
    kvphase::matrix_t<Real> S;
    {
      py::gil_scoped_release release;
      S = s * (view_of<Real>(q) * view_of<Real>(k).transpose());
    }
    return to_numpy<Real>(std::move(S));
  };
  return f32 ? run(float{}) : run(double{});
}

// ---- sweeps -------------------------------------------------------------------------------------

/// The sweep of c: one sim::run_sweep with the GIL released. About every `check_seconds` the
/// calling thread (one of the sweep's threads) takes the GIL, calls `progress(fraction)` if given
/// and checks for signals; a pending KeyboardInterrupt (or an exception of `progress`) cancels the
/// sweep (sweep_progress::cancel: the trials not yet started are skipped) and is raised here.
sim::sweep_result run_sweep_interruptible(const sim::sweep_config& c, const py::object& progress, double check_seconds) {
  std::optional<py::error_already_set> pending;
  std::int64_t done = 0, total = 1;
  sim::sweep_progress sp;
  sp.interval = check_seconds;
  sp.report = [&](std::int64_t d, std::int64_t t) {
    done = d;
    total = std::max<std::int64_t>(t, 1);
  };
  sp.cancel = [&]() -> bool {
    py::gil_scoped_acquire gil;
    if (pending) return true;
    try {
      if (!progress.is_none()) progress(static_cast<double>(done) / static_cast<double>(total));
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    } catch (py::error_already_set& e) {
      pending.emplace(std::move(e));
      return true;
    }
    return false;
  };
  try {
    py::gil_scoped_release release;
    return sim::run_sweep(c, sp);
  } catch (const sim::sweep_cancelled&) {
    if (pending) throw std::move(*pending);
    throw;
  }
}

sim::sweep_config config_from_json(const json& j) {
  sim::sweep_config c;
  kvphase::io::fields_from_json(j, c, "config");
  c.validate();
  return c;
}

py::dict interval_dict(const stats::interval& i) {
  py::dict d;
  d["low"] = i.low;
  d["high"] = i.high;
  return d;
}
py::dict gap_dict(const stats::gap_result& g) {
  py::dict d;
  d["gap"] = g.gap;
  d["bias_corrected"] = g.bias_corrected;
  d["simultaneous"] = interval_dict(g.simultaneous);
  d["percentile"] = interval_dict(g.ci);
  d["argmax"] = g.argmax;
  d["argmin"] = g.argmin;
  d["replicates"] = g.replicates;
  d["group_alpha"] = g.group_alpha;
  return d;
}
py::dict test_dict(const stats::test_result& t) {
  py::dict d;
  d["statistic"] = t.statistic;
  d["dof"] = t.dof;
  d["p"] = t.p;
  d["test"] = t.test;
  return d;
}
py::dict periodicity_dict(const stats::periodicity_result& r) {
  py::dict d;
  d["modulus"] = r.modulus;
  d["period"] = r.period;
  d["cycles"] = r.cycles;
  d["power"] = r.power;
  d["amplitude"] = r.amplitude;
  d["peak_phase"] = r.peak_phase;
  d["statistic"] = r.statistic;
  d["dof"] = r.dof;
  d["p"] = r.p;
  d["p_chi_square"] = r.p_chi_square;
  d["p_permutation"] = r.p_permutation;
  d["p_mc_error"] = r.p_mc_error;
  d["permutations"] = r.permutations;
  d["test"] = r.test;
  return d;
}
py::dict paired_dict(const stats::paired_summary& p) {
  py::dict d;
  d["groups"] = p.groups;
  d["items"] = p.items;
  py::dict q;
  q["statistic"] = p.cochran.statistic;
  q["dof"] = p.cochran.dof;
  q["p"] = p.cochran.p;
  q["p_chi_square"] = p.cochran.p_chi_square;
  q["reference"] = p.cochran.reference;
  d["cochran_q"] = q;
  py::dict m;
  m["group_a"] = p.best_vs_worst.group_a;
  m["group_b"] = p.best_vs_worst.group_b;
  m["a_only"] = p.best_vs_worst.a_only;
  m["b_only"] = p.best_vs_worst.b_only;
  m["p_exact"] = p.best_vs_worst.p_exact;
  m["p_mid"] = p.best_vs_worst.p_mid;
  m["statistic"] = p.best_vs_worst.statistic;
  m["p_chi_square"] = p.best_vs_worst.p_chi_square;
  m["p_adjusted"] = p.best_vs_worst_p_adjusted;
  d["mcnemar_best_vs_worst"] = m;
  d["flips"] = p.flips;
  d["flip_fraction"] = p.flip_fraction;
  d["flip_ci"] = interval_dict(p.flip_ci);
  return d;
}

py::dict summary_dict(const stats::model_summary& s) {
  py::dict d;
  d["model"] = s.model;
  d["total_trials"] = s.total_trials;
  d["total_hits"] = s.total_hits;
  d["total_recall"] = s.total_recall;
  std::vector<double> lo, hi;
  for (const auto& c : s.ci) {
    lo.push_back(c.low);
    hi.push_back(c.high);
  }
  d["recall"] = to_numpy(std::vector<double>(s.recall));
  d["ci_low"] = to_numpy(std::move(lo));
  d["ci_high"] = to_numpy(std::move(hi));
  d["gap"] = gap_dict(s.gap);
  d["uniformity"] = test_dict(s.uniformity);
  d["periodicity"] = periodicity_dict(s.periodicity);
  if (s.vs_baseline) {
    py::dict v;
    v["difference"] = s.vs_baseline->difference;
    v["bias_corrected"] = s.vs_baseline->bias_corrected;
    v["simultaneous"] = interval_dict(s.vs_baseline->simultaneous);
    v["percentile"] = interval_dict(s.vs_baseline->ci);
    v["replicates"] = s.vs_baseline->replicates;
    d["vs_baseline"] = v;
  } else {
    d["vs_baseline"] = py::none();
  }
  d["paired"] = s.paired ? py::object(paired_dict(*s.paired)) : py::object(py::none());
  return d;
}

/// One sweep's counts and its output (provenance, run columns, theory column); statistics are
/// computed on first use (GIL released) and kept.
/// The written form of a result (io::sweep_result) with its summaries computed once: shared by
/// sweeps and analyze() results.
struct output_handle {
  kvphase::io::sweep_result out;
  std::optional<std::vector<stats::model_summary>> summaries;

  const std::vector<stats::model_summary>& summary() {
    if (!summaries) {
      py::gil_scoped_release release;
      summaries = stats::summarize(out.models, out.analysis);
    }
    return *summaries;
  }
  std::string text(const std::string& format) {
    kvphase::require(format == "csv" || format == "json", "format", format, "must be csv or json");
    return kvphase::io::sweep_text(out, summary(), format);
  }
  py::dict statistics() {
    py::dict d;
    for (const auto& s : summary()) d[py::str(s.model)] = summary_dict(s);
    return d;
  }
};

/// A sweep: the run's counts (sim::sweep_result) beside their written form.
struct sweep_handle : output_handle {
  sim::sweep_result result;
};

std::shared_ptr<sweep_handle> sweep_py(const py::dict& config, const py::dict& extra, const std::vector<std::string>& argv,
                                       bool theory, const py::object& progress, double check_seconds) {
  kvphase::require(std::isfinite(check_seconds) && check_seconds > 0 && check_seconds <= 3600, "check_seconds",
                   check_seconds, "must be in (0, 3600]");
  const auto c = config_from_json(to_json(config, "config"));
  if (theory) (void)sim::theory_or_throw(c);  // before the run: fail fast when not covered
  auto h = std::make_shared<sweep_handle>();
  h->result = run_sweep_interruptible(c, progress, check_seconds);
  if (!progress.is_none()) progress(1.0);
  std::vector<const char*> args;
  for (const auto& a : argv) args.push_back(a.c_str());
  h->out = sim::to_output(h->result, {.extra_config = nlohmann::json::parse(to_json(extra, "extra").dump()),
                                      .argc = static_cast<int>(args.size()),
                                      .argv = args.data(),
                                      .theory = theory});
  return h;
}


/// The result of analyze(): an external evaluation's counts in the sweep format (io/evaluation.hpp).
using analysis_handle = output_handle;

/// analyze(): the records arrive as the CSV text kvphase-analyze reads (built by the Python
/// side from the arrays), so the same parser checks them with the same messages.
std::shared_ptr<analysis_handle> analyze_py(const std::string& text, std::int64_t stride, std::int64_t modulus,
                                            std::int64_t origin, const std::vector<std::string>& by, double confidence,
                                            std::int64_t permutations, std::int64_t bootstrap, std::uint64_t seed,
                                            const std::string& baseline, const std::vector<std::string>& argv) {
  kvphase::io::evaluation_options o;
  o.stride = stride;
  o.modulus = modulus;
  o.origin = origin;
  o.by = by;
  o.validate();
  auto h = std::make_shared<analysis_handle>();
  {
    py::gil_scoped_release release;
    const auto d = kvphase::io::parse_evaluation(text, "analyze()", o);
    nlohmann::json config{{"program", "kvphase.analyze"}, {"stride", o.stride}, {"modulus", o.groups()},
                          {"origin", o.origin}, {"by", o.by}, {"records", d.records.size()},
                          {"items", d.items.size()}};
    std::vector<const char*> args;
    for (const auto& a : argv) args.push_back(a.c_str());
    auto prov = kvphase::io::make_provenance(std::move(config), seed, 1, static_cast<int>(args.size()), args.data());
    h->out = kvphase::io::evaluation_result(d, o,
                                            {.confidence = confidence,
                                             .permutations = permutations,
                                             .bootstrap_replicates = bootstrap,
                                             .seed = seed,
                                             .baseline = baseline},
                                            std::move(prov));
  }
  return h;
}

/// paired_test(): outcomes [items × groups] of 0/1 → stats::summarize_paired.
py::dict paired_test_py(py::handle outcomes_obj, double confidence, std::int64_t permutations, std::uint64_t seed) {
  if (!py::isinstance<py::array>(outcomes_obj))
    throw py::type_error("outcomes: expected a NumPy array of 0/1 (items × groups)");
  const auto a = py::reinterpret_borrow<py::array>(outcomes_obj);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b')
    throw py::type_error("outcomes: dtype must be an integer or bool type, got " + std::string(py::str(a.dtype())));
  if (a.ndim() != 2) throw py::value_error("outcomes: must be 2-D (items × groups), got " + std::to_string(a.ndim()) + "-D");
  kvphase::require(a.shape(1) >= 2, "outcomes.shape[1]", a.shape(1), "must be >= 2 groups");
  const auto x = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  const auto items = x.shape(0), k = x.shape(1);
  auto c = stats::paired_counts::zero(k);
  const std::int64_t* v = x.data();
  std::vector<std::uint8_t> row(static_cast<std::size_t>(k));
  for (py::ssize_t i = 0; i < items; ++i) {
    for (py::ssize_t g = 0; g < k; ++g) {
      const std::int64_t o = v[i * k + g];
      kvphase::require(o == 0 || o == 1, "outcomes[" + std::to_string(i) + ", " + std::to_string(g) + "]", o,
                       "must be 0 or 1");
      row[static_cast<std::size_t>(g)] = static_cast<std::uint8_t>(o);
    }
    c.add_item(std::span<const std::uint8_t>(row));
  }
  const stats::paired_options opt{.confidence = confidence, .permutations = permutations, .seed = seed};
  stats::paired_summary r;
  {
    py::gil_scoped_release release;
    r = stats::summarize_paired(c, opt);
  }
  return paired_dict(r);
}

/// load_v4_layer(): one layer's DeepSeek-V4 compressor (and CSA indexer) from a safetensors
/// checkpoint (compress/checkpoint.hpp), as OperatorSpec + Params.
template <class Real>
py::dict load_v4_layer_impl(const std::string& path, index_t layer) {
  compress::v4_layer<Real> L;
  {
    py::gil_scoped_release release;
    const kvphase::io::safetensors_checkpoint ck(path);
    L = compress::load_v4_layer<Real>(ck, layer, compress::v4_options_for(path));
  }
  auto one = [](compress::loaded_compressor<Real>& c) {
    py::dict d;
    d["prefix"] = c.prefix;
    d["spec"] = c.spec;
    params_holder h;
    h.d = c.d;
    h.p = std::move(c.params);
    d["params"] = std::move(h);
    d["d"] = c.d;
    return d;
  };
  py::dict d;
  d["layer"] = L.layer;
  d["csa"] = L.csa;
  d["compressor"] = one(L.compressor);
  d["indexer"] = L.indexer ? py::object(one(*L.indexer)) : py::object(py::none());
  d["indexer_q_b"] = L.indexer_q_b.size() ? py::object(to_numpy<Real>(std::move(L.indexer_q_b))) : py::object(py::none());
  d["indexer_weights"] =
      L.indexer_weights.size() ? py::object(to_numpy<Real>(std::move(L.indexer_weights))) : py::object(py::none());
  return d;
}

}  // namespace

PYBIND11_MODULE(_kvphase, m) {
  m.doc() = "kvphase extension module (use the kvphase package)";
  m.attr("__version__") = KVPHASE_VERSION_STRING;
  m.attr("compiled_isa") = kvphase::io::compiled_isa();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kvphase::error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(PyExc_ValueError, (std::string("kvphase: ") + e.what()).c_str());
    }
  });

  // ---- operator specs ----
  py::class_<compress::operator_spec>(m, "OperatorSpec",
                                      "A chunked compression operator (compress::operator_spec). Build with "
                                      "kvphase.operator_spec(...) or kvphase.preset(name).")
      .def("to_dict", [](const compress::operator_spec& s) { return from_json(kvphase::io::fields_to_json(s)); },
           "Every field, by the spec's field list (nested: grid, rope).")
      .def("validate", &compress::operator_spec::validate)
      .def("stream_key", [](const compress::operator_spec& s) { return kvphase::fields::canonical(s); })
      .def("__repr__",
           [](const compress::operator_spec& s) {
             std::ostringstream os;
             os.precision(17);
             os << s;
             return os.str();
           })
      .def("__eq__", [](const compress::operator_spec& a, const compress::operator_spec& b) { return a == b; })
      .def("__copy__", [](const compress::operator_spec& s) { return s; })
      .def(py::pickle([](const compress::operator_spec& s) { return kvphase::io::fields_to_json(s).dump(); },
                      [](const std::string& t) { return spec_from_json(json::parse(t)); }))
      .def("num_entries", [](const compress::operator_spec& s, index_t n, index_t head) {
             s.validate();
             kvphase::require(n >= 0 && n <= (index_t(1) << 40) - 1, "n_tokens", n, "must be in [0, 2^40)");
             return s.head_grid(head).num_entries(n);
           }, py::arg("n_tokens"), py::arg("head") = 0)
      .def("entries", &entries_py, py::arg("n_tokens"), py::arg("head") = 0,
           "Per complete entry of n_tokens: first/last source token (unclipped), masked leading slots, "
           "visible_from (first query position that sees it) and phase_of_first.")
      .def("phases", [](const compress::operator_spec& s, py::handle positions, index_t head) {
             s.validate();
             const auto g = s.head_grid(head);
             auto p = int_vector(positions, "positions");
             for (std::size_t i = 0; i < p.size(); ++i) {
               if (!compress::chunk_grid::in_extent(p[i]))
                 kvphase::fail("positions[" + std::to_string(i) + "]", p[i], "must be within ±2^40");
               p[i] = g.phase(p[i]);
             }
             return to_numpy(std::move(p));
           }, py::arg("positions"), py::arg("head") = 0, "Phase (p − origin) mod stride of each position.")
      .def("num_visible", [](const compress::operator_spec& s, index_t t, index_t head) {
             s.validate();
             kvphase::require(compress::chunk_grid::in_extent(t), "t", t, "must be within ±2^40");
             return s.head_grid(head).num_visible(t);
           }, py::arg("t"), py::arg("head") = 0, "Entries visible to a query at position t (a prefix).")
      .def("entries_containing", [](const compress::operator_spec& s, index_t p, index_t head) {
             s.validate();
             kvphase::require(compress::chunk_grid::in_extent(p), "p", p, "must be within ±2^40");
             std::vector<std::pair<index_t, index_t>> out;
             for (const auto& es : s.head_grid(head).entries_containing(p)) out.emplace_back(es.entry, es.slot);
             return out;
           }, py::arg("p"), py::arg("head") = 0, "(entry, slot) pairs of the entries that pool token p.");

  m.def("_spec_from_dict", [](const py::dict& d) { return spec_from_json(to_json(d, "")); });
  m.def("_preset", [](const std::string& name) { return compress::preset(name); });
  m.attr("preset_names") = [] {
    py::list l;
    for (auto n : compress::preset_names) l.append(std::string(n));
    return py::tuple(l);
  }();

  py::class_<params_holder>(m, "Params", "Learned parameters of one compression head (compress::pool_params).")
      .def_property_readonly("dtype", [](const params_holder& p) { return p.f32() ? "float32" : "float64"; })
      .def_readonly("d", &params_holder::d)
      .def_readonly("head", &params_holder::head)
      .def("__repr__", [](const params_holder& p) {
        std::ostringstream os;
        std::visit([&](const auto& q) { os << q; }, p.p);
        return os.str();
      });
  m.def("make_params",
        [](const compress::operator_spec& spec, index_t d, std::uint64_t seed, index_t head, const std::string& dtype,
           bool preset_recipe) {
          kvphase::require(dtype == "float32" || dtype == "float64", "dtype", dtype, "must be float32 or float64");
          const compress::param_init init = preset_recipe ? compress::preset_init(spec, seed) : compress::param_init{.seed = seed};
          params_holder h;
          h.d = d;
          h.head = head;
          if (dtype == "float32") h.p = compress::make_params<float>(spec, d, init, head);
          else h.p = compress::make_params<double>(spec, d, init, head);
          return h;
        },
        py::arg("spec"), py::arg("d"), py::arg("seed") = 0, py::arg("head") = 0, py::arg("dtype") = "float32",
        py::arg("preset_recipe") = true);
  m.def("output_dim", [](const compress::operator_spec& spec, index_t d, const params_holder* p) -> index_t {
          spec.validate();
          if (!p) return compress::pool_params<float>{}.output_dim(spec, d);
          return std::visit([&](const auto& q) { return q.output_dim(spec, d); }, p->p);
        }, py::arg("spec"), py::arg("d"), py::arg("params") = nullptr);
  m.def("compress", &compress_py, py::arg("spec"), py::arg("x"), py::arg("params") = nullptr, py::arg("head") = 0,
        "Compress x (tokens × channels, float32/float64, C-contiguous; read in place) into one row per complete "
        "entry.");

  // ---- attention ----
  m.def("full_attention", &full_attention_py, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("pos") = py::none(),
        py::arg("scale") = 0.0, py::arg("sink") = std::nullopt, py::arg("threads") = 0);
  m.def("_compressed_attention", &compressed_attention_py);
  m.def("_multihead_attention", &multihead_attention_py);
  m.def("scores", &scores_py, py::arg("q"), py::arg("k"), py::arg("scale") = 0.0,
        "Scaled attention logits scale·q·kᵀ (scale 0: 1/sqrt(d)).");

  // ---- sweeps ----
  m.def("_default_config", [] { return from_json(kvphase::io::fields_to_json(sim::sweep_config{})); });
  m.def("_task_defaults", [](const std::string& name) { return from_json(kvphase::io::fields_to_json(sim::make_task(name))); });
  m.def("task_names", [] { return kvphase::tasks::registry().names(); });
  m.def("_check_config", [](const py::dict& config) {
    const auto c = config_from_json(to_json(config, "config"));
    return py::make_tuple(from_json(kvphase::io::fields_to_json(c)), c.groups());
  });
  py::class_<sweep_handle, std::shared_ptr<sweep_handle>>(m, "_Sweep")
      .def_property_readonly("labels", [](const sweep_handle& h) { return to_numpy(std::vector<index_t>(h.result.labels)); })
      .def("counts", [](const sweep_handle& h, const std::string& model) {
        kvphase::require(model == "compressed" || model == "full", "model", model, "must be compressed or full");
        const auto& g = model == "compressed" ? h.result.compressed : h.result.full;
        std::vector<std::int64_t> t, k, mass, margin;
        for (const auto& s : g) {
          t.push_back(s.trials);
          k.push_back(s.hits);
        }
        py::dict d;
        d["trials"] = to_numpy(std::move(t));
        d["hits"] = to_numpy(std::move(k));
        return d;
      })
      .def_property_readonly("seconds", [](const sweep_handle& h) { return h.result.seconds; })
      .def_property_readonly("config", [](const sweep_handle& h) { return from_json(kvphase::io::fields_to_json(h.result.config)); })
      .def_property_readonly("stream_key", [](const sweep_handle& h) { return h.result.config.stream_key(); })
      .def_property_readonly("provenance", [](const sweep_handle& h) { return from_json(kvphase::io::to_json(h.out.prov)); })
      .def_property_readonly("run_columns", [](const sweep_handle& h) { return h.out.columns; })
      .def_property_readonly("analysis", [](const sweep_handle& h) { return from_json(kvphase::io::to_json(h.out.analysis)); })
      .def("extra", [](const sweep_handle& h) {
        py::dict d;
        for (const auto& mdl : h.out.models) {
          py::dict e;
          for (const auto& x : mdl.extra) e[py::str(x.name)] = to_numpy(std::vector<double>(x.values));
          d[py::str(mdl.model)] = e;
        }
        return d;
      })
      .def("statistics", [](sweep_handle& h) { return h.statistics(); })
      .def("text", [](sweep_handle& h, const std::string& f) { return h.text(f); }, py::arg("format"));
  m.def("_sweep", &sweep_py, py::arg("config"), py::arg("extra"), py::arg("argv"), py::arg("theory"),
        py::arg("progress") = py::none(), py::arg("check_seconds") = 0.1);
  // the C++ call of compress() timed in this process (examples/python/bench_overhead.py puts it
  // beside the Python call, under the same machine load): median seconds per call over `repeats`
  // loops of `calls` calls
  m.def("_time_compress", [](const compress::operator_spec& spec, py::handle x_obj, int calls, int repeats) {
    const py::array x = require_matrix(x_obj, "x");
    kvphase::require(is_f32(x), "x", dtype_name(x), "the timing loop takes float32");
    const auto xv = view_of<float>(x);
    const compress::pool_params<float> none;
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) {
        auto out = compress::compress<float>(spec, none, xv);
        asm volatile("" : : "g"(out.data()) : "memory");
      }
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  });
  m.def("_theory", [](const py::dict& config) {
    const auto c = config_from_json(to_json(config, "config"));
    const auto t = kvphase::theory::predict_sweep_column(c);
    py::dict d;
    d["covered"] = t.covered;
    d["reason"] = t.reason;
    std::vector<index_t> labels;
    for (index_t g = 0; g < c.groups(); ++g) labels.push_back(c.label(g));
    d["labels"] = to_numpy(std::move(labels));
    d["compressed"] = to_numpy(std::vector<double>(t.compressed));
    d["full"] = to_numpy(std::vector<double>(t.full));
    return d;
  });

  // ---- statistics (counts in, statistics out) ----
  m.def("recall", [](std::int64_t hits, std::int64_t trials) { return stats::recall(hits, trials); });
  m.def("binomial_interval", [](std::int64_t hits, std::int64_t trials, double confidence, const std::string& method) {
          return std::make_pair(stats::binomial_interval(hits, trials, confidence, stats::parse_interval_method(method)).low,
                                stats::binomial_interval(hits, trials, confidence, stats::parse_interval_method(method)).high);
        }, py::arg("hits"), py::arg("trials"), py::arg("confidence") = 0.95, py::arg("method") = "wilson");
  m.def("simultaneous_intervals", [](py::handle hits, py::handle trials, double confidence) {
          const auto h = int_vector(hits, "hits"), t = int_vector(trials, "trials");
          const auto ci = stats::simultaneous_intervals(h, t, confidence);
          std::vector<double> lo, hi;
          for (const auto& c : ci) {
            lo.push_back(c.low);
            hi.push_back(c.high);
          }
          return py::make_tuple(to_numpy(std::move(lo)), to_numpy(std::move(hi)));
        }, py::arg("hits"), py::arg("trials"), py::arg("confidence") = 0.95);
  m.def("uniformity_test", [](py::handle hits, py::handle trials, const std::string& method) {
          stats::uniformity_method um{};
          if (method == "pearson_chi_square") um = stats::uniformity_method::pearson_chi_square;
          else if (method == "g_test") um = stats::uniformity_method::g_test;
          else kvphase::fail("method", method, "must be pearson_chi_square or g_test");
          return test_dict(stats::uniformity_test(int_vector(hits, "hits"), int_vector(trials, "trials"), um));
        }, py::arg("hits"), py::arg("trials"), py::arg("method") = "pearson_chi_square");
  m.def("periodicity_test", [](py::handle hits, py::handle trials, std::int64_t modulus, std::int64_t period,
                               const std::string& statistic, std::int64_t permutations, std::uint64_t seed) {
          stats::periodicity_options o;
          if (statistic == "harmonics") o.statistic = stats::periodicity_statistic::harmonics;
          else if (statistic == "fundamental") o.statistic = stats::periodicity_statistic::fundamental;
          else kvphase::fail("statistic", statistic, "must be harmonics or fundamental");
          o.reference = permutations > 0 ? stats::periodicity_reference::permutation : stats::periodicity_reference::chi_square;
          o.permutations = std::max<std::int64_t>(permutations, 1);
          o.seed = seed;
          const auto h = int_vector(hits, "hits"), t = int_vector(trials, "trials");
          stats::periodicity_result r;
          {
            py::gil_scoped_release release;
            r = stats::periodicity_test(h, t, modulus, period, o);
          }
          return periodicity_dict(r);
        }, py::arg("hits"), py::arg("trials"), py::arg("modulus"), py::arg("period"), py::arg("statistic") = "harmonics",
        py::arg("permutations") = 9999, py::arg("seed") = 0);
  m.def("phase_gap", [](py::handle hits, py::handle trials, std::int64_t replicates, double confidence, std::uint64_t seed) {
          const auto h = int_vector(hits, "hits"), t = int_vector(trials, "trials");
          stats::gap_result r;
          {
            py::gil_scoped_release release;
            r = stats::phase_gap_bootstrap(h, t, {.replicates = replicates, .confidence = confidence, .seed = seed});
          }
          return gap_dict(r);
        }, py::arg("hits"), py::arg("trials"), py::arg("replicates") = 2000, py::arg("confidence") = 0.95,
        py::arg("seed") = 0);
  m.def("gap_difference", [](py::handle hits_a, py::handle trials_a, py::handle hits_b, py::handle trials_b,
                             std::int64_t replicates, double confidence, std::uint64_t seed) {
          const auto ha = int_vector(hits_a, "hits_a"), ta = int_vector(trials_a, "trials_a");
          const auto hb = int_vector(hits_b, "hits_b"), tb = int_vector(trials_b, "trials_b");
          stats::gap_difference_result r;
          {
            py::gil_scoped_release release;
            r = stats::gap_difference_bootstrap(ha, ta, hb, tb,
                                                {.replicates = replicates, .confidence = confidence, .seed = seed});
          }
          py::dict v;
          v["difference"] = r.difference;
          v["bias_corrected"] = r.bias_corrected;
          v["simultaneous"] = interval_dict(r.simultaneous);
          v["percentile"] = interval_dict(r.ci);
          v["replicates"] = r.replicates;
          return v;
        }, py::arg("hits_a"), py::arg("trials_a"), py::arg("hits_b"), py::arg("trials_b"), py::arg("replicates") = 2000,
        py::arg("confidence") = 0.95, py::arg("seed") = 0);
  m.def("summarize", [](py::handle hits, py::handle trials, std::int64_t period, double confidence,
                        std::int64_t permutations, std::int64_t bootstrap_replicates, std::uint64_t seed,
                        const std::string& model) {
          stats::phase_counts pc;
          pc.model = model;
          pc.hits = int_vector(hits, "hits");
          pc.trials = int_vector(trials, "trials");
          stats::analysis_options a;
          a.modulus = static_cast<std::int64_t>(pc.trials.size());
          a.period = period;
          a.confidence = confidence;
          a.permutations = permutations;
          a.bootstrap_replicates = bootstrap_replicates;
          a.seed = seed;
          stats::model_summary s;
          {
            py::gil_scoped_release release;
            s = stats::summarize(pc, a);
          }
          return summary_dict(s);
        }, py::arg("hits"), py::arg("trials"), py::arg("period"), py::arg("confidence") = 0.95,
        py::arg("permutations") = 9999, py::arg("bootstrap_replicates") = 2000, py::arg("seed") = 0,
        py::arg("model") = "model");

  // ---- external evaluations, paired tests, real checkpoints ----
  py::class_<analysis_handle, std::shared_ptr<analysis_handle>>(m, "_Analysis")
      .def_property_readonly("models", [](const analysis_handle& h) {
        std::vector<std::string> n;
        for (const auto& mdl : h.out.models) n.push_back(mdl.model);
        return n;
      })
      .def("counts", [](const analysis_handle& h, const std::string& model) {
        for (const auto& mdl : h.out.models)
          if (mdl.model == model) {
            py::dict d;
            d["trials"] = to_numpy(std::vector<std::int64_t>(mdl.trials));
            d["hits"] = to_numpy(std::vector<std::int64_t>(mdl.hits));
            return d;
          }
        kvphase::fail("model", model, "is not a model of this analysis");
      })
      .def_property_readonly("provenance", [](const analysis_handle& h) { return from_json(kvphase::io::to_json(h.out.prov)); })
      .def("statistics", [](analysis_handle& h) { return h.statistics(); })
      .def("text", [](analysis_handle& h, const std::string& f) { return h.text(f); }, py::arg("format"));
  m.def("_analyze", &analyze_py);
  m.def("paired_test", &paired_test_py, py::arg("outcomes"), py::arg("confidence") = 0.95,
        py::arg("permutations") = 9999, py::arg("seed") = 0,
        "Paired analysis of outcomes [items × groups] of 0/1 (the same item in every group): Cochran's Q, "
        "McNemar best vs worst group (with its Bonferroni-adjusted p), the flip count (stats/paired.hpp).");
  m.def("load_v4_layer", [](const std::string& path, index_t layer, const std::string& dtype) {
          kvphase::require(dtype == "float32" || dtype == "float64", "dtype", dtype, "must be float32 or float64");
          return dtype == "float32" ? load_v4_layer_impl<float>(path, layer) : load_v4_layer_impl<double>(path, layer);
        }, py::arg("path"), py::arg("layer"), py::arg("dtype") = "float32",
        "Loads layer `layer`'s DeepSeek-V4 compressor (and CSA indexer) from a safetensors checkpoint (file, "
        "directory or model.safetensors.index.json) by Hugging Face tensor name (docs/real-models.md).");
}

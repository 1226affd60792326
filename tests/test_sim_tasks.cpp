// Tasks are open: a task defined and registered in this file alone runs through run_sweep, the
// library's output path and the JSON round trip; and the stream key is independent of any
// printed text.
#include <catch2/catch.hpp>

#include <kvphase/io/fields_json.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/sim/report.hpp>
#include <kvphase/sim/sweep.hpp>

#include <charconv>
#include <sstream>
#include <string>
#include <vector>

namespace sim = kvphase::sim;
namespace tasks = kvphase::tasks;
namespace io = kvphase::io;
using kvphase::index_t;

namespace {

// ---- a toy task: the whole definition --------------------------------------------------------
/// One planted token in N noise tokens at p ≡ origin + group (mod M), p uniform over the middle
/// half; the query is the token's key; hit = the best item holds it.
struct beacon_task {
  static constexpr std::string_view task_name = "beacon";
  index_t context = 600;
  index_t dim = 16;
  double query_noise = 0.8;

  template <class V>
  void visit_fields(V&& v) {
    v("context", context);
    v("dim", dim);
    v("query_noise", query_noise);
  }
  index_t groups(const tasks::sweep_geometry& g) const { return g.phase_groups(); }
  index_t label(index_t g) const { return g; }
  std::string_view label_column() const { return {}; }
  index_t key_dim() const { return dim; }
  index_t context_tokens(index_t) const { return context; }
  void validate(const tasks::sweep_geometry& g) const {
    kvphase::require(dim >= 1 && dim <= 1024, "dim", dim, "must be in [1, 1024]");
    kvphase::require(context >= 4 * (g.phase_groups() + g.reserve()) && context <= 100000, "context", context,
                     "must be in [4 * (groups + window reserve), 100000]");
  }
  struct state {
    std::vector<float> kappa, eps, q;
    std::vector<tasks::planted_span> planted;
  };
  void run(tasks::trial_env& env, state& w, tasks::trial_outcome& comp, tasks::trial_outcome& full) const {
    const auto& geo = env.geometry();
    const index_t M = groups(geo);
    const index_t p0 = context / 4 + static_cast<index_t>(env.layout().below(static_cast<std::uint64_t>(context / 2)));
    const index_t p = p0 + tasks::centred_residue_shift(p0 - geo.origin, env.group(), M);
    tasks::detail::fill(env.normals(), w.kappa, dim);
    tasks::detail::fill(env.normals(), w.eps, dim);
    const double qn = tasks::detail::make_query(w.q, w.kappa, w.eps, query_noise, dim);
    const double qk = tasks::detail::dot_d(w.q.data(), w.kappa.data(), dim);
    kvphase::sim::normal_state st = env.normals().state();
    w.planted.assign({{p, 1, w.kappa.data(), 1.0f, static_cast<float>(qk)}});
    env.score(st, context, w.q.data(), qn, w.planted);
    auto readout = [&](tasks::model_view mv) {
      float bt, bo;
      mv.model.best_scores(mv.buffers, p, p + 1, bt, bo);
      return tasks::trial_outcome{.hit = bt > bo, .mass = 0.0, .margin = static_cast<double>(bt) - bo};
    };
    comp = readout(env.compressed());
    full = readout(env.full());
  }
};
// ---- its registration: one line ----------------------------------------------------------------
const bool beacon_registered = tasks::register_task<beacon_task>();

sim::sweep_config beacon_sweep() {
  sim::sweep_config c;
  c.task = beacon_task{};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = kvphase::compress::pool_kind::slot_gate,
          .slot_bias = {3, 0, 0, 0}, .name = "early-gate"};
  c.modulus = 4;
  c.trials = 300;
  c.seed = 9;
  return c;
}

}  // namespace

TEST_CASE("tasks: a task defined in a test file sweeps through run_sweep, the output path and JSON", "[sim][tasks]") {
  REQUIRE(beacon_registered);
  REQUIRE(tasks::registry().contains("beacon"));
  auto c = beacon_sweep();
  REQUIRE_NOTHROW(c.validate());
  CHECK(c.resolved_engine() == sim::engine_kind::score);  // a fixed linear pool: score engine is exact
  c.threads = 1;
  const auto r = sim::run_sweep(c);
  REQUIRE(r.compressed.size() == 4);
  for (const auto& g : r.compressed) CHECK(g.trials == 300);
  // the early-slot gate keeps phase 0 and loses the others; full attention does not care
  const auto out = sim::to_output(r, {.extra_config = {{"program", "test"}}});
  const auto summaries = kvphase::stats::summarize(out.models, out.analysis);
  CHECK(summaries[0].periodicity.p < 0.01);
  CHECK(summaries[0].recall[0] > summaries[0].recall[1] + 0.2);
  // the same counts on any thread count
  c.threads = 2;
  const auto r2 = sim::run_sweep(c);
  CHECK(r2.compressed == r.compressed);
  CHECK(r2.full == r.full);
  // the task is recorded by its field list, in the provenance and as run columns
  CHECK(out.prov.config["task"]["kind"] == "beacon");
  CHECK(out.prov.config["task"]["query_noise"] == 0.8);
  bool has_col = false;
  for (const auto& [k, v] : out.columns) has_col |= (k == "task" && v == "beacon");
  CHECK(has_col);
  // JSON and CSV round trips keep the counts and the run columns
  for (const char* fmt : {"json", "csv"}) {
    INFO(fmt);
    const std::string text = sim::output_text(out, fmt);
    const auto back = io::parse_sweep(text, fmt);
    CHECK(back.models == out.models);
    CHECK(back.columns == out.columns);
    CHECK(sim::output_text(back, fmt) == text);
  }
  // the config itself round-trips through JSON, task included (by its registered name)
  sim::sweep_config c2;
  io::fields_from_json(io::fields_to_json(c), c2, "config");
  CHECK(c2.task.name() == "beacon");
  CHECK(c2.stream_key() == c.stream_key());
  CHECK(c2.config_id() == c.config_id());
  CHECK_THROWS_WITH(io::fields_from_json(nlohmann::ordered_json{{"task", {{"kind", "nope"}}}}, c2, "config"),
                    Catch::Contains("nope") && Catch::Contains("beacon"));
  CHECK_THROWS_WITH(io::fields_from_json(nlohmann::ordered_json{{"task", {{"kind", "beacon"}, {"size", 3}}}}, c2, "config"),
                    Catch::Contains("config.task.size"));
}

TEST_CASE("tasks: the stream key does not depend on printed text", "[sim][tasks][determinism]") {
  auto c = beacon_sweep();
  c.task.get<beacon_task>().query_noise = 0.123456789012345678;  // a value printed differently at each precision
  std::ostringstream coarse, fine;
  coarse.precision(3);
  fine.precision(17);
  coarse << c;
  fine << c;
  REQUIRE(coarse.str() != fine.str());  // the printed text changes with the stream's format ...
  const auto key = c.stream_key();
  const auto id = c.config_id();
  std::ostringstream other;
  other.precision(1);
  other << std::scientific << c;  // printing never changes the key
  CHECK(c.stream_key() == key);
  CHECK(c.config_id() == id);
  // ... while the key is canonical: exact (hexadecimal) doubles, versioned schema
  CHECK(key.starts_with(std::string(sim::sweep_schema) + "|"));
  char hex[64];
  const auto end = std::to_chars(hex, hex + sizeof hex, 0.123456789012345678, std::chars_format::hex).ptr;
  CHECK(key.find("query_noise=" + std::string(hex, end) + ";") != std::string::npos);  // the exact double
  CHECK(key.find("trials") == std::string::npos);  // unkeyed fields are absent
  // keyed fields change it, unkeyed ones (trials, threads, shard, seed) do not
  auto d = c;
  d.trials = 7;
  d.threads = 3;
  d.shard = {1, 2};
  d.seed = 99;
  CHECK(d.config_id() == id);
  d.task.get<beacon_task>().query_noise = 0.5;
  CHECK(d.config_id() != id);
  // auto resolves before keying: auto and the engine it picks are the same stream
  auto e = c;
  e.engine = sim::engine_kind::score;
  CHECK(e.config_id() == id);
  e.engine = sim::engine_kind::key;
  CHECK(e.config_id() != id);
  // modulus 0 means the stride: the same stream as naming it
  auto m = c;
  m.modulus = 0;
  CHECK(m.config_id() == id);  // beacon_sweep() has modulus 4 = the stride
  m.modulus = 8;
  CHECK(m.config_id() != id);
}

TEST_CASE("tasks: an engine that cannot run an operator exactly is refused, naming the field", "[sim][tasks]") {
  sim::sweep_config c;
  c.task = tasks::needle_config{.context = 512, .dim = 16};
  c.op = kvphase::compress::v4_csa();
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("op.rope.rope_dim = 64"));  // RoPE must fit d = 16
  c.op.rope.rope_dim = 16;
  CHECK(c.resolved_engine() == sim::engine_kind::key);
  c.engine = sim::engine_kind::score;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("engine = score") && Catch::Contains("not linear"));
  c.engine = sim::engine_kind::automatic;
  CHECK_NOTHROW(c.validate());
  auto p = c;
  p.task = tasks::padding_config{};
  p.modulus = 4;
  CHECK_THROWS_WITH(p.validate(), Catch::Contains("modulus = 4"));
}

#include <kvphase/io/evaluation.hpp>

TEST_CASE("kvphase-analyze reproduces a sweep's counts and tests from its per-trial records", "[sim][analyze]") {
  for (auto design : {kvphase::sim::design_kind::independent, kvphase::sim::design_kind::shifted}) {
    kvphase::sim::sweep_config c;
    c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 32};
    c.op = {.grid = {.window = 4, .stride = 4}, .pool = kvphase::compress::pool_kind::slot_gate,
            .slot_bias = {0, 1, 2, 0}, .content_std = 0.3};
    c.trials = 150;
    c.seed = 5;
    c.design = design;
    INFO(c);
    const auto r = kvphase::sim::run_sweep(c);
    auto out = kvphase::sim::to_output(r);
    out.analysis.permutations = 999;
    out.analysis.bootstrap_replicates = 300;
    // one record per trial and model, as an external evaluation would log them
    std::string csv = "model,item,position,correct\n";
    kvphase::sim::trial_runner runner(c);
    std::vector<std::string> rows[2];
    for (kvphase::index_t g = 0; g < c.groups(); ++g)
      for (kvphase::index_t k = 0; k < c.trials; ++k) {
        kvphase::tasks::trial_outcome oc, of;
        runner.run(g, k, oc, of);
        // a position with the trial's phase (4 divides 1000): position mod 4 = g
        const std::string item = design == kvphase::sim::design_kind::shifted ? std::to_string(k) : std::to_string(g * c.trials + k);
        const std::string pos = std::to_string(1000 + 4 * k + g);
        rows[0].push_back("compressed," + item + "," + pos + "," + (oc.hit ? "1" : "0"));
        rows[1].push_back("full," + item + "," + pos + "," + (of.hit ? "1" : "0"));
      }
    for (auto& m : rows)
      for (auto& l : m) csv += l + "\n";
    kvphase::io::evaluation_options o{.by = {"model"}, .stride = 4};
    if (design == kvphase::sim::design_kind::independent) o.columns.item = "no_such_column";  // unpaired
    const auto d = kvphase::io::parse_evaluation(csv, "per_trial.csv", o);
    const auto a = kvphase::io::evaluation_result(d, o, out.analysis, out.prov);
    REQUIRE(a.models.size() == 2);
    CHECK(a.models == out.models);
    const auto ja = kvphase::io::sweep_to_json(a, kvphase::stats::summarize(a.models, a.analysis));
    const auto js = kvphase::io::sweep_to_json(out, kvphase::stats::summarize(out.models, out.analysis));
    CHECK(ja["models"].dump() == js["models"].dump());
    CHECK(ja["models"][0].contains("paired") == (design == kvphase::sim::design_kind::shifted));
  }
}

// Training loop, evaluation by phase, ablation matrix and mitigation variants.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "kvphase/train/mitigations.hpp"
#include "kvphase/io/train_units.hpp"
#include "kvphase/train/trainer.hpp"

using namespace kvphase;
using namespace kvphase::train;

namespace {

retrieval_task tiny_task() {
  return retrieval_task{.n_context = 24, .raw_window = 4, .n_keys = 64, .key_dim = 16, .n_values = 8,
                        .embed_seed = 2};
}

bool same_params(model_params a, model_params b, index_t H) {
  std::vector<std::vector<double>> va, vb;
  a.for_each_tensor(H, [&](const std::string&, double* d, index_t n) { va.emplace_back(d, d + n); });
  b.for_each_tensor(H, [&](const std::string&, double* d, index_t n) { vb.emplace_back(d, d + n); });
  return va == vb;
}

}  // namespace

TEST_CASE("train: training is deterministic and records gate profiles", "[train]") {
  const retrieval_data data(tiny_task());
  model_config mc;
  mc.head_dim = 8;
  const train_config tc{.steps = 40, .batch = 8, .profile_every = 10, .log_every = 0};
  const train_result a = train_model(data, mc, tc);
  const train_result b = train_model(data, mc, tc);
  CHECK(same_params(a.params, b.params, mc.heads()));
  REQUIRE(a.history.size() == 5);  // steps 0, 10, 20, 30, 40
  CHECK(a.history.front().step == 0);
  CHECK(a.history.back().step == 40);
  for (const auto& snap : a.history) {
    REQUIRE(snap.profile.size() == 2);
    for (const auto& row : snap.profile) {
      REQUIRE(row.size() == 4);
      double s = 0;
      for (double v : row) s += v;
      CHECK(s == Approx(1.0).epsilon(1e-14));
    }
  }
  const eval_config ec{.trials_per_position = 4, .seed = 5};
  const position_counts e1 = evaluate(data, mc, a.params, ec);
  const position_counts e2 = evaluate(data, mc, b.params, ec);
  CHECK(e1.hits == e2.hits);
  CHECK(e1.trials.size() == 20);
  // a different data seed gives different parameters
  train_config tc2 = tc;
  tc2.data_seed = 8;
  CHECK_FALSE(same_params(a.params, train_model(data, mc, tc2).params, mc.heads()));
}

TEST_CASE("train: phase grouping and ablation matrix", "[train]") {
  position_counts pc;
  pc.hits = {1, 2, 3, 4, 5, 6, 7};
  pc.trials = {10, 10, 10, 10, 10, 10, 10};
  const phase_counts ph = by_phase(pc, 3);
  CHECK(ph.hits == std::vector<std::int64_t>{1 + 4 + 7, 2 + 5, 3 + 6});
  CHECK(ph.trials == std::vector<std::int64_t>{30, 20, 20});
  CHECK(ph.total_hits() == 28);
  CHECK(ph.total_trials() == 70);
  CHECK(ph.recall(1) == Approx(0.35));
  const phase_counts shifted = by_phase(pc, 3, 1);  // phase of p is (p − 1) mod 3
  CHECK(shifted.hits == std::vector<std::int64_t>{2 + 5, 3 + 6, 1 + 4 + 7});
  CHECK_THROWS_AS(by_phase(pc, 0), kvphase::error);

  const retrieval_data data(tiny_task());
  model_config mc;
  mc.layers = 2;
  mc.head_dim = 4;
  const model_params p = init_params(data.task(), mc);
  const eval_config ec{.trials_per_position = 2, .seed = 3};
  const auto rows = ablation_matrix(data, mc, p, ec);
  REQUIRE(rows.size() == 1 + 2 * (2 + 1));
  CHECK(rows[0].component == "none");
  CHECK(rows[1].component == "l0.h0");
  CHECK(rows[3].component == "l0");
  CHECK(rows[3].head == -1);
  CHECK(rows[6].component == "l1");
  CHECK(rows[0].counts.hits == evaluate(data, mc, p, ec).hits);
  // each row is the evaluation with exactly its component knocked out
  std::vector<double> head_1(static_cast<std::size_t>(mc.layers * mc.heads()), 1.0), layer_1 = head_1;
  head_1[1] = 0.0;
  for (index_t h = 0; h < mc.heads(); ++h) layer_1[static_cast<std::size_t>(mc.heads() + h)] = 0.0;
  CHECK(rows[2].component == "l0.h1");
  CHECK(rows[2].counts.hits == evaluate(data, mc, p, ec, &head_1).hits);
  CHECK(rows[6].counts.hits == evaluate(data, mc, p, ec, &layer_1).hits);
  const auto names = ablation_components(mc);
  REQUIRE(names.size() == rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) CHECK(names[r].component == rows[r].component);
  std::vector<double> bad(3, 1.0);
  CHECK_THROWS_AS(evaluate(data, mc, p, ec, &bad), kvphase::error);
}

TEST_CASE("train: a trained full-attention control retrieves at every phase", "[train]") {
  const retrieval_data data(tiny_task());
  model_config mc;
  mc.cache = cache_kind::full;
  mc.spec.heads = 1;
  mc.head_dim = 8;
  const train_config tc{.steps = 600, .batch = 16, .adam = {.lr = 1e-2}, .profile_every = 0, .log_every = 0};
  const train_result r = train_model(data, mc, tc);
  const phase_counts ph = by_phase(evaluate(data, mc, r.params, {.trials_per_position = 20}), 4);
  // deterministic run; chance is 1/8
  for (index_t f = 0; f < 4; ++f) CHECK(ph.recall(f) >= 0.9);
}

TEST_CASE("train: a one-head compressed model learns one phase", "[train]") {
  const retrieval_data data(tiny_task());
  model_config mc;  // W = S = 4, slot gate
  mc.spec.heads = 1;
  mc.head_dim = 8;
  const train_config tc{.steps = 3000, .batch = 16, .adam = {.lr = 1e-2}, .profile_every = 0, .log_every = 0};
  const train_result r = train_model(data, mc, tc);
  const phase_counts ph = by_phase(evaluate(data, mc, r.params, {.trials_per_position = 20}), 4);
  // one slot wins the gate: its phase is retrieved, the others are near chance (1/8)
  const auto prof = slot_gate_profile(mc, r.params)[0];
  index_t best = 0;
  for (index_t s = 1; s < 4; ++s)
    if (prof[static_cast<std::size_t>(s)] > prof[static_cast<std::size_t>(best)]) best = s;
  CHECK(prof[static_cast<std::size_t>(best)] > 0.9);
  CHECK(ph.recall(best) >= 0.8);
  for (index_t f = 0; f < 4; ++f)
    if (f != best) CHECK(ph.recall(f) <= 0.4);
}

TEST_CASE("train: mitigation variants change exactly one thing", "[train]") {
  model_config base;
  base.spec.heads = 2;
  const train_config tb{};
  const mitigation_settings ms{};
  for (mitigation m : all_mitigations) {
    CHECK(parse_mitigation(to_string(m)) == m);
    const variant v = make_variant(m, base, tb, ms);
    CHECK(v.name() == to_string(m));
    CHECK(v.model.spec.grid.window == (m == mitigation::overlap ? 8 : 4));
    CHECK(v.model.spec.grid.stride == 4);
    CHECK(v.model.spec.head_offsets == (m == mitigation::shifted_heads ? std::vector<index_t>{0, 2} : std::vector<index_t>{}));
    CHECK(v.train.random_origin == (m == mitigation::random_offset));
    CHECK(v.model.blur.empty() == (m != mitigation::blur));
    CHECK((v.train.entropy_reg > 0) == (m == mitigation::gate_entropy));
    CHECK(v.model.content_gate == (m == mitigation::content_gate));
    CHECK(v.model.compressed() == (m != mitigation::full_attention));
  }
  // matched cache: every compressed variant has the same number of complete entries per head
  const retrieval_task task{};
  for (mitigation m : all_mitigations) {
    if (m == mitigation::full_attention) continue;
    const variant v = make_variant(m, base, tb, ms);
    for (index_t h = 0; h < 2; ++h) {
      const index_t e = v.model.spec.head_grid(h).num_entries(task.n_context);
      CHECK(e >= 15);
      CHECK(e <= 16);
    }
  }
  CHECK_THROWS_AS(parse_mitigation("nope"), kvphase::error);
  model_config bad = base;
  bad.spec.grid.window = 8;
  CHECK_THROWS_AS(make_variant(mitigation::plain, bad, tb), kvphase::error);
  bad = base;
  bad.cache = cache_kind::full;
  CHECK_THROWS_AS(make_variant(mitigation::plain, bad, tb), kvphase::error);
  CHECK_THROWS_AS(train_config{.steps = -1}.validate(), kvphase::error);
  CHECK_THROWS_AS(train_config{.batch = 0}.validate(), kvphase::error);
  CHECK_THROWS_AS(train_config{.entropy_reg = -1}.validate(), kvphase::error);
  CHECK_THROWS_AS(eval_config{.trials_per_position = 0}.validate(), kvphase::error);
  CHECK_THROWS_AS(mitigation_settings{.entropy_reg = -1.0}.validate(), kvphase::error);
  mitigation_settings even;
  even.blur_kernel = {0.5, 0.5};
  CHECK_THROWS_AS(even.validate(), kvphase::error);
  mitigation_settings none;
  none.blur_kernel.clear();
  CHECK_THROWS_AS(make_variant(mitigation::blur, base, tb, none), kvphase::error);
}

TEST_CASE("train: unit files (io/train_units.hpp) round-trip exactly and refuse bad members by name", "[train][io]") {
  namespace io = kvphase::io;
  const retrieval_data data(tiny_task());
  model_config mc;
  mc.head_dim = 8;
  const train_config tc{.steps = 20, .batch = 8, .profile_every = 10, .log_every = 0};
  const train_result t = train_model(data, mc, tc);
  const eval_config ec{.trials_per_position = 2, .seed = 3};
  io::train_unit u{.variant = "plain", .seed = 7, .trained = t, .ablation = ablation_matrix(data, mc, t.params, ec),
                   .final_gates = slot_gate_profile(mc, t.params)};
  u.trained.params = {};
  const index_t P = data.task().target_end();
  const io::ordered_json file = {{"config", {{"quick", true}}}, {"shard", "0/1"}, {"units", {io::to_json(u)}}};
  const auto back = io::parse_train_units(io::json_text(file), "units.json", P);
  REQUIRE(back.units.size() == 1);
  const auto& b = back.units[0];
  CHECK(b.variant == "plain");
  CHECK(b.seed == 7);
  CHECK(b.trained.final_loss == u.trained.final_loss);  // doubles round-trip exactly
  CHECK(b.final_gates == u.final_gates);
  REQUIRE(b.trained.history.size() == u.trained.history.size());
  CHECK(b.trained.history.back().profile == u.trained.history.back().profile);
  REQUIRE(b.ablation.size() == u.ablation.size());
  CHECK(b.ablation[1].counts.hits == u.ablation[1].counts.hits);
  CHECK(b.ablation[1].counts.mean_margin == u.ablation[1].counts.mean_margin);

  auto message = [&](const std::function<void(io::ordered_json&)>& edit, index_t positions) {
    io::ordered_json f = file;
    edit(f);
    try {
      (void)io::parse_train_units(io::json_text(f), "units.json", positions);
    } catch (const kvphase::error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  using Catch::Matchers::Contains;
  auto unit0 = [](io::ordered_json& f) -> io::ordered_json& { return f["units"][0]; };
  CHECK_THAT(message([&](auto& f) { unit0(f)["ablation"][0]["hits"][0] = 1000; }, P),
             Contains("units.json units[0] (plain seed 7).ablation[0].hits[0]") && Contains("must be an integer in [0, 2]"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["ablation"][0]["trials"][0] = 0; }, P), Contains("trials[0]"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["ablation"][0]["hits"][0] = 0.5; }, P), Contains("must be an integer"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["final_gates"][0][0] = 1.5; }, P),
             Contains("final_gates[0][0]") && Contains("must be in [0, 1]"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["seed"] = -1; }, P), Contains("units[0].seed"));
  CHECK_THAT(message([&](auto& f) { unit0(f).erase("history"); }, P), Contains(".history") && Contains("is required"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["ablation"][0]["component"] = "l0.h0"; }, P), Contains("baseline row"));
  CHECK_THAT(message([&](auto& f) { unit0(f)["history"][0]["step"] = -3; }, P), Contains("history[0].step"));
  CHECK_THAT(message([](auto& f) { f["units"] = "x"; }, P), Contains("units.json.units") && Contains("must be an array"));
  CHECK_THAT(message([](auto&) {}, P + 1), Contains("must be an array of " + std::to_string(P + 1) + " entries"));
  CHECK_THAT(message([](auto& f) { f.erase("config"); }, P), Contains("units.json.config"));
  CHECK_THROWS_AS(io::parse_train_units("{", "units.json", P), kvphase::error);
}

// Evaluation results (io/evaluation.hpp, behind kvphase-analyze): CSV and JSON Lines agree, every
// reader rule names the file, line, column and rule, a periodic dataset shows its period, and on
// flat data the tests keep their false-positive rate (2000 datasets, z = 5 bounds).
#include <catch2/catch.hpp>

#include <kvphase/core/rng.hpp>
#include <kvphase/io/evaluation.hpp>
#include <kvphase/stats/summary.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace io = kvphase::io;

namespace {
// items × 4 phases (positions 4q + phase), item difficulty p_i ~ U(0.2, 0.8), plus `lift` at
// phase 1; scores N(p_i + lift·[phase 1], 1).
std::string dataset(int items, double lift, std::uint64_t seed, int modulus = 4) {
  kvphase::rng::philox_stream s(seed, 11);
  std::string csv = "item,position,correct,score,model\n";
  for (int i = 0; i < items; ++i) {
    const double p = 0.2 + 0.6 * s.uniform();
    const long base = 1000 + 64 * static_cast<long>(s.below(1000));
    for (int g = 0; g < modulus; ++g) {
      const double q = p + (g % 4 == 1 ? lift : 0.0);
      csv += "q" + std::to_string(i) + "," + std::to_string(base + g) + "," + (s.uniform() < q ? "1" : "0") + "," +
             io::format_shortest(q + s.normal()) + ",m\n";
    }
  }
  return csv;
}
std::vector<kvphase::stats::model_summary> analyse(const std::string& text, const io::evaluation_options& o,
                                                   std::int64_t permutations = 199) {
  const auto d = io::parse_evaluation(text, "t.csv", o);
  const auto r = io::evaluation_result(d, o, {.permutations = permutations, .bootstrap_replicates = 0, .seed = 3},
                                       io::make_provenance(nlohmann::json::object(), 3, 1));
  return kvphase::stats::summarize(r.models, r.analysis);
}
}  // namespace

TEST_CASE("evaluation: CSV and JSON Lines give the same counts, remapped columns, phases", "[io][evaluation]") {
  const std::string csv = "id,pos,ok,model\na,8,1,x\na,9,0,x\nb,12,1,y\nb,13,1,y\n";
  const std::string jsonl = "{\"id\":\"a\",\"pos\":8,\"ok\":1,\"model\":\"x\"}\n{\"id\":\"a\",\"pos\":9,\"ok\":false,\"model\":\"x\"}\n\n"
                            "{\"id\":\"b\",\"pos\":12,\"ok\":true,\"model\":\"y\"}\n{\"id\":\"b\",\"pos\":13,\"ok\":1,\"model\":\"y\"}\n";
  io::evaluation_options o{.by = {"model"}, .stride = 2};
  o.columns.position = "pos";
  o.columns.correct = "ok";
  o.columns.item = "id";
  const auto a = io::evaluation_counts(io::parse_evaluation(csv, "a.csv", o));
  const auto b = io::evaluation_counts(io::parse_evaluation(jsonl, "b.jsonl", o));
  CHECK(a == b);
  REQUIRE(a.size() == 2);
  CHECK(a[0].model == "x");
  CHECK(a[0].trials == std::vector<std::int64_t>{1, 1});
  CHECK(a[0].hits == std::vector<std::int64_t>{1, 0});
  REQUIRE(a[0].paired.has_value());
  CHECK(a[0].paired->flips() == 1);
  o.origin = 1;  // phase = (position − 1) mod 2
  CHECK(io::evaluation_counts(io::parse_evaluation(csv, "a.csv", o))[0].hits == std::vector<std::int64_t>{0, 1});
  // phase given directly, no conditions
  const auto c = io::evaluation_counts(io::parse_evaluation("phase,correct\n0,1\n1,0\n1,1\n", "c.csv", {.stride = 2}));
  CHECK(c[0].model == "all");
  CHECK(c[0].trials == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("evaluation: every reader rule names the file, line, column and rule", "[io][evaluation]") {
  const io::evaluation_options o{.by = {"model"}, .stride = 2};
  auto err = [&](const std::string& text, const io::evaluation_options& opt) {
    try {
      (void)io::evaluation_counts(io::parse_evaluation(text, "e.csv", opt));
    } catch (const kvphase::error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  using Catch::Contains;
  CHECK_THAT(err("position,correct,model\n1,2,x\n", o), Contains("e.csv line 2 column correct") && Contains("0 or 1"));
  CHECK_THAT(err("position,correct,model\n1.5,1,x\n", o), Contains("line 2 column position") && Contains("integer"));
  CHECK_THAT(err("position,phase,correct,model\n1,1,1,x\n", o), Contains("not both"));
  CHECK_THAT(err("correct,model\n1,x\n", o), Contains("position or its phase"));
  CHECK_THAT(err("position,model\n1,x\n", o), Contains("correct (0/1) and/or score"));
  CHECK_THAT(err("position,correct\n1,1\n", o), Contains("--by column") && Contains("model"));
  CHECK_THAT(err("phase,correct,model\n2,1,x\n", o), Contains("line 2 column phase") && Contains("[0, modulus = 2)"));
  CHECK_THAT(err("position,score,model\n1,inf,x\n", o), Contains("column score"));
  CHECK_THAT(err("position,correct,model\n1,1,x\n2,1\n", o), Contains("line = 3") && Contains("fields"));
  CHECK_THAT(err("item,position,correct,model\na,1,1,x\na,3,0,x\n", o), Contains("line 3 item a") && Contains("twice"));
  CHECK_THAT(err("item,position,correct,model\na,1,1,x\n", o), Contains("item a phase 0") && Contains("missing"));
  CHECK_THAT(err("position,correct,model\n", o), Contains("no records"));
  CHECK_THAT(err("{\"position\":1,\"correct\":1,\"model\":\"x\"}\n[1]\n", o), Contains("line 2") && Contains("JSON object"));
  CHECK_THAT(err("{\"position\":1,\"correct\":1,\"model\":\"x\"}\n{\"position\":2,\"model\":\"x\"}\n", o),
             Contains("line 2 column correct") && Contains("required"));
  CHECK_THAT(err("{\"position\":1,\"correct\":1,\"model\":\"x\"}\n{\"position\":2,\"correct\":1,\"model\":[1]}\n", o),
             Contains("line 2 column model"));
  CHECK_THAT(err("{\"position\":1,\"correct\":1,\"model\":\"x\"}\n{\"position\":\"2\",\"correct\":1,\"model\":\"x\"}\n", o),
             Contains("line 2 column position") && Contains("integer"));
  CHECK_THAT(err("{\"position\":1,\"correct\":1,\"model\":\"x\"\n", o), Contains("e.csv line 1"));
  CHECK_THAT(err("item,phase,correct\na,0,1\n", {.stride = 2, .modulus = 128}), Contains("<= 64"));
  CHECK_THROWS_WITH(io::evaluation_options({.stride = 4, .modulus = 6}).validate(), Contains("multiple of the stride"));
}

TEST_CASE("evaluation: a periodic dataset shows its period in counts, paired tests and scores", "[io][evaluation]") {
  const io::evaluation_options o{.by = {"model"}, .stride = 4, .modulus = 8};
  const auto s = analyse(dataset(150, 0.25, 1, 8), o, 999);
  REQUIRE(s.size() == 1);
  CHECK(s[0].periodicity.p < 0.01);
  CHECK(s[0].uniformity.p < 0.01);
  REQUIRE(s[0].paired.has_value());
  CHECK(s[0].paired->cochran.p < 0.01);
  CHECK((s[0].paired->best_vs_worst.group_a % 4) == 1);
  REQUIRE(s[0].scores.has_value());
  CHECK(s[0].scores->periodicity.p < 0.01);
  CHECK(s[0].scores->friedman->p < 0.01);
  CHECK(s[0].scores->mean[1] > s[0].scores->mean[0]);
}

TEST_CASE("evaluation: false-positive rate at alpha 0.01 on flat data (2000 datasets)", "[io][evaluation]") {
  const io::evaluation_options o{.by = {"model"}, .stride = 4};
  const double alpha = 0.01, n = 2000, band = 5 * std::sqrt(alpha * (1 - alpha) / n);
  int period = 0, uniform = 0, cochran = 0, score_period = 0, friedman = 0;
  for (int d = 0; d < 2000; ++d) {
    const auto s = analyse(dataset(60, 0.0, 1000 + d), o);
    period += s[0].periodicity.p <= alpha;
    uniform += s[0].uniformity.p <= alpha;
    cochran += s[0].paired->cochran.p <= alpha;
    score_period += s[0].scores->periodicity.p <= alpha;
    friedman += s[0].scores->friedman->p <= alpha;
  }
  INFO("period " << period << " uniformity " << uniform << " cochran " << cochran << " score period " << score_period
                 << " friedman " << friedman);
  CHECK(period / n <= alpha + band);  // independent-design tests on paired data: conservative
  CHECK(uniform / n <= alpha + band);
  CHECK(std::abs(cochran / n - alpha) <= band);
  CHECK(std::abs(score_period / n - alpha) <= band);
  CHECK(std::abs(friedman / n - alpha) <= band);
}

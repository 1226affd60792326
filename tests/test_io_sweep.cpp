// CSV writer/reader, the sweep output format (CSV and JSON round trips, byte stability), shard
// merging (exactness, missing / duplicate shards, mismatched runs), paired counts in the output,
// and the evaluation-results reader behind kvphase-analyze.
#include <catch2/catch.hpp>

#include <kvphase/core/rng.hpp>
#include <kvphase/io/csv.hpp>
#include <kvphase/io/evaluation.hpp>
#include <kvphase/io/json.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

#include <clocale>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace io = kvphase::io;

namespace {

// io writes what kvphase::stats computes: the output of r with its summaries.
std::string sweep_text(const io::sweep_result& r, std::string_view fmt) {
  return io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), fmt);
}
io::ordered_json sweep_json(const io::sweep_result& r) {
  return io::sweep_to_json(r, kvphase::stats::summarize(r.models, r.analysis));
}
// Drops every comment line: the data rows only.
std::string data_lines(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.starts_with("#")) out += line + "\n";
  return out;
}
// Drops the provenance: comment lines other than format/analysis/summary.
std::string without_provenance(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.starts_with("#") || line.starts_with("# format:") || line.starts_with("# analysis:") ||
        line.starts_with("# summary"))
      out += line + "\n";
  return out;
}

io::sweep_result example_result(std::int64_t shard = 0, std::int64_t shards = 1) {
  io::sweep_result r;
  r.prov = io::make_provenance({{"task", "needle"}, {"stride", 4}, {"threads", 2}}, 42, 2);
  r.prov.shard_index = shard;
  r.prov.shard_count = shards;
  r.analysis = {.modulus = 8, .period = 4, .permutations = 999, .bootstrap_replicates = 500, .seed = 42};
  r.models = {{"compressed", {100, 100, 100, 100, 100, 100, 100, 100}, {90, 60, 91, 88, 87, 58, 90, 92}, {}},
              {"full", {100, 100, 100, 100, 100, 100, 100, 100}, {95, 96, 94, 95, 97, 93, 95, 96}, {}}};
  for (auto& m : r.models) m.extra.push_back({"theory", {0.9, 0.6, 0.9, 0.9, 0.9, 0.6, 0.9, 0.9}});
  return r;
}

// Splits counts into `n` shards (each count into near-equal parts that sum to it), as a sharded
// sweep splits its trials.
std::vector<io::sweep_result> split(const io::sweep_result& whole, std::int64_t n) {
  std::vector<io::sweep_result> out;
  for (std::int64_t s = 0; s < n; ++s) {
    auto r = whole;
    r.prov.shard_index = s;
    r.prov.shard_count = n;
    r.prov.threads = 1 + static_cast<int>(s);
    r.prov.config["threads"] = 1 + s;
    for (auto& m : r.models)
      for (std::size_t g = 0; g < m.trials.size(); ++g) {
        const auto part = [&](std::int64_t x) { return x / n + (s < x % n ? 1 : 0); };
        m.trials[g] = part(whole.models[&m - &r.models[0]].trials[g]);
        m.hits[g] = part(whole.models[&m - &r.models[0]].hits[g]);
      }
    out.push_back(r);
  }
  return out;
}
}  // namespace

TEST_CASE("csv: numbers are locale independent and exact", "[io][csv]") {
  CHECK(io::format_fixed(0.5, 3) == "0.500");
  CHECK(io::format_fixed(-0.0, 2) == "0.00");
  CHECK(io::format_fixed(-1e-12, 4) == "0.0000");
  CHECK(io::format_fixed(1.0 / 3.0, 10) == "0.3333333333");
  CHECK(io::format_shortest(0.1) == "0.1");
  CHECK(io::format_shortest(1e-300) == "1e-300");
  CHECK(io::parse_double(io::format_shortest(1.0 / 3.0)) == 1.0 / 3.0);
  CHECK(io::format_shortest(std::nan("")) == "nan");
  CHECK(io::format_fixed(-HUGE_VAL) == "-inf");
  const char* old = std::setlocale(LC_NUMERIC, nullptr);
  const std::string saved = old ? old : "C";
  if (std::setlocale(LC_NUMERIC, "de_DE.UTF-8")) {  // decimal comma, if installed
    CHECK(io::format_fixed(0.25, 2) == "0.25");
    std::setlocale(LC_NUMERIC, saved.c_str());
  }
  CHECK_THROWS_WITH(io::parse_double("1,5", "recall"), Catch::Contains("recall"));
  CHECK_THROWS_WITH(io::parse_int("12x", "trials"), Catch::Contains("trials = 12x"));
  CHECK_THROWS_WITH(io::format_fixed(1.0, 31), Catch::Contains("digits"));
}

TEST_CASE("csv: writer quotes what needs quoting and the reader inverts it", "[io][csv]") {
  std::ostringstream os;
  io::csv_writer w(os);
  w.comment("line one\nline two");
  w.row({"name", "value", "note"});
  const std::vector<std::vector<std::string>> rows{{"a,b", "1", "say \"hi\""},
                                                   {"#not a comment", " padded ", "multi\nline"},
                                                   {"", "x", "plain"}};
  for (const auto& r : rows) w.row(r);
  const std::string text = os.str();
  CHECK(text.starts_with("# line one\n# line two\nname,value,note\n\"a,b\",1,\"say \"\"hi\"\"\"\n"));
  const auto t = io::parse_csv(text);
  CHECK(t.comments == std::vector<std::string>{"# line one", "# line two"});
  CHECK(t.header == std::vector<std::string>{"name", "value", "note"});
  CHECK(t.rows == rows);
  CHECK(t.column("note") == 2);
  CHECK_THROWS_WITH(t.column("absent"), Catch::Contains("absent"));
  // CRLF and blank lines.
  const auto c = io::parse_csv("a,b\r\n1,2\r\n\r\n3,4\r\n");
  CHECK(c.rows == std::vector<std::vector<std::string>>{{"1", "2"}, {"3", "4"}});
  CHECK_THROWS_WITH(io::parse_csv("a,b\n1,2,3\n", "f.csv"), Catch::Contains("f.csv line") && Catch::Contains("2"));
  CHECK_THROWS_WITH(io::parse_csv("a\n\"open\n"), Catch::Contains("unterminated"));
  CHECK_THROWS_WITH(io::parse_csv("a\n\"x\"y\n"), Catch::Contains("after a closing quote"));
}

TEST_CASE("sweep format: CSV and JSON round trips keep counts, settings and provenance", "[io][sweep]") {
  const auto r = example_result();
  for (const char* fmt : {"csv", "json"}) {
    INFO(fmt);
    const std::string text = sweep_text(r, fmt);
    const auto back = io::parse_sweep(text, fmt);
    CHECK(back.models == r.models);
    CHECK(back.analysis == r.analysis);
    CHECK(io::to_json(back.prov) == io::to_json(r.prov));
    // Writing what was read gives the same bytes.
    CHECK(sweep_text(back, fmt) == text);
  }
  const std::string csv = sweep_text(r, "csv");
  CHECK(csv.find("\nmodel,phase,trials,hits,recall,ci_low,ci_high,theory\n") != std::string::npos);
  CHECK(csv.find("\ncompressed,1,100,60,0.6000000000,") != std::string::npos);
  CHECK(csv.find("# shard: 0/1\n") != std::string::npos);
  const auto j = sweep_json(r);
  const auto& m = j["models"][0];
  for (const char* k : {"gap", "gap_ci_low", "gap_ci_high", "uniformity_p", "period", "period_p"}) CHECK(m.contains(k));
  CHECK(m["period"] == 4);
  CHECK(m["gap"].get<double>() == Approx(0.34));
  CHECK(m["period_p"].get<double>() == Approx(1.0 / 1000));  // phase 1 is weak: clearly periodic
  CHECK(j["models"][1]["uniformity_p"].get<double>() > 0.01);
  CHECK(m["baseline"] == "full");
  CHECK(m["gap_minus_baseline"].get<double>() == Approx(0.34 - 0.04));
  CHECK(m["gap_minus_baseline_ci_low"].get<double>() < m["gap_minus_baseline"].get<double>());
  CHECK_FALSE(j["models"][1].contains("gap_minus_baseline"));
  CHECK(j["provenance"]["seed"] == 42);
  CHECK(j["provenance"]["config"]["task"] == "needle");
  // The statistics agree with the stats module called directly.
  const auto s = kvphase::stats::summarize(r.models[0], r.analysis);
  CHECK(m["period_p"].get<double>() == s.periodicity.p);
  CHECK(m["phases"][1]["ci_low"].get<double>() == s.ci[1].low);
}

TEST_CASE("sweep format: identical counts give identical bytes apart from provenance", "[io][sweep]") {
  auto a = example_result();
  auto b = example_result();
  b.prov = io::make_provenance({{"task", "needle"}, {"stride", 4}}, 42, 7);
  b.prov.date = "2000-01-01T00:00:00Z";
  b.prov.command_line = "another command";
  CHECK(without_provenance(sweep_text(a, "csv")) == without_provenance(sweep_text(b, "csv")));
  auto ja = sweep_json(a), jb = sweep_json(b);
  ja.erase("provenance");
  jb.erase("provenance");
  CHECK(ja.dump() == jb.dump());
}

TEST_CASE("sweep format: bad inputs are rejected with the field named", "[io][sweep]") {
  auto r = example_result();
  r.models[1].model = "compressed";
  CHECK_THROWS_WITH(sweep_text(r, "csv"), Catch::Contains("appears twice"));
  r = example_result();
  r.models[0].hits[3] = 101;
  CHECK_THROWS_WITH(sweep_text(r, "json"), Catch::Contains("hits[3]"));
  r = example_result();
  r.analysis.period = 3;
  CHECK_THROWS_WITH(sweep_text(r, "csv"), Catch::Contains("analysis.period"));
  r = example_result();
  r.models[0].trials.pop_back();
  CHECK_THROWS_WITH(sweep_text(r, "csv"), Catch::Contains("trials.size()"));
  r = example_result();
  CHECK_THROWS_WITH(sweep_text(r, "xml"), Catch::Contains("format = xml"));
  r.models[1].extra[0].name = "other";
  CHECK_THROWS_WITH(sweep_text(r, "csv"), Catch::Contains("extra column"));
  const std::string csv = sweep_text(example_result(), "csv");
  std::string dup = csv + "full,3,10,5,0.5,0.2,0.8,0.9\n";
  CHECK_THROWS_WITH(io::parse_sweep(dup, "d.csv"), Catch::Contains("d.csv row") && Catch::Contains("twice"));
  std::string nofmt = csv;
  nofmt.erase(nofmt.find("# format:"), nofmt.find('\n', nofmt.find("# format:")) - nofmt.find("# format:") + 1);
  CHECK_THROWS_WITH(io::parse_sweep(nofmt, "n.csv"), Catch::Contains("kvphase-sweep/1"));
  CHECK_THROWS_WITH(io::parse_sweep("{\"format\": \"other\"}", "x.json"), Catch::Contains("x.json.format"));
  CHECK_THROWS_WITH(io::parse_sweep("{not json", "y.json"), Catch::Contains("y.json"));
}

TEST_CASE("merge: shards sum to the single run exactly", "[io][merge]") {
  const auto whole = example_result();
  const std::string single = sweep_text(whole, "csv");
  for (std::int64_t n : {1, 2, 3}) {
    auto shards = split(whole, n);
    // Read back from text, in shuffled order, mixing CSV and JSON inputs.
    std::vector<io::sweep_result> parsed;
    for (std::int64_t s = n - 1; s >= 0; --s)
      parsed.push_back(io::parse_sweep(sweep_text(shards[static_cast<std::size_t>(s)], s % 2 ? "json" : "csv")));
    const auto merged = io::merge_shards(parsed);
    CHECK(merged.models == whole.models);
    CHECK(merged.prov.shard_count == 1);
    CHECK(merged.prov.merged_from == n);
    CHECK(data_lines(sweep_text(merged, "csv")) == data_lines(single));
    CHECK(without_provenance(sweep_text(merged, "csv")) == without_provenance(single));
    auto jm = sweep_json(merged), js = sweep_json(whole);
    jm.erase("provenance");
    js.erase("provenance");
    CHECK(jm.dump() == js.dump());
  }
}

TEST_CASE("merge: missing, duplicate and mismatched shards fail with a clear message", "[io][merge]") {
  const auto whole = example_result();
  auto shards = split(whole, 3);
  const std::vector<std::string> names{"s0.csv", "s1.csv", "s2.csv"};
  CHECK_THROWS_WITH(io::merge_shards({shards[0], shards[2]}, {"s0.csv", "s2.csv"}),
                    Catch::Contains("1/3") && Catch::Contains("missing"));
  CHECK_THROWS_WITH(io::merge_shards({shards[0], shards[1], shards[1], shards[2]}, {"a", "b", "c", "d"}),
                    Catch::Contains("duplicate") && Catch::Contains("c") && Catch::Contains("b"));
  auto other_count = shards;
  other_count[1].prov.shard_count = 4;
  other_count[1].prov.shard_index = 1;
  CHECK_THROWS_WITH(io::merge_shards(other_count, names), Catch::Contains("shard count of s1.csv"));
  auto cfg = shards;
  cfg[2].prov.config["stride"] = 8;
  CHECK_THROWS_WITH(io::merge_shards(cfg, names), Catch::Contains("config of s2.csv") && Catch::Contains("/stride"));
  auto seed = shards;
  seed[1].prov.seed = 43;
  CHECK_THROWS_WITH(io::merge_shards(seed, names), Catch::Contains("seed of s1.csv"));
  auto an = shards;
  an[1].analysis.permutations = 10;
  CHECK_THROWS_WITH(io::merge_shards(an, names), Catch::Contains("analysis of s1.csv"));
  auto git = shards;
  git[2].prov.git_hash = "deadbeef";
  CHECK_THROWS_WITH(io::merge_shards(git, names), Catch::Contains("git hash of s2.csv"));
  CHECK_NOTHROW(io::merge_shards(git, names, {.allow_mixed_builds = true}));
  auto models = shards;
  models[1].models.pop_back();
  CHECK_THROWS_WITH(io::merge_shards(models, names), Catch::Contains("models of s1.csv"));
  auto extra = shards;
  extra[1].models[0].extra[0].values[0] = 0.5;
  CHECK_THROWS_WITH(io::merge_shards(extra, names), Catch::Contains("extra columns of s1.csv"));
  CHECK_THROWS_WITH(io::merge_shards({}), Catch::Contains("shards"));
}

namespace {
// A paired result (design shifted): 4 phases, the same `items` items in every phase, shard s of
// n holding items [s·items/n, (s+1)·items/n) of a fixed pattern list.
io::sweep_result paired_result(std::int64_t s = 0, std::int64_t n = 1, std::int64_t items = 60) {
  io::sweep_result r;
  r.prov = io::make_provenance({{"task", "needle"}, {"design", "shifted"}, {"trials", items}}, 7, 1);
  r.prov.shard_index = s;
  r.prov.shard_count = n;
  r.analysis = {.modulus = 4, .period = 4, .permutations = 199, .bootstrap_replicates = 100, .seed = 7};
  for (const char* name : {"compressed", "full"}) {
    auto pc = kvphase::stats::paired_counts::zero(4);
    for (std::int64_t i = s * items / n; i < (s + 1) * items / n; ++i) {
      std::vector<std::uint8_t> o(4);
      for (int g = 0; g < 4; ++g) o[g] = std::string(name) == "full" ? 1 : ((i * 7 + g * 3) % 5 < 2 + (g == 2));
      pc.add_item(std::span<const std::uint8_t>(o));
    }
    io::phase_counts m;
    m.model = name;
    m.trials.assign(4, pc.items);
    m.hits = pc.hits;
    m.paired = pc;
    r.models.push_back(m);
  }
  return r;
}
}  // namespace

TEST_CASE("paired: CSV and JSON carry the paired counts and tests, shards merge exactly", "[io][sweep][paired]") {
  const auto whole = paired_result();
  for (const char* fmt : {"csv", "json"}) {
    const auto text = sweep_text(whole, fmt);
    const auto back = io::parse_sweep(text);
    CHECK(back.models == whole.models);
    CHECK(text.find("cochran") != std::string::npos);
    CHECK(text.find("mcnemar") != std::string::npos);
  }
  const auto j = sweep_json(whole);
  const auto s = kvphase::stats::summarize(whole.models, whole.analysis);
  CHECK(j["models"][0]["paired"]["cochran_p"].get<double>() == s[0].paired->cochran.p);
  CHECK(j["models"][0]["paired"]["flips"].get<std::int64_t>() == whole.models[0].paired->flips());
  CHECK(j["models"][1]["paired"]["flips"].get<std::int64_t>() == 0);
  std::vector<io::sweep_result> shards;
  for (std::int64_t i = 0; i < 3; ++i) shards.push_back(io::parse_sweep(sweep_text(paired_result(i, 3), i % 2 ? "json" : "csv")));
  const auto merged = io::merge_shards(shards);
  CHECK(merged.models == whole.models);
  CHECK(without_provenance(sweep_text(merged, "csv")) == without_provenance(sweep_text(whole, "csv")));
  auto mixed = shards;
  mixed[1].models[0].paired.reset();
  CHECK_THROWS_WITH(io::merge_shards(mixed), Catch::Contains("paired counts") && Catch::Contains("every shard"));
}

TEST_CASE("paired: inconsistent or hostile paired counts are refused naming the rule", "[io][sweep][paired]") {
  const auto whole = paired_result();
  auto bad = whole;
  bad.models[0].paired->hits[0] += 1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("paired"));
  bad = whole;
  bad.models[0].trials[1] += 1;
  bad.models[0].trials[1] -= 0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("paired.items"));
  const std::string csv = sweep_text(whole, "csv");
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = csv;
    const auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return t;
  };
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"groups\":4", "\"groups\":65"), "x.csv"),
                    Catch::Contains("x.csv") && Catch::Contains("groups") && Catch::Contains("[2, 64]"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"groups\":4", "\"groups\":3"), "x.csv"), Catch::Contains("x.csv"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"items\":60", "\"items\":-1"), "x.csv"),
                    Catch::Contains("items") && Catch::Contains("[0, 2^53]"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"model\":\"full\"", "\"model\":\"nobody\""), "x.csv"),
                    Catch::Contains("nobody") && Catch::Contains("no rows"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"row_totals\":[", "\"row_totals\":[1,"), "x.csv"),
                    Catch::Contains("row_totals") && Catch::Contains("5 integers"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"discordant\":[0,", "\"discordant\":[1,"), "x.csv"),
                    Catch::Contains("diagonal"));
  CHECK_THROWS_WITH(io::parse_sweep_csv(edit("\"discordant\":[0,", "\"discordant\":[\"a\","), "x.csv"),
                    Catch::Contains("discordant[0]"));
}

// ---- evaluation results (io/evaluation.hpp, behind kvphase-analyze): CSV and JSON Lines agree,
// every reader rule names the file, line, column and rule, a periodic dataset shows its period,
// and on flat data the tests keep their false-positive rate (2000 datasets, z = 5 bounds).

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

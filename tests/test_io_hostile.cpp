// Hostile sweep files: every rule of the readers and of merge_shards that guards against a
// silently wrong merge, a crash, an absurd allocation or an unclear message (docs/reliability.md).
#include <catch2/catch.hpp>

#include <kvphase/io/csv.hpp>
#include <kvphase/io/json.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace io = kvphase::io;

namespace {

// io writes what kvphase::stats computes.
std::string sweep_text(const io::sweep_result& r, std::string_view fmt) {
  return io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), fmt);
}
constexpr std::int64_t T = 101;  // trials per phase in the config: shards of 3 get 33, 34, 34

// A run whose config records its trials per phase, as kvphase-sweep writes it.
io::sweep_result run(std::int64_t shard = 0, std::int64_t shards = 1) {
  io::sweep_result r;
  r.prov = io::make_provenance({{"task", "needle"}, {"trials", T}, {"threads", 1}}, 9, 1);
  r.prov.shard_index = shard;
  r.prov.shard_count = shards;
  r.analysis = {.modulus = 4, .period = 2, .permutations = 99, .bootstrap_replicates = 50, .seed = 9};
  const auto lo = shard * T / shards, hi = (shard + 1) * T / shards;  // sim::shard_spec::range
  r.models = {{"compressed", std::vector<std::int64_t>(4, hi - lo), {}, {}},
              {"full", std::vector<std::int64_t>(4, hi - lo), {}, {}}};
  for (auto& m : r.models)
    for (std::int64_t g = 0; g < 4; ++g) m.hits.push_back((hi - lo) * (m.model == "full" ? 9 : 5 + g) / 10);
  return r;
}

// `text` with the first occurrence of `from` replaced by `to` (the test fails if absent).
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// `text` with the first occurrence of `from` after `marker` replaced by `to`.
std::string edit_after(const std::string& text, const std::string& marker, const std::string& from,
                       const std::string& to) {
  const auto at = text.find(marker);
  REQUIRE(at != std::string::npos);
  return text.substr(0, at) + edit(text.substr(at), from, to);
}

// The message of the kvphase::error `f` throws ("" if it throws none or another type).
template <class F>
std::string message(F&& f) {
  try {
    f();
  } catch (const kvphase::error& e) {
    return e.what();
  } catch (...) {
    return "(not a kvphase::error)";
  }
  return "";
}
}  // namespace

TEST_CASE("hostile csv: every (model, phase) row must be present exactly once", "[io][hostile]") {
  const std::string csv = sweep_text(run(), "csv");
  // The last row dropped (head -n -1): the reader names the file, the model and the phase.
  const std::string cut = csv.substr(0, csv.rfind('\n', csv.size() - 2) + 1);
  const auto m = message([&] { io::parse_sweep(cut, "t.csv"); });
  CHECK_THAT(m, Catch::Contains("t.csv model full phase 3") && Catch::Contains("missing"));
  // A model with no rows at all cannot be detected by the reader (it is not in the file), but
  // merge_shards rejects it: the models of the shards differ.
  std::string only_full;
  for (std::size_t at = 0, end; at < csv.size(); at = end + 1) {
    end = csv.find('\n', at);
    const std::string line = csv.substr(at, end - at);
    if (!line.starts_with("compressed,")) only_full += line + "\n";
  }
  const auto a = io::parse_sweep(only_full, "a.csv");
  CHECK(a.models.size() == 1);
  // A repeated row names both rows.
  const auto dup = message([&] { io::parse_sweep(csv + "full,2,101,90,0.9,0.8,0.95\n", "d.csv"); });
  CHECK_THAT(dup, Catch::Contains("d.csv row 9 phase = 2") && Catch::Contains("rows 7 and 9"));
  // Counts are checked with the file, model and phase named.
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, "\nfull,1,101,90,", "\nfull,1,101,190,"), "h.csv"); }),
             Catch::Contains("h.csv row 6 (model full phase 1) hits = 190"));
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, "\nfull,1,101,", "\nfull,1,1099511627777,"), "h.csv"); }),
             Catch::Contains("trials = 1099511627777: must be in [0, 2^40]"));
}

TEST_CASE("hostile merge: per-phase trials must be the shard's part of the config's trials", "[io][hostile]") {
  std::vector<io::sweep_result> shards{run(0, 3), run(1, 3), run(2, 3)};
  CHECK(shards[0].models[0].trials[0] == 33);  // ⌊101/3⌋
  CHECK(shards[2].models[0].trials[0] == 34);
  const std::vector<std::string> names{"s0.csv", "s1.csv", "s2.json"};
  const auto merged = io::merge_shards(shards, names);
  for (const auto& m : merged.models) CHECK(m.trials == std::vector<std::int64_t>(4, T));
  // Trials edited beyond the configuration: named by file, model and phase.
  auto edited = shards;
  edited[1].models[1].trials[2] = 60;
  CHECK_THAT(message([&] { io::merge_shards(edited, names); }),
             Catch::Contains("s1.csv model full phase 2 trials = 60") && Catch::Contains("[33, 67)"));
  // A shard that ran nothing in one phase (trials 0) is as wrong as one that ran too much.
  edited = shards;
  edited[2].models[0].trials[3] = 0;
  edited[2].models[0].hits[3] = 0;
  CHECK_THAT(message([&] { io::merge_shards(edited, names); }),
             Catch::Contains("s2.json model compressed phase 3 trials = 0: must be 34"));
  // A whole run (shard 0/1) must hold all the trials too.
  auto whole = run();
  whole.models[0].trials[1] = 100;
  CHECK_THAT(message([&] { io::merge_shards({whole}, {"w.csv"}); }), Catch::Contains("w.csv model compressed phase 1"));
  // A config whose "trials" is not a count is rejected, naming the file.
  auto bad = shards;
  for (auto& s : bad) s.prov.config["trials"] = "many";
  CHECK_THAT(message([&] { io::merge_shards(bad, names); }), Catch::Contains("config.trials of s0.csv"));
  // The same checks through the text forms: a missing row is caught by the reader, an edited
  // trials field by the merge, with the file name given to both.
  const std::string s1 = sweep_text(shards[1], "csv");
  const auto t1 = edit(s1, "\nfull,0,34,", "\nfull,0,33,");
  const auto p1 = io::parse_sweep(t1, "t1.csv");
  CHECK_THAT(message([&] {
               io::merge_shards({shards[0], p1, shards[2]}, {"s0.csv", "t1.csv", "s2.json"});
             }),
             Catch::Contains("t1.csv model full phase 0 trials = 33: must be 34"));
}

TEST_CASE("hostile merge: mismatch messages name the file and stay short", "[io][hostile]") {
  std::vector<io::sweep_result> shards{run(0, 2), run(1, 2)};
  auto renamed = shards;
  renamed[1].models[1].model = "other";
  CHECK_THAT(message([&] { io::merge_shards(renamed, {"a.csv", "b.csv"}); }),
             Catch::Contains("models of b.csv = compressed, other") && Catch::Contains("compressed, full"));
  // Only one shard of 2^20: the list of missing shards is cut, the message stays small.
  auto lone = run(0, 1 << 20);
  for (auto& m : lone.models) std::fill(m.trials.begin(), m.trials.end(), 0), std::fill(m.hits.begin(), m.hits.end(), 0);
  const auto missing = message([&] { io::merge_shards({lone}, {"lone.csv"}); });
  CHECK_THAT(missing, Catch::Contains("1/1048576, 2/1048576") && Catch::Contains("are missing"));
  CHECK(missing.size() < 400);
  // Validation errors of a shard name its file.
  auto invalid = shards;
  invalid[0].models[0].hits[0] = 1000;
  CHECK_THAT(message([&] { io::merge_shards(invalid, {"x.csv", "y.csv"}); }), Catch::Contains("kvphase: x.csv: "));
}

TEST_CASE("hostile json: nesting beyond the depth limit is an error, not a stack overflow", "[io][hostile]") {
  auto nested = [](std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  CHECK_NOTHROW(io::parse_json(nested(io::max_json_depth)));
  CHECK_THAT(message([&] { io::parse_json(nested(io::max_json_depth + 1), "n.json"); }),
             Catch::Contains("n.json nesting depth") && Catch::Contains("at most 64 levels"));
  // Brackets inside strings do not count.
  CHECK_NOTHROW(io::parse_json("{\"k\": \"" + std::string(1000, '[') + "\\\"[\"}"));
  // 100k levels (200 KB) in a JSON shard and in the provenance line of a CSV shard.
  const std::string deep = nested(100000);
  const std::string json = sweep_text(run(), "json");
  CHECK_THAT(message([&] { io::parse_sweep(edit(json, "\"task\": \"needle\"", "\"task\": " + deep), "d.json"); }),
             Catch::Contains("d.json nesting depth"));
  const std::string csv = sweep_text(run(), "csv");
  CHECK_THAT(message([&] { io::parse_sweep(edit_after(csv, "provenance_json", "\"task\":\"needle\"", "\"task\":" + deep), "d.csv"); }),
             Catch::Contains("d.csv provenance_json nesting depth"));
}

TEST_CASE("hostile files: counts are bounded before anything is allocated", "[io][hostile]") {
  const std::string json = sweep_text(run(), "json");
  const std::string csv = sweep_text(run(), "csv");
  // "shard": "0/10000000": rejected by the shard rule, with a short message.
  const auto shard = message([&] { io::parse_sweep(edit(json, "\"shard\": \"0/1\"", "\"shard\": \"0/10000000\""), "s.json"); });
  CHECK_THAT(shard, Catch::Contains("s.json provenance.shard = 0/10000000") && Catch::Contains("N <= 2^20"));
  CHECK(shard.size() < 200);
  CHECK_THROWS_WITH(io::parse_shard("0/1048577"), Catch::Contains("2^20"));
  CHECK(io::parse_shard("1048575/1048576").second == 1048576);
  // A declared modulus of 2^28 in either form.
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, "{\"modulus\":4,", "{\"modulus\":268435456,"), "m.csv"); }),
             Catch::Contains("m.csv analysis.modulus = 268435456: must be <= 4096"));
  CHECK_THAT(message([&] { io::parse_sweep(edit(json, "\"modulus\": 4,", "\"modulus\": 268435456,"), "m.json"); }),
             Catch::Contains("m.json analysis.modulus = 268435456"));
  // Permutations 10^13 and bootstrap replicates 10^13.
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, "\"permutations\":99", "\"permutations\":10000000000000"), "p.csv"); }),
             Catch::Contains("p.csv") && Catch::Contains("analysis.permutations = 10000000000000: must be in [0, 1000000]"));
  CHECK_THAT(message([&] {
               io::parse_sweep(edit(json, "\"bootstrap_replicates\": 50", "\"bootstrap_replicates\": 10000000000000"), "b.json");
             }),
             Catch::Contains("b.json") && Catch::Contains("analysis.bootstrap_replicates = 10000000000000"));
  // Legal alone, too much together: the statistics' draws are bounded too.
  const auto work = message([&] {
    // 256 groups x (10^6 + 2 x 10^6) draws: one model is within 2^30, two are not.
    io::parse_sweep(edit(edit(edit(csv, "\"permutations\":99", "\"permutations\":1000000"), "\"bootstrap_replicates\":50",
                              "\"bootstrap_replicates\":1000000"),
                         "{\"modulus\":4,", "{\"modulus\":256,"),
                    "w.csv");
  });
  CHECK_THAT(work, Catch::Contains("w.csv models x modulus") && Catch::Contains("2^30"));
  // More models than the limit: rejected at the 1025th distinct name, before its storage.
  std::string many = csv.substr(0, csv.find("\nmodel,") + 1) + "model,phase,trials,hits\n";
  for (int k = 0; k <= 1024; ++k) {
    many += 'm';
    many += std::to_string(k);
    many += ",0,1,1\n";
  }
  const auto manym = message([&] {
    io::parse_sweep(edit(edit(many, "\"permutations\":99", "\"permutations\":0"), "\"bootstrap_replicates\":50",
                         "\"bootstrap_replicates\":0"),
                    "many.csv");
  });
  CHECK_THAT(manym, Catch::Contains("many.csv models = 1025: must number at most 1024"));
  // More than 64 extra columns.
  std::string header = "model,phase,trials,hits";
  for (int k = 0; k < 65; ++k) {
    header += ",x";
    header += std::to_string(k);
  }
  std::string wide = csv.substr(0, csv.find("\nmodel,") + 1) + header + "\n";
  CHECK_THAT(message([&] { io::parse_sweep(wide, "wide.csv"); }), Catch::Contains("wide.csv extra columns = 65"));
  // Error texts quote an excerpt, not a whole field.
  const auto big = message([&] { io::parse_sweep(edit(csv, "\nfull,1,101,", "\nfull,1," + std::string(100000, '7') + "x,"), "big.csv"); });
  CHECK_THAT(big, Catch::Contains("big.csv row") && Catch::Contains("..."));
  CHECK(big.size() < 300);
}

TEST_CASE("hostile files: clear messages for syntax errors, BOMs and invalid UTF-8", "[io][hostile]") {
  const std::string json = sweep_text(run(), "json");
  const std::string csv = sweep_text(run(), "csv");
  // A JSON syntax error gives the byte offset, line and column.
  const auto syn = message([&] { io::parse_sweep(edit(json, "\"models\": [", "\"models\": [,"), "x.json"); });
  CHECK_THAT(syn, Catch::Contains("x.json = byte ") && Catch::Contains("line ") && Catch::Contains("column ") &&
                      Catch::Contains("is not valid JSON"));
  CHECK_THAT(message([&] { io::parse_json("{\n  \"a\": 1,\n  x\n}", "p.json"); }),
             Catch::Contains("byte 14 (line 3, column 3)"));
  // A UTF-8 byte order mark at the start is skipped, in both forms: same result as without.
  const std::string bom = "\xEF\xBB\xBF";
  CHECK(io::parse_sweep(bom + csv, "bom.csv").models == run().models);
  CHECK(io::parse_sweep(bom + json, "bom.json").models == run().models);
  CHECK(io::parse_csv(bom + "a,b\n1,2\n").header == std::vector<std::string>{"a", "b"});
  // Invalid UTF-8 in a model name: a kvphase::error naming the file, in both forms.
  const auto bad_csv = message([&] { io::parse_sweep(edit(csv, "\nfull,0,", "\nf\xFFull,0,"), "u.csv"); });
  CHECK_THAT(bad_csv, Catch::Contains("u.csv row") && Catch::Contains("not valid UTF-8"));
  const auto bad_json = message([&] { io::parse_sweep(edit(json, "\"model\": \"full\"", "\"model\": \"f\xC0\xAFull\""), "u.json"); });
  CHECK_THAT(bad_json, Catch::Contains("u.json = byte") && Catch::Contains("UTF-8"));
  // An invalid extra column name in a CSV header.
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, ",ci_high\n", ",th\xE2\x28\xA1ory\n"), "h.csv"); }),
             Catch::Contains("h.csv header column 7") && Catch::Contains("UTF-8"));
  // Whatever a reader throws is a kvphase::error naming the file.
  for (const std::string& text : {std::string("{\"format\": \"kvphase-sweep/1\", \"provenance\": [], \"analysis\": {}}"),
                                  std::string("{\"format\": 7}"), std::string("[1, 2]"), std::string("\xFF\xFE"),
                                  std::string("# provenance_json: {\"config\": 5}\nmodel\n")}) {
    INFO(text);
    const auto m = message([&] { io::parse_sweep(text, "any.in"); });
    CHECK_THAT(m, Catch::StartsWith("kvphase: any.in"));
  }
}

TEST_CASE("hostile files: narrowing and duplicate header columns are rejected", "[io][hostile]") {
  const std::string json = sweep_text(run(), "json");
  const std::string csv = sweep_text(run(), "csv");
  CHECK_THAT(message([&] { io::parse_sweep(edit_after(json, "\"shard\":", "\"threads\": 1,", "\"threads\": 10000000000,"), "t.json"); }),
             Catch::Contains("t.json provenance.threads = 10000000000: must be an integer in [1, 65536]"));
  CHECK_THAT(message([&] { io::parse_sweep(edit_after(json, "\"shard\":", "\"threads\": 1,", "\"threads\": 1.5,"), "t.json"); }),
             Catch::Contains("provenance.threads = 1.5"));
  CHECK_THAT(message([&] { io::parse_sweep(edit(json, "\"merged_from\": 0", "\"merged_from\": -3"), "t.json"); }),
             Catch::Contains("provenance.merged_from = -3"));
  CHECK_THAT(message([&] { io::parse_sweep(edit(json, "\"seed\": 9,", "\"seed\": -9,"), "t.json"); }),
             Catch::Contains("provenance.seed = -9"));
  CHECK_THAT(message([&] { io::parse_csv("a,b,a\n1,2,3\n", "h.csv"); }),
             Catch::Contains("h.csv header column 3 = a: repeats column 1"));
  CHECK_THAT(message([&] { io::parse_sweep(edit(csv, "ci_low,ci_high\n", "ci_low,trials\n"), "h.csv"); }),
             Catch::Contains("h.csv header column 7 = trials: repeats column 3"));
}

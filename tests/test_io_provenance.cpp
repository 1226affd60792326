// Provenance: build values present, JSON and CSV-comment round trips, shard text, bad input.
#include <catch2/catch.hpp>

#include <kvphase/io/provenance.hpp>

#include <string>
#include <vector>

namespace io = kvphase::io;

TEST_CASE("provenance carries build, ISA, run and config fields", "[io][provenance]") {
  const char* argv[] = {"kvphase-sweep", "--seed", "7", "--out", "a b.csv"};
  auto p = io::make_provenance({{"task", "needle"}, {"stride", 4}}, 7, 2, 5, argv);
  CHECK(p.version == KVPHASE_VERSION_STRING);
  CHECK_FALSE(p.compiler.empty());
  CHECK_FALSE(p.isa_compiled.empty());
  CHECK(p.isa_runtime != "none");
#if defined(KVPHASE_HAVE_BUILD_INFO)
  CHECK(p.git_hash != "unknown");  // our own build: the generated header is present
  CHECK(p.build_type != "unknown");
#endif
  CHECK(p.command_line == "kvphase-sweep --seed 7 --out 'a b.csv'");
  CHECK(p.date.size() == 20);
  CHECK(p.date.back() == 'Z');
  CHECK(p.shard_text() == "0/1");
  const auto j = io::to_json(p);
  for (const char* k : {"version", "git_hash", "compiler", "flags", "build_type", "isa_compiled", "isa_runtime",
                        "seed", "threads", "shard", "date", "command_line", "config"})
    CHECK(j.contains(k));
  CHECK(j["config"]["stride"] == 4);
}

TEST_CASE("provenance round-trips through JSON and CSV comments", "[io][provenance]") {
  auto p = io::make_provenance({{"x", 1.25}, {"name", "a,\"b\"\nc"}}, 0xFFFFFFFFFFFFFFFFULL, 3);
  p.shard_index = 2;
  p.shard_count = 5;
  p.command_line = "prog --flag 'quoted\nnewline'";
  const auto q = io::provenance_from_json(io::to_json(p));
  CHECK(io::to_json(q) == io::to_json(p));
  CHECK(q.seed == 0xFFFFFFFFFFFFFFFFULL);
  CHECK(q.shard_index == 2);
  CHECK(q.shard_count == 5);

  const std::string text = io::to_csv_comment(p);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& l : lines) CHECK(l.rfind("# ", 0) == 0);
  const auto r = io::provenance_from_csv_comments(lines);
  CHECK(io::to_json(r) == io::to_json(p));
}

TEST_CASE("shard text parses and rejects bad forms", "[io][provenance]") {
  CHECK(io::parse_shard("0/1") == std::pair<std::int64_t, std::int64_t>{0, 1});
  CHECK(io::parse_shard("3/4") == std::pair<std::int64_t, std::int64_t>{3, 4});
  for (const char* bad : {"4/4", "1/0", "-1/2", "a/2", "1/", "/2", "12", "", "1/2/3", "1 /2"})
    CHECK_THROWS_WITH(io::parse_shard(bad, "--shard"), Catch::Contains("--shard"));
  io::provenance p;
  p.shard_index = 3;
  p.shard_count = 2;
  CHECK_THROWS_WITH(p.validate(), Catch::Contains("shard_index"));
  CHECK_THROWS_WITH(io::make_provenance(nlohmann::json::array(), 0, 1), Catch::Contains("config"));
  CHECK_THROWS_WITH(io::make_provenance({}, 0, 0), Catch::Contains("threads"));
  CHECK_THROWS_WITH(io::provenance_from_csv_comments({"# nothing"}), Catch::Contains("provenance_json"));
  CHECK_THROWS_WITH(io::provenance_from_json(nlohmann::json{{"shard", "9/3"}}), Catch::Contains("provenance.shard"));
}

TEST_CASE("provenance: a command line with bytes that are not UTF-8 is recorded as valid JSON", "[io][provenance]") {
  const char* argv[] = {"kvphase-sweep", "--out", "\xff\xfe.csv", "it's"};
  const std::string line = kvphase::io::join_command_line(4, argv);
  CHECK(line == "kvphase-sweep --out ??.csv 'it'\\''s'");
  auto p = kvphase::io::make_provenance(nlohmann::json::object(), 1, 1, 4, argv);
  CHECK_NOTHROW(kvphase::io::to_json(p).dump());
}

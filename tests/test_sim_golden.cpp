// Golden outputs: the random streams and a few small sweeps against values recorded in
// tests/data/golden_sim.json, so that a change of any stream (the Gaussian generator, the
// Philox-keyed draws of the tasks, the config hash that keys them, the order in which a trial
// consumes its normals) fails here instead of passing silently. The other tests check that the
// paths agree with each other and that the statistics are right; only this one pins the values.
//
//  - Streams: the scalar reference of sim::normal_generator (integer operations, std::fma and
//    std::sqrt only, so the same bits on every IEEE-754 machine) and key_space_scores on the
//    scalar path. Always compared.
//  - Sweeps: hits and the fixed-point mass and margin sums per (model, group) of nine small
//    configurations on the build's default SIMD path. Their float arithmetic (fused multiply-adds,
//    vector exp) is that of the arch they were recorded on: hits are compared when the default
//    arch is that arch (they agree between the Release, RelWithDebInfo and sanitizer builds).
//    The sums are compared only when compiler and flags are the recorded ones too. -O2 and -O3
//    agree on all nine sweeps. A sanitizer build differs in the last bits of some sums: GCC
//    contracts a·b + c into one fma differently under instrumentation (docs/sim.md). So the
//    sanitizer build checks hits only.
//
// An intended stream change regenerates the file (and says so in CHANGELOG.md):
//   KVPHASE_GOLDEN_WRITE=tests/data/golden_sim.json build/release/tests/kvphase_tests_sim '[golden]'
#include <catch2/catch.hpp>

#include <kvphase/compress/presets.hpp>
#include <kvphase/core/simd.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/sim/noise_scores.hpp>
#include <kvphase/sim/normal.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/version.hpp>

#include <nlohmann/json.hpp>

#include "support/sweep_configs.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using kvphase::index_t;
namespace sim = kvphase::sim;
namespace simd = kvphase::simd;
namespace compress = kvphase::compress;
using json = nlohmann::json;

namespace {

/// FNV-1a over the bit patterns of the floats.
std::uint64_t fnv1a(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (float x : v) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    for (int k = 0; k < 4; ++k) {
      h ^= (b >> (8 * k)) & 0xffu;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

std::string hex(std::uint64_t h) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

struct stream_case {
  std::uint64_t seed, stream;
};
const stream_case stream_cases[] = {{1, 0}, {42, 7}, {0x8000000000000005ULL, 123456789}};
constexpr index_t stream_normals = 65536;

json stream_values() {
  json out = json::array();
  for (const auto& c : stream_cases) {
    sim::normal_generator g(c.seed, c.stream);
    std::vector<float> z(static_cast<std::size_t>(stream_normals));
    g.fill<simd::scalar>(z.data(), stream_normals);
    // key_space_scores on the scalar path, continuing the same generator: 100 tokens, d = 7
    // (a lone last channel and a partial group of tokens)
    std::vector<float> q(7);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(i) - 0.5f;
    sim::normal_state st = g.state();
    std::vector<float> s(100);
    sim::key_space_scores<simd::scalar>(st, q.data(), 7, s.data(), 100);
    out.push_back({{"seed", std::to_string(c.seed)},
                   {"stream", std::to_string(c.stream)},
                   {"normals", stream_normals},
                   {"fnv1a", hex(fnv1a(z))},
                   {"first", {z[0], z[1], z[2], z[3]}},
                   {"key_space_fnv1a", hex(fnv1a(s))}});
  }
  return out;
}

/// The sweeps: every task on both linear engines with content gates and a raw window, the
/// plain mean model, and the general key-space path for two learned operators.
std::vector<sim::sweep_config> sweep_cases() {
  std::vector<sim::sweep_config> out;
  for (auto t : {"needle", "kv-pairs", "padding"})
    for (auto e : {sim::engine_kind::key, sim::engine_kind::score}) out.push_back(kvphase::test::small_sweep(t, e));
  {
    sim::sweep_config c;  // mean pooling W = S = 4, the benchmark's model, d = 64
    c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 64};
    c.engine = sim::engine_kind::key;
    c.trials = 40;
    c.seed = 11;
    out.push_back(c);
  }
  out.push_back(kvphase::test::small_general_sweep("kv-pairs", compress::preset("v4_csa")));
  out.push_back(kvphase::test::small_general_sweep("padding", compress::preset("paper_ref")));
  return out;
}

json model_values(const std::vector<sim::group_stats>& g) {
  json hits = json::array(), mass = json::array(), margin = json::array();
  for (const auto& x : g) {
    hits.push_back(x.hits);
    mass.push_back(x.mass_fx);
    margin.push_back(x.margin_fx);
  }
  return {{"hits", hits}, {"mass_fx", mass}, {"margin_fx", margin}};
}

json sweep_values(sim::sweep_config c) {
  c.threads = 2;
  const auto r = sim::run_sweep(c);
  return {{"stream_key", c.stream_key()},
          {"config_id", hex(c.config_id())},
          {"trials", c.trials},
          {"seed", c.seed},
          {"compressed", model_values(r.compressed)},
          {"full", model_values(r.full)}};
}

json golden_file() {
  std::ifstream in(std::string(KVPHASE_TEST_DATA_DIR) + "/golden_sim.json");
  REQUIRE(in.good());
  return json::parse(in);
}

/// What the sweep values depend on besides the code: SIMD arch, compiler and its flags.
json build() {
  return {{"version", KVPHASE_VERSION_STRING},
          {"arch", simd::arch_name<simd::default_arch>()},
          {"compiler", kvphase::io::detail::build_compiler},
          {"flags", kvphase::io::detail::build_flags}};
}

/// KVPHASE_GOLDEN_WRITE=path: write the values of this build to path instead of comparing.
const char* write_path() {
  const char* path = std::getenv("KVPHASE_GOLDEN_WRITE");
  return path != nullptr && *path != '\0' ? path : nullptr;
}

bool regenerate() {
  const char* path = write_path();
  if (path == nullptr) return false;
  json sweeps = json::array();
  for (const auto& c : sweep_cases()) sweeps.push_back(sweep_values(c));
  const json out = {{"recorded_with", build()},
                    {"streams", stream_values()},
                    {"sweeps", sweeps}};
  std::ofstream(path) << out.dump(1) << "\n";
  WARN("golden values written to " << path);
  return true;
}

}  // namespace

TEST_CASE("golden: scalar reference streams keep their recorded values", "[sim][golden]") {
  if (regenerate()) return;
  const json want = golden_file().at("streams");
  const json got = stream_values();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("seed " << got[i]["seed"] << " stream " << got[i]["stream"]);
    CHECK(got[i]["first"] == want[i]["first"]);
    CHECK(got[i]["fnv1a"] == want[i]["fnv1a"]);
    CHECK(got[i]["key_space_fnv1a"] == want[i]["key_space_fnv1a"]);
  }
}

TEST_CASE("golden: small sweeps keep their recorded counts and sums", "[sim][golden]") {
  if (write_path() != nullptr) return;  // written by the case above
  const json file = golden_file();
  const json& rec = file.at("recorded_with");
  const json now = build();
  const auto cases = sweep_cases();
  const json& want = file.at("sweeps");
  REQUIRE(want.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    // what keys the draws is arch-independent: the canonical text and its hash
    INFO(cases[i].describe());
    CHECK(cases[i].stream_key() == want[i]["stream_key"]);
    CHECK(hex(cases[i].config_id()) == want[i]["config_id"]);
  }
  if (now["arch"] != rec["arch"]) {
    WARN("sweep values were recorded on " << rec["arch"] << "; this build's default arch is " << now["arch"]
                                          << ": its float arithmetic differs, so they are not compared");
    return;
  }
  const bool same_build = now["compiler"] == rec["compiler"] && now["flags"] == rec["flags"];
  if (!same_build)
    WARN("recorded with " << rec["compiler"] << " " << rec["flags"] << "; this build: " << now["compiler"] << " "
                          << now["flags"] << ": hits compared, mass and margin sums not");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].describe());
    const json got = sweep_values(cases[i]);
    for (const char* m : {"compressed", "full"}) {
      INFO(m);
      CHECK(got[m]["hits"] == want[i][m]["hits"]);
      if (!same_build) continue;
      CHECK(got[m]["mass_fx"] == want[i][m]["mass_fx"]);
      CHECK(got[m]["margin_fx"] == want[i][m]["margin_fx"]);
    }
  }
}

// The double-precision recall quadrature against an independent 50-digit evaluation
// (tests/data/theory_recall_reference.csv, written by theory/reference_table.cpp). Each value must
// lie within the quadrature's own error estimate of the reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kvphase/theory/gaussian.hpp"

using namespace kvphase;

namespace {
std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, c)) out.push_back(item);
  return out;
}
}  // namespace

TEST_CASE("theory: recall quadrature agrees with the 50-digit reference within its own error estimate", "[theory]") {
  std::ifstream in(std::string(KVPHASE_TEST_DATA_DIR) + "/theory_recall_reference.csv");
  REQUIRE(in.good());
  std::string line;
  int rows = 0;
  double worst_eps = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("case,", 0) == 0) continue;
    const auto f = split(line, ',');
    REQUIRE(f.size() == 7);
    theory::phase_geometry geo;
    for (const auto& t : split(f[3], ';')) {
      const auto av = split(t, ':');
      geo.targets.push_back({0, std::stod(av[0]), std::stod(av[1])});
    }
    for (const auto& d : split(f[4], ';')) {
      const auto sc = split(d, ':');
      geo.distractors.push_back({std::stod(sc[0]), std::stod(sc[1])});
    }
    const double snr = std::stod(f[2]);
    theory::needle_model m{.context = 1 << 20, .dim = std::stoi(f[1]),
                           .snr = snr == 0 ? std::numeric_limits<double>::infinity() : snr};
    const double ref = std::stod(f[5]), ref_err = std::stod(f[6]);
    const auto r = theory::recall_exact_disjoint(geo, m, 1e-10);
    const double diff = std::abs(r.recall - ref);
    const double eps = std::numeric_limits<double>::epsilon();
    worst_eps = std::max(worst_eps, diff / eps);
    std::printf("%-36s ref %.15f  ours %.15f  |diff| %.2e (%.0f eps)  own estimate %.2e\n", f[0].c_str(), ref, r.recall,
                diff, diff / eps, r.error);
    CHECK(ref_err < 1e-15);
    CHECK(diff <= r.error);
    CHECK(r.error < 1e-6);  // the estimate itself is useful, not vacuous
    ++rows;
  }
  CHECK(rows >= 8);
  std::printf("worst |diff| %.0f eps\n", worst_eps);
}

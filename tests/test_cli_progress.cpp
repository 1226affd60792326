// examples/progress.hpp: the progress printer of the command-line programs, driven with explicit
// times (no waiting) into a temporary file whose text is then read back.
#include <catch2/catch.hpp>

#include "../examples/progress.hpp"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace {

/// Everything written to `f` so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) s.push_back(static_cast<char>(c));
  return s;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto i = s.find(what); i != std::string::npos; i = s.find(what, i + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("progress: durations read as seconds, minutes, hours", "[cli][progress]") {
  using kvphase::cli::format_duration;
  CHECK(format_duration(0.0) == "0.0 s");
  CHECK(format_duration(12.34) == "12.3 s");
  CHECK(format_duration(245.0) == "4 min 05 s");
  CHECK(format_duration(7620.0) == "2 h 07 min");
  CHECK(format_duration(-1.0) == "0.0 s");
}

TEST_CASE("progress: a short run prints nothing, not even a final line", "[cli][progress]") {
  for (bool terminal : {false, true}) {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    {
      kvphase::cli::progress_printer p("prog", f, terminal);
      for (int i = 0; i <= 10; ++i) p.update(i * 100, 1000, 0.19 * i);  // ends at 1.9 s < 2 s
      p.finish(1.95);
      CHECK_FALSE(p.printed());
    }
    CHECK(contents(f).empty());
    std::fclose(f);
  }
}

TEST_CASE("progress: plain lines without carriage returns, at 10% steps or every 10 s, then the total time",
          "[cli][progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  kvphase::cli::progress_printer p("kvphase-sweep", f, false);
  // a slow start: 1% per 2 s for 20 s (a line every 10 s), then 10% per second (a line per step),
  // reported twice a second as sim::run_sweep does
  double t = 0.0;
  std::int64_t done = 0;
  for (; t < 20.0; t += 0.5) p.update(done = static_cast<std::int64_t>(t / 2.0 * 10.0), 1000, t);
  for (; done < 1000; t += 0.5) p.update(done = std::min<std::int64_t>(1000, done + 50), 1000, t);
  p.finish(t);
  const std::string s = contents(f);
  CHECK(s.find('\r') == std::string::npos);
  // first line at 2 s; then 12 s (10 s later); then the 10%, ..., 100% crossings (10 of them),
  // and the final line
  CHECK(count(s, "\n") == 13);
  CHECK(s.rfind("kvphase-sweep: 10/1000 (1%), elapsed 2.0 s, ETA 3 min 18 s\n", 0) == 0);
  CHECK(s.find("kvphase-sweep: 60/1000 (6%), elapsed 12.0 s, ETA 3 min 08 s\n") != std::string::npos);
  CHECK(s.find("kvphase-sweep: 547/1000 (55%), elapsed 24.0 s, ETA 19.9 s\n") != std::string::npos);  // step 5
  CHECK(count(s, "ETA") == 11);  // every line before 100%
  CHECK(s.find("kvphase-sweep: 1000/1000 (100%), elapsed") != std::string::npos);
  CHECK(s.substr(s.rfind("kvphase-sweep:")) == "kvphase-sweep: 1000/1000 done in 29.5 s\n");
  std::fclose(f);
}

TEST_CASE("progress: on a terminal one line is rewritten with carriage returns and ended once", "[cli][progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  kvphase::cli::progress_printer p("demo", f, true);
  p.update(10, 40, 1.0);  // quiet: before 2 s
  p.update(20, 40, 2.5);
  p.update(30, 40, 3.0);
  p.finish(4.0);
  p.finish(9.0);          // once only
  p.update(40, 40, 9.0);  // after finish: nothing
  const std::string s = contents(f);
  CHECK(count(s, "\r") == 3);
  CHECK(count(s, "\n") == 1);
  CHECK(s.back() == '\n');
  CHECK(s.find("\rdemo: 20/40 (50%), elapsed 2.5 s, ETA 2.5 s") == 0);
  CHECK(s.find("\rdemo: 30/40 (75%), elapsed 3.0 s, ETA 1.0 s") != std::string::npos);
  // the final line is blank-padded over the longer progress line before it
  const std::string last = "\rdemo: 30/40 done in 4.0 s";
  const auto at = s.find(last);
  REQUIRE(at != std::string::npos);
  CHECK(s.size() - at - 1 == std::string("\rdemo: 30/40 (75%), elapsed 3.0 s, ETA 1.0 s").size());
  std::fclose(f);
}

TEST_CASE("progress: the callback adaptor reports through the printer", "[cli][progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  // quiet_seconds 0: the first report prints at once, whatever the clock says
  kvphase::cli::progress_printer p("prog", f, false, {.quiet_seconds = 0.0});
  auto report = p.callback();
  report(5, 10);
  p.finish();
  const std::string s = contents(f);
  CHECK(s.rfind("prog: 5/10 (50%), elapsed ", 0) == 0);
  CHECK(s.find("prog: 5/10 done in ") != std::string::npos);
  std::fclose(f);
}

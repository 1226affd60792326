// libFuzzer target: the command-line value parsing shared by kvphase's programs
// (examples/cli_common.hpp, kvphase::cli::parse). The input is an argv, one argument per line,
// parsed into an app with the option kinds the programs use (signed and unsigned integers,
// doubles, comma-separated lists, choices, flags, positional files). The only outcomes allowed
// are "go on" and an exit status of 0 (--help) or 2 (a bad command line).
//
// The other inputs a command line brings in are fuzzed here too (one target, no extra CI time):
//  - an input starting with "STUDY\n" is a study file (io::parse_study, --grid): it must parse
//    or throw kvphase::error, and a parsed study maps every array task to a valid unit;
//  - an input starting with "PARAMS\n" is a `--params-file` argument, PATH or PATH#LAYER
//    (compress::split_params_file): a split keeps the text before the last '#' as the path and
//    a non-negative layer, anything else is kvphase::error;
//  - lines "ENV NAME=VALUE" are a launcher's environment for `--shard auto`
//    (sim::shard_from_environment): a result is a valid shard, anything else kvphase::error.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <map>

#include <kvphase/compress/params_kind.hpp>
#include <kvphase/io/study.hpp>

#include "cli_common.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = kvphase::fuzz::as_text(data, size);
  if (text.starts_with("STUDY\n")) {
    kvphase::fuzz::expect_result_or_error([&] {
      const auto st = kvphase::io::parse_study(text.substr(6), "fuzz.json");
      kvphase::fuzz::check(st.units() >= 1 && st.tasks() <= (std::int64_t(1) << 20), "study sizes in range");
      for (const std::int64_t t : {std::int64_t(0), st.tasks() / 2, st.tasks() - 1}) {
        const auto [unit, shard] = kvphase::io::study_task(st, t, st.tasks());
        kvphase::fuzz::check(unit >= 0 && unit < st.units() && shard >= 0 && shard < st.shards, "task maps into the study");
        (void)st.unit_label(unit);
      }
    });
    return 0;
  }
  if (text.starts_with("PARAMS\n")) {
    const std::string_view arg = text.substr(7);
    kvphase::fuzz::expect_result_or_error([&] {
      const auto [path, layer] = kvphase::compress::split_params_file(arg);
      const auto h = arg.rfind('#');
      kvphase::fuzz::check(!path.empty() && layer >= 0, "a split has a path and a non-negative layer");
      kvphase::fuzz::check(h == std::string_view::npos ? (path == arg && layer == 0) : path == arg.substr(0, h),
                           "the path is the text before the last '#'");
    });
    return 0;
  }
  std::vector<std::string> args{"kvphase-fuzz"};
  std::map<std::string, std::string> env;
  for (std::size_t at = 0; at < text.size() && args.size() < 64;) {
    auto end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with("ENV ") && line.find('=') != std::string_view::npos) {
      const auto eq = line.find('=');
      env[std::string(line.substr(4, eq - 4))] = std::string(line.substr(eq + 1));
    } else {
      args.emplace_back(line);
    }
    at = end + 1;
  }
  if (!env.empty()) {
    kvphase::fuzz::expect_result_or_error([&] {
      const auto s = kvphase::sim::shard_from_environment([&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      });
      kvphase::fuzz::check(s.shard.count >= 1 && s.shard.count <= kvphase::sim::max_shard_count &&
                               s.shard.index >= 0 && s.shard.index < s.shard.count && !s.launcher.empty(),
                           "launcher shard is valid");
    });
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  CLI::App app{"fuzz target", "kvphase-fuzz"};
  std::int64_t context = 8192, trials = 1000;
  std::uint64_t seed = 0;
  int threads = 0;
  double noise = 0.0, scale = 0.0;
  std::vector<double> bias;
  std::vector<std::string> inputs;
  std::string task = "needle", shard = "0/1", out;
  bool quick = false;
  app.add_option("--context", context);
  app.add_option("--trials", trials);
  app.add_option("--seed", seed);
  app.add_option("--threads", threads);
  app.add_option("--query-noise", noise);
  app.add_option("--logit-scale", scale);
  app.add_option("--gate-bias", bias)->delimiter(',');
  // the project's own validators (cli_common.hpp) on a fixed-length integer list and a real
  std::vector<std::int64_t> grid;
  double lr = 0.0;
  app.add_option("--grid", grid)->expected(2)->delimiter(',')->transform(kvphase::cli::integer<std::int64_t>(1, 4096));
  app.add_option("--lr", lr)->transform(kvphase::cli::real(1e-6, 0.5));
  app.add_option("--task", task)->check(CLI::IsMember({"needle", "kv-pairs", "padding"}));
  app.add_option("--shard", shard);
  app.add_option("--out,-o", out);
  app.add_flag("--quick", quick);
  app.add_option("inputs", inputs);
  const auto status = kvphase::cli::parse(app, static_cast<int>(args.size()), argv.data(), "kvphase-fuzz");
  kvphase::fuzz::check(!status || *status == 0 || *status == 2, "cli::parse exits 0 or 2");
  if (!status) {
    kvphase::fuzz::check(grid.empty() || (grid.size() == 2 && grid[0] >= 1 && grid[0] <= 4096 && grid[1] >= 1 && grid[1] <= 4096),
                         "an accepted --grid is two integers in [1, 4096]");
    kvphase::fuzz::check(lr == 0.0 || (lr >= 1e-6 && lr <= 0.5), "an accepted --lr is in [1e-6, 0.5]");
  }
  if (!status && shard != "auto")  // the --shard value through the one i/N parser
    kvphase::fuzz::expect_result_or_error([&] { (void)kvphase::cli::resolve_shard(shard); });
  return 0;
}

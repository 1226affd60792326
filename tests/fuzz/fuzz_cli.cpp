// libFuzzer target: the command-line value parsing shared by kvphase's programs
// (examples/cli_common.hpp, kvphase::cli::parse). The input is an argv, one argument per line,
// parsed into an app with the option kinds the programs use (signed and unsigned integers,
// doubles, comma-separated lists, choices, flags, positional files). The only outcomes allowed
// are "go on" and an exit status of 0 (--help) or 2 (a bad command line).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = kvphase::fuzz::as_text(data, size);
  std::vector<std::string> args{"kvphase-fuzz"};
  for (std::size_t at = 0; at < text.size() && args.size() < 64;) {
    auto end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    args.emplace_back(text.substr(at, end - at));
    at = end + 1;
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
  app.add_option("--task", task)->check(CLI::IsMember({"needle", "kv-pairs", "padding"}));
  app.add_option("--shard", shard);
  app.add_option("--out,-o", out);
  app.add_flag("--quick", quick);
  app.add_option("inputs", inputs);
  const auto status = kvphase::cli::parse(app, static_cast<int>(args.size()), argv.data(), "kvphase-fuzz");
  kvphase::fuzz::check(!status || *status == 0 || *status == 2, "cli::parse exits 0 or 2");
  return 0;
}

#pragma once
// Command-line parsing shared by kvphase's programs (kvphase-sweep, kvphase-merge, demo,
// paper_findings, train_phase, kvphase-theory): one rule for what a bad command line does.
#include <iostream>
#include <optional>
#include <string_view>

#include <CLI/CLI.hpp>

namespace kvphase::cli {

/// Parses argv into app. Returns the status to exit with — 0 after --help, 2 for an unknown flag
/// or a value that does not convert or validate (the message names it) — or nullopt to go on.
/// (CLI11's own exit codes for parse errors are 100 and up; every kvphase program exits 2.)
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, std::string_view prog) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << prog << ": " << e.what() << "\n(run " << prog << " --help for usage)\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace kvphase::cli

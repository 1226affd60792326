#pragma once
/// \file examples/progress.hpp
/// Progress of a long run on stderr, for the command-line programs: done/total, percent, elapsed
/// time and an ETA (elapsed · remaining / done).
///
///  - On a terminal (isatty(fileno(stream))) one line is rewritten in place with '\r'.
///  - Otherwise (a log file, a pipe, a batch system) plain lines without '\r': one when the run
///    crosses a 10% step, or when 10 s have passed since the last line, whichever comes first.
///  - Quiet while the run is short: nothing before 2 s have passed, and no final line for a run
///    that never printed. A run that printed ends with one line giving the total time.
///
///     kvphase::cli::progress_printer progress("kvphase-sweep");
///     sim::sweep_progress p;
///     p.report = progress.callback();      // std::function<void(std::int64_t done, std::int64_t total)>
///     const auto r = sim::run_sweep(c, p);
///     progress.finish();
///
/// Not thread-safe: call update() from one thread (sim::run_sweep calls its report from the
/// calling thread), or under the caller's lock.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

namespace kvphase::cli {

/// "12.3 s", "4 min 05 s", "2 h 07 min": a duration in seconds for a progress line.
inline std::string format_duration(double seconds) {
  if (!(seconds >= 0.0)) seconds = 0.0;
  char buf[48];
  if (seconds < 59.95) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 3600.0) {
    const auto s = static_cast<long long>(std::lround(seconds));
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", s / 60, s % 60);
  } else {
    const auto m = static_cast<long long>(std::lround(seconds / 60.0));
    std::snprintf(buf, sizeof buf, "%lld h %02lld min", m / 60, m % 60);
  }
  return buf;
}

/// True when `f` is a terminal.
inline bool is_terminal(std::FILE* f) noexcept { return f != nullptr && ::isatty(::fileno(f)) == 1; }

/// When a progress_printer speaks (defaults as in the file comment).
struct progress_options {
  double quiet_seconds = 2.0;    ///< nothing is printed before this much time has passed
  double plain_interval = 10.0;  ///< plain mode: a line at least this often (seconds) ...
  double plain_step = 0.1;       ///< ... and at every crossing of this fraction of the total
};

class progress_printer {
 public:
  /// Prints to stderr as "<program>: …", rewriting one line when stderr is a terminal.
  explicit progress_printer(std::string program, progress_options options = {})
      : progress_printer(std::move(program), stderr, is_terminal(stderr), options) {}

  /// Prints to `out`; `terminal` chooses the '\r' form.
  progress_printer(std::string program, std::FILE* out, bool terminal, progress_options options = {})
      : program_(std::move(program)), out_(out), terminal_(terminal), options_(options),
        start_(std::chrono::steady_clock::now()) {}

  progress_printer(const progress_printer&) = delete;
  progress_printer& operator=(const progress_printer&) = delete;

  /// Ends an open terminal line, so that what follows starts on a line of its own.
  ~progress_printer() {
    if (open_line_) std::fputc('\n', out_);
  }

  /// Seconds since construction.
  [[nodiscard]] double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  /// Reports `done` of `total` units at the current time.
  void update(std::int64_t done, std::int64_t total) { update(done, total, elapsed()); }

  /// Reports `done` of `total` units at `seconds` since the start (the clock is a parameter so
  /// that the behaviour can be checked without waiting).
  void update(std::int64_t done, std::int64_t total, double seconds) {
    if (finished_ || total <= 0) return;
    last_done_ = done;
    last_total_ = total;
    if (seconds < options_.quiet_seconds) return;
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    if (terminal_) {
      write_line(line(done, total, seconds), false);
      return;
    }
    const auto step = static_cast<std::int64_t>(std::floor(fraction / options_.plain_step + 1e-9));
    if (printed_ && step <= last_step_ && seconds - last_print_ < options_.plain_interval) return;
    last_step_ = step;
    last_print_ = seconds;
    write_line(line(done, total, seconds), false);
  }

  /// The final line with the total time, when anything was printed; quiet otherwise.
  void finish() { finish(elapsed()); }
  void finish(double seconds) {
    if (finished_) return;
    finished_ = true;
    if (!printed_) return;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%lld/%lld", static_cast<long long>(last_done_),
                  static_cast<long long>(last_total_));
    write_line(program_ + ": " + buf + " done in " + format_duration(seconds), true);
  }

  /// An adaptor for sim::sweep_progress::report (and any (done, total) callback).
  [[nodiscard]] std::function<void(std::int64_t, std::int64_t)> callback() {
    return [this](std::int64_t done, std::int64_t total) { update(done, total); };
  }

  [[nodiscard]] bool printed() const noexcept { return printed_; }

 private:
  [[nodiscard]] std::string line(std::int64_t done, std::int64_t total, double seconds) const {
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%lld/%lld (%.0f%%)", static_cast<long long>(done), static_cast<long long>(total),
                  100.0 * fraction);
    std::string s = program_ + ": " + buf + ", elapsed " + format_duration(seconds);
    if (done > 0 && done < total)
      s += ", ETA " + format_duration(seconds * static_cast<double>(total - done) / static_cast<double>(done));
    return s;
  }

  /// Terminal: rewrites the line in place (blank-padded over a longer previous one); plain: one
  /// line each.
  void write_line(const std::string& s, bool final) {
    if (terminal_) {
      const std::size_t pad = width_ > s.size() ? width_ - s.size() : 0;
      std::fprintf(out_, "\r%s%*s", s.c_str(), static_cast<int>(pad), "");
      width_ = s.size();
      open_line_ = !final;
      if (final) std::fputc('\n', out_);
    } else {
      std::fprintf(out_, "%s\n", s.c_str());
    }
    std::fflush(out_);
    printed_ = true;
  }

  std::string program_;
  std::FILE* out_;
  bool terminal_;
  progress_options options_;
  std::chrono::steady_clock::time_point start_;
  std::int64_t last_done_ = 0, last_total_ = 0, last_step_ = -1;
  double last_print_ = 0.0;
  std::size_t width_ = 0;
  bool printed_ = false, open_line_ = false, finished_ = false;
};

}  // namespace kvphase::cli

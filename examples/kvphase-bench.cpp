// kvphase-bench: the three benchmark levels in one program, every figure beside its bound
// measured in the same process (kvphase/bench/roofline.hpp).
//
//   kvphase-bench compress --preset v4-csa --context 16384 --dim 4096 --head-dim 512 --threads 1,2
//   kvphase-bench compress --all --context 4096 --dim 512 --cold --csv compress.csv
//   kvphase-bench compress --study specs.json          (a study file: one row set per unit)
//   kvphase-bench attention --context 32768 --dim 128 --queries 256 --threads 1,2
//   kvphase-bench trial --config sweep.json            (one sweep trial, the generator's share)
//
// compress: any operator through the same flags as kvphase-sweep (examples/cli_operator.hpp), at
// any shape. Per operator, thread count and cache state (warm: the same buffers reused; cold:
// caches evicted before every call): median, min and max time over the repetitions, GB/s and
// GFLOP/s of the pass's bytes and FLOPs (compress/cost.hpp), the bound that applies (read
// bandwidth or FMA peak, from the pass's arithmetic intensity against the machine's balance
// point) and the fraction of it. The read bandwidth is the time to read the input once, paired
// with every repetition in the same cache state; the FMA peak is measured after each row's
// repetitions at the same thread count. rw_frac: the same fraction against a bound that counts
// the written bytes too, at the rate of a probe that reads the input and writes the output once
// (kb::read_write_seconds), paired with every repetition like the read probe.
// attention: compressed entries + raw window (joint softmax), CSA top-k selection (indexer +
// attention), NSA's gated branches (block selection + attention) and decode (one query), with
// the FLOPs and bytes of attention/cost.hpp.
// trial: one trial of a sweep configuration (a sweep_config as JSON, or a kvphase-sweep JSON
// output, whose provenance holds it): time per trial and, where the task states its normals per
// trial, the share the Gaussian generator alone would take.
// --compare-torch runs benchmarks/compare_torch.py compress (or --torch-script, with --python's
// interpreter) on every warm compress row with the row's input and parameters, and checks the
// outputs agree within the float rounding bound (exit 1 if not, or if the script fails) when
// the interpreter imports torch, and says so when it does not.
// Output: a table on stdout; --csv / --json with provenance. Progress on stderr. Bad flags or
// values exit 2 naming the flag.

#include <CLI/CLI.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_common.hpp"
#include "cli_operator.hpp"
#include "progress.hpp"

#include <kvphase/attention/compressed.hpp>
#include <kvphase/attention/cost.hpp>
#include <kvphase/attention/select.hpp>
#include <kvphase/bench/roofline.hpp>
#include <kvphase/compress/cost.hpp>
#include <kvphase/compress/presets.hpp>
#include <kvphase/io/csv.hpp>
#include <kvphase/io/fields_json.hpp>
#include <kvphase/io/json.hpp>
#include <kvphase/io/npy.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/study.hpp>
#include <kvphase/sim/normal.hpp>
#include <kvphase/sim/report.hpp>
#include <kvphase/sim/sweep.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kvphase::index_t;
namespace kc = kvphase::compress;
namespace att = kvphase::attention;
namespace kb = kvphase::bench;
namespace cl = kvphase::cli;
namespace io = kvphase::io;
namespace sim = kvphase::sim;

constexpr const char* program = "kvphase-bench";

// ---- flags shared by the subcommands -------------------------------------------------------------

struct run_flags {
  std::vector<index_t> threads{1};
  index_t reps = 0;  // 0: automatic (≈ --seconds per row, at least 5)
  double seconds = 2.0;
  bool cold = false;
  std::string pages = "system";  // the input and output buffers' pages: "system", "huge" or "small"
  std::string csv, json;
  bool quiet = false;
  std::uint64_t seed = 1;
};

void add_run_flags(CLI::App& app, run_flags& r) {
  app.add_option("--threads", r.threads, "thread counts, comma-separated (each a row)")
      ->delimiter(',')
      ->transform(cl::integer<index_t>(1, 1024));
  cl::add_int(app, "--reps", r.reps, 0, 100000, "repetitions per row (0: enough for about --seconds, at least 5)");
  cl::add_real(app, "--seconds", r.seconds, 0.01, 3600, "target time per row when --reps is 0");
  app.add_flag("--cold", r.cold, "also measure with caches evicted before every call (cold rows beside the warm ones)");
  app.add_option("--pages", r.pages,
                 "pages of the input and output buffers: system (what a malloc'd matrix gets: the kernel's "
                 "transparent-huge-page policy, as for the compressor's own workspace), huge (2 MiB requested) or "
                 "small (4 KiB)")
      ->check(CLI::IsMember({"system", "huge", "small"}));
  app.add_option("--csv", r.csv, "write the rows as CSV (with provenance) to this file");
  app.add_option("--json", r.json, "write the rows as JSON (with provenance) to this file");
  app.add_flag("--quiet,-q", r.quiet, "no progress on stderr");
  cl::add_u64(app, "--seed", r.seed, "seed of the random inputs and parameters");
}

/// Shape of a compress job.
struct shape_flags {
  index_t context = 16384;
  index_t dim = 512;
  index_t head_dim = 0;    // 0: the operator's own output width (d without a payload projection)
  index_t mlp_hidden = 0;  // 0: 2·c
};

void add_shape_flags(CLI::App& app, shape_flags& s) {
  cl::add_int(app, "--context", s.context, 1, index_t(1) << 28, "tokens N of the compressed sequence");
  cl::add_int(app, "--dim", s.dim, 1, 65536, "input width d (channels per token)");
  cl::add_int(app, "--head-dim", s.head_dim, 0, 65536,
              "output width c through a payload projection (gated, channel-gate, two-stream and MLP pools; 0: "
              "the operator's own)");
  cl::add_int(app, "--mlp-hidden", s.mlp_hidden, 0, 65536, "hidden width H of an MLP pool (0: 2c)");
}

// ---- one output row ------------------------------------------------------------------------------

struct row {
  std::string level, name, kind;
  index_t tokens = 0, dim = 0, out_dim = 0;
  int threads = 1;
  std::string cache = "warm";
  index_t reps = 0;
  double median_s = 0, min_s = 0, max_s = 0;
  double bytes = 0, flops = 0;
  double read_bytes = 0;  // the part of bytes the read bound counts (inputs and weights)
  double fma_peak_gflops = 0, read_gbs = 0;
  /// compress rows: the bandwidth of the read-and-write probe (the row's input read, its output
  /// written once, beside each repetition) and the fraction of the bound it sets for all the
  /// row's bytes, read and written (the FMA peak where that is longer)
  double rw_gbs = std::numeric_limits<double>::quiet_NaN();
  double rw_fraction = std::numeric_limits<double>::quiet_NaN();
  std::string bound = "n/a";
  double bound_s = 0;
  double fraction = std::numeric_limits<double>::quiet_NaN();
  double cpu_fraction = std::numeric_limits<double>::quiet_NaN();  // the same per CPU-second
  double gen_share = std::numeric_limits<double>::quiet_NaN();  // trial rows
  std::string torch = "";                                        // --compare-torch result
  std::string command;

  [[nodiscard]] double gbs() const { return median_s > 0 ? bytes / median_s * 1e-9 : 0.0; }
  [[nodiscard]] double gflops() const { return median_s > 0 ? flops / median_s * 1e-9 : 0.0; }
};

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string num(double v) { return std::isfinite(v) ? io::format_shortest(v) : ""; }

void print_table(const std::vector<row>& rows, std::ostream& os) {
  const std::vector<std::string> head{"level", "name", "kind", "N", "d", "c", "thr", "cache", "reps", "median_ms",
                                      "min_ms", "max_ms", "GB/s", "GFLOP/s", "MB", "GFLOP", "FLOP/B", "bound",
                                      "frac", "cpu_frac", "rw_frac", "extra"};
  std::vector<std::vector<std::string>> cells{head};
  for (const auto& r : rows) {
    std::string extra = r.torch;
    if (std::isfinite(r.gen_share)) extra = "gen_share " + fixed(r.gen_share, 3) + (extra.empty() ? "" : "; " + extra);
    cells.push_back({r.level, r.name, r.kind, std::to_string(r.tokens), std::to_string(r.dim), std::to_string(r.out_dim),
                     std::to_string(r.threads), r.cache, std::to_string(r.reps), fixed(r.median_s * 1e3, 3),
                     fixed(r.min_s * 1e3, 3), fixed(r.max_s * 1e3, 3), fixed(r.gbs(), 2), fixed(r.gflops(), 2),
                     fixed(r.bytes * 1e-6, 3), fixed(r.flops * 1e-9, 4),
                     r.bytes > 0 ? fixed(r.flops / r.bytes, 3) : "n/a", r.bound, fixed(r.fraction, 3), fixed(r.cpu_fraction, 3), fixed(r.rw_fraction, 3), extra});
  }
  std::vector<std::size_t> w(head.size(), 0);
  for (const auto& c : cells)
    for (std::size_t i = 0; i < c.size(); ++i) w[i] = std::max(w[i], c[i].size());
  for (const auto& c : cells) {
    std::string line;
    for (std::size_t i = 0; i < c.size(); ++i) {
      std::string cell = c[i];
      if (i + 1 < c.size()) cell.resize(w[i], ' ');
      line += cell + (i + 1 < c.size() ? "  " : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << '\n';
  }
}

const std::vector<std::string>& csv_head() {
  static const std::vector<std::string> h{
      "level",    "name",   "kind",       "tokens",       "dim",     "out_dim",  "threads", "cache",  "reps",
      "median_s", "min_s",  "max_s",      "bytes",        "flops",   "gb_per_s", "gflop_per_s", "intensity",
      "fma_peak_gflops", "read_gb_per_s", "bound", "bound_s", "fraction", "cpu_fraction", "rw_gb_per_s", "rw_fraction",
      "gen_share", "torch", "command"};
  return h;
}

std::vector<std::string> csv_fields(const row& r) {
  return {r.level, r.name, r.kind, std::to_string(r.tokens), std::to_string(r.dim), std::to_string(r.out_dim),
          std::to_string(r.threads), r.cache, std::to_string(r.reps), num(r.median_s), num(r.min_s), num(r.max_s),
          num(r.bytes), num(r.flops), num(r.gbs()), num(r.gflops()), num(r.bytes > 0 ? r.flops / r.bytes : NAN),
          num(r.fma_peak_gflops), num(r.read_gbs), r.bound, num(r.bound_s), num(r.fraction), num(r.cpu_fraction), num(r.rw_gbs), num(r.rw_fraction), num(r.gen_share),
          r.torch, r.command};
}

void write_outputs(const std::vector<row>& rows, const run_flags& rf, const nlohmann::json& config, int argc,
                   char** argv) {
  int max_threads = 1;
  for (index_t t : rf.threads) max_threads = std::max(max_threads, static_cast<int>(t));
  nlohmann::json cfg = config;
  cfg["program"] = program;
  cfg["isa"] = kb::isa_name();
  cfg["machine_note"] = "fractions are of bounds measured in the same process, next to each row";
  const auto prov = io::make_provenance(cfg, rf.seed, max_threads, argc, argv);
  if (!rf.csv.empty()) {
    std::ostringstream os;
    io::csv_writer w(os);
    w.comment(io::to_csv_comment(prov));
    w.comment("format: kvphase-bench/2");
    w.row(csv_head());
    for (const auto& r : rows) w.row(csv_fields(r));
    sim::write_text_file(rf.csv, os.str());
  }
  if (!rf.json.empty()) {
    io::ordered_json j;
    j["format"] = "kvphase-bench/2";
    j["provenance"] = io::to_json(prov);
    auto& arr = j["rows"] = io::ordered_json::array();
    const auto& h = csv_head();
    for (const auto& r : rows) {
      const auto f = csv_fields(r);
      io::ordered_json e;
      for (std::size_t i = 0; i < h.size(); ++i) {
        const bool text = h[i] == "level" || h[i] == "name" || h[i] == "kind" || h[i] == "cache" || h[i] == "bound" ||
                          h[i] == "torch" || h[i] == "command";
        if (text) e[h[i]] = f[i];
        else if (f[i].empty()) e[h[i]] = nullptr;
        else e[h[i]] = std::stod(f[i]);
      }
      arr.push_back(e);
    }
    sim::write_text_file(rf.json, io::json_text(j));
  }
}

// ---- buffers and timing --------------------------------------------------------------------------

/// 2 MiB-aligned float buffer on the pages `pages` asks for ("system": no request, the pages a
/// malloc'd matrix gets; "huge": 2 MiB transparent huge pages requested; "small": refused),
/// first-touched by `threads` threads in a static split (no page faults inside a timed loop),
/// filled with values in [−0.5, 0.5). The pages matter beyond the TLB: on an AMD Zen 5 core
/// V4-CSA's projections ran at 0.71 of the FMA peak with the input on huge pages and the
/// compressor's workspace (std::vector) on 4 KiB pages, 0.80–0.83 with both on the same size
/// (docs/performance.md), so the default puts the input where the workspace is.
struct buffer {
  float* p = nullptr;
  std::size_t n = 0;
  buffer(std::size_t count, int threads, const std::string& pages = "system") : n(std::max<std::size_t>(count, 1)) {
    const std::size_t align = std::size_t(2) << 20;
    const std::size_t bytes = ((n * sizeof(float) + align - 1) / align) * align;
    p = static_cast<float*>(std::aligned_alloc(align, bytes));
    kvphase::require(p != nullptr, "buffer", bytes, "allocation failed (shape too large for this machine?)");
    if (pages == "huge") madvise(p, bytes, MADV_HUGEPAGE);
    else if (pages == "small") madvise(p, bytes, MADV_NOHUGEPAGE);
#pragma omp parallel num_threads(threads)
    {
      const std::size_t t = static_cast<std::size_t>(kb::detail::thread_num());
      const std::size_t nt = static_cast<std::size_t>(kb::detail::num_threads());
      for (std::size_t i = n * t / nt; i < n * (t + 1) / nt; ++i)
        p[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    }
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { std::free(p); }
};

struct timing {
  std::vector<double> job, roof;          // seconds per repetition: the job, and reading its probe once
  std::vector<double> roof_rw;            // reading the probe and writing the job's output once (compress)
  std::vector<double> job_cpu, roof_cpu;  // the same in CPU seconds of the process
  std::vector<double> peak, peak_cpu;     // FMA peak probes between repetitions: GFLOP/s, GFLOP per CPU-second
};

/// Repetitions of job, each paired with one read of probe[0 … probe_n) in the same cache state,
/// and an FMA-peak probe (~10 ms) after each of the first 5 repetitions and every 10th: on a
/// shared machine the bound and the job are sampled under the same load.
/// `peak`: the FMA-peak probe of the path the job runs (default: the compiled path's).
/// `out`, `out_n`: the job's output; when given, each repetition also times the read-and-write
/// probe (kb::read_write_seconds: the probe read, out written once), in the same cache state.
timing measure(const std::function<void()>& job, const float* probe, std::size_t probe_n, int threads, index_t reps,
               double seconds, bool cold, const std::function<void()>& tick,
               kb::peak_sample (*peak)(int) = &kb::fma_peak_sample<float>, float* out = nullptr,
               std::size_t out_n = 0) {
  const auto t0 = kb::clock_type::now();
  job();  // warm-up (first touch of internal buffers); also the time estimate
  const double first = std::chrono::duration<double>(kb::clock_type::now() - t0).count();
  if (reps <= 0) reps = std::clamp<index_t>(static_cast<index_t>(std::ceil(seconds / std::max(first, 1e-7))), 5, 201);
  timing t;
  for (index_t r = 0; r < reps; ++r) {
    if (cold) kb::evict_caches();
    double c0 = kb::process_cpu_seconds();
    t.roof.push_back(kb::read_seconds(probe, probe_n, threads, 1));
    t.roof_cpu.push_back(kb::process_cpu_seconds() - c0);
    if (out != nullptr) {
      if (cold) kb::evict_caches();
      t.roof_rw.push_back(kb::read_write_seconds(probe, probe_n, out, out_n, threads, 1));
    }
    if (cold) kb::evict_caches();
    c0 = kb::process_cpu_seconds();
    const auto a = kb::clock_type::now();
    job();
    t.job.push_back(std::chrono::duration<double>(kb::clock_type::now() - a).count());
    t.job_cpu.push_back(kb::process_cpu_seconds() - c0);
    if (r < 5 || r % 10 == 0) {
      const kb::peak_sample p = peak(threads);
      t.peak.push_back(p.wall_gflops);
      t.peak_cpu.push_back(p.cpu_gflops);
    }
    tick();
  }
  return t;
}

/// Fills the timing columns of r (median, min, max; bound and fraction from bytes and flops).
void finish_row(row& r, const timing& t, double probe_bytes) {
  r.reps = static_cast<index_t>(t.job.size());
  r.median_s = kb::median(t.job);
  r.min_s = *std::min_element(t.job.begin(), t.job.end());
  r.max_s = *std::max_element(t.job.begin(), t.job.end());
  r.read_gbs = probe_bytes / kb::median(t.roof) * 1e-9;
  r.fma_peak_gflops = kb::median(t.peak);
  kc::pass_cost c;  // the bound from the bytes read and the flops alone
  c.input_bytes = r.read_bytes;
  c.pool_flops = r.flops;
  kc::pass_bound b{};
  r.bound_s = kc::bound_seconds(c, r.fma_peak_gflops, r.read_gbs, &b);
  r.bound = b == kc::pass_bound::memory ? "read_bw" : "fma_peak";
  r.fraction = r.bound_s / r.median_s;
  // per CPU-second: the share of the machine the process got does not enter
  r.cpu_fraction = kc::bound_seconds(c, kb::median(t.peak_cpu), probe_bytes / kb::median(t.roof_cpu) * 1e-9) /
                   kb::median(t.job_cpu);
  if (!t.roof_rw.empty()) {
    // the probe moved probe_bytes in and the output's bytes out; the row's bytes (read and
    // written) at that rate, or its flops at the peak, whichever is longer
    r.rw_gbs = (probe_bytes + (r.bytes - r.read_bytes)) / kb::median(t.roof_rw) * 1e-9;
    r.rw_fraction = std::max(r.bytes / (r.rw_gbs * 1e9), r.flops / (r.fma_peak_gflops * 1e9)) / r.median_s;
  }
}

std::string command_text(const std::vector<std::string>& args) {
  std::string s = program;
  for (const auto& a : args) s += " " + a;
  return s;
}

// ---- compress ------------------------------------------------------------------------------------

struct compress_job {
  std::string label;
  cl::operator_flags op;
  shape_flags shape;
  std::vector<std::string> args;  // the flags that define it (for the row's command)
  bool head_dim_if_projected = false;  // --all: --head-dim applies to the pools with a projection only
};

/// Parses a job's flags (operator and shape) exactly as the command line's.
compress_job parse_job(const std::string& label, const std::vector<std::string>& args, const shape_flags& base) {
  CLI::App app{"job", label};
  compress_job j{.label = label, .shape = base, .args = args};
  cl::add_operator_flags(app, j.op);
  add_shape_flags(app, j.shape);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    kvphase::fail(label, e.what(), "is not a valid set of operator and shape flags");
  }
  return j;
}

/// Every preset and every pool kind (max and fixed weights on the V4 grid W = 8, S = 4).
std::vector<std::pair<std::string, std::vector<std::string>>> all_jobs() {
  std::vector<std::pair<std::string, std::vector<std::string>>> j;
  for (const auto& p : cl::operator_preset_names()) j.push_back({p, {"--preset", p}});
  j.push_back({"max", {"--preset", "mean", "--window", "8", "--stride", "4", "--pool", "max"}});
  j.push_back({"weights", {"--preset", "mean", "--window", "8", "--stride", "4", "--pool", "weights", "--slot-weights",
                           "0.05,0.1,0.15,0.2,0.2,0.15,0.1,0.05"}});
  return j;
}

/// Parameters for the job's spec at width d: the preset's recipe, with a payload projection to
/// --head-dim where one is asked for.
bool projectable(kc::pool_kind k) {
  return k == kc::pool_kind::slot_gate || k == kc::pool_kind::channel_gate || k == kc::pool_kind::two_stream ||
         k == kc::pool_kind::mlp;
}

kc::pool_params<float> job_params(const kc::operator_spec& s, const shape_flags& sh, std::uint64_t seed) {
  kc::param_init init = kc::preset_init(s, seed);
  if (sh.head_dim > 0 && sh.head_dim != sh.dim) {
    kvphase::require(projectable(s.pool), "head-dim", sh.head_dim,
                     std::string("needs a pool with a payload projection (slot-gate, channel_gate, two_stream, mlp); ") +
                         kc::to_string(s.pool) + " keeps the input width --dim");
    init.project_payload = true;
    init.out_dim = sh.head_dim;
  } else if (s.pool == kc::pool_kind::mlp) {
    init.project_payload = false;
  }
  if (s.pool == kc::pool_kind::mlp) init.mlp_hidden = sh.mlp_hidden;
  else kvphase::require(sh.mlp_hidden == 0, "mlp-hidden", sh.mlp_hidden, "applies only to the mlp pool (--preset nsa)");
  return kc::make_params<float>(s, sh.dim, init);
}

/// Called on each warm compress row after it is timed, with the operator, its parameters, the
/// input (N × d) and the library's output (E × c) of the last repetition: the PyTorch peer.
using compress_peer = std::function<void(row&, const kc::operator_spec&, const kc::pool_params<float>&,
                                         kvphase::matrix_view<float>, kvphase::matrix_view<float>)>;

std::vector<row> run_compress(const std::vector<compress_job>& jobs, const run_flags& rf, bool quiet,
                              const compress_peer& peer = {}) {
  std::vector<row> rows;
  std::vector<std::string> caches{"warm"};
  if (rf.cold) caches.push_back("cold");
  cl::progress_printer printer(program);
  const std::int64_t total = static_cast<std::int64_t>(jobs.size() * rf.threads.size() * caches.size());
  std::int64_t done = 0;
  for (const auto& j : jobs) {
    const kc::operator_spec s = cl::make_operator(j.op);
    shape_flags sh = j.shape;
    if (j.head_dim_if_projected && !projectable(s.pool)) sh.head_dim = 0;
    const auto p = job_params(s, sh, rf.seed);
    const index_t N = j.shape.context, d = j.shape.dim;
    const kc::pass_cost cost = kc::compress_cost<float>(s, p, d, N);
    kvphase::require(cost.entries >= 1, "context", N, "too short for one complete entry of " + j.label);
    for (index_t T : rf.threads) {
      const int threads = static_cast<int>(T);
      buffer x(static_cast<std::size_t>(N * d), threads, rf.pages);
      buffer out(static_cast<std::size_t>(cost.entries * cost.out_dim), threads, rf.pages);
      const kvphase::matrix_view<float> xv(x.p, N, d);
      kvphase::matrix_mut_view<float> ov(out.p, cost.entries, cost.out_dim);
      kc::compress_workspace<float> ws;
      const kc::compress_options opt{.threads = threads};
      for (const auto& cache : caches) {
        row r{.level = "compress", .name = j.label, .kind = kc::to_string(s.pool), .tokens = N, .dim = d,
              .out_dim = cost.out_dim, .threads = threads, .cache = cache};
        r.bytes = cost.bytes();
        r.read_bytes = cost.read_bytes();
        r.flops = cost.flops();
        std::vector<std::string> args{"compress"};
        args.insert(args.end(), j.args.begin(), j.args.end());
        args.insert(args.end(), {"--context", std::to_string(N), "--dim", std::to_string(d)});
        if (sh.head_dim > 0) args.insert(args.end(), {"--head-dim", std::to_string(sh.head_dim)});
        args.insert(args.end(), {"--threads", std::to_string(threads)});
        if (cache == "cold") args.push_back("--cold");
        if (rf.pages != "system") args.insert(args.end(), {"--pages", rf.pages});
        r.command = command_text(args);
        const auto t = measure([&] { kc::compress_into<float>(s, p, xv, ov, 0, opt, &ws); }, x.p, x.n, threads,
                               rf.reps, rf.seconds, cache == "cold", [] {}, &kb::fma_peak_sample<float>, out.p, out.n);
        finish_row(r, t, static_cast<double>(x.n * sizeof(float)));
        if (peer && cache == "warm") peer(r, s, p, xv, kvphase::matrix_view<float>(out.p, cost.entries, cost.out_dim));
        rows.push_back(r);
        if (!quiet) printer.update(++done, total);
      }
    }
  }
  printer.finish();
  return rows;
}

// ---- attention -----------------------------------------------------------------------------------

struct attention_flags {
  index_t context = 32768, dim = 128, queries = 256, window = 128;
  index_t top_k = 512, indexer_heads = 4, indexer_dim = 64;
  index_t select_top_n = 16, select_block = 64;
  std::string arch = "native";  ///< the SIMD path the calls run: "native" (compiled) or "avx2"
};

/// The arch names --arch takes in this build: "native" always; "avx2" where the fma3<avx2> path
/// is compiled (an AVX-512 build compiles it beside its own; on an AVX2 build it is the native one).
std::vector<std::string> attention_arches() {
#if XSIMD_WITH_FMA3_AVX2
  return {"native", "avx2"};
#else
  return {"native"};
#endif
}

void add_attention_flags(CLI::App& app, attention_flags& a) {
  cl::add_int(app, "--context", a.context, 2, index_t(1) << 26, "raw tokens N");
  cl::add_int(app, "--dim", a.dim, 1, 4096, "key and value width d = dv");
  cl::add_int(app, "--queries", a.queries, 1, index_t(1) << 20, "queries: the last M positions (decode rows: 1)");
  cl::add_int(app, "--raw-window", a.window, 0, index_t(1) << 20, "raw sliding window (tokens)");
  cl::add_int(app, "--topk", a.top_k, 1, index_t(1) << 20, "entries the CSA indexer keeps");
  cl::add_int(app, "--indexer-heads", a.indexer_heads, 1, 64, "CSA indexer heads H");
  cl::add_int(app, "--indexer-dim", a.indexer_dim, 1, 1024, "CSA indexer width dI");
  cl::add_int(app, "--select-blocks", a.select_top_n, 3, 4096, "NSA selected blocks per query (initial and 2 local included)");
  cl::add_int(app, "--select-block", a.select_block, 1, 4096, "NSA selection block size (tokens)");
  app.add_option("--arch", a.arch,
                 "SIMD path of the attention calls and of the FMA peak they are measured against: native (the "
                 "compiled one) or avx2 (the fma3<avx2> kernels of an AVX-512 build, against the AVX2 peak "
                 "measured in the same run)")
      ->check(CLI::IsMember(attention_arches()));
}

template <class Arch>
std::vector<row> run_attention_on(const kc::operator_spec& op, const attention_flags& a, const run_flags& rf,
                                  const std::vector<std::string>& base_args, bool quiet) {
  using matrix = kvphase::matrix_t<float>;
  const kc::chunk_grid grid = op.grid;
  const index_t N = a.context, d = a.dim;
  kvphase::require(a.queries <= N, "queries", a.queries, "must be <= --context");
  const index_t E = grid.num_visible(N - 1);
  kvphase::require(E >= 1, "context", N, "too short for one compressed entry");
  std::mt19937 gen(static_cast<std::uint32_t>(rf.seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randn = [&](index_t r, index_t c) {
    matrix m(r, c);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = nd(gen);
    return m;
  };
  const matrix K = randn(N, d), V = randn(N, d), Kc = randn(E, d), Vc = randn(E, d);
  const matrix Qall = randn(a.queries, d);
  const matrix QI = randn(a.queries, a.indexer_heads * a.indexer_dim), HW = randn(a.queries, a.indexer_heads);
  const matrix KI = randn(E, a.indexer_dim);
  struct variant {
    std::string name, kind;
    index_t M;
    bool topk, nsa;
  };
  const std::vector<variant> vars{{"compressed+window", "joint", a.queries, false, false},
                                  {"topk", "csa_indexer+joint", a.queries, true, false},
                                  {"nsa", "gated_branches", a.queries, false, true},
                                  {"decode", "joint", 1, false, false}};
  std::vector<std::string> caches{"warm"};
  if (rf.cold) caches.push_back("cold");
  cl::progress_printer printer(program);
  const std::int64_t total = static_cast<std::int64_t>(vars.size() * rf.threads.size() * caches.size());
  std::int64_t done = 0;
  std::vector<row> rows;
  for (const auto& v : vars) {
    const index_t M = v.M;
    const matrix Q = Qall.bottomRows(M);
    std::vector<index_t> pos(static_cast<std::size_t>(M));
    for (index_t i = 0; i < M; ++i) pos[static_cast<std::size_t>(i)] = N - M + i;
    matrix O(M, d);
    att::compressed_call shape{.grid = grid, .tokens = N, .queries = M, .window = a.window, .d = d, .dv = d};
    if (v.topk) {
      shape.top_k = a.top_k;
      shape.indexer_heads = a.indexer_heads;
      shape.indexer_dim = a.indexer_dim;
    }
    if (v.nsa) {
      shape.select_top_n = a.select_top_n;
      shape.select_block = a.select_block;
    }
    const att::call_cost cost = att::compressed_cost(shape);
    // NSA: block importances from compression probabilities (random rows on the simplex)
    matrix P;
    if (v.nsa) {
      P = randn(M, E).array().exp().matrix();
      for (index_t i = 0; i < M; ++i) P.row(i) /= P.row(i).sum();
    }
    for (index_t T : rf.threads) {
      const int threads = static_cast<int>(T);
      att::compressed_params prm{.window = a.window, .attn = {.threads = threads}};
      if (v.nsa) {
        prm.combine = att::combine_mode::gated;
        prm.select_block = a.select_block;
      }
      const att::indexer_params ip{.heads = a.indexer_heads, .top_k = a.top_k, .threads = threads};
      const att::block_select_params bp{.block = a.select_block, .top_n = a.select_top_n, .threads = threads};
      auto job = [&] {
        if (v.topk) {
          const auto sel = att::csa_select<float, Arch>(QI.bottomRows(M), HW.bottomRows(M), KI, grid, pos, ip);
          att::compressed_selection<float> cs{.entries = &sel};
          att::compressed_attention<float, Arch>(Q, pos, Kc, Vc, grid, K, V, prm, O, cs);
        } else if (v.nsa) {
          const auto blocks = att::nsa_select<float>(P, grid, pos, bp);
          att::compressed_selection<float> cs{.blocks = &blocks};
          att::compressed_attention<float, Arch>(Q, pos, Kc, Vc, grid, K, V, prm, O, cs);
        } else {
          att::compressed_attention<float, Arch>(Q, pos, Kc, Vc, grid, K, V, prm, O);
        }
        kb::keep(O(0, 0));
      };
      // probe: reading the keys and values once (K then V halves of one buffer of their size)
      buffer probe(static_cast<std::size_t>(cost.bytes / sizeof(float)), threads, rf.pages);
      for (const auto& cache : caches) {
        row r{.level = "attention", .name = v.name, .kind = v.kind, .tokens = N, .dim = d, .out_dim = d,
              .threads = threads, .cache = cache};
        r.bytes = cost.bytes;
        r.read_bytes = cost.bytes - static_cast<double>(M * d * sizeof(float));  // all but O
        r.flops = cost.flops;
        std::vector<std::string> args{"attention"};
        args.insert(args.end(), base_args.begin(), base_args.end());
        args.insert(args.end(), {"--threads", std::to_string(threads)});
        if (cache == "cold") args.push_back("--cold");
        if (rf.pages != "system") args.insert(args.end(), {"--pages", rf.pages});
        r.command = command_text(args);
        const auto t = measure(job, probe.p, probe.n, threads, rf.reps, rf.seconds, cache == "cold", [] {},
                               &kb::fma_peak_sample<float, Arch>);
        finish_row(r, t, static_cast<double>(probe.n * sizeof(float)));
        rows.push_back(r);
        if (!quiet) printer.update(++done, total);
      }
    }
  }
  printer.finish();
  return rows;
}

/// The name of the path `--arch` selects (printed and recorded in the configuration).
std::string attention_arch_name(const std::string& arch) {
#if XSIMD_WITH_FMA3_AVX2
  if (arch == "avx2") return xsimd::fma3<xsimd::avx2>::name();
#endif
  return kb::isa_name();
}

std::vector<row> run_attention(const kc::operator_spec& op, const attention_flags& a, const run_flags& rf,
                               const std::vector<std::string>& base_args, bool quiet) {
#if XSIMD_WITH_FMA3_AVX2
  if (a.arch == "avx2") return run_attention_on<xsimd::fma3<xsimd::avx2>>(op, a, rf, base_args, quiet);
#endif
  return run_attention_on<kvphase::simd::default_arch>(op, a, rf, base_args, quiet);
}

// ---- trial ---------------------------------------------------------------------------------------

/// A sweep configuration from JSON text: a sweep_config object, or a kvphase-sweep JSON output
/// (its provenance.config, the members that are not sweep_config fields dropped).
sim::sweep_config read_sweep_config(const std::string& text, const std::string& source) {
  auto j = io::parse_json_as<io::ordered_json>(text, source);
  if (j.is_object() && j.contains("provenance")) {
    kvphase::require(j["provenance"].is_object() && j["provenance"].contains("config"), source + ": provenance.config",
                     "(absent)", "a kvphase-sweep JSON output records its configuration there");
    io::ordered_json cfg = j["provenance"]["config"];
    const auto known = io::fields_to_json(sim::sweep_config{});
    io::ordered_json keep = io::ordered_json::object();
    for (auto it = cfg.begin(); it != cfg.end(); ++it)
      if (known.contains(it.key())) keep[it.key()] = it.value();
    j = keep;
  }
  sim::sweep_config c;
  io::fields_from_json(j, c, "config");
  c.validate();
  return c;
}

/// Normals the needle task draws per trial on the exact engines (as benchmarks/bench_sweep.cpp
/// counts them): the query key (⌈d/32⌉ blocks of 32) and the noise keys (key engine) or the N
/// scores (score engine). Nullopt for another task or the general path.
std::optional<double> normals_per_trial(const sim::sweep_config& c) {
  const auto* t = c.task.get_if<kvphase::tasks::needle_config>();
  if (!t || c.general()) return std::nullopt;
  const index_t d = t->dim, N = t->context;
  const double q = static_cast<double>(((d + 31) / 32) * 32);
  if (c.resolved_engine() == sim::engine_kind::key) return q + static_cast<double>(sim::key_space_normals(N, d));
  return q + static_cast<double>(((N + 31) / 32) * 32);
}

std::vector<row> run_trial(const sim::sweep_config& c, const std::string& label, const run_flags& rf,
                           const std::vector<std::string>& base_args, bool quiet) {
  sim::trial_runner runner(c);
  kvphase::tasks::trial_outcome comp, full;
  const index_t groups = c.groups();
  index_t k = 0;
  auto one = [&] {
    runner.run(k % groups, k / groups, comp, full);
    ++k;
  };
  cl::progress_printer printer(program);
  const auto t0 = kb::clock_type::now();
  one();
  const double first = std::chrono::duration<double>(kb::clock_type::now() - t0).count();
  const index_t reps =
      rf.reps > 0 ? rf.reps : std::clamp<index_t>(static_cast<index_t>(std::ceil(rf.seconds / std::max(first, 1e-7))), 5, 100000);
  // the generator alone: the trial's normals drawn into a buffer of their size, right after
  // every trial (paired: the same load)
  const auto normals = normals_per_trial(c);
  std::vector<float> gbuf(static_cast<std::size_t>(normals.value_or(0.0)));
  sim::normal_generator g(rf.seed, 1);
  std::vector<double> times, gen;
  for (index_t r = 0; r < reps; ++r) {
    auto a = kb::clock_type::now();
    one();
    times.push_back(std::chrono::duration<double>(kb::clock_type::now() - a).count());
    if (normals) {
      a = kb::clock_type::now();
      g.fill(gbuf.data(), static_cast<index_t>(gbuf.size()));
      gen.push_back(std::chrono::duration<double>(kb::clock_type::now() - a).count());
      kb::keep(gbuf[0]);
    }
    if (!quiet) printer.update(r + 1, reps);
  }
  printer.finish();
  row rw{.level = "trial", .name = label, .kind = sim::to_string(c.resolved_engine()), .tokens = c.task.context_tokens(0)};
  rw.dim = c.dim();
  rw.out_dim = rw.dim;
  rw.reps = reps;
  rw.median_s = kb::median(times);
  rw.min_s = *std::min_element(times.begin(), times.end());
  rw.max_s = *std::max_element(times.begin(), times.end());
  if (normals) rw.gen_share = kb::median(gen) / rw.median_s;
  std::vector<std::string> args{"trial"};
  args.insert(args.end(), base_args.begin(), base_args.end());
  rw.command = command_text(args);
  return {rw};
}

// ---- --compare-torch -----------------------------------------------------------------------------

bool torch_available(const std::string& python) {
  return std::system(("'" + python + "' -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

/// The PyTorch peer script: `given` when set (it must exist), else the installed copy
/// (<prefix>/share/kvphase/compare_torch.py beside <prefix>/bin/kvphase-bench), else the source
/// tree's benchmarks/compare_torch.py this program was built from. Throws kvphase::error naming
/// --torch-script when none exists, so a missing script is not 20 failed rows.
std::string torch_script_path(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) {
    kvphase::require(fs::is_regular_file(given), "torch-script", given, "no such file");
    return given;
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "kvphase" / "compare_torch.py");
#ifdef KVPHASE_SOURCE_TORCH_SCRIPT
  candidates.emplace_back(KVPHASE_SOURCE_TORCH_SCRIPT);
#endif
  std::string tried;
  for (const auto& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c.string();
    tried += (tried.empty() ? "" : ", ") + c.string();
  }
  kvphase::fail("torch-script", "(default)", "compare_torch.py not found (looked at: " + tried + "); pass its path");
}

/// The PyTorch peer of one compress row (benchmarks/compare_torch.py compress, its CLI in the
/// file comment): the row's input and parameters go to .npy files in a temporary directory, the
/// script runs the operator as a PyTorch user writes it on the same data, with the same thread
/// count, and writes its output and its median time; the outputs must agree within the float
/// rounding bound 2·K·u·max(1, max|out|), K = the longest reduction of the pass (d, or W·d + H
/// for the MLP, plus W and c), u = 2⁻²⁴ — a worst-case bound, so a difference above it is a
/// defect of one side, not noise. The row gets "torch/kvphase <ratio>, outputs agree (…)".
struct torch_peer {
  std::string python = "python3";
  std::string script;
  index_t reps = 3;
  int disagreements = 0;

  void operator()(row& r, const kc::operator_spec& s, const kc::pool_params<float>& p, kvphase::matrix_view<float> x,
                  kvphase::matrix_view<float> out) {
    namespace fs = std::filesystem;
    if (!s.rope.inv_freq.empty() || s.rope.yarn.factor != 1.0) {
      r.torch = "torch n/a (explicit RoPE frequencies or YaRN)";
      return;
    }
    const fs::path dir = fs::temp_directory_path() / ("kvphase_bench_torch_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto save_matrix = [&](const char* name, const auto& m) {
      if (m.size()) io::write_npy<float>((dir / (std::string(name) + ".npy")).string(), kvphase::matrix_t<float>(m));
    };
    auto save_vector = [&](const char* name, const auto& v) {
      const std::int64_t shape[1] = {static_cast<std::int64_t>(v.size())};
      if (v.size())
        io::write_npy<float>((dir / (std::string(name) + ".npy")).string(),
                             std::span<const float>(v.data(), static_cast<std::size_t>(v.size())), shape, io::tensor_dtype::f32);
    };
    const std::int64_t xshape[2] = {static_cast<std::int64_t>(x.rows()), static_cast<std::int64_t>(x.cols())};
    io::write_npy<float>((dir / "x.npy").string(), std::span<const float>(x.data(), static_cast<std::size_t>(x.size())),
                         xshape, io::tensor_dtype::f32);
    save_vector("content_u", p.content_u);
    save_matrix("slot_u", p.slot_u);
    save_matrix("w_c", p.w_c);
    save_matrix("w_z", p.w_z);
    save_matrix("slot_bias_c", p.slot_bias_c);
    save_matrix("mlp_pos", p.mlp_pos);
    save_matrix("mlp_w1", p.mlp_w1);
    save_vector("mlp_b1", p.mlp_b1);
    save_matrix("mlp_w2", p.mlp_w2);
    save_vector("mlp_b2", p.mlp_b2);
    save_vector("rms_weight", p.rms_weight);
    auto list = [](const std::vector<double>& v) {
      std::string t;
      for (double w : v) t += " " + io::format_shortest(w);
      return t;
    };
    std::string cmd = "'" + python + "' '" + script + "' compress --pool " + kc::to_string(s.pool) + " --window " +
                      std::to_string(s.grid.window) + " --stride " + std::to_string(s.grid.stride) + " --origin " +
                      std::to_string(s.grid.origin) + " --convention " + kc::to_string(s.grid.convention) +
                      " --rms-eps " + io::format_shortest(s.rms_eps) + " --rope-anchor " + kc::to_string(s.rope.anchor) +
                      " --rope-theta " + io::format_shortest(s.rope.theta) + " --rope-dim " +
                      std::to_string(s.rope.rope_dim) + " --activation " + kc::to_string(p.activation) +
                      " --context " + std::to_string(x.rows()) + " --dim " + std::to_string(x.cols()) + " --head-dim " +
                      std::to_string(out.cols()) + " --threads " + std::to_string(r.threads) + " --reps " +
                      std::to_string(reps) + " --tensors '" + dir.string() + "' --out-npy '" + (dir / "torch.npy").string() +
                      "' --out '" + (dir / "torch.json").string() + "' > /dev/null";
    if (!s.slot_weights.empty()) cmd += " --slot-weights" + list(s.slot_weights);
    if (!s.slot_bias.empty()) cmd += " --slot-bias" + list(s.slot_bias);
    if (s.rmsnorm) cmd += " --rmsnorm";
    const int status = std::system(cmd.c_str());
    if (status != 0) {
      const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // -1: killed by a signal, or no shell
      r.torch = "torch failed (exit " + std::to_string(rc) + ")";
      std::cerr << program << ": --compare-torch: `" << cmd << "` failed (exit " << rc << ")\n";
      ++disagreements;
      fs::remove_all(dir);
      return;
    }
    const auto res = io::parse_json((io::read_text_file((dir / "torch.json").string())), "compare_torch.py output");
    const double torch_s = io::json_number(res.at("results").at(0).at("median_s"), "compare_torch.py median_s", 0.0,
                                           std::numeric_limits<double>::infinity());
    const io::npy_file tout((dir / "torch.npy").string());
    const auto tv = tout.values<float>();
    double diff = std::numeric_limits<double>::infinity(), scale = 1.0;
    if (tv.size() == static_cast<std::size_t>(out.size())) {
      diff = 0.0;
      for (index_t e = 0; e < out.rows(); ++e)
        for (index_t k = 0; k < out.cols(); ++k) {
          const double a = out(e, k), b = tv[static_cast<std::size_t>(e * out.cols() + k)];
          diff = std::max(diff, std::abs(a - b));
          scale = std::max(scale, std::abs(a));
        }
    }
    const double W = static_cast<double>(s.grid.window), d = static_cast<double>(x.cols());
    const double K = (s.pool == kc::pool_kind::mlp ? W * d + static_cast<double>(p.mlp_w1.cols()) : d) + W +
                     static_cast<double>(out.cols());
    const double tol = 2.0 * K * 0x1p-24 * scale;
    const bool agree = diff <= tol;
    if (!agree) ++disagreements;
    r.torch = "torch/kvphase " + fixed(torch_s / r.median_s, 2) + (agree ? ", outputs agree" : ", outputs DIFFER") +
              " (max |diff| " + io::format_shortest(diff) + ", bound " + io::format_shortest(tol) + ")";
    fs::remove_all(dir);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmarks of compression operators, attention calls and sweep trials, each against its bound "
               "measured in the same process.",
               program};
  app.require_subcommand(1);
  // compress
  auto* sc = app.add_subcommand("compress", "time compression operators (kvphase-sweep's operator flags)");
  cl::operator_flags opf;
  shape_flags shape;
  run_flags rf_c;
  std::string study;
  bool all = false, torch = false, require_torch = false;
  std::string torch_script;  // empty: found (torch_script_path)
  std::string torch_python = "python3";
  index_t torch_reps = 3;
  int torch_disagreements = 0;
  cl::add_operator_flags(*sc, opf);
  add_shape_flags(*sc, shape);
  add_run_flags(*sc, rf_c);
  sc->add_option("--study", study, "study file (JSON, docs/scale-out.md): one operator per unit (its flags)");
  sc->add_flag("--all", all, "every preset and every pool kind (max and fixed weights on W = 8, S = 4)");
  sc->add_flag("--compare-torch", torch, "also time the PyTorch peer (benchmarks/compare_torch.py) when torch imports");
  sc->add_flag("--require-torch", require_torch, "with --compare-torch: a missing torch is an error (exit 2)");
  sc->add_option("--torch-script", torch_script,
                 "the PyTorch peer script (default: the installed share/kvphase/compare_torch.py beside this "
                 "program, else the source tree's benchmarks/compare_torch.py)");
  sc->add_option("--python", torch_python, "the Python interpreter that has torch (Debian: /usr/bin/python3)")
      ->capture_default_str();
  cl::add_int(*sc, "--torch-reps", torch_reps, 1, 1000,
              "timed PyTorch calls per row after one warm-up (on generic BLAS a real-shape call takes minutes)");
  // attention
  auto* sa = app.add_subcommand("attention", "time attention calls: compressed + window, top-k, NSA, decode");
  cl::operator_flags opa;
  attention_flags af;
  run_flags rf_a;
  cl::add_operator_flags(*sa, opa);
  add_attention_flags(*sa, af);
  add_run_flags(*sa, rf_a);
  // trial
  auto* st = app.add_subcommand("trial", "time one trial of a sweep configuration, with the generator's share");
  std::string config;
  run_flags rf_t;
  st->add_option("--config", config, "sweep configuration: a sweep_config JSON object or a kvphase-sweep JSON output "
                                     "(default: needle, N = 8192, d = 64, W = S = 4 mean)");
  add_run_flags(*st, rf_t);
  if (const auto status = cl::parse(app, argc, argv, program)) return *status;

  // the flags given after the subcommand, for the rows' commands
  std::vector<std::string> given;
  for (int a = 2; a < argc; ++a) given.emplace_back(argv[a]);
  return cl::run(program, [&] {
    std::vector<row> rows;
    nlohmann::json cfg = nlohmann::json::object();
    const run_flags* rf = nullptr;
    for (const run_flags* f : {&rf_c, &rf_a, &rf_t}) {
      if (!f->csv.empty()) cl::check_writable_file(f->csv, "csv");
      if (!f->json.empty()) cl::check_writable_file(f->json, "json");
    }
    if (sc->parsed()) {
      rf = &rf_c;
      std::vector<compress_job> jobs;
      kvphase::require(!(all && !study.empty()), "all", "given", "excludes --study (one list of operators)");
      if (all) {
        for (const auto& [label, args] : all_jobs()) {
          jobs.push_back(parse_job(label, args, shape));
          jobs.back().head_dim_if_projected = true;
        }
      } else if (!study.empty()) {
        const auto s = io::parse_study(io::read_text_file(study), study);
        for (std::int64_t k = 0; k < s.units(); ++k) {
          std::vector<std::string> args;
          for (const auto& f : s.unit_flags(k)) {
            args.push_back("--" + f.key);
            if (f.value) args.push_back(*f.value);
          }
          jobs.push_back(parse_job(s.unit_label(k), args, shape));
        }
      } else {
        std::vector<std::string> args;  // the operator flags as given
        for (const auto& a : given)
          if (a != "--cold") args.push_back(a);
        compress_job j{.label = opf.pool.empty() ? opf.preset : opf.preset + "/" + opf.pool, .op = opf, .shape = shape};
        // the row's command is rebuilt from the job: keep the operator flags only
        for (std::size_t i = 0; i < args.size(); ++i) {
          const std::string& a = args[i];
          const bool shape_or_run = a == "--context" || a == "--dim" || a == "--head-dim" || a == "--threads" ||
                                    a == "--reps" || a == "--seconds" || a == "--csv" || a == "--json" ||
                                    a == "--seed" || a == "--torch-script" || a == "--python" || a == "--mlp-hidden" ||
                                    a == "--torch-reps";
          if (shape_or_run) {
            ++i;
            continue;
          }
          if (a == "--quiet" || a == "-q" || a == "--compare-torch" || a == "--require-torch") continue;
          j.args.push_back(a);
        }
        if (shape.mlp_hidden > 0) j.args.insert(j.args.end(), {"--mlp-hidden", std::to_string(shape.mlp_hidden)});
        jobs.push_back(j);
      }
      torch_peer peer{.python = torch_python, .script = torch_script, .reps = torch_reps};
      compress_peer hook;
      if (torch || require_torch) {
        if (!torch_script.empty()) torch_script_path(torch_script);  // a given path must exist, torch or not
        if (torch_available(torch_python)) {
          peer.script = torch_script_path(torch_script);
          hook = std::ref(peer);
        } else {
          const std::string msg = "PyTorch is not importable by " + torch_python + " (apt-get install -y python3-torch, or "
                                  "scripts/setup.sh --with-torch; --python names the interpreter): no PyTorch comparison made";
          kvphase::require(!require_torch, "require-torch", "given", msg);
          std::cerr << program << ": --compare-torch: " << msg << "\n";
        }
      }
      rows = run_compress(jobs, *rf, rf->quiet, hook);
      torch_disagreements = peer.disagreements;
      if (peer.disagreements > 0)
        std::cerr << program << ": --compare-torch: " << peer.disagreements
                  << " row(s) where PyTorch failed or the outputs differ beyond the rounding bound (column torch)\n";
      cfg["subcommand"] = "compress";
    } else if (sa->parsed()) {
      rf = &rf_a;
      const kc::operator_spec op = cl::make_operator(opa);
      std::vector<std::string> args;
      for (std::size_t i = 0; i < given.size(); ++i) {
        if (given[i] == "--threads" || given[i] == "--csv" || given[i] == "--json" || given[i] == "--reps") {
          ++i;
          continue;
        }
        if (given[i] == "--cold" || given[i] == "--quiet" || given[i] == "-q") continue;
        args.push_back(given[i]);
      }
      rows = run_attention(op, af, *rf, args, rf->quiet);
      cfg["subcommand"] = "attention";
      cfg["arch"] = attention_arch_name(af.arch);
      cfg["grid"] = io::fields_to_json(op.grid);
    } else {
      rf = &rf_t;
      sim::sweep_config c;
      std::string label = "needle-mean";
      if (!config.empty()) {
        c = read_sweep_config(io::read_text_file(config), config);
        label = config;
      } else {
        c.task = kvphase::tasks::needle_config{.context = 8192, .dim = 64};
        c.op = {.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean, .name = "mean"};
        c.compute_mass = false;
        c.validate();
      }
      kvphase::require(rf->threads.size() == 1 && rf->threads[0] == 1, "threads", rf->threads.size(),
                       "a trial runs on one thread (give --threads 1 or nothing)");
      std::vector<std::string> args;
      if (!config.empty()) args = {"--config", config};
      rows = run_trial(c, label, *rf, args, rf->quiet);
      cfg["subcommand"] = "trial";
      cfg["sweep_config"] = io::fields_to_json(c);
    }
    print_table(rows, std::cout);
    const std::string isa = cfg.contains("arch") ? cfg["arch"].get<std::string>() : std::string(kb::isa_name());
    std::cout << "# " << isa << "; frac = bound time / median time, the bound (read bandwidth or FMA peak) "
                 "measured in this process beside each row; cpu_frac: the same per CPU-second of the process "
                 "(steadier when the machine is shared); rw_frac (compress): the bound of all the row's bytes, read "
                 "and written, at the rate of a probe that reads the input and writes the output once beside each "
                 "repetition (the read bound leaves the writes out)\n";
    write_outputs(rows, *rf, cfg, argc, argv);
    return torch_disagreements > 0 ? 1 : 0;  // a PyTorch peer that failed or disagrees is a finding
  });
}

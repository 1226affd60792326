// Hostile values at the API boundary: sizes whose products would overflow, indices out of range,
// sums that overflow, and the shared command-line value parsing. Every case must end in a
// kvphase::error naming the parameter (never a wrap, a crash or a silent default).
#include <catch2/catch.hpp>

#include <kvphase/attention/compressed.hpp>
#include <kvphase/compress/grid.hpp>
#include <kvphase/compress/pool.hpp>
#include <kvphase/compress/spec.hpp>
#include <kvphase/core/checked.hpp>
#include <kvphase/core/error.hpp>
#include <kvphase/sim/shard.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/tasks/kv_pairs.hpp>
#include <kvphase/tasks/needle.hpp>
#include <kvphase/tasks/padding.hpp>
#include <kvphase/theory/gaussian.hpp>
#include <kvphase/theory/padding.hpp>
#include <kvphase/train/model.hpp>
#include <kvphase/train/trainer.hpp>

#include "../examples/cli_common.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using kvphase::index_t;
using Catch::Contains;
namespace compress = kvphase::compress;
namespace tasks = kvphase::tasks;
namespace sim = kvphase::sim;
namespace cli = kvphase::cli;

namespace {
constexpr index_t big = index_t(1) << 62;  // 2 * big overflows index_t
constexpr index_t i64max = std::numeric_limits<index_t>::max();
}  // namespace

TEST_CASE("checked arithmetic computes or throws naming the parameter", "[core][hostile]") {
  CHECK(kvphase::checked_add<index_t>(3, 4, "x") == 7);
  CHECK(kvphase::checked_mul<index_t>(-3, 4, "x") == -12);
  CHECK(kvphase::checked_sub<index_t>(3, 4, "x") == -1);
  CHECK(kvphase::checked_mul<index_t>(index_t(1) << 31, index_t(1) << 31, "x") == index_t(1) << 62);
  CHECK_THROWS_WITH(kvphase::checked_add(big, big, "pairs * span"),
                    Contains("pairs * span = 4611686018427387904 + 4611686018427387904: overflows 63-bit"));
  CHECK_THROWS_AS(kvphase::checked_mul(big, index_t(2), "n"), kvphase::error);
  CHECK_THROWS_AS(kvphase::checked_sub(std::numeric_limits<index_t>::min(), index_t(1), "n"), kvphase::error);
  CHECK_THROWS_AS(kvphase::checked_mul<std::uint64_t>(std::uint64_t(1) << 32, std::uint64_t(1) << 32, "n"),
                  kvphase::error);
  CHECK(kvphase::checked_elements(kvphase::limits::max_tokens, kvphase::limits::max_dim, "N * d") ==
        kvphase::limits::max_elements);
  CHECK_THROWS_WITH(kvphase::checked_elements(kvphase::limits::max_tokens + 1, kvphase::limits::max_dim, "N * d"),
                    Contains("N * d"));
  CHECK_THROWS_AS(kvphase::checked_elements(-1, 4, "N * d"), kvphase::error);
  CHECK_THROWS_AS(kvphase::checked_elements(big, big, "N * d"), kvphase::error);
}

TEST_CASE("kv-pairs spans whose product overflows are rejected by validate", "[core][hostile]") {
  // the reproducer: --pairs 2 --key-span 2^62 --value-span 2^62 --context 1024 (pair span 2^63
  // wrapped negative, the context check passed and the layout crashed)
  tasks::kv_pairs_config c{.context = 1024, .pairs = 2, .key_span = big, .value_span = big};
  CHECK_THROWS_WITH(c.validate(8), Contains("key_span = 4611686018427387904"));
  c.key_span = kvphase::limits::max_tokens;
  c.value_span = kvphase::limits::max_tokens;
  c.pairs = kvphase::limits::max_tokens;  // 2^30 * 2^31 = 2^61 fits and is far above the context
  CHECK_THROWS_WITH(c.validate(8), Contains("context = 1024: must hold"));
  c = {.context = 1024, .pairs = 2, .key_span = 2, .value_span = 2};
  CHECK_THROWS_WITH(c.validate(0), Contains("modulus = 0"));
  CHECK_THROWS_WITH(c.validate(i64max), Contains("modulus"));
  c.pairs = i64max;
  CHECK_THROWS_WITH(c.validate(8), Contains("pairs"));
  c = {.context = -5, .pairs = 2, .key_span = 2, .value_span = 2};
  CHECK_THROWS_WITH(c.validate(8), Contains("context = -5"));
  c = {.context = 1024, .pairs = 100, .key_span = 2, .value_span = 2};
  CHECK_NOTHROW(c.validate(8));
  // an unvalidated config cannot overflow in max_gap (computed in double)
  const tasks::kv_pairs_config bad{.context = 1024, .pairs = 2, .key_span = big, .value_span = big};
  CHECK(bad.max_gap(8) == 0);

  // the layout checks its own preconditions
  kvphase::rng::philox_stream s(1, 2);
  tasks::kv_layout L;
  CHECK_THROWS_WITH(tasks::kv_pairs_layout(c, 8, 8, 0, s, L), Contains("group = 8"));
  CHECK_THROWS_WITH(tasks::kv_pairs_layout(c, 8, -1, 0, s, L), Contains("group = -1"));
  CHECK_THROWS_AS(tasks::kv_pairs_layout(bad, 8, 0, 0, s, L), kvphase::error);
  CHECK_NOTHROW(tasks::kv_pairs_layout(c, 8, 7, 0, s, L));

  // and through the sweep configuration the CLI builds
  sim::sweep_config sc;
  sc.task = tasks::kv_pairs_config{.context = 1024, .pairs = 2, .key_span = big, .value_span = big};
  sc.modulus = 8;
  CHECK_THROWS_WITH(sc.validate(), Contains("key_span"));
  sc.task = tasks::kv_pairs_config{.context = 1024, .dim = 8, .pairs = 10, .key_span = 2, .value_span = 2};
  sc.window = i64max;
  CHECK_THROWS_WITH(sc.validate(), Contains("window = 9223372036854775807"));
}

TEST_CASE("needle and padding bounds hold before any sum is formed", "[core][hostile]") {
  tasks::needle_config n{.context = 1024, .key_span = 1, .value_span = i64max};
  CHECK_THROWS_WITH(n.validate(), Contains("value_span = 9223372036854775807"));
  n = {.context = 1024, .key_span = i64max, .value_span = 1};
  CHECK_THROWS_WITH(n.validate(), Contains("key_span = 9223372036854775807"));
  n = {.context = index_t(1) << 31};
  CHECK_THROWS_WITH(n.validate(), Contains("context = 2147483648"));
  n = {.context = 1024};
  kvphase::rng::philox_stream s(1, 2);
  CHECK_THROWS_WITH(tasks::needle_position(n, 4, 4, 0, 0, s), Contains("group = 4"));
  CHECK_THROWS_WITH(tasks::needle_position(n, 4, 0, 0, -1, s), Contains("reserve = -1"));
  CHECK_THROWS_WITH(tasks::needle_position(n, 4, 0, 0, i64max, s), Contains("reserve"));
  CHECK_THROWS_WITH(tasks::needle_position(n, 0, 0, 0, 0, s), Contains("modulus = 0"));
  const index_t p = tasks::needle_position(n, 4, 3, 0, 16, s);
  CHECK(kvphase::floor_mod(p, 4) == 3);

  tasks::padding_config pc{};
  pc.offset_a = i64max;  // offset + span overflowed before the bound
  CHECK_THROWS_WITH(pc.validate(), Contains("offset_a = 9223372036854775807"));
  pc = {};
  pc.span_b = i64max;
  CHECK_THROWS_WITH(pc.validate(), Contains("span_b"));
  pc = {};
  pc.pad_min = i64max;
  CHECK_THROWS_WITH(pc.validate(), Contains("pad_min"));
  pc = {};
  CHECK_NOTHROW(pc.validate());
}

TEST_CASE("chunk grid and operator spec check sizes, indices and the weight sum", "[core][hostile]") {
  compress::chunk_grid g{.window = i64max, .stride = i64max};
  CHECK_THROWS_WITH(g.validate(), Contains("stride = 9223372036854775807"));
  g = {.window = 4, .stride = 4, .origin = i64max};
  CHECK_THROWS_WITH(g.validate(), Contains("origin"));

  compress::operator_spec op{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean};
  // linear_slot_weights: the mask must leave a slot
  CHECK_THROWS_WITH(op.linear_slot_weights(-1), Contains("masked = -1"));
  CHECK_THROWS_WITH(op.linear_slot_weights(4), Contains("masked = 4"));
  CHECK(op.linear_slot_weights(3)[3] == 1.0);
  // head_grid: h in [0, heads)
  CHECK_THROWS_WITH(op.head_grid(1), Contains("head = 1: must be in [0, heads = 1)"));
  CHECK_THROWS_WITH(op.head_grid(-1), Contains("head = -1"));
  op.heads = 2;
  op.head_offsets = {0, 2};
  CHECK(op.head_grid(1).origin == 2);
  CHECK_THROWS_AS(op.head_grid(2), kvphase::error);
  op.head_offsets = {0, i64max};
  CHECK_THROWS_WITH(op.validate(), Contains("head_offsets[1]"));
  op.heads = i64max;
  op.head_offsets.clear();
  CHECK_THROWS_WITH(op.validate(), Contains("heads = 9223372036854775807"));

  // weights whose sum overflows to infinity would renormalise to an all-zero pool
  compress::operator_spec w{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::weights,
                            .slot_weights = {1e308, 1e308, 1e308, 1e308}};
  CHECK_THROWS_WITH(w.validate(), Contains("sum(slot_weights) = inf: must be finite"));
  w.slot_weights = {1e307, 1e307, 1e307, 1e307};
  CHECK_NOTHROW(w.validate());
  CHECK(w.linear_slot_weights(0)[0] == Approx(0.25));
  w.slot_weights = {1, 2};  // unvalidated: the size is checked before indexing
  CHECK_THROWS_WITH(w.linear_slot_weights(0), Contains("slot_weights.size() = 2"));
  compress::operator_spec mx{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::max};
  CHECK_THROWS_WITH(mx.linear_slot_weights(0), Contains("pool = max"));

  // the pool's entry points bound the input width
  compress::operator_spec mean{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean};
  CHECK_THROWS_WITH(compress::make_params<float>(mean, i64max), Contains("d = 9223372036854775807"));
}

TEST_CASE("shard ranges check their shard and trial count", "[core][hostile]") {
  CHECK_THROWS_WITH((sim::shard_spec{0, 0}.range(10)), Contains("shard = 0/0"));
  CHECK_THROWS_WITH((sim::shard_spec{2, 2}.range(10)), Contains("shard = 2/2"));
  CHECK_THROWS_WITH((sim::shard_spec{0, 2}.range(-1)), Contains("trials = -1"));
  const auto r = sim::shard_spec{1, 3}.range(10);
  CHECK(r.first == 3);
  CHECK(r.second == 6);
}

TEST_CASE("theory models bound the values they add", "[core][hostile]") {
  kvphase::theory::needle_model m{.context = 1024, .dim = 8, .key_span = 2};
  m.value_span = i64max;  // key_span + value_span overflowed before the bound
  CHECK_THROWS_WITH(m.validate(), Contains("value_span = 9223372036854775807"));
  kvphase::theory::padding_model pm{};
  pm.offset_correct = i64max;
  CHECK_THROWS_WITH(pm.validate(), Contains("offset_correct"));
  pm = {};
  pm.periods = i64max;
  CHECK_THROWS_WITH(pm.validate(), Contains("periods"));
  CHECK_THROWS_WITH(kvphase::theory::window_compressed_only_distance(i64max, 1), Contains("raw_window"));
  CHECK_THROWS_WITH(kvphase::theory::sweep_window_invariant_distance(i64max, 1), Contains("raw_window"));
  CHECK(kvphase::theory::window_compressed_only_distance(16, 2) == 17);
}

TEST_CASE("attention settings bound windows and selected blocks", "[core][hostile]") {
  kvphase::attention::compressed_params p;
  p.window = i64max;
  CHECK_THROWS_WITH(p.validate(), Contains("window = 9223372036854775807"));
  p = {};
  p.select_block = 0;
  CHECK_THROWS_WITH(p.validate(), Contains("select_block = 0"));
}

TEST_CASE("training helpers check indices and sizes once per call", "[core][hostile]") {
  namespace train = kvphase::train;
  train::position_counts pc;
  pc.hits = {1, 2, 3};
  pc.trials = {4, 4, 4};
  CHECK_THROWS_WITH(train::by_phase(pc, i64max), Contains("period = 9223372036854775807"));
  CHECK_THROWS_WITH(train::by_phase(pc, 0), Contains("period = 0"));
  CHECK(train::by_phase(pc, 2).hits == std::vector<std::int64_t>{4, 2});
  pc.trials.pop_back();
  CHECK_THROWS_WITH(train::by_phase(pc, 2), Contains("position_counts.trials.size() = 2"));

  const train::retrieval_task task{.n_context = 16, .raw_window = 4, .n_keys = 8, .key_dim = 4, .n_values = 4};
  train::model_config cfg{};
  cfg.spec.heads = 1;
  cfg.head_dim = 4;
  const auto params = train::init_params(task, cfg);
  const kvphase::matrixd x = kvphase::matrixd::Zero(task.n_context, task.model_dim());
  const kvphase::vectord xq = kvphase::vectord::Zero(task.model_dim());
  CHECK_NOTHROW(train::forward_backward(task, cfg, params, x, xq, 3));
  CHECK_THROWS_WITH(train::forward_backward(task, cfg, params, x, xq, 4), Contains("answer = 4"));
  CHECK_THROWS_WITH(train::forward_backward(task, cfg, params, x, xq, -1), Contains("answer = -1"));
  const kvphase::matrixd short_x = kvphase::matrixd::Zero(task.n_context - 1, task.model_dim());
  CHECK_THROWS_WITH(train::forward_backward(task, cfg, params, short_x, xq, 0), Contains("x.rows() = 15"));
}

// ---- the shared command-line value parsing (examples/cli_common.hpp) ---------------------------

TEST_CASE("strict integers: decimal, in range, nothing else", "[core][hostile][cli]") {
  CHECK(cli::strict_integer<index_t>("42") == 42);
  CHECK(cli::strict_integer<index_t>("-5") == -5);
  CHECK(cli::strict_integer<index_t>("010") == 10);  // decimal, never octal
  CHECK(cli::strict_integer<std::uint64_t>("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
  for (const char* bad : {"", "1x", "0x10", " 5", "5 ", "+5", "1e3", "1.0", "99999999999999999999", "-"}) {
    INFO(bad);
    CHECK_FALSE(cli::strict_integer<index_t>(bad).has_value());
  }
  CHECK_FALSE(cli::strict_integer<std::uint64_t>("-1").has_value());  // CLI11 2.1 wraps it to 2^64 - 1
  CHECK_FALSE(cli::strict_integer<std::uint64_t>("18446744073709551616").has_value());
  CHECK_FALSE(cli::strict_integer<int>("4294967296").has_value());
  CHECK(cli::parse_integer<index_t>("7", "trials", 1, 10) == 7);
  CHECK_THROWS_WITH(cli::parse_integer<index_t>("0", "trials", 1, 10),
                    Contains("trials = 0: must be a decimal integer in [1, 10]"));
}

TEST_CASE("strict reals: finite unless allowed, whole text, no NaN", "[core][hostile][cli]") {
  CHECK(cli::strict_real("0.5") == 0.5);
  CHECK(cli::strict_real("-1e-3") == -1e-3);
  for (const char* bad : {"", "abc", "1x", "0.5 ", " 0.5", "1e999", "0x1p3", "1,5"}) {
    INFO(bad);
    CHECK_FALSE(cli::strict_real(bad).has_value());
  }
  CHECK_THROWS_WITH(cli::parse_real("nan", "logit-scale", 0.0), Contains("logit-scale = nan: must be a finite number"));
  CHECK_THROWS_WITH(cli::parse_real("inf", "logit-scale", 0.0), Contains("logit-scale = inf"));
  CHECK(std::isinf(cli::parse_real("inf", "snr", 0.0, INFINITY, true)));
  CHECK_THROWS_AS(cli::parse_real("nan", "snr", 0.0, INFINITY, true), kvphase::error);
  CHECK_THROWS_WITH(cli::parse_real("-1", "noise", 0.0), Contains("noise = -1: must be a finite number >= 0"));
  CHECK(cli::parse_real_list("3,0,-1.5", "gate-bias") == std::vector<double>{3, 0, -1.5});
  CHECK_THROWS_WITH(cli::parse_real_list("abc,0,0,0", "gate-bias"), Contains("gate-bias[0] = abc"));
  CHECK_THROWS_WITH(cli::parse_real_list("1,,0", "gate-bias"), Contains("gate-bias[1] = "));
  CHECK_THROWS_WITH(cli::parse_real_list("1,", "gate-bias"), Contains("gate-bias[1] = "));
  CHECK_THROWS_WITH(cli::parse_real_list("", "gate-bias"), Contains("not empty"));
  CHECK(cli::parse_choice("nsa", "convention", {"v4", "nsa"}) == "nsa");
  CHECK_THROWS_WITH(cli::parse_choice("foo", "convention", {"v4", "nsa"}),
                    Contains("convention = foo: must be one of v4, nsa"));
}

TEST_CASE("option helpers reject what CLI11 alone would accept", "[core][hostile][cli]") {
  struct result {
    int status = -1;  // -1: parsed
    index_t context = 0;
    std::uint64_t seed = 1;
    double scale = -1;
    std::vector<double> bias;
  };
  const auto run = [](std::vector<std::string> args) {
    result r;
    CLI::App app{"test"};
    cli::add_int<index_t>(app, "--context", r.context, 0, index_t(1) << 30, "N");
    cli::add_u64(app, "--seed", r.seed, "seed");
    cli::add_real(app, "--logit-scale", r.scale, 0.0, 1e6, "beta");
    cli::add_reals(app, "--gate-bias", r.bias, -1e3, 1e3, "b");
    std::vector<std::string> store{"prog"};
    store.insert(store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : store) argv.push_back(s.data());
    std::ostringstream sink;
    auto* old = std::cerr.rdbuf(sink.rdbuf());
    const auto st = cli::parse(app, static_cast<int>(argv.size()), argv.data(), "test");
    std::cerr.rdbuf(old);
    if (st) r.status = *st;
    return r;
  };
  const result ok = run({"--context", "010", "--seed", "18446744073709551615", "--logit-scale", "0.25",
                         "--gate-bias", "3,0,-1"});
  CHECK(ok.status == -1);
  CHECK(ok.context == 10);
  CHECK(ok.seed == std::numeric_limits<std::uint64_t>::max());
  CHECK(ok.scale == 0.25);
  CHECK(ok.bias == std::vector<double>{3, 0, -1});
  CHECK(run({}).context == 0);  // the default (a sentinel) is untouched
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--context", "-5"},
                                                               {"--context", "1x"},
                                                               {"--context", "0x10"},
                                                               {"--context", "2147483648"},
                                                               {"--seed", "-1"},
                                                               {"--seed", "18446744073709551616"},
                                                               {"--logit-scale", "nan"},
                                                               {"--logit-scale", "inf"},
                                                               {"--logit-scale", "-1"},
                                                               {"--gate-bias", "3,abc,0"},
                                                               {"--gate-bias", "3,nan,0"}}) {
    INFO(bad[0] + " " + bad[1]);
    CHECK(run(bad).status == 2);
  }
}

TEST_CASE("output paths are checked before a run", "[core][hostile][cli]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "kvphase_test_core_hostile";
  fs::remove_all(dir);
  CHECK_NOTHROW(cli::check_writable_dir((dir / "a" / "b").string(), "out"));
  CHECK(fs::is_directory(dir / "a" / "b"));
  CHECK(fs::is_empty(dir / "a" / "b"));  // the probe file is removed
  CHECK_NOTHROW(cli::check_writable_file((dir / "x.csv").string(), "out"));
  CHECK_FALSE(fs::exists(dir / "x.csv"));  // a new file is not left behind
  {
    std::ofstream f(dir / "keep.csv");
    f << "data";
  }
  CHECK_NOTHROW(cli::check_writable_file((dir / "keep.csv").string(), "out"));
  CHECK(fs::file_size(dir / "keep.csv") == 4);  // an existing file is not truncated
  CHECK_THROWS_WITH(cli::check_writable_file((dir / "no" / "x.csv").string(), "out"), Contains("does not exist"));
  CHECK_THROWS_WITH(cli::check_writable_file(dir.string(), "out"), Contains("is a directory"));
  CHECK_THROWS_WITH(cli::check_writable_dir((dir / "keep.csv").string(), "out"), Contains("out = "));
  CHECK_THROWS_WITH(cli::check_writable_dir("/proc/kvphase_no_such_dir", "out"),
                    Contains("out = /proc/kvphase_no_such_dir"));
  CHECK_THROWS_AS(cli::check_writable_file("/proc/x", "out"), kvphase::error);
  CHECK(cli::run("test", [] { return 0; }) == 0);
  std::ostringstream sink;
  auto* old = std::cerr.rdbuf(sink.rdbuf());
  const int st = cli::run("test", []() -> int { throw std::runtime_error("disk on fire"); });
  std::cerr.rdbuf(old);
  CHECK(st == 2);
  CHECK(sink.str() == "test: disk on fire\n");
  fs::remove_all(dir);
}

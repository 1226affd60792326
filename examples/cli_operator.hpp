#pragma once
// The compression-operator flags shared by kvphase-sweep and kvphase-bench (--preset, --window,
// --stride, --pool, --gate-bias, --slot-weights, --rope..., --heads, ...): one declaration, one
// mapping to a compress::operator_spec, so both programs read a command line the same way.
// (A header of its own beside cli_common.hpp, so programs without operator flags do not parse
// the compressor's headers.)
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/compress/presets.hpp>
#include <kvphase/core/error.hpp>

namespace kvphase::cli {

/// The operator flags' values (unset optionals: the preset's value).
struct operator_flags {
  std::string preset = "mean";
  std::optional<index_t> window;  // chunk window W (default: the preset's)
  std::optional<index_t> stride;  // S (default: the preset's)
  std::string rope;               // none, start, end, centre (default: the preset's)
  std::optional<double> rope_theta;
  std::optional<index_t> rope_dim;
  std::optional<index_t> origin;  // grid origin φ0
  std::optional<index_t> heads;   // compression heads
  std::string head_offsets;       // "auto" (h·S/H) or a,b,... (default: all 0)
  bool uniform_pool = false;      // ablation: mean pooling on the same grid (keeps RMSNorm and RoPE)
  std::string pool;               // override of the pool kind (mean, slot-gate, weights, max, identity)
  std::vector<double> gate_bias;
  std::vector<double> slot_weights;
  double gate_content_std = 0.0;
};

/// Names --preset accepts.
inline const std::vector<std::string>& operator_preset_names() {
  static const std::vector<std::string> n{"full", "mean", "gated", "v4-csa", "v4-hca", "v41", "nsa", "paper-ref"};
  return n;
}

/// Declares the operator flags on app.
inline void add_operator_flags(CLI::App& app, operator_flags& o) {
  auto opt_int = [&](const char* name, std::optional<index_t>& v, index_t lo, index_t hi, const std::string& help) {
    return app.add_option(name, v, help)->transform(integer<index_t>(lo, hi));
  };
  app.add_option("--preset", o.preset, "operator: full, mean, gated, v4-csa, v4-hca, v41, nsa, paper-ref")
      ->check(CLI::IsMember(operator_preset_names()))
      ->capture_default_str();
  opt_int("--window", o.window, 1, index_t(1) << 20, "chunk window W: tokens pooled per entry (default: the preset's)");
  opt_int("--stride", o.stride, 1, index_t(1) << 20, "stride S between entries (default: the preset's; mean/gated: 4)");
  app.add_option("--rope", o.rope, "RoPE anchor of the entries: none, start, end, centre (default: the preset's); "
                                   "the general path also rotates the query at N and the raw keys at their positions")
      ->check(CLI::IsMember({"none", "start", "end", "centre"}));
  app.add_option("--rope-theta", o.rope_theta, "RoPE base theta (default: the preset's)")
      ->transform(real(1.0000001, 1e12));
  opt_int("--rope-dim", o.rope_dim, 0, 65536, "rotated channels, the last ones of the keys (default: the preset's, "
                                              "v4 presets 64: must be <= --dim)");
  opt_int("--origin", o.origin, -(index_t(1) << 39), index_t(1) << 39, "grid origin phi0 of the operator");
  opt_int("--heads", o.heads, 1, 4096, "compression heads (each on its own grid; general path)");
  app.add_option("--head-offsets", o.head_offsets, "per-head grid offsets a,b,... or auto (head h: h*S/H)");
  app.add_flag("--uniform-pool", o.uniform_pool,
               "ablation: uniform (mean) pooling of the same grid, RMSNorm and RoPE kept");
  app.add_option("--pool", o.pool, "override the pool kind: mean, slot-gate, weights, max, identity");
  add_reals(app, "--gate-bias", o.gate_bias, -1e3, 1e3, "slot-gate bias b0,b1,... (one per slot; gated)");
  add_reals(app, "--slot-weights", o.slot_weights, 0, 1e300, "fixed slot weights w0,w1,... (--pool weights)");
  add_real(app, "--gate-content-std", o.gate_content_std, 0, 1e6,
           "std of random per-token content logits of the gate (gated)");
}

/// The compressed operator of a preset name (with the flag overrides applied). Throws
/// kvphase::error naming the flag for an unknown name or a value the operator rejects.
inline compress::operator_spec make_operator(const operator_flags& o) {
  compress::operator_spec op;
  const std::string& p = o.preset;
  if (p == "full") {
    op = compress::full();
  } else if (p == "mean") {
    op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean, .name = "mean"};
  } else if (p == "gated") {
    op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .name = "gated"};
  } else if (p == "v4-csa" || p == "v4-hca" || p == "v41" || p == "nsa" || p == "paper-ref") {
    std::string lib = p;
    for (auto& ch : lib)
      if (ch == '-') ch = '_';
    op = compress::preset(lib == "paper_ref" ? "paper_ref" : lib);
  } else {
    kvphase::fail("preset", p, "must be one of full, mean, gated, v4-csa, v4-hca, v41, nsa, paper-ref");
  }
  if (o.stride) {
    op.grid.stride = *o.stride;
    if (!o.window && op.grid.window < *o.stride) op.grid.window = *o.stride;
    if (!o.window && (p == "mean" || p == "gated")) op.grid.window = *o.stride;
  }
  if (o.window) op.grid.window = *o.window;
  if (!o.rope.empty()) compress::parse(o.rope, op.rope.anchor);
  if (!o.pool.empty()) {
    if (o.pool == "mean") op.pool = compress::pool_kind::mean;
    else if (o.pool == "slot-gate" || o.pool == "gated") op.pool = compress::pool_kind::slot_gate;
    else if (o.pool == "weights") op.pool = compress::pool_kind::weights;
    else if (o.pool == "max") op.pool = compress::pool_kind::max;
    else if (o.pool == "identity") op.pool = compress::pool_kind::identity;
    else kvphase::fail("pool", o.pool, "must be mean, slot-gate, weights, max or identity");
  }
  if (op.pool == compress::pool_kind::slot_gate) {
    if (!o.gate_bias.empty()) op.slot_bias = o.gate_bias;
    else if (op.slot_bias.size() != static_cast<std::size_t>(op.grid.window)) op.slot_bias.assign(static_cast<std::size_t>(op.grid.window), 0.0);
    if (p == "gated" || !o.pool.empty()) op.content_std = o.gate_content_std;
    kvphase::require(static_cast<index_t>(op.slot_bias.size()) == op.grid.window, "gate-bias", op.slot_bias.size(),
                     "needs one value per slot of the window (" + std::to_string(op.grid.window) + ")");
  } else {
    kvphase::require(o.gate_bias.empty(), "gate-bias", o.gate_bias.size(), "applies only to gated pools (--preset gated)");
    kvphase::require(o.gate_content_std == 0.0, "gate-content-std", o.gate_content_std,
                     "applies only to gated pools (--preset gated)");
  }
  if (op.pool == compress::pool_kind::weights) op.slot_weights = o.slot_weights;
  if (o.rope_theta) op.rope.theta = *o.rope_theta;
  if (o.rope_dim) op.rope.rope_dim = *o.rope_dim;
  if (o.origin) op.grid.origin = *o.origin;
  if (o.uniform_pool) {  // the same grid pooled uniformly: learned pooling removed, the rest kept
    op.pool = compress::pool_kind::mean;
    op.slot_bias.clear();
    op.slot_weights.clear();
    op.content_std = 0.0;
    op.name += op.name.empty() ? "uniform" : "+uniform";
  }
  if (o.heads) op.heads = *o.heads;
  if (o.head_offsets == "auto") {  // head h shifted by h·S/H
    op.head_offsets.clear();
    for (index_t h = 0; h < op.heads; ++h) op.head_offsets.push_back(h * op.grid.stride / op.heads);
  } else if (!o.head_offsets.empty()) {
    op.head_offsets.clear();
    std::size_t i = 0;
    while (i <= o.head_offsets.size()) {
      const std::size_t j = std::min(o.head_offsets.find(',', i), o.head_offsets.size());
      const std::string item = o.head_offsets.substr(i, j - i);
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      kvphase::require(!item.empty() && end == item.c_str() + item.size() && errno == 0 && v > -(1LL << 40) &&
                           v < (1LL << 40),
                       "head-offsets", item, "must be auto or decimal integers a,b,... within ±2^40");
      op.head_offsets.push_back(static_cast<index_t>(v));
      i = j + 1;
    }
  }
  op.validate();
  return op;
}

}  // namespace kvphase::cli

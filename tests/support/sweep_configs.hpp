#pragma once
// Small sweep configurations shared by the sim tests (determinism, general path, golden values).
// The golden values in tests/data/golden_sim.json are recorded from these: changing one changes
// them (regenerate as tests/test_sim_golden.cpp says).
#include <initializer_list>
#include <string_view>

#include <catch2/catch.hpp>

#include <kvphase/compress/spec.hpp>
#include <kvphase/sim/sweep.hpp>

namespace kvphase::test {

/// op with its RoPE anchor set to none (the general key-space path applies no RoPE and refuses
/// a spec that asks for it).
inline compress::operator_spec without_rope(compress::operator_spec op) {
  op.rope.anchor = compress::rope_anchor::none;
  return op;
}

/// The task named t ("needle", "kv-pairs" or "padding") from the three configs.
inline tasks::any_task pick_task(std::string_view t, const tasks::needle_config& n, const tasks::kv_pairs_config& k,
                                 const tasks::padding_config& p) {
  if (t == "needle") return n;
  if (t == "kv-pairs") return k;
  if (t == "padding") return p;
  fail("task", std::string(t), "must be needle, kv-pairs or padding");
}

/// Every task on a linear engine: a slot gate with content logits (W = 8, S = 4) and a raw window
/// of 8 tokens, d = 16, 24 trials per group.
inline sim::sweep_config small_sweep(std::string_view t, sim::engine_kind e) {
  sim::sweep_config c;
  c.task = pick_task(t, {.context = 512, .dim = 16, .key_span = 2, .value_span = 1},
                     {.context = 2048, .dim = 16, .pairs = 200, .codes = 16},
                     {.code_length = 96, .dim = 16, .pad_min = 5, .lengths = 8, .offset_a = 10, .offset_b = 31});
  c.engine = e;
  c.trials = 24;
  c.seed = 42;
  c.op = {.grid = {.window = 8, .stride = 4}, .pool = compress::pool_kind::slot_gate,
          .slot_bias = {0, 1, 2, 0, 0, 1, 0, 0}, .content_std = 0.5};
  c.window = 8;
  return c;
}

/// A task on the general key-space path for operator op (parameters from params_seed 5), modulus
/// 8 (padding: its 8 lengths), a raw window of 4 tokens, d = 16, 12 trials per group. The general path applies no RoPE:
/// op's rope anchor is set to none here, explicitly (a spec with RoPE is refused by the sweep).
inline sim::sweep_config small_general_sweep(std::string_view t, compress::operator_spec op) {
  sim::sweep_config c;
  c.task = pick_task(t, {.context = 512, .dim = 16, .key_span = 2, .value_span = 1},
                     {.context = 2048, .dim = 16, .pairs = 200, .codes = 16},
                     {.code_length = 160, .dim = 16, .pad_min = 5, .lengths = 8, .offset_a = 10, .offset_b = 61});
  c.op = without_rope(op);
  c.trials = 12;
  c.seed = 17;
  c.params_seed = 5;
  c.modulus = t == "padding" ? 0 : 8;  // padding: the groups are the lengths
  c.window = 4;
  return c;
}


/// Runs c with 1 and 2 threads and split into n shards for every n of `splits` (shard i on
/// 1 + i % 2 threads, counts added), and checks every count is bitwise the one-thread run's.
/// Returns the one-thread result.
inline sim::sweep_result check_threads_and_shards(sim::sweep_config c, std::initializer_list<index_t> splits) {
  c.shard = {};
  c.threads = 1;
  const auto one = sim::run_sweep(c);
  c.threads = 2;
  const auto two = sim::run_sweep(c);
  CHECK(one.compressed == two.compressed);
  CHECK(one.full == two.full);
  for (index_t n : splits) {
    INFO("shards " << n);
    std::vector<sim::group_stats> comp(one.compressed.size()), full(one.full.size());
    for (index_t i = 0; i < n; ++i) {
      c.shard = {i, n};
      c.threads = static_cast<int>(1 + i % 2);
      const auto part = sim::run_sweep(c);
      for (std::size_t g = 0; g < comp.size(); ++g) {
        comp[g] += part.compressed[g];
        full[g] += part.full[g];
      }
    }
    CHECK(comp == one.compressed);
    CHECK(full == one.full);
  }
  return one;
}

}  // namespace kvphase::test

#pragma once
// Small sweep configurations shared by the sim tests (determinism, general path, golden values).
// The golden values in tests/data/golden_sim.json are recorded from these: changing one changes
// them (regenerate as tests/test_sim_golden.cpp says).
#include <kvphase/compress/spec.hpp>
#include <kvphase/sim/sweep.hpp>

namespace kvphase::test {

/// Every task on a linear engine: a slot gate with content logits (W = 8, S = 4) and a raw window
/// of 8 tokens, d = 16, 24 trials per group.
inline sim::sweep_config small_sweep(sim::task_kind t, sim::engine_kind e) {
  sim::sweep_config c;
  c.task = t;
  c.engine = e;
  c.trials = 24;
  c.seed = 42;
  c.needle = {.context = 512, .dim = 16, .key_span = 2, .value_span = 1};
  c.kv_pairs = {.context = 2048, .dim = 16, .pairs = 200, .codes = 16};
  c.padding = {.code_length = 96, .dim = 16, .pad_min = 5, .lengths = 8, .offset_a = 10, .offset_b = 31};
  c.op = {.grid = {.window = 8, .stride = 4}, .pool = compress::pool_kind::slot_gate,
          .slot_bias = {0, 1, 2, 0, 0, 1, 0, 0}, .content_std = 0.5};
  c.window = 8;
  return c;
}

/// A task on the general key-space path for operator op (parameters from params_seed 5), modulus
/// 8, a raw window of 4 tokens, d = 16, 12 trials per group.
inline sim::sweep_config small_general_sweep(sim::task_kind t, const compress::operator_spec& op) {
  sim::sweep_config c;
  c.task = t;
  c.op = op;
  c.trials = 12;
  c.seed = 17;
  c.params_seed = 5;
  c.needle = {.context = 512, .dim = 16, .key_span = 2, .value_span = 1};
  c.kv_pairs = {.context = 2048, .dim = 16, .pairs = 200, .codes = 16};
  c.padding = {.code_length = 160, .dim = 16, .pad_min = 5, .lengths = 8, .offset_a = 10, .offset_b = 61};
  c.modulus = 8;
  c.window = 4;
  return c;
}

}  // namespace kvphase::test

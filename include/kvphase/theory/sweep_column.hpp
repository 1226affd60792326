#pragma once
/// \file theory/sweep_column.hpp
/// The theory column of a sweep: per group, the predicted recall of the compressed model and of
/// the full-attention control, for the same operator and task config — or, when the theory does
/// not cover the configuration, covered = false and the reason (never an error). Every program
/// that prints a theory column calls this one function.
///
/// Coverage: the operator must be covered (compress::capabilities(op).theory_covered, or a slot
/// gate with content logits for the needle, theory/gates.hpp), and the task must be one the
/// theory models: needle (theory/predict.hpp: P(hit) per phase group) and padding
/// (theory/padding_task.hpp: P(answer A preferred) per padding length). Other tasks (kv-pairs,
/// registered tasks) are not covered, with that reason.

#include <string>
#include <vector>

#include "kvphase/compress/spec.hpp"
#include "kvphase/sim/sweep_config.hpp"
#include "kvphase/theory/padding_task.hpp"
#include "kvphase/theory/predict.hpp"

namespace kvphase::theory {

/// Predicted per-group values of the compressed and full models (see the file comment).
struct sweep_column {
  bool covered = false;
  std::string reason;                 ///< why not covered ("" when covered)
  std::vector<double> compressed;     ///< per group
  std::vector<double> full;           ///< per group
};

[[nodiscard]] inline sweep_column predict_sweep_column(const sim::sweep_config& c) {
  sweep_column out;
  if (const auto* needle = c.task.get_if<tasks::needle_config>()) {
    const auto p = predict_sweep_needle(c.op, *needle, c.window, c.groups());
    out.covered = p.covered;
    out.reason = p.reason;
    if (p.covered) {
      out.compressed = p.compressed;
      out.full = p.full;
    }
    return out;
  }
  if (const auto* pad = c.task.get_if<tasks::padding_config>()) {
    const auto pc = predict_padding(c.op, *pad, c.window);
    const auto pf = predict_padding(compress::full(), *pad, 0);
    out.covered = pc.covered && pf.covered;
    out.reason = pc.covered ? pf.reason : pc.reason;
    if (out.covered) {
      for (const auto& l : pc.lengths) out.compressed.push_back(l.p_a);
      for (const auto& l : pf.lengths) out.full.push_back(l.p_a);
    } else if (out.reason.empty()) {
      out.reason = "not every padding length is covered";
    }
    return out;
  }
  out.reason = "the theory covers the needle and padding tasks, not " + std::string(c.task.name());
  return out;
}

}  // namespace kvphase::theory

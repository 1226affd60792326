#pragma once
/// \file theory/heads.hpp
/// Several heads, each with its own linear pool (slot preference) or grid offset, over the same
/// keys (derivation: theory/heads.md). A trial is a hit when ANY head's argmax entry holds the
/// target. Approximation: heads' hit events independent given the phase,
///   recall_any(φ) ≈ 1 − Π_h (1 − R_h(φ)),
/// which ignores the correlation the shared keys induce (measured in tests/test_theory_approx.cpp).
/// Ablating head h gives the predicted drop recall_any(φ) − recall_any without h (φ): large where
/// h is the only head that retrieves well — phase specialisation.

#include <vector>

#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

struct heads_prediction {
  std::vector<std::vector<double>> per_head;      ///< [head][phase]
  std::vector<double> any;                        ///< [phase]
  std::vector<std::vector<double>> ablation_drop; ///< [head][phase]
};

/// Phases are those of heads[0]'s grid; every head must have the same stride.
inline heads_prediction predict_heads(const std::vector<compress::operator_spec>& heads, const needle_model& m,
                                      const recall_options& opt = {}) {
  require(!heads.empty(), "heads.size()", heads.size(), "must be >= 1");
  m.validate();
  opt.validate();
  const index_t S = heads.front().grid.stride;
  for (std::size_t h = 0; h < heads.size(); ++h) {
    heads[h].validate();
    require(heads[h].grid.stride == S, "heads[" + std::to_string(h) + "].grid.stride", heads[h].grid.stride,
            "every head needs the same stride");
    const auto why = outside_theory_reason(heads[h], m);
    require(why.empty(), "heads[" + std::to_string(h) + "]", why, "is outside the Gaussian theory");
  }
  heads_prediction out;
  const std::size_t H = heads.size();
  out.per_head.assign(H, std::vector<double>(static_cast<std::size_t>(S)));
  for (index_t ph = 0; ph < S; ++ph) {
    const index_t pos = target_position_for_phase(heads.front().grid, m, ph);
    for (std::size_t h = 0; h < H; ++h)
      out.per_head[h][static_cast<std::size_t>(ph)] = predict_recall_at(heads[h], m, ph, pos, opt).recall;
  }
  auto any_without = [&](std::size_t skip, index_t ph) {
    double miss = 1;
    for (std::size_t h = 0; h < H; ++h)
      if (h != skip) miss *= 1.0 - out.per_head[h][static_cast<std::size_t>(ph)];
    return 1.0 - miss;
  };
  out.ablation_drop.assign(H, std::vector<double>(static_cast<std::size_t>(S)));
  for (index_t ph = 0; ph < S; ++ph) {
    out.any.push_back(any_without(H, ph));
    for (std::size_t h = 0; h < H; ++h)
      out.ablation_drop[h][static_cast<std::size_t>(ph)] = out.any.back() - any_without(h, ph);
  }
  return out;
}

}  // namespace kvphase::theory

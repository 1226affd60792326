#pragma once
/// \file train/adam.hpp
/// Adam optimiser (Kingma & Ba) over model_params, with bias-corrected moments.
///   m ← β1 m + (1−β1) g,  v ← β2 v + (1−β2) g²,  θ ← θ − lr · m̂ / (√v̂ + ε),
///   m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t).

#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/train/model.hpp"

namespace kvphase::train {

struct adam_config {
  double lr = 3e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  void validate() const {
    require(std::isfinite(lr) && lr > 0.0, "adam.lr", lr, "must be finite and > 0");
    require(beta1 >= 0.0 && beta1 < 1.0, "adam.beta1", beta1, "must be in [0, 1)");
    require(beta2 >= 0.0 && beta2 < 1.0, "adam.beta2", beta2, "must be in [0, 1)");
    require(std::isfinite(eps) && eps > 0.0, "adam.eps", eps, "must be finite and > 0");
  }
  friend std::ostream& operator<<(std::ostream& os, const adam_config& a) {
    return os << "adam{lr=" << a.lr << ", beta1=" << a.beta1 << ", beta2=" << a.beta2 << ", eps=" << a.eps << "}";
  }
};

class adam {
 public:
  adam(const model_params& shape, index_t heads_per_layer, adam_config cfg)
      : cfg_(cfg), heads_per_layer_(heads_per_layer), m_(shape.zeros_like()), v_(shape.zeros_like()) {
    cfg_.validate();
  }

  /// One update of `params` with gradient `grad` (same shapes).
  void step(model_params& params, model_params& grad) {
    ++t_;
    const double c1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
    const double c2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
    std::vector<double*> g, m, v;
    grad.for_each_tensor(heads_per_layer_, [&](const std::string&, double* p, index_t) { g.push_back(p); });
    m_.for_each_tensor(heads_per_layer_, [&](const std::string&, double* p, index_t) { m.push_back(p); });
    v_.for_each_tensor(heads_per_layer_, [&](const std::string&, double* p, index_t) { v.push_back(p); });
    std::size_t k = 0;
    params.for_each_tensor(heads_per_layer_, [&](const std::string&, double* p, index_t n) {
      double* gk = g[k];
      double* mk = m[k];
      double* vk = v[k];
      for (index_t i = 0; i < n; ++i) {
        mk[i] = cfg_.beta1 * mk[i] + (1.0 - cfg_.beta1) * gk[i];
        vk[i] = cfg_.beta2 * vk[i] + (1.0 - cfg_.beta2) * gk[i] * gk[i];
        p[i] -= cfg_.lr * (mk[i] / c1) / (std::sqrt(vk[i] / c2) + cfg_.eps);
      }
      ++k;
    });
  }

  [[nodiscard]] std::int64_t steps() const noexcept { return t_; }

 private:
  adam_config cfg_;
  index_t heads_per_layer_;
  model_params m_, v_;
  std::int64_t t_ = 0;
};

}  // namespace kvphase::train

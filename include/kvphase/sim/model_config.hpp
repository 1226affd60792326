#pragma once
/// \file sim/model_config.hpp
/// The attention model a sweep measures around its compressor (sweep_config::model): which
/// attention::model runs the query over the compressed entries, and which compressor parameters.
///
///  | kind       | items of the query (one joint softmax unless said)                              |
///  |------------|---------------------------------------------------------------------------------|
///  | compressed | every visible compressed entry + the raw window (+ sink): the default; with a   |
///  |            | V4-HCA operator this is V4's HCA layer                                          |
///  | csa        | the Lightning-indexer top-k of the visible entries + the raw window + sink:     |
///  |            | V4's CSA layer (the indexer scores the entries with the query, one index head)  |
///  | nsa        | compressed entries, the raw tokens of the top select_blocks blocks (of          |
///  |            | select_block tokens, chosen from the compressed branch's probabilities, the     |
///  |            | initial and two local blocks always in), and the raw window: three softmaxes    |
///  |            | mixed by the gates gate_cmp, gate_slc, gate_win                                 |
/// Several compression heads (the operator's heads and head_offsets) each run the model on their
/// own grid; their outputs are averaged and a needle trial is a hit when any head's best item
/// holds the target (theory/heads.hpp).
///
/// Parameters (compress/presets.hpp params_kind): random (make_preset_params with params_seed),
/// identity, planted-early / -middle / -late (slot-bias profiles of strength params_strength), or
/// file (params_file through compress::load_params_file).
///
/// The default (compressed, no sink, random parameters) is the model of the exact engines; any
/// other value needs the general key-space path (sweep_config::general()).

#include <cmath>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "kvphase/compress/params_kind.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::sim {

enum class model_kind { compressed, csa, nsa };

inline const char* to_string(model_kind k) noexcept {
  switch (k) {
    case model_kind::compressed: return "compressed";
    case model_kind::csa: return "csa";
    case model_kind::nsa: return "nsa";
  }
  return "?";
}
inline void parse(std::string_view s, model_kind& out) {
  if (s == "compressed") out = model_kind::compressed;
  else if (s == "csa" || s == "v4-csa") out = model_kind::csa;
  else if (s == "nsa") out = model_kind::nsa;
  else fail("model.kind", std::string(s), "must be compressed, csa or nsa");
}

struct model_config {
  model_kind kind = model_kind::compressed;
  index_t top_k = 512;          ///< csa: entries the indexer keeps
  index_t select_blocks = 16;   ///< nsa: selected blocks (initial and two local included)
  index_t select_block = 64;    ///< nsa: tokens per selection block
  double gate_cmp = 1.0 / 3, gate_slc = 1.0 / 3, gate_win = 1.0 / 3;  ///< nsa: branch gates
  bool sink = false;            ///< a sink of logit 0 in every softmax (DeepSeek-V4)
  compress::params_kind params = compress::params_kind::random;
  double params_strength = 2.0; ///< κ of the planted slot-bias profiles
  std::string params_file{};    ///< params = file

  [[nodiscard]] bool is_default() const { return *this == model_config{}; }

  void validate() const {
    require(top_k >= 1 && top_k <= limits::max_tokens, "model.top_k", top_k, "must be in [1, 2^30]");
    require(select_block >= 1 && select_block <= limits::max_tokens, "model.select_block", select_block,
            "must be in [1, 2^30]");
    require(select_blocks >= 3 && select_blocks <= limits::max_tokens, "model.select_blocks", select_blocks,
            "must be in [3, 2^30] (the initial and two local blocks are always selected)");
    for (auto [n, g] : {std::pair{"model.gate_cmp", gate_cmp}, std::pair{"model.gate_slc", gate_slc},
                        std::pair{"model.gate_win", gate_win}})
      require(std::isfinite(g) && g >= 0 && g <= 1, n, g, "must be in [0, 1]");
    require(std::isfinite(params_strength) && params_strength >= 0 && params_strength <= 100, "model.params_strength",
            params_strength, "must be in [0, 100]");
    require(params == compress::params_kind::file || params_file.empty(), "model.params_file", params_file,
            "applies only to params file");
  }

  template <class V>
  void visit_fields(V&& v) {
    v("kind", kind);
    v("top_k", top_k);
    v("select_blocks", select_blocks);
    v("select_block", select_block);
    v("gate_cmp", gate_cmp);
    v("gate_slc", gate_slc);
    v("gate_win", gate_win);
    v("sink", sink);
    v("params", params);
    v("params_strength", params_strength);
    v("params_file", params_file);
  }
  friend std::ostream& operator<<(std::ostream& os, const model_config& m) { return fields::print(os, m, "model_config"); }
  friend bool operator==(const model_config& a, const model_config& b) { return fields::equal(a, b); }
};

}  // namespace kvphase::sim

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
///  |            | V4's CSA layer. Indexer: indexer.dim = 0 scores the compressed entries with the |
///  |            | query itself (one index head); indexer.dim = dI > 0 is V4's own indexer (below) |
///  | nsa        | compressed entries, the raw tokens of the top select_blocks blocks (of          |
///  |            | select_block tokens, chosen from the compressed branch's probabilities, the     |
///  |            | initial and two local blocks always in), and the raw window: three softmaxes    |
///  |            | mixed by the gates gate_cmp, gate_slc, gate_win (per head: head_gates; per      |
///  |            | query around them: gate_std)                                                    |
/// V4's indexer (csa, indexer.dim = dI > 0): the index keys are their own compressor (the
/// operator's kind and grid at width dI, parameters of the `params` kind drawn for dI, RoPE at
/// the anchor as the operator's) over the projected token rows P_K·x_t; H = indexer.heads index
/// queries q_h = P_h·q (rotated at the query position); entry e scores
/// Σ_h ReLU(q_h·k_e / √dI) / H and the top_k are kept. P_K has entries N(0, 1/dI), so
/// (P_K a)·(P_K b) is a·b on average (a random projection to dI channels); P_h = ρ·P_K +
/// √(1 − ρ²)·R_h with R_h independent and ρ = indexer.align: ρ = 1 is an indexer whose heads
/// all agree with the keys' projection (its only error is the projection to dI channels), ρ = 0
/// an untrained one (its scores carry no information about q·k). They stand in for the trained
/// projections of a real model.
///
/// Several compression heads (the operator's heads and head_offsets) each run the model on their
/// own grid; their outputs are averaged and a needle trial is a hit when any head's best item
/// holds the target (theory/heads.hpp).
///
/// Parameters (compress/presets.hpp params_kind): random (make_preset_params with params_seed),
/// identity, planted-early / -middle / -late (slot-bias profiles of strength params_strength), or
/// file (params_file through compress::load_params_file).
///
/// Layer schedule (`layers`, comma-separated; empty = one `op` layer): `op` (the sweep's operator
/// and parameters, attended by `kind` above), `window` (the last `window` raw tokens only),
/// `full` (causal attention over every earlier token), or an operator preset name (v4_hca or
/// v4-hca, v4_csa, v41, nsa, paper_ref: that compressor, with the sweep's RoPE setting and its own
/// parameters of the `params` kind, attended by a joint softmax with the raw window). Every layer
/// before the read layer runs on all context tokens and the query (identity projections, residual
/// stream: sim/general_model.hpp); the query's outcome is read at `read_layer` (1-based; 0 = the
/// last `op` layer), which must be an `op` layer; layers after it cannot change it and are not run.
///
/// The default (compressed, no sink, random parameters) is the model of the exact engines; any
/// other value needs the general key-space path (sweep_config::general()).

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// V4's Lightning indexer of a csa model (file comment): dim = dI (0: the query itself scores the
/// compressed entries, one head), heads = H, align = ρ.
struct indexer_config {
  index_t dim = 0;
  index_t heads = 1;
  double align = 1.0;
  void validate() const {
    require(dim >= 0 && dim <= limits::max_dim, "model.indexer.dim", dim,
            "must be in [0, 65536] (0: the query scores the compressed entries)");
    require(heads >= 1 && heads <= 256, "model.indexer.heads", heads, "must be in [1, 256]");
    require(std::isfinite(align) && align >= 0 && align <= 1, "model.indexer.align", align, "must be in [0, 1]");
    require(dim > 0 || (heads == 1 && align == 1.0), "model.indexer.dim", dim,
            "is 0: indexer heads and align apply only to a projected indexer (dim > 0)");
  }
  template <class V>
  void visit_fields(V&& v) {
    v("dim", dim);
    v("heads", heads);
    v("align", align);
  }
  friend bool operator==(const indexer_config& a, const indexer_config& b) { return fields::equal(a, b); }
};

struct model_config {
  model_kind kind = model_kind::compressed;
  index_t top_k = 512;          ///< csa: entries the indexer keeps
  indexer_config indexer{};     ///< csa: the indexer (default: the query scores the entries)
  index_t select_blocks = 16;   ///< nsa: selected blocks (initial and two local included)
  index_t select_block = 64;    ///< nsa: tokens per selection block
  double gate_cmp = 1.0 / 3, gate_slc = 1.0 / 3, gate_win = 1.0 / 3;  ///< nsa: branch gates
  /// nsa: each compression head's own gates, (cmp, slc, win) per head in head order (3 × the
  /// operator's heads values; the general model checks the count); empty = every head uses
  /// gate_cmp, gate_slc, gate_win. NSA's gates are per head; this lets heads weight the branches
  /// differently.
  std::vector<double> head_gates{};
  /// nsa: per-query gates. 0 = the constant gates above; τ > 0: query q's gate of branch b in
  /// head h is σ(logit(g_b) + w_{h,b}·q) with w_{h,b} drawn N(0, τ²/d) once per model (params
  /// seed), so the gate's logit moves by about τ between queries, as NSA computes its gates from
  /// each query (a gate of 0 or 1 stays).
  double gate_std = 0.0;
  bool sink = false;            ///< a sink of logit 0 in every softmax (DeepSeek-V4)
  compress::params_kind params = compress::params_kind::random;
  double params_strength = 2.0; ///< κ of the planted slot-bias profiles
  std::string params_file{};    ///< params = file
  std::string layers{};         ///< layer schedule (see the file comment); "" = one op layer
  index_t read_layer = 0;       ///< 1-based layer the outcome is read at; 0 = the last op layer

  [[nodiscard]] bool is_default() const { return *this == model_config{}; }

  /// The schedule's layer names (one `op` when `layers` is empty), presets spelled with '_'.
  [[nodiscard]] std::vector<std::string> layer_names() const {
    std::vector<std::string> out;
    if (layers.empty()) return {"op"};
    std::size_t a = 0;
    while (a <= layers.size()) {
      const std::size_t b = std::min(layers.find(',', a), layers.size());
      std::string n = layers.substr(a, b - a);
      for (char& c : n)
        if (c == '-') c = '_';
      out.push_back(std::move(n));
      a = b + 1;
    }
    return out;
  }
  /// Index (0-based) of the layer the outcome is read at.
  [[nodiscard]] std::size_t read_index() const {
    const auto names = layer_names();
    if (read_layer > 0) return static_cast<std::size_t>(read_layer - 1);
    std::size_t r = names.size();
    for (std::size_t l = 0; l < names.size(); ++l)
      if (names[l] == "op") r = l;
    return r;
  }

  void validate() const {
    require(top_k >= 1 && top_k <= limits::max_tokens, "model.top_k", top_k, "must be in [1, 2^30]");
    indexer.validate();
    require(indexer.dim == 0 || kind == model_kind::csa, "model.indexer.dim", indexer.dim,
            "applies only to model csa (the Lightning indexer)");
    require(indexer.dim == 0 || params != compress::params_kind::file, "model.indexer.dim", indexer.dim,
            "with params file: the file holds the operator's compressor at the token width; the indexer's compressor "
            "draws random, identity or planted parameters");
    require(select_block >= 1 && select_block <= limits::max_tokens, "model.select_block", select_block,
            "must be in [1, 2^30]");
    require(select_blocks >= 3 && select_blocks <= limits::max_tokens, "model.select_blocks", select_blocks,
            "must be in [3, 2^30] (the initial and two local blocks are always selected)");
    for (auto [n, g] : {std::pair{"model.gate_cmp", gate_cmp}, std::pair{"model.gate_slc", gate_slc},
                        std::pair{"model.gate_win", gate_win}})
      require(std::isfinite(g) && g >= 0 && g <= 1, n, g, "must be in [0, 1]");
    require(head_gates.size() % 3 == 0 && head_gates.size() <= 3 * 64, "model.head_gates", head_gates.size(),
            "values must be (cmp, slc, win) per head: a multiple of 3, at most 64 heads");
    for (double g : head_gates) require(std::isfinite(g) && g >= 0 && g <= 1, "model.head_gates", g, "every gate must be in [0, 1]");
    require(head_gates.empty() || kind == model_kind::nsa, "model.head_gates", head_gates.size(),
            "values given: head gates apply only to model nsa");
    require(std::isfinite(gate_std) && gate_std >= 0 && gate_std <= 100, "model.gate_std", gate_std, "must be in [0, 100]");
    require(gate_std == 0 || kind == model_kind::nsa, "model.gate_std", gate_std, "applies only to model nsa");
    require(std::isfinite(params_strength) && params_strength >= 0 && params_strength <= 100, "model.params_strength",
            params_strength, "must be in [0, 100]");
    require(params == compress::params_kind::file || params_file.empty(), "model.params_file", params_file,
            "applies only to params file");
    const auto names = layer_names();
    require(names.size() <= 64, "model.layers", layers, "must list at most 64 layers");
    for (const auto& n : names)
      require(n == "op" || n == "window" || n == "full" || is_layer_preset(n), "model.layers", layers,
              "layer '" + n + "' must be op, window, full or an operator preset (v4_csa, v4_hca, v41, nsa, paper_ref)");
    require(read_layer >= 0 && read_layer <= static_cast<index_t>(names.size()), "model.read_layer", read_layer,
            "must be in [0, " + std::to_string(names.size()) + "] (1-based layer; 0 = the last op layer)");
    for (const auto& n : names)
      require(params != compress::params_kind::file || !is_layer_preset(n), "model.layers", layers,
              "a preset layer ('" + n + "') draws random, identity or planted parameters; params file sets the op layers only");
    const std::size_t r = read_index();
    require(r < names.size(), "model.layers", layers, "must contain an op layer (the sweep's operator) to read");
    require(names[r] == "op", "model.read_layer", read_layer,
            "must name an op layer (layer " + std::to_string(r + 1) + " is " + names[r] + ")");
  }

  /// Whether `n` names an operator preset a schedule may use.
  [[nodiscard]] static bool is_layer_preset(std::string_view n) {
    return n == "v4_csa" || n == "v4_hca" || n == "v41" || n == "nsa" || n == "paper_ref";
  }

  template <class V>
  void visit_fields(V&& v) {
    v("kind", kind);
    v("top_k", top_k);
    v("indexer", indexer, fields::omit_default);
    v("select_blocks", select_blocks);
    v("select_block", select_block);
    v("gate_cmp", gate_cmp);
    v("gate_slc", gate_slc);
    v("gate_win", gate_win);
    v("head_gates", head_gates, fields::omit_default);
    v("gate_std", gate_std, fields::omit_default);
    v("sink", sink);
    v("params", params);
    v("params_strength", params_strength);
    v("params_file", params_file);
    v("layers", layers, fields::omit_default);
    v("read_layer", read_layer, fields::omit_default);
  }
  friend std::ostream& operator<<(std::ostream& os, const model_config& m) { return fields::print(os, m, "model_config"); }
  friend bool operator==(const model_config& a, const model_config& b) { return fields::equal(a, b); }
};

}  // namespace kvphase::sim

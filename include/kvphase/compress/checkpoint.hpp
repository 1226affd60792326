#pragma once
/// \file compress/checkpoint.hpp
/// Real compressor weights: loads one layer's DeepSeek-V4 compressor from a safetensors
/// checkpoint (io/safetensors.hpp) by tensor name into an operator_spec and pool_params.
///
/// Names (Hugging Face `deepseek_v4` layout; P = "model.layers.<L>.self_attn.compressor"):
///
/// | tensor                         | shape             | field                                   |
/// |--------------------------------|-------------------|-----------------------------------------|
/// | P.kv_proj.weight               | [k·c, D]          | params.w_c = weightᵀ (D × k·c)          |
/// | P.gate_proj.weight             | [k·c, D]          | params.w_z = weightᵀ                    |
/// | P.position_bias                | [m, k·c]          | params.slot_bias_c                      |
/// | P.kv_norm.weight               | [c]               | params.rms_weight (spec.rmsnorm = true) |
/// | P.indexer.{kv_proj,gate_proj}.weight, P.indexer.position_bias, P.indexer.kv_norm.weight | | the indexer's own compressor (always two-stream) |
/// | P.indexer.q_b_proj.weight      | [H_I·c_I, q_lora] | v4_layer::indexer_q_b (as stored)        |
/// | P.indexer.scorer.weights_proj.weight | [H_I, D]    | v4_layer::indexer_weights (as stored)    |
///
/// k = 2 (two streams, [a | b]) when position_bias has twice the kv_norm width: CSA, grid
/// W = 2m, S = m (v4 convention), pool two_stream; otherwise k = 1: HCA, W = S = m, pool
/// channel_gate. m comes from position_bias's rows (V4: 4 and 128), c from kv_norm. RoPE: the
/// "compress" rope of the config — anchor start (entry i at i·m), the last rope_dim channels,
/// θ and YaRN from v4_load_options (defaults: the published V4 config, θ = 160000, rope_dim 64,
/// YaRN factor 16 over 65536 positions, β_fast 32, β_slow 1). Block-scaled F8 weights are
/// dequantised by the reader.
///
/// Every missing tensor or inconsistent shape is a kvphase::error naming the tensor.
///
/// v4_options_from_config reads those values from the checkpoint's config.json (Hugging Face
/// DeepseekV4Config): the compress rope from rope_parameters.compress (nested form) or from
/// compress_rope_theta with a flat rope_parameters / rope_scaling (rope_type "yarn": factor,
/// original_max_position_embeddings, beta_fast, beta_slow), the rotated channels from
/// qk_rope_head_dim or head_dim × partial_rotary_factor, and rms_norm_eps.

#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/safetensors.hpp"

namespace kvphase::compress {

/// What the checkpoint does not say about a V4 compressor (the config's values).
struct v4_load_options {
  std::string layer_prefix = "model.layers.";    ///< + <layer> + module
  std::string module = ".self_attn.compressor";  ///< the compressor's module path in a layer
  double rope_theta = 160000.0;                  ///< compress rope θ
  index_t rope_dim = 64;                         ///< rotated channels (qk_rope_head_dim)
  yarn_config yarn{.factor = 16.0, .original_max_position = 65536.0, .beta_fast = 32.0, .beta_slow = 1.0};
  std::vector<double> inv_freq{};  ///< explicit inverse frequencies (replace θ and YaRN)
  double rms_eps = 1e-6;           ///< rms_norm_eps
};

/// The load options a config.json states (see the file comment); keys it lacks keep the
/// defaults. Throws kvphase::error naming the file and the key for unreadable JSON or a value of
/// the wrong type.
inline v4_load_options v4_options_from_config(const std::string& path) {
  const io::mapped_file m(path);
  const std::string_view text(reinterpret_cast<const char*>(m.bytes().data()), m.size());
  const auto j = io::parse_json_as<nlohmann::json>(text, path);
  require(j.is_object(), path, "(not an object)", "a config.json must be a JSON object");
  v4_load_options o;
  auto number = [&](const nlohmann::json& obj, const char* key, double& out, const std::string& where) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return false;
    require(it->is_number(), path + " " + where + key, io::detail::json_excerpt(*it), "must be a number");
    out = it->get<double>();
    return true;
  };
  double v = 0;
  number(j, "compress_rope_theta", o.rope_theta, "");
  number(j, "rms_norm_eps", o.rms_eps, "");
  double head_dim = 512, factor = -1;
  number(j, "head_dim", head_dim, "");
  if (number(j, "qk_rope_head_dim", v, "")) o.rope_dim = static_cast<index_t>(v);
  else if (number(j, "partial_rotary_factor", factor, "")) o.rope_dim = static_cast<index_t>(head_dim * factor);
  // the rope parameters of the compressed layers
  const nlohmann::json* rp = nullptr;
  std::string where;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    require(it->is_object(), path + " " + key, io::detail::json_excerpt(*it), "must be an object");
    const auto c = it->find("compress");
    if (c != it->end()) {
      require(c->is_object(), path + " " + key + ".compress", io::detail::json_excerpt(*c), "must be an object");
      rp = &*c;
      where = std::string(key) + ".compress.";
      number(*rp, "rope_theta", o.rope_theta, where);
      if (number(*rp, "partial_rotary_factor", factor, where)) o.rope_dim = static_cast<index_t>(head_dim * factor);
    } else {
      rp = &*it;
      where = std::string(key) + ".";
    }
    break;
  }
  o.yarn = yarn_config{};
  if (rp != nullptr) {
    std::string type = "default";
    for (const char* key : {"rope_type", "type"}) {
      const auto it = rp->find(key);
      if (it == rp->end()) continue;
      require(it->is_string(), path + " " + where + key, io::detail::json_excerpt(*it), "must be a string");
      type = it->get<std::string>();
      break;
    }
    if (type == "yarn") {
      o.yarn = yarn_config{.factor = 1.0, .original_max_position = 0.0, .beta_fast = 32.0, .beta_slow = 1.0};
      number(*rp, "factor", o.yarn.factor, where);
      number(*rp, "original_max_position_embeddings", o.yarn.original_max_position, where);
      number(*rp, "beta_fast", o.yarn.beta_fast, where);
      number(*rp, "beta_slow", o.yarn.beta_slow, where);
      o.yarn.validate();
    } else {
      require(type == "default", path + " " + where + "rope_type", type,
              "must be default or yarn for the compress rope");
    }
  }
  require(o.rope_dim >= 0 && o.rope_dim % 2 == 0, path + " rotated channels", o.rope_dim, "must be even and >= 0");
  return o;
}

/// v4_options_from_config(dir/config.json) when a checkpoint directory (or an index's or a
/// file's directory) holds one, else the defaults.
inline v4_load_options v4_options_for(const std::string& checkpoint_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(checkpoint_path);
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const fs::path cfg = dir / "config.json";
  if (fs::exists(cfg, ec)) return v4_options_from_config(cfg.string());
  return {};
}

/// One loaded compressor: its operator and its (single-head) parameters for input width d.
template <class Real>
struct loaded_compressor {
  std::string prefix;  ///< tensor-name prefix it was read from
  operator_spec spec;
  pool_params<Real> params;
  index_t d = 0;  ///< input (hidden) width
};

/// One layer's compressor and, for CSA, its Lightning indexer.
template <class Real>
struct v4_layer {
  index_t layer = 0;
  bool csa = false;  ///< two-stream (CSA) or single-stream (HCA)
  loaded_compressor<Real> compressor;
  std::optional<loaded_compressor<Real>> indexer;  ///< CSA: the indexer's own compressor
  matrix_t<Real> indexer_q_b;                      ///< [H_I·c_I, q_lora] as stored (empty if absent)
  matrix_t<Real> indexer_weights;                  ///< [H_I, D] as stored (empty if absent)
};

namespace detail {
inline std::string shape_of(const io::safetensors_checkpoint& ck, const std::string& n) {
  return io::shape_text(ck.info(n).shape);
}

template <class Real>
loaded_compressor<Real> load_compressor(const io::safetensors_checkpoint& ck, const std::string& P,
                                        const v4_load_options& o, const std::string& what) {
  auto need = [&](const std::string& n) -> std::string {
    require(ck.contains(n), what + " tensor", n, "is missing from the checkpoint");
    return n;
  };
  const std::string kv = need(P + ".kv_proj.weight"), gate = need(P + ".gate_proj.weight"),
                    bias = need(P + ".position_bias"), norm = need(P + ".kv_norm.weight");
  auto dims = [&](const std::string& n, std::size_t rank) {
    const auto& s = ck.info(n).shape;
    require(s.size() == rank, n + " shape", shape_of(ck, n), "must be " + std::to_string(rank) + "-D");
    return s;
  };
  const auto skv = dims(kv, 2), sg = dims(gate, 2), sb = dims(bias, 2), sn = dims(norm, 1);
  const index_t c = static_cast<index_t>(sn[0]);
  require(c >= 1, norm + " shape", shape_of(ck, norm), "must have at least one channel");
  const index_t width = static_cast<index_t>(skv[0]), D = static_cast<index_t>(skv[1]);
  require(width == c || width == 2 * c, kv + " shape", shape_of(ck, kv),
          "rows must be c or 2c (c = " + std::to_string(c) + " from kv_norm)");
  require(sg[0] == skv[0] && sg[1] == skv[1], gate + " shape", shape_of(ck, gate),
          "must equal kv_proj's " + shape_of(ck, kv));
  require(sb[1] == width && sb[0] >= 1, bias + " shape", shape_of(ck, bias),
          "must be [m, " + std::to_string(width) + "] (one row per slot of a block)");
  const bool two = width == 2 * c;
  const index_t m = static_cast<index_t>(sb[0]);
  loaded_compressor<Real> out;
  out.prefix = P;
  out.d = D;
  operator_spec& s = out.spec;
  s.grid = two ? chunk_grid{.window = 2 * m, .stride = m} : chunk_grid{.window = m, .stride = m};
  s.pool = two ? pool_kind::two_stream : pool_kind::channel_gate;
  s.rmsnorm = true;
  s.rms_eps = o.rms_eps;
  s.rope = rope_config{.anchor = rope_anchor::start,
                       .theta = o.rope_theta,
                       .rope_dim = o.rope_dim,
                       .inv_freq = o.inv_freq,
                       .yarn = o.inv_freq.empty() ? o.yarn : yarn_config{}};
  s.name = P;
  require(o.rope_dim <= c, "rope_dim", o.rope_dim, "must be <= the compressor width c = " + std::to_string(c));
  out.params.w_c = ck.matrix<Real>(kv).transpose();
  out.params.w_z = ck.matrix<Real>(gate).transpose();
  out.params.slot_bias_c = ck.matrix<Real>(bias);
  const auto g = ck.values<Real>(norm);
  out.params.rms_weight = Eigen::Map<const vector_t<Real>>(g.data(), static_cast<index_t>(g.size()));
  s.validate();
  out.params.validate(s, D);
  return out;
}
}  // namespace detail

/// The tensor-name prefix of layer `layer`'s compressor.
inline std::string v4_compressor_prefix(index_t layer, const v4_load_options& o = {}) {
  return o.layer_prefix + std::to_string(layer) + o.module;
}

/// Whether the checkpoint has a compressor for `layer` (window-only layers have none).
inline bool has_v4_compressor(const io::safetensors_checkpoint& ck, index_t layer, const v4_load_options& o = {}) {
  return ck.contains(v4_compressor_prefix(layer, o) + ".kv_proj.weight");
}

/// Loads layer `layer`'s compressor (and, for CSA, its indexer). Throws kvphase::error naming the
/// missing or inconsistent tensor.
template <class Real>
v4_layer<Real> load_v4_layer(const io::safetensors_checkpoint& ck, index_t layer, const v4_load_options& o = {}) {
  require(layer >= 0, "layer", layer, "must be >= 0");
  const std::string P = v4_compressor_prefix(layer, o);
  v4_layer<Real> out;
  out.layer = layer;
  out.compressor = detail::load_compressor<Real>(ck, P, o, "layer " + std::to_string(layer) + " compressor");
  out.csa = out.compressor.spec.pool == pool_kind::two_stream;
  const std::string I = P + ".indexer";
  if (ck.contains(I + ".kv_proj.weight")) {
    out.indexer = detail::load_compressor<Real>(ck, I, o, "layer " + std::to_string(layer) + " indexer");
    require(out.indexer->spec.pool == pool_kind::two_stream, I + ".position_bias shape",
            detail::shape_of(ck, I + ".position_bias"), "the indexer's compressor must be two-stream ([m, 2c])");
    require(out.indexer->d == out.compressor.d, I + ".kv_proj.weight shape",
            detail::shape_of(ck, I + ".kv_proj.weight"),
            "must read the same hidden width as the compressor (" + std::to_string(out.compressor.d) + ")");
    if (ck.contains(I + ".q_b_proj.weight")) out.indexer_q_b = ck.matrix<Real>(I + ".q_b_proj.weight");
    if (ck.contains(I + ".scorer.weights_proj.weight"))
      out.indexer_weights = ck.matrix<Real>(I + ".scorer.weights_proj.weight");
  }
  return out;
}


/// A params_loader (compress/presets.hpp) for sweeps with parameters from a file
/// (model_config::params = file): `params_file` is "PATH" or "PATH#LAYER" (layer 0 by default), a
/// safetensors checkpoint as load_v4_layer reads it (file, directory or index; config.json beside
/// it). The layer's compressor must be the sweep's operator (same pool kind, window and stride) and
/// read rows as wide as the sweep's tokens (its hidden width D = d); anything else is refused with
/// an error naming params_file, the checkpoint's value and the sweep's. Register it with
/// set_params_loader<Real>(v4_params_loader<Real>()) (kvphase-sweep does).
template <class Real>
params_loader<Real> v4_params_loader() {
  return [](const std::string& arg, const operator_spec& spec, index_t d, index_t head) -> pool_params<Real> {
    const auto [path, layer] = split_params_file(arg);
    require(head == 0, "params_file", arg, "a checkpoint layer's compressor is one compression head (head 0)");
    const io::safetensors_checkpoint ck(path);
    auto L = load_v4_layer<Real>(ck, layer, v4_options_for(path));
    const auto& c = L.compressor;
    require(c.spec.pool == spec.pool && c.spec.grid.window == spec.grid.window && c.spec.grid.stride == spec.grid.stride,
            "params_file", arg,
            "layer " + std::to_string(layer) + "'s compressor is " + std::string(to_string(c.spec.pool)) + " W = " +
                std::to_string(c.spec.grid.window) + ", S = " + std::to_string(c.spec.grid.stride) +
                ", the sweep's operator is " + std::string(to_string(spec.pool)) + " W = " +
                std::to_string(spec.grid.window) + ", S = " + std::to_string(spec.grid.stride) +
                ": choose the matching preset (v4-csa or v4-hca)");
    require(c.d == d, "params_file", arg,
            "layer " + std::to_string(layer) + " reads hidden rows of D = " + std::to_string(c.d) +
                " channels, the sweep's token rows have " + std::to_string(d) + " (key dim + value channels)");
    return std::move(L.compressor.params);
  };
}

}  // namespace kvphase::compress

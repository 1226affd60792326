#pragma once
/// \file lm/checkpoint.hpp
/// Saves an lm/model.hpp model as a safetensors checkpoint (io/safetensors.hpp) with the
/// Hugging Face deepseek_v4 tensor names, plus a config.json giving the compress RoPE, so that
/// compress::load_v4_layer (compress/checkpoint.hpp) and kvphase-inspect read every compressed
/// layer like a real model's:
///  - csa layers: model.layers.L.self_attn.compressor.{kv_proj.weight [2c, D], gate_proj.weight
///    [2c, D], position_bias [S, 2c], kv_norm.weight [c]} (two-stream, W = 2S);
///  - gated layers: the same with one stream ([c, D], position_bias [W, c]); the loader reads
///    them as HCA (W = S = m), so only gated layers with W = S load with their own grid;
///  - uniform layers: stored as the two-stream compressor they equal (both streams W_C, zero
///    gates, zero slot bias: a softmax over equal logits is the mean over the unmasked slots);
///  - shift_heads: head 0's compressor under the name above (the loader reads it, on its own
///    grid (H·W, H·S) but at origin 0), head h's under self_attn.compressor_h<h>.
/// Every other parameter is stored under its named_parameters() name, all in F32.
/// config.json: compress_rope_theta, qk_rope_head_dim, rms_norm_eps and the model's field list
/// under "kvphase". A NoPE model still loads with the loader's RoPE (the loader has no NoPE
/// form); its "kvphase".rope is false.
///
/// load_checkpoint reads such a directory back into an lm: the architecture from config.json's
/// "kvphase" fields, every parameter by name, bit for bit (strict: a missing, misshapen,
/// non-finite or unknown tensor is an error naming the file and the tensor).

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvphase/io/fields_json.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/safetensors.hpp"
#include "kvphase/io/tensor_data.hpp"
#include "kvphase/lm/model.hpp"

namespace kvphase::lm {

namespace detail {
/// Compressor name prefixes of the model's uniform layers, with their strides.
inline std::vector<std::pair<std::string, index_t>> uniform_compressors(lm& model) {
  std::vector<std::pair<std::string, index_t>> out;
  for (std::size_t l = 0; l < model->kinds.size(); ++l)
    if (model->kinds[l] == layer_kind::uniform) {
      const auto& cs = model->model->blocks[l]->self_attn->comps;
      for (std::size_t h = 0; h < cs.size(); ++h)
        out.emplace_back("model.layers." + std::to_string(l) + ".self_attn.compressor" +
                             (h ? "_h" + std::to_string(h) : std::string()),
                         cs[h]->stride);
    }
  return out;
}
}  // namespace detail

/// The model as a safetensors checkpoint named like a DeepSeek-V4 one (compress/checkpoint.hpp
/// reads each compressed layer's compressor). A uniform layer is stored as the two-stream
/// compressor it equals: both streams W_C, zero gates, zero slot bias.
inline void save_checkpoint(lm& model, const std::string& dir) {
  std::filesystem::create_directories(dir);
  io::safetensors_writer w;
  torch::NoGradGuard ng;
  const auto& c = model->cfg;
  const auto uniform = detail::uniform_compressors(model);  // compressor prefixes of uniform layers, stride
  auto put = [&](const std::string& name, torch::Tensor t) {
    t = t.detach().to(torch::kFloat32).contiguous();
    std::vector<std::int64_t> shape(t.sizes().begin(), t.sizes().end());
    w.add<float>(name, shape, std::span<const float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel())),
                 io::tensor_dtype::f32);
  };
  for (const auto& kv : model->named_parameters()) {
    auto t = kv.value();
    for (const auto& P : uniform)
      if (kv.key() == P.first + ".kv_proj.weight") t = torch::cat({t, t}, 0);  // streams a and b equal
    put(kv.key(), t);
  }
  for (const auto& [P, S] : uniform) {
    put(P + ".gate_proj.weight", torch::zeros({2 * c.head_dim, c.d_model}));
    put(P + ".position_bias", torch::zeros({S, 2 * c.head_dim}));
  }
  w.metadata("format", "kvphase.lm/1");
  w.metadata("schedule", c.schedule);
  w.write(dir + "/model.safetensors");
  nlohmann::json cfg;
  cfg["model_type"] = "kvphase_lm";
  cfg["compress_rope_theta"] = c.rope_theta;
  cfg["qk_rope_head_dim"] = c.rope_dim;
  cfg["rms_norm_eps"] = c.rms_eps;
  cfg["kvphase"] = io::fields_to_json(c);
  std::ofstream(dir + "/config.json") << cfg.dump(2) << "\n";
}

/// The model of a save_checkpoint directory (config.json + model.safetensors): the architecture
/// from config.json's "kvphase" field list (strict: an unknown field or a bad value is an error),
/// every named parameter from model.safetensors, bit for bit. Throws kvphase::error naming the
/// file and the rule when a file is missing or not JSON, the format metadata is not
/// kvphase.lm/1, a parameter is missing, has another shape or a non-finite value, a uniform
/// layer's stored streams differ or its gates or slot bias are not zero, or the file holds a
/// tensor the model has no place for.
inline lm load_checkpoint(const std::string& dir) {
  const std::string cj = dir + "/config.json", st = dir + "/model.safetensors";
  std::ifstream in(cj);
  require(in.good(), "checkpoint config", cj, "must be a readable file (save_checkpoint writes it)");
  const nlohmann::ordered_json j = io::read_json(in, cj);
  require(j.is_object() && j.contains("kvphase") && j["kvphase"].is_object(), "checkpoint config", cj,
          "must hold the model's field list under \"kvphase\" (a kvphase lm checkpoint)");
  model_config c;
  io::fields_from_json(j["kvphase"], c, cj + " kvphase");
  c.validate();
  const io::safetensors_file f(st);
  {  // every parameter is in the file: a config.json naming a far larger model is refused before
     // the model is allocated (the embedding, head, projections and MLPs bound it from below)
    const double D = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab),
                 HC = static_cast<double>(c.heads * c.head_dim), C = static_cast<double>(c.head_dim),
                 F = static_cast<double>(c.mlp_hidden), L = static_cast<double>(c.layers().size());
    const double need = 2.0 * V * D + L * (2.0 * HC * D + C * D + 3.0 * D * F);
    double have = 0.0;
    for (const auto& t : f.tensors()) have += static_cast<double>(t.count());
    require(need <= have, st, std::to_string(static_cast<std::uint64_t>(have)) + " values",
            "must hold the model " + cj + " describes: at least " +
                std::to_string(static_cast<std::uint64_t>(need)) + " parameters");
  }
  const auto& meta = f.header().metadata;
  const auto fmt = meta.find("format");
  require(fmt != meta.end() && fmt->second == "kvphase.lm/1", st + " metadata format",
          fmt == meta.end() ? std::string("(absent)") : fmt->second, "must be kvphase.lm/1");
  torch::NoGradGuard ng;
  lm model(c);
  const auto uniform = detail::uniform_compressors(model);
  std::set<std::string> used;
  auto read = [&](const std::string& name, std::vector<std::int64_t> want) {
    const io::tensor_info& t = f.info(name);
    require(io::is_float_dtype(t.dtype), st + " tensor '" + name + "' dtype", io::to_string(t.dtype),
            "must be a float type");
    require(t.shape == want, st + " tensor '" + name + "' shape", io::shape_text(t.shape),
            "must be " + io::shape_text(want) + " (the model " + cj + " describes)");
    auto v = f.values<float>(name);
    require_finite(v, st + " tensor '" + name + "'");
    used.insert(name);
    return torch::from_blob(v.data(), want, torch::kFloat32).clone();
  };
  for (auto& kv : model->named_parameters()) {
    auto p = kv.value();
    std::vector<std::int64_t> want(p.sizes().begin(), p.sizes().end());
    const bool doubled = std::any_of(uniform.begin(), uniform.end(),
                                     [&](const auto& u) { return kv.key() == u.first + ".kv_proj.weight"; });
    if (!doubled) {
      p.copy_(read(kv.key(), want));
      continue;
    }
    // a uniform layer is stored as the two-stream compressor it equals: both streams W_C
    auto shape2 = want;
    shape2[0] *= 2;
    const auto t = read(kv.key(), shape2);
    require(torch::equal(t.narrow(0, 0, want[0]), t.narrow(0, want[0], want[0])), st + " tensor '" + kv.key() + "'",
            "two different streams", "must hold one stream twice (a uniform layer in " + cj + ")");
    p.copy_(t.narrow(0, 0, want[0]));
  }
  for (const auto& [P, S] : uniform) {
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
             {P + ".gate_proj.weight", {2 * c.head_dim, c.d_model}}, {P + ".position_bias", {S, 2 * c.head_dim}}})
      require(read(name, shape).abs().max().item<float>() == 0.0f, st + " tensor '" + name + "'", "non-zero",
              "must be zero (a uniform layer in " + cj + ")");
  }
  for (const auto& t : f.tensors())
    require(used.count(t.name) == 1, st + " tensor", t.name, "has no place in the model " + cj + " describes");
  return model;
}

}  // namespace kvphase::lm

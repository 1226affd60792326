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

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/io/fields_json.hpp"
#include "kvphase/io/safetensors.hpp"
#include "kvphase/lm/model.hpp"

namespace kvphase::lm {

/// The model as a safetensors checkpoint named like a DeepSeek-V4 one (compress/checkpoint.hpp
/// reads each compressed layer's compressor). A uniform layer is stored as the two-stream
/// compressor it equals: both streams W_C, zero gates, zero slot bias.
inline void save_checkpoint(lm& model, const std::string& dir) {
  std::filesystem::create_directories(dir);
  io::safetensors_writer w;
  torch::NoGradGuard ng;
  const auto& c = model->cfg;
  std::vector<std::pair<std::string, index_t>> uniform;  // compressor prefixes of uniform layers, stride
  for (std::size_t l = 0; l < model->kinds.size(); ++l)
    if (model->kinds[l] == layer_kind::uniform) {
      const auto& cs = model->model->blocks[l]->self_attn->comps;
      for (std::size_t h = 0; h < cs.size(); ++h)
        uniform.emplace_back("model.layers." + std::to_string(l) + ".self_attn.compressor" +
                                 (h ? "_h" + std::to_string(h) : std::string()),
                             cs[h]->stride);
    }
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

}  // namespace kvphase::lm

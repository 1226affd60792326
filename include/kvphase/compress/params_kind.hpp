#pragma once
/// \file compress/params_kind.hpp
/// Which compressor parameters a sweep measures (the recipes are in compress/presets.hpp).

#include <charconv>
#include <string>
#include <string_view>
#include <utility>

#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

/// Parameters worth measuring (what a sweep's model.params names):
///  - random: make_preset_params (random projections: a random payload map or MLP does not
///    preserve the query–key alignment, so recall then measures how much of it survives);
///  - identity: identity payload maps, no content logits, zero slot biases, an MLP initialised
///    to the uniform mean pool plus a small random part: the learned pools of the same grid
///    reduced to a uniform average (RMSNorm and RoPE as the spec says);
///  - planted_early / planted_middle / planted_late: as identity, plus a slot-bias profile that
///    prefers the early, middle or late slots of the window: b_r = −κ·r, −κ·|r − (W−1)/2|,
///    −κ·(W−1−r) with κ = `strength` (the same bias for every channel of a channel-wise gate;
///    the MLP's mean weights replaced by softmax_r(b_r));
///  - file: parameters read by a registered loader (params_loader below).
enum class params_kind { random, identity, planted_early, planted_middle, planted_late, file };

inline const char* to_string(params_kind k) noexcept {
  switch (k) {
    case params_kind::random: return "random";
    case params_kind::identity: return "identity";
    case params_kind::planted_early: return "planted-early";
    case params_kind::planted_middle: return "planted-middle";
    case params_kind::planted_late: return "planted-late";
    case params_kind::file: return "file";
  }
  return "?";
}
inline void parse(std::string_view s, params_kind& out) {
  for (params_kind k : {params_kind::random, params_kind::identity, params_kind::planted_early,
                        params_kind::planted_middle, params_kind::planted_late, params_kind::file})
    if (s == to_string(k)) {
      out = k;
      return;
    }
  fail("params", std::string(s), "must be random, identity, planted-early, planted-middle, planted-late or file");
}

/// Splits a parameter-file argument "PATH" or "PATH#LAYER" (model_config::params_file) into the
/// path and the layer index (0 without '#'; the last '#' separates them, so a path may hold '#').
/// Throws kvphase::error naming params_file when the part after '#' is not a non-negative integer
/// that fits an index or when the path is empty.
inline std::pair<std::string, index_t> split_params_file(std::string_view arg) {
  std::string_view path = arg;
  index_t layer = 0;
  if (const auto h = arg.rfind('#'); h != std::string_view::npos) {
    path = arg.substr(0, h);
    const std::string_view t = arg.substr(h + 1);
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), layer);
    require(ec == std::errc() && end == t.data() + t.size() && !t.empty() && layer >= 0, "params_file",
            std::string(arg), "the part after '#' must be a layer index (a non-negative integer)");
  }
  require(!path.empty(), "params_file", std::string(arg), "must name a checkpoint file or directory before any '#'");
  return {std::string(path), layer};
}

}  // namespace kvphase::compress

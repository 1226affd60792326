// kvphase-inspect: the phase profile of a real compressor layer (docs/real-models.md).
//
//   kvphase-inspect CHECKPOINT [--layer L ...] [--format csv|json] [--out FILE]
//       weights alone: per layer and channel the gate's slot preference (softmax of the slot
//       bias over the window), the preferred slot, and each layer's histogram of preferred slots.
//   kvphase-inspect CHECKPOINT --layer L --activations H.npy|H.safetensors [--queries Q.npy]
//       captured hidden states (tokens x hidden) of one layer: the exact compressor is run and
//       every token is read out by a query that looks for it (compress/inspect.hpp); the
//       per-phase counts of "the token gets the most attention mass" for the compressed and the
//       full model are written in kvphase-sweep's CSV/JSON format (intervals, uniformity and
//       periodicity tests, gap), with the per-phase mean mass and retention as extra columns.
// CHECKPOINT is a .safetensors file, a directory or a model.safetensors.index.json.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <kvphase/compress/checkpoint.hpp>
#include <kvphase/compress/inspect.hpp>
#include <kvphase/io/json.hpp>
#include <kvphase/io/npy.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/safetensors.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

#include "cli_common.hpp"

using namespace kvphase;
namespace cl = kvphase::cli;
namespace kc = kvphase::compress;

namespace {

struct options {
  std::string checkpoint;
  std::vector<index_t> layers;
  std::string activations, activations_tensor, queries, queries_tensor;
  index_t rope_dim = 64;
  double rope_theta = 160000.0;
  double yarn_factor = 16.0;
  double yarn_original = 65536.0;
  bool indexer = false;
  index_t modulus = 0;
  std::int64_t permutations = 9999, bootstrap = 2000;
  std::uint64_t seed = 0;
  std::string format, out, config;
};

matrixd read_matrix(const std::string& path, const std::string& tensor, const std::string& what) {
  if (path.size() >= 4 && path.ends_with(".npy")) return io::npy_file(path).matrix<double>();
  const io::safetensors_checkpoint ck(path);
  std::string name = tensor;
  if (name.empty()) {
    const auto names = ck.names();
    require(names.size() == 1, what, path,
            "holds " + std::to_string(names.size()) + " tensors: name one with the tensor flag");
    name = names[0];
  }
  return ck.matrix<double>(name);
}

nlohmann::json config_json(const options& o) {
  return {{"program", "kvphase-inspect"},
          {"checkpoint", o.checkpoint},
          {"layers", o.layers},
          {"activations", o.activations},
          {"activations_tensor", o.activations_tensor},
          {"queries", o.queries},
          {"queries_tensor", o.queries_tensor},
          {"rope_dim", o.rope_dim},
          {"rope_theta", o.rope_theta},
          {"yarn_factor", o.yarn_factor},
          {"yarn_original", o.yarn_original},
          {"config", o.config},
          {"indexer", o.indexer},
          {"modulus", o.modulus},
          {"format", o.format},
          {"out", o.out}};
}

std::string weights_report(const options& o, const io::safetensors_checkpoint& ck, const kc::v4_load_options& lo,
                           const io::provenance& prov) {
  std::vector<index_t> layers = o.layers;
  if (layers.empty())
    for (index_t l = 0; l < 4096; ++l)
      if (kc::has_v4_compressor(ck, l, lo)) layers.push_back(l);
  require(!layers.empty(), "checkpoint", o.checkpoint, "has no compressor tensors under the deepseek_v4 names");
  struct row {
    index_t layer;
    std::string part;
    kc::operator_spec spec;
    kc::slot_profile prof;
  };
  std::vector<row> rows;
  for (index_t l : layers) {
    const auto L = kc::load_v4_layer<double>(ck, l, lo);
    rows.push_back({l, "compressor", L.compressor.spec, kc::gate_slot_profile(L.compressor.spec, L.compressor.params)});
    if (o.indexer && L.indexer)
      rows.push_back({l, "indexer", L.indexer->spec, kc::gate_slot_profile(L.indexer->spec, L.indexer->params)});
  }
  const std::string not_covered =
      "not covered: channel-wise gates with content logits (the theory covers content-free linear pools)";
  if (o.format == "json") {
    io::ordered_json j;
    j["format"] = "kvphase-inspect-weights/1";
    j["provenance"] = io::to_json(prov);
    j["theory"] = not_covered;
    auto& arr = j["layers"] = io::ordered_json::array();
    for (const auto& r : rows) {
      io::ordered_json e;
      e["layer"] = r.layer;
      e["part"] = r.part;
      e["pool"] = kc::to_string(r.spec.pool);
      e["window"] = r.prof.window;
      e["stride"] = r.prof.stride;
      e["histogram"] = r.prof.histogram;
      auto& ch = e["channels"] = io::ordered_json::array();
      for (index_t k = 0; k < r.prof.channels; ++k)
        ch.push_back({{"channel", k},
                      {"preferred_slot", r.prof.preferred[static_cast<std::size_t>(k)]},
                      {"preferred_block_slot", r.prof.preferred[static_cast<std::size_t>(k)] % r.prof.stride},
                      {"profile", r.prof.profile[static_cast<std::size_t>(k)]}});
      arr.push_back(e);
    }
    return io::json_text(j);
  }
  std::ostringstream os;
  io::csv_writer w(os);
  w.comment(io::to_csv_comment(prov));
  w.comment("format: kvphase-inspect-weights/1");
  w.comment("theory: " + not_covered);
  for (const auto& r : rows) {
    std::string h = "histogram layer " + std::to_string(r.layer) + " " + r.part + ":";
    for (std::size_t s = 0; s < r.prof.histogram.size(); ++s) h += " " + std::to_string(r.prof.histogram[s]);
    w.comment(h);
  }
  std::vector<std::string> head{
      "layer", "part", "pool", "window", "stride", "channel", "preferred_slot", "preferred_block_slot", "max_weight"};
  const index_t wmax = std::max_element(rows.begin(), rows.end(), [](const row& a, const row& b) {
                         return a.prof.window < b.prof.window;
                       })->prof.window;
  for (index_t s = 0; s < wmax; ++s) head.push_back("slot_" + std::to_string(s));
  w.row(head);
  for (const auto& r : rows)
    for (index_t k = 0; k < r.prof.channels; ++k) {
      const auto& p = r.prof.profile[static_cast<std::size_t>(k)];
      const index_t best = r.prof.preferred[static_cast<std::size_t>(k)];
      std::vector<std::string> f{std::to_string(r.layer),
                                 r.part,
                                 kc::to_string(r.spec.pool),
                                 std::to_string(r.prof.window),
                                 std::to_string(r.prof.stride),
                                 std::to_string(k),
                                 std::to_string(best),
                                 std::to_string(best % r.prof.stride),
                                 io::format_shortest(p[static_cast<std::size_t>(best)])};
      for (index_t s = 0; s < wmax; ++s)
        f.push_back(s < r.prof.window ? io::format_shortest(p[static_cast<std::size_t>(s)]) : "");
      w.row(f);
    }
  return os.str();
}

std::string activations_report(const options& o, const io::safetensors_checkpoint& ck, const kc::v4_load_options& lo,
                               io::provenance prov) {
  require(o.layers.size() == 1, "--layer", o.layers.size(), "name exactly one layer with --activations");
  const auto L = kc::load_v4_layer<double>(ck, o.layers[0], lo);
  const auto& C = (o.indexer && L.indexer) ? *L.indexer : L.compressor;
  const matrixd x = read_matrix(o.activations, o.activations_tensor, "--activations");
  require(x.cols() == C.d, "--activations columns", x.cols(),
          "must equal the layer's hidden width " + std::to_string(C.d));
  matrixd q;
  if (!o.queries.empty()) q = read_matrix(o.queries, o.queries_tensor, "--queries");
  const auto r = kc::read_tokens<double>(C.spec, C.params, x, q);
  const index_t S = C.spec.grid.stride, M = o.modulus > 0 ? o.modulus : S;
  require(r.targets >= M, "--activations rows", x.rows(), "too few tokens: fewer complete-entry tokens than phases");
  io::sweep_result out;
  out.prov = std::move(prov);
  out.analysis.modulus = M;
  out.analysis.period = S <= M && M % S == 0 ? S : M;
  out.analysis.permutations = o.permutations;
  out.analysis.bootstrap_replicates = o.bootstrap;
  out.analysis.seed = o.seed;
  for (int model = 0; model < 2; ++model) {
    stats::phase_counts pc;
    pc.model = model == 0 ? "compressed" : "full";
    pc.trials.assign(static_cast<std::size_t>(M), 0);
    pc.hits.assign(static_cast<std::size_t>(M), 0);
    std::vector<double> mass(static_cast<std::size_t>(M), 0.0), ret(static_cast<std::size_t>(M), 0.0);
    for (index_t t = 0; t < r.targets; ++t) {
      const auto g = static_cast<std::size_t>(t % M);
      ++pc.trials[g];
      pc.hits[g] +=
          model == 0 ? r.hit_compressed[static_cast<std::size_t>(t)] : r.hit_full[static_cast<std::size_t>(t)];
      mass[g] += model == 0 ? r.mass_compressed[static_cast<std::size_t>(t)] : r.mass_full[static_cast<std::size_t>(t)];
      ret[g] += model == 0 ? r.retention[static_cast<std::size_t>(t)] : 1.0;
    }
    for (std::size_t g = 0; g < mass.size(); ++g) {
      mass[g] /= static_cast<double>(std::max<std::int64_t>(pc.trials[g], 1));
      ret[g] /= static_cast<double>(std::max<std::int64_t>(pc.trials[g], 1));
    }
    pc.extra = {{"mass_mean", mass}, {"retention_mean", ret}};
    out.models.push_back(std::move(pc));
  }
  out.columns = {{"layer", std::to_string(o.layers[0])},
                 {"part", o.indexer ? "indexer" : "compressor"},
                 {"pool", kc::to_string(C.spec.pool)},
                 {"chunk_window", std::to_string(C.spec.grid.window)},
                 {"stride", std::to_string(S)},
                 {"tokens", std::to_string(x.rows())},
                 {"queries", o.queries.empty() ? "self" : "given"}};
  const auto summaries = stats::summarize(out.models, out.analysis);
  return io::sweep_text(out, summaries, o.format);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "kvphase-inspect: the phase profile of a DeepSeek-V4 compressor layer from its weights and, with "
      "--activations, from captured hidden states"};
  app.add_option("checkpoint", o.checkpoint, "a .safetensors file, a directory or a model.safetensors.index.json")
      ->required();
  app.add_option("--layer", o.layers, "layer index (repeatable; default: every layer with a compressor)")
      ->transform(cl::integer<index_t>(0, index_t(1) << 20));
  app.add_option("--activations", o.activations,
                 "captured hidden states of the layer (tokens x hidden; .npy or safetensors)");
  app.add_option("--activations-tensor", o.activations_tensor, "tensor name in a safetensors activation file");
  app.add_option("--queries", o.queries,
                 "queries (tokens x c) that look for each token (default: the token's own key)");
  app.add_option("--queries-tensor", o.queries_tensor, "tensor name in a safetensors query file");
  app.add_option("--config", o.config, "config.json giving the compress rope (default: the checkpoint directory's)");
  app.add_flag("--indexer", o.indexer,
               "inspect the CSA layers' indexer compressor as well (weights) or instead (activations)");
  cl::add_int(app, "--rope-dim", o.rope_dim, 0, 65536,
              "rotated channels of the compress rope (default: config.json, else 64)");
  cl::add_real(app, "--rope-theta", o.rope_theta, 1.0000001, 1e12,
               "compress rope base (default: config.json, else 160000)");
  cl::add_real(app, "--yarn-factor", o.yarn_factor, 1.0, 1e6,
               "YaRN factor of the compress rope, 1: none (default: config.json, else 16)");
  cl::add_real(app, "--yarn-original", o.yarn_original, 1.0, 1e12,
               "YaRN original_max_position_embeddings (default: config.json, else 65536)");
  cl::add_int(app, "--modulus", o.modulus, 0, 4096, "phase groups (0: the compressor's stride)");
  cl::add_int(app, "--permutations", o.permutations, 0, 1000000, "permutations of the periodicity test");
  cl::add_int(app, "--bootstrap", o.bootstrap, 0, 1000000, "bootstrap replicates of the gap interval");
  cl::add_u64(app, "--seed", o.seed, "seed of the permutation and bootstrap streams");
  app.add_option("--format", o.format, "csv or json (default: from --out's extension, else csv)")
      ->check(CLI::IsMember({"csv", "json"}));
  app.add_option("--out,-o", o.out, "output file (default: standard output)");
  if (const auto status = cl::parse(app, argc, argv, "kvphase-inspect")) return *status;
  return cl::run("kvphase-inspect", [&] {
    if (o.format.empty()) o.format = (o.out.size() >= 5 && o.out.ends_with(".json")) ? "json" : "csv";
    if (!o.out.empty()) cl::check_writable_file(o.out, "out");
    const io::safetensors_checkpoint ck(o.checkpoint);
    // the checkpoint's config.json (or --config) gives the compress rope; flags override it
    kc::v4_load_options lo = o.config.empty() ? kc::v4_options_for(o.checkpoint) : kc::v4_options_from_config(o.config);
    if (app.count("--rope-dim")) lo.rope_dim = o.rope_dim;
    if (app.count("--rope-theta")) lo.rope_theta = o.rope_theta;
    if (app.count("--yarn-factor") || app.count("--yarn-original")) {
      if (!app.count("--yarn-factor")) o.yarn_factor = lo.yarn.enabled() ? lo.yarn.factor : o.yarn_factor;
      if (!app.count("--yarn-original") && lo.yarn.enabled()) o.yarn_original = lo.yarn.original_max_position;
      lo.yarn = o.yarn_factor == 1.0
                    ? kc::yarn_config{}
                    : kc::yarn_config{.factor = o.yarn_factor, .original_max_position = o.yarn_original};
    }
    nlohmann::json cj = config_json(o);  // with the compress rope actually used
    cj["rope_dim"] = lo.rope_dim;
    cj["rope_theta"] = lo.rope_theta;
    cj["yarn_factor"] = lo.yarn.factor;
    cj["yarn_original"] = lo.yarn.original_max_position;
    const auto prov = io::make_provenance(cj, o.seed, 1, argc, argv);
    const std::string text =
        o.activations.empty() ? weights_report(o, ck, lo, prov) : activations_report(o, ck, lo, prov);
    if (o.out.empty()) {
      std::cout << text << std::flush;
    } else {
      std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
      f << text;
      f.close();
      if (!f) fail("out", o.out, "could not be written");
    }
    return 0;
  });
}

// Real compressor weights: YaRN inverse frequencies against values derived by hand, the public
// token projection, the empty result, and a tiny 2-layer DeepSeek-V4-like checkpoint (F32,
// BF16 and block-scaled F8_E4M3) whose loaded operators compress bitwise like the same weights
// set through the API.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "kvphase/compress/checkpoint.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/io/safetensors.hpp"

using namespace kvphase;
namespace kc = kvphase::compress;

namespace {
matrixf random_matrix(index_t r, index_t c, std::uint64_t seed, double sd = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, sd);
  matrixf m(r, c);
  for (index_t i = 0; i < r; ++i)
    for (index_t k = 0; k < c; ++k) m(i, k) = static_cast<float>(nd(g));
  return m;
}
/// The V4 operators as the published code defines them (CSA: W = 8, S = 4 two-stream; HCA:
/// W = S = 128 channel gate; RMSNorm with weight; RoPE at i·S, θ 160000, the last 64 channels).
kc::operator_spec v4_spec(bool csa) {
  return kc::operator_spec{
      .grid = csa ? kc::chunk_grid{.window = 8, .stride = 4} : kc::chunk_grid{.window = 128, .stride = 128},
      .pool = csa ? kc::pool_kind::two_stream : kc::pool_kind::channel_gate,
      .content_std = 1.0,
      .rmsnorm = true,
      .rms_eps = 1e-6,
      .rope = {.anchor = kc::rope_anchor::start, .theta = 160000.0, .rope_dim = 4}};
}
std::string tmp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / "kvphase_test_compress_checkpoint" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}
/// The value a reader returns for x stored as dt (F32 and BF16; F8 goes through block scales).
matrixf stored(const matrixf& m, io::tensor_dtype dt) {
  if (dt == io::tensor_dtype::f32) return m;
  matrixf r = m;
  for (index_t i = 0; i < m.size(); ++i) r.data()[i] = io::bf16_to_float(io::float_to_bf16(m.data()[i]));
  return r;
}
}  // namespace

TEST_CASE("YaRN inverse frequencies of the V4 compress rope equal the hand-derived values", "[compress][checkpoint]") {
  // θ = 160000, R = 64, L = 65536, factor 16, β_fast 32, β_slow 1 (the published V4 config).
  // d(r) = 64 ln(65536 / (2π r)) / (2 ln 160000): d(32) = 15.45… → low = 15, d(1) = 24.71… → high = 25.
  const kc::yarn_config y{.factor = 16, .original_max_position = 65536, .beta_fast = 32, .beta_slow = 1};
  const double th = 160000.0;
  CHECK(std::floor(64 * std::log(65536 / (2 * M_PI * 32)) / (2 * std::log(th))) == 15);
  CHECK(std::ceil(64 * std::log(65536 / (2 * M_PI * 1)) / (2 * std::log(th))) == 25);
  const auto f = kc::rope_inverse_frequencies(th, 64, y);
  REQUIRE(f.size() == 32);
  for (int k = 0; k < 32; ++k) {
    const double base = 1.0 / std::pow(th, 2.0 * k / 64.0);
    // pairs 0…15 keep their frequency, 25… are divided by 16, the ones between interpolate linearly
    const double ramp = k <= 15 ? 0.0 : (k >= 25 ? 1.0 : (k - 15) / 10.0);
    const double want = base * (1 - ramp) + base / 16 * ramp;
    INFO("pair " << k);
    CHECK(f[k] == Approx(want).epsilon(1e-14));
  }
  // explicit inverse frequencies are used as given; factor 1 is the plain θ rope
  kc::rope_config r{.anchor = kc::rope_anchor::start, .rope_dim = 4, .inv_freq = {0.5, 0.25}};
  CHECK(kc::rope_frequencies(r, 8).inv_freq == std::vector<double>{0.5, 0.25});
  CHECK(kc::rope_inverse_frequencies(10000.0, 4) == kc::rope_frequencies(kc::rope_config{.rope_dim = 4}, 4).inv_freq);
  r.inv_freq = {0.5};
  CHECK_THROWS_WITH(kc::rope_frequencies(r, 8), Catch::Contains("inv_freq.size()"));
  CHECK_THROWS_WITH((kc::rope_config{.yarn = {.factor = 4}}.validate()), Catch::Contains("original_max_position"));
  CHECK_THROWS_WITH((kc::rope_config{.yarn = {.factor = 0.5}}.validate()), Catch::Contains("yarn.factor"));
  // default-valued new fields leave the stream key unchanged (an omit_default field)
  CHECK(fields::canonical(kc::rope_config{}) == "anchor=none;theta=1.388p+13;rope_dim=0;");
  CHECK(fields::canonical(kc::rope_config{.yarn = y}).find("yarn.{factor=") != std::string::npos);
}

TEST_CASE("compress: no complete entry gives zero rows, invalid shapes still throw", "[compress][checkpoint]") {
  const auto s = v4_spec(false);
  const auto p =
      kc::make_params<float>(s, 16, {.seed = 3, .project_payload = true, .bias_std = 0.5, .rms_weight = true});
  const matrixf x = random_matrix(100, 16, 1);  // the first HCA entry needs 128 tokens
  const matrixf out = kc::compress(s, p, x);
  CHECK(out.rows() == 0);
  CHECK(out.cols() == p.output_dim(s, 16));
  CHECK(kc::compress(s, p, matrixf(0, 16)).rows() == 0);
  CHECK_THROWS_WITH(kc::compress(s, p, random_matrix(100, 15, 1)), Catch::Contains("params.w_c.rows()"));
}

TEST_CASE("project_tokens equals the compressor's own projections", "[compress][checkpoint]") {
  for (const auto& s : {v4_spec(true), v4_spec(false)}) {
    const auto p = kc::make_params<float>(
        s, 32, {.seed = 5, .project_payload = true, .out_dim = 16, .bias_std = 0.5, .rms_weight = true});
    const matrixf x = random_matrix(300, 32, 2);
    const auto pr = kc::project_tokens(s, p, x);
    const matrixf c = x * p.w_c;
    const matrixf z = x * p.w_z;
    CHECK(pr.payload.rows() == 300);
    CHECK(pr.payload.cols() == p.w_c.cols());
    CHECK((pr.payload - c).cwiseAbs().maxCoeff() <= 1e-4);
    CHECK((pr.logits - z).cwiseAbs().maxCoeff() <= 1e-4);
    // HCA entry 0 rebuilt from the public projections with the bias and a channel softmax,
    // before RMSNorm / RoPE (rotation at position 0 is the identity), equals the compressor
    if (s.pool == kc::pool_kind::channel_gate) {
      kc::operator_spec plain = s;
      plain.rmsnorm = false;
      kc::pool_params<float> pp = p;
      pp.rms_weight.resize(0);
      const matrixf e = kc::compress(plain, pp, x);
      for (index_t k = 0; k < 16; ++k) {
        double den = 0, num = 0, mx = -1e300;
        for (index_t r = 0; r < 128; ++r) mx = std::max(mx, double(pr.logits(r, k)) + p.slot_bias_c(r, k));
        for (index_t r = 0; r < 128; ++r) {
          const double w = std::exp(double(pr.logits(r, k)) + p.slot_bias_c(r, k) - mx);
          den += w;
          num += w * pr.payload(r, k);
        }
        CHECK(e(0, k) == Approx(num / den).margin(1e-5));
      }
    }
  }
  CHECK_THROWS_WITH(kc::project_tokens(kc::operator_spec{}, kc::pool_params<float>{}, random_matrix(4, 4, 1)),
                    Catch::Contains("no token projections"));
}

TEST_CASE("a tiny 2-layer V4 checkpoint loads into operators that compress like the API", "[compress][checkpoint]") {
  // layer 0: CSA (m = 4, c = 8, rope 4) with an indexer (c_I = 4, 2 heads); layer 1: HCA (m = 128).
  const index_t D = 16, c = 8, cI = 4, HI = 2, qlora = 6;
  for (io::tensor_dtype dt : {io::tensor_dtype::f32, io::tensor_dtype::bf16, io::tensor_dtype::f8_e4m3}) {
    INFO("dtype " << io::to_string(dt));
    io::safetensors_writer w;
    std::uint64_t seed = 10;
    // the values the reader will return, per tensor name
    std::map<std::string, matrixf> truth;
    auto put = [&](const std::string& n, const matrixf& m, bool weight) {
      if (dt == io::tensor_dtype::f8_e4m3 && weight) truth[n] = w.add_f8_block_scaled<float>(n, m);
      else {
        const auto t = dt == io::tensor_dtype::f8_e4m3 ? io::tensor_dtype::bf16 : dt;  // norms and biases stay BF16
        truth[n] = stored(m, t);
        w.add<float>(n, m, t);
      }
    };
    auto put_vec = [&](const std::string& n, const matrixf& m) {
      const auto t = dt == io::tensor_dtype::f8_e4m3 ? io::tensor_dtype::f32 : dt;
      const std::int64_t shape[1] = {m.cols()};
      w.add<float>(n, shape, std::span<const float>(m.data(), m.size()), t);
      truth[n] = stored(m, t);
    };
    const std::string L0 = "model.layers.0.self_attn.compressor", L1 = "model.layers.1.self_attn.compressor";
    put(L0 + ".kv_proj.weight", random_matrix(2 * c, D, seed++, 0.3), true);
    put(L0 + ".gate_proj.weight", random_matrix(2 * c, D, seed++, 0.3), true);
    put(L0 + ".position_bias", random_matrix(4, 2 * c, seed++), false);
    put_vec(L0 + ".kv_norm.weight", (random_matrix(1, c, seed++, 0.1).array() + 1.0f).matrix());
    put(L0 + ".indexer.kv_proj.weight", random_matrix(2 * cI, D, seed++, 0.3), true);
    put(L0 + ".indexer.gate_proj.weight", random_matrix(2 * cI, D, seed++, 0.3), true);
    put(L0 + ".indexer.position_bias", random_matrix(4, 2 * cI, seed++), false);
    put_vec(L0 + ".indexer.kv_norm.weight", (random_matrix(1, cI, seed++, 0.1).array() + 1.0f).matrix());
    put(L0 + ".indexer.q_b_proj.weight", random_matrix(HI * cI, qlora, seed++), true);
    put(L0 + ".indexer.scorer.weights_proj.weight", random_matrix(HI, D, seed++), true);
    put(L1 + ".kv_proj.weight", random_matrix(c, D, seed++, 0.3), true);
    put(L1 + ".gate_proj.weight", random_matrix(c, D, seed++, 0.3), true);
    put(L1 + ".position_bias", random_matrix(128, c, seed++), false);
    put_vec(L1 + ".kv_norm.weight", (random_matrix(1, c, seed++, 0.1).array() + 1.0f).matrix());
    put("model.layers.1.self_attn.kv_proj.weight", random_matrix(c, D, seed++), true);  // not the compressor's
    const std::string dir = tmp_dir(io::to_string(dt));
    w.write(dir + "/model.safetensors");
    const io::safetensors_checkpoint ck(dir);
    const kc::v4_load_options opt{.rope_dim = 4};
    CHECK(kc::has_v4_compressor(ck, 0, opt));
    CHECK_FALSE(kc::has_v4_compressor(ck, 2, opt));

    const matrixf x = random_matrix(300, D, 99);
    auto api = [&](const std::string& P, bool two) {
      // the same weights set through the API
      kc::operator_spec s = two ? v4_spec(true) : v4_spec(false);
      s.grid = two ? kc::chunk_grid{.window = 8, .stride = 4} : kc::chunk_grid{.window = 128, .stride = 128};
      s.content_std = 0;
      s.rope.rope_dim = 4;
      s.rope.yarn = {.factor = 16, .original_max_position = 65536};
      kc::pool_params<float> p;
      p.w_c = truth[P + ".kv_proj.weight"].transpose();
      p.w_z = truth[P + ".gate_proj.weight"].transpose();
      p.slot_bias_c = truth[P + ".position_bias"];
      p.rms_weight = truth[P + ".kv_norm.weight"].row(0).transpose();
      return kc::compress(s, p, x);
    };
    const auto l0 = kc::load_v4_layer<float>(ck, 0, opt);
    CHECK(l0.csa);
    CHECK(l0.compressor.spec.grid.window == 8);
    CHECK(l0.compressor.spec.grid.stride == 4);
    CHECK(l0.compressor.spec.rope.yarn.factor == 16);
    CHECK(l0.compressor.d == D);
    const matrixf got0 = kc::compress(l0.compressor.spec, l0.compressor.params, x);
    REQUIRE(got0.rows() == 75);
    CHECK((got0.array() == api(L0, true).array()).all());
    REQUIRE(l0.indexer.has_value());
    const matrixf gi = kc::compress(l0.indexer->spec, l0.indexer->params, x);
    CHECK((gi.array() == api(L0 + ".indexer", true).array()).all());
    CHECK(l0.indexer_q_b.rows() == HI * cI);
    CHECK(l0.indexer_weights.cols() == D);
    const auto l1 = kc::load_v4_layer<float>(ck, 1, opt);
    CHECK_FALSE(l1.csa);
    CHECK_FALSE(l1.indexer.has_value());
    CHECK(l1.compressor.spec.grid.window == 128);
    const matrixf got1 = kc::compress(l1.compressor.spec, l1.compressor.params, x);
    REQUIRE(got1.rows() == 2);
    CHECK((got1.array() == api(L1, false).array()).all());
    CHECK_THROWS_WITH(kc::load_v4_layer<float>(ck, 2, opt),
                      Catch::Contains("model.layers.2") && Catch::Contains("missing"));
  }
  // inconsistent shapes are errors naming the tensor
  io::safetensors_writer w;
  const std::string P = "model.layers.0.self_attn.compressor";
  w.add<float>(P + ".kv_proj.weight", random_matrix(8, 16, 1), io::tensor_dtype::f32);
  w.add<float>(P + ".gate_proj.weight", random_matrix(8, 16, 2), io::tensor_dtype::f32);
  w.add<float>(P + ".position_bias", random_matrix(4, 6, 3), io::tensor_dtype::f32);
  const std::int64_t s8[1] = {8};
  w.add<float>(P + ".kv_norm.weight", s8, std::vector<float>(8, 1.0f), io::tensor_dtype::f32);
  const std::string dir = tmp_dir("bad");
  w.write(dir + "/model.safetensors");
  CHECK_THROWS_WITH(kc::load_v4_layer<float>(io::safetensors_checkpoint(dir), 0),
                    Catch::Contains("position_bias shape") && Catch::Contains("[m, 8]"));
}

TEST_CASE("config.json gives the compress rope and norm settings", "[compress][checkpoint]") {
  const std::string dir = tmp_dir("config");
  auto cfg = [&](const std::string& text) {
    std::ofstream(dir + "/config.json") << text;
    return kc::v4_options_for(dir);
  };
  // the nested form HF writes
  auto o = cfg(R"({"head_dim": 512, "rms_norm_eps": 1e-5, "rope_parameters": {"main": {"rope_type": "default",
    "rope_theta": 10000, "partial_rotary_factor": 0.125}, "compress": {"rope_type": "yarn", "rope_theta": 160000,
    "partial_rotary_factor": 0.125, "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
    "beta_slow": 1, "attention_factor": 1.0}}})");
  CHECK(o.rope_theta == 160000);
  CHECK(o.rope_dim == 64);
  CHECK(o.rms_eps == 1e-5);
  CHECK(o.yarn.factor == 16);
  CHECK(o.yarn.original_max_position == 65536);
  // the flat form of DeepSeek's own config: compress_rope_theta, qk_rope_head_dim, rope_scaling
  o = cfg(R"({"compress_rope_theta": 40000, "qk_rope_head_dim": 32, "rope_scaling": {"type": "yarn", "factor": 4,
    "original_max_position_embeddings": 4096}})");
  CHECK(o.rope_theta == 40000);
  CHECK(o.rope_dim == 32);
  CHECK(o.yarn.factor == 4);
  CHECK(o.yarn.beta_fast == 32);
  o = cfg(R"({"compress_rope_theta": 40000})");
  CHECK_FALSE(o.yarn.enabled());
  CHECK_THROWS_WITH(cfg(R"({"compress_rope_theta": "big"})"),
                    Catch::Contains("compress_rope_theta") && Catch::Contains("number"));
  CHECK_THROWS_WITH(cfg(R"({"rope_scaling": {"type": "linear", "factor": 2}})"), Catch::Contains("default or yarn"));
  CHECK_THROWS_WITH(cfg(R"({"rope_scaling": {"type": "yarn", "factor": 2}})"),
                    Catch::Contains("original_max_position"));
  CHECK_THROWS_WITH(cfg("{"), Catch::Contains("config.json"));
  std::filesystem::remove(dir + "/config.json");
  CHECK(kc::v4_options_for(dir).rope_theta == 160000);  // defaults without a config
}

TEST_CASE("v4_params_loader gives a sweep a checkpoint layer's compressor, refusing a mismatched operator or width",
          "[compress][checkpoint]") {
  const index_t D = 16, c = 8;
  io::safetensors_writer w;
  const std::string P = "model.layers.3.self_attn.compressor";
  w.add<float>(P + ".kv_proj.weight", random_matrix(c, D, 1, 0.3), io::tensor_dtype::f32);
  w.add<float>(P + ".gate_proj.weight", random_matrix(c, D, 2, 0.3), io::tensor_dtype::f32);
  w.add<float>(P + ".position_bias", random_matrix(4, c, 3), io::tensor_dtype::f32);
  const std::int64_t s8[1] = {c};
  w.add<float>(P + ".kv_norm.weight", s8, std::vector<float>(static_cast<std::size_t>(c), 1.0f), io::tensor_dtype::f32);
  const std::string dir = tmp_dir("loader");
  w.write(dir + "/model.safetensors");
  {
    std::ofstream cfg(dir + "/config.json");
    cfg << R"({"qk_rope_head_dim": 4})";
  }
  const auto layer = kc::load_v4_layer<float>(io::safetensors_checkpoint(dir), 3, kc::v4_options_for(dir));
  CHECK(layer.compressor.spec.rope.rope_dim == 4);
  const auto load = kc::v4_params_loader<float>();
  // the sweep's operator: the checkpoint's own (HCA, m = 4)
  const kc::pool_params<float> p = load(dir + "#3", layer.compressor.spec, D, 0);
  CHECK((p.w_c.array() == layer.compressor.params.w_c.array()).all());
  CHECK((p.w_z.array() == layer.compressor.params.w_z.array()).all());
  CHECK((p.slot_bias_c.array() == layer.compressor.params.slot_bias_c.array()).all());
  // registered, load_params_file goes through it
  kc::set_params_loader<float>(load);
  CHECK((kc::load_params_file<float>(dir + "#3", layer.compressor.spec, D).w_c.array() == p.w_c.array()).all());
  kc::set_params_loader<float>({});
  CHECK_THROWS_WITH(load(dir + "#x", layer.compressor.spec, D, 0), Catch::Contains("params_file") && Catch::Contains("layer index"));
  CHECK_THROWS_WITH(load(dir, layer.compressor.spec, D, 0), Catch::Contains("model.layers.0"));  // layer 0 by default
  CHECK_THROWS_WITH(load(dir + "#3", layer.compressor.spec, D + 2, 0),
                    Catch::Contains("params_file") && Catch::Contains("D = 16") && Catch::Contains("18"));
  kc::operator_spec other = layer.compressor.spec;
  other.grid = {.window = 8, .stride = 4};
  CHECK_THROWS_WITH(load(dir + "#3", other, D, 0), Catch::Contains("params_file") && Catch::Contains("W = 4, S = 4") &&
                                                      Catch::Contains("W = 8, S = 4"));
  CHECK_THROWS_WITH(load(dir + "#3", layer.compressor.spec, D, 1), Catch::Contains("head 0"));
  // the argument's split: the last '#' separates the layer, which must be a whole index
  CHECK(kc::split_params_file("a#b/ck#12") == std::pair<std::string, index_t>{"a#b/ck", 12});
  CHECK(kc::split_params_file("ck.safetensors") == std::pair<std::string, index_t>{"ck.safetensors", 0});
  for (const char* bad : {"ck#", "ck#-1", "ck#1x", "ck# 1", "ck#99999999999999999999", "#3", ""})
    CHECK_THROWS_WITH(kc::split_params_file(bad), Catch::Contains("params_file") && Catch::Contains(bad));
}

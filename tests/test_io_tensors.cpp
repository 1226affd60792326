// Tensor files: .npy read/write (versions, byte orders, orders, dtypes), safetensors read/write
// (dtypes, block-scaled F8, sharded checkpoints), one test per malformed-file rule, and the
// element decoders against a double reference built from each format's definition.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kvphase/io/npy.hpp"
#include "kvphase/io/safetensors.hpp"

using namespace kvphase;
using namespace kvphase::io;

namespace {

std::string tmp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "kvphase_test_io_tensors";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

/// An .npy image with a hand-written header (version v) and raw data bytes.
std::vector<std::byte> npy_image(std::string header, const std::vector<std::byte>& data, int v = 1) {
  std::vector<std::byte> out = bytes_of(std::string("\x93NUMPY", 6));
  out.push_back(std::byte(v));
  out.push_back(std::byte(0));
  const std::size_t n = header.size();
  out.push_back(std::byte(n & 0xff));
  out.push_back(std::byte((n >> 8) & 0xff));
  if (v >= 2) {
    out.push_back(std::byte((n >> 16) & 0xff));
    out.push_back(std::byte((n >> 24) & 0xff));
  }
  for (char c : header) out.push_back(std::byte(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// A safetensors image with a hand-written header and `data_bytes` zero bytes of data.
std::vector<std::byte> st_image(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> out(8);
  for (int k = 0; k < 8; ++k) out[k] = std::byte((header.size() >> (8 * k)) & 0xff);
  for (char c : header) out.push_back(std::byte(c));
  out.resize(out.size() + data_bytes);
  return out;
}

std::string npy_error(const std::vector<std::byte>& img) {
  try {
    (void)npy_view(img, "x.npy").values<double>();
  } catch (const kvphase::error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string st_error(const std::vector<std::byte>& img) {
  try {
    (void)safetensors_view(img, "w.safetensors");
  } catch (const kvphase::error& e) {
    return e.what();
  }
  return "(no error)";
}

// double references from the definitions
double ref_f16(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}
double ref_bf16(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
  double v;
  if (e == 0) v = std::ldexp(m, -133);
  else if (e == 255) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.0 + m / 128.0, e - 127);
  return s ? -v : v;
}
double ref_f8(std::uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp(m, -9);
  else v = std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("element decoders equal the double reference for every code", "[io][tensors]") {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    REQUIRE(same(f16_to_float(static_cast<std::uint16_t>(c)), ref_f16(static_cast<std::uint16_t>(c))));
    REQUIRE(same(bf16_to_float(static_cast<std::uint16_t>(c)), ref_bf16(static_cast<std::uint16_t>(c))));
  }
  for (int c = 0; c < 256; ++c)
    REQUIRE(same(f8_e4m3_to_float(static_cast<std::uint8_t>(c)), ref_f8(static_cast<std::uint8_t>(c))));
  CHECK(f8_e4m3_to_float(0x7e) == 448.0f);
  // the bulk kernel equals the scalar codecs (both byte orders)
  std::vector<std::byte> raw(2 * 65536);
  for (std::uint32_t c = 0; c < 65536; ++c) std::memcpy(raw.data() + 2 * c, &c, 2);
  std::vector<double> out(65536);
  convert_elements<double>(raw.data(), tensor_dtype::f16, 65536, false, out.data());
  for (std::uint32_t c = 0; c < 65536; ++c) REQUIRE(same(out[c], ref_f16(static_cast<std::uint16_t>(c))));
  convert_elements<double>(raw.data(), tensor_dtype::bf16, 65536, true, out.data());
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto sw = static_cast<std::uint16_t>(((c & 0xff) << 8) | (c >> 8));
    REQUIRE(same(out[c], ref_bf16(sw)));
  }
}

TEST_CASE("encoders round to nearest even and round-trip every code", "[io][tensors]") {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float f = f16_to_float(static_cast<std::uint16_t>(c));
    if (!std::isnan(f)) REQUIRE(float_to_f16(f) == c);
    const float b = bf16_to_float(static_cast<std::uint16_t>(c));
    if (!std::isnan(b)) REQUIRE(float_to_bf16(b) == c);
  }
  for (int c = 0; c < 256; ++c) {
    const float f = f8_e4m3_to_float(static_cast<std::uint8_t>(c));
    if (!std::isnan(f)) REQUIRE(f8_e4m3_to_float(float_to_f8_e4m3(f)) == f);
  }
  // ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 in binary16 -> even (1)
  CHECK(float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(float_to_f16(65520.0f) == 0x7c00);
  CHECK(float_to_f16(65519.0f) == 0x7bff);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(float_to_f8_e4m3(1.0625f) == 0x38);  // halfway between 1 and 1.125 -> even code 0x38
  CHECK_THROWS_WITH(float_to_f8_e4m3(449.0f, "w"), Catch::Contains("448"));
  CHECK_THROWS_AS(float_to_f8_e4m3(NAN), kvphase::error);
}

TEST_CASE("npy: numpy's own header layout reads (v1, C order, little-endian f4)", "[io][tensors]") {
  // the header numpy 1.x writes for np.arange(6, dtype='<f4').reshape(2, 3)
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  h.append(128 - 10 - h.size() - 1, ' ');
  h += '\n';
  std::vector<std::byte> data(24);
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(data.data() + 4 * i, &f, 4);
  }
  const auto img = npy_image(h, data);
  const npy_view v(img, "a.npy");
  CHECK(v.header.shape == std::vector<std::int64_t>{2, 3});
  CHECK(v.header.data_offset == 128);
  const auto m = v.matrix<double>();
  REQUIRE(m.rows() == 2);
  CHECK(m(1, 2) == 5.0);
}

TEST_CASE("npy: write/read round trip over versions, byte orders, orders and dtypes", "[io][tensors]") {
  const std::vector<std::int64_t> shape{2, 3, 4};
  std::vector<double> vals(24);
  for (int i = 0; i < 24; ++i) vals[i] = (i % 2 ? -1.0 : 1.0) * (i * 0.5);
  for (bool big : {false, true})
    for (bool fortran : {false, true})
      for (tensor_dtype dt : {tensor_dtype::f16, tensor_dtype::f32, tensor_dtype::f64, tensor_dtype::i8,
                              tensor_dtype::i16, tensor_dtype::i32, tensor_dtype::i64}) {
        std::vector<double> v = vals;
        if (!is_float_dtype(dt))
          for (auto& x : v) x = std::round(x);
        const auto img = npy_bytes<double>(v, shape, dt, {.fortran_order = fortran, .big_endian = big});
        const npy_view r(img, "rt.npy");
        CHECK(r.header.fortran_order == fortran);
        CHECK(r.header.dtype == dt);
        CHECK(r.values<double>() == v);
      }
  const std::vector<std::int64_t> shape2{5};
  const std::vector<int> b{0, 1, 1, 0, 1};
  CHECK(npy_view(npy_bytes<int>(b, shape2, tensor_dtype::boolean), "b.npy").values<int>() == b);
  const std::vector<std::uint64_t> big{0, 1, (std::uint64_t(1) << 63) + 7};
  const std::vector<std::int64_t> shape3{3};
  CHECK(npy_view(npy_bytes<std::uint64_t>(big, shape3, tensor_dtype::u64), "u.npy").values<std::uint64_t>() == big);
  // scalar (shape ()) and empty arrays
  const std::vector<double> one{3.5};
  CHECK(npy_view(npy_bytes<double>(one, {}, tensor_dtype::f64), "s.npy").values<double>() == one);
  const std::vector<std::int64_t> shape0{0, 4};
  CHECK(npy_view(npy_bytes<double>({}, shape0, tensor_dtype::f64), "e.npy").values<double>().empty());
  // versions 2 and 3 (4-byte header length) read; '=' and '|' byte orders
  std::string h = "{'descr': '=f8', 'fortran_order': False, 'shape': (1,), }\n";
  std::vector<std::byte> d(8);
  const double x = 2.25;
  std::memcpy(d.data(), &x, 8);
  CHECK(npy_view(npy_image(h, d, 2), "v2.npy").values<double>()[0] == 2.25);
  CHECK(npy_view(npy_image(h, d, 3), "v3.npy").values<double>()[0] == 2.25);
  CHECK(npy_view(npy_image("{\"descr\": \"|u1\", \"shape\": (2,), \"fortran_order\": True}", bytes_of("\x05\x07")),
                 "u1.npy")
            .values<int>() == std::vector<int>{5, 7});
  // a file on disk, memory-mapped
  matrixf m(3, 2);
  m << 1, 2, 3, 4, 5, 6;
  const auto p = tmp_path("m.npy");
  write_npy<float>(p, m);
  const npy_file f(p);
  CHECK(f.matrix<float>() == m);
}

TEST_CASE("npy: every malformed-file rule is an error naming the file and the rule", "[io][tensors]") {
  const std::string ok = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n";
  const std::vector<std::byte> d8(8);
  CHECK_THAT(npy_error(bytes_of("\x93NUM")), Catch::Contains("x.npy") && Catch::Contains("truncated"));
  CHECK_THAT(npy_error(bytes_of("PK\x03\x04xxxxxxxxxx")), Catch::Contains("magic"));
  CHECK_THAT(npy_error(npy_image(ok, d8, 4)), Catch::Contains("version") && Catch::Contains("1, 2 or 3"));
  {  // header length beyond the file
    auto img = npy_image(ok, d8);
    img[8] = std::byte(0xff);
    img[9] = std::byte(0x7f);
    CHECK_THAT(npy_error(img), Catch::Contains("header length") && Catch::Contains("beyond"));
  }
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", d8)),
             Catch::Contains("truncated") && Catch::Contains("needs 16"));
  CHECK_THAT(npy_error(npy_image(ok, std::vector<std::byte>(9))), Catch::Contains("trailing"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", d8)),
             Catch::Contains("descr"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<U4', 'fortran_order': False, 'shape': (1,), }", d8)),
             Catch::Contains("unsupported"));
  CHECK_THAT(npy_error(npy_image("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }", d8)),
             Catch::Contains("structured"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", d8)),
             Catch::Contains(">= 0"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", d8)),
             Catch::Contains("overflow"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", d8)),
             Catch::Contains("2^62"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (1,), }", d8)),
             Catch::Contains("True or False"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'shape': (1,), }", d8)), Catch::Contains("must have the keys"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", d8)),
             Catch::Contains("repeated"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}", d8)),
             Catch::Contains("unknown"));
  CHECK_THAT(npy_error(npy_image("['descr']", d8)), Catch::Contains("dict literal"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)} junk", d8)),
             Catch::Contains("only spaces"));
  CHECK_THAT(npy_error(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\xc3\xa9", d8)),
             Catch::Contains("ASCII"));
  CHECK_THROWS_WITH(npy_file(tmp_path("does_not_exist.npy")), Catch::Contains("cannot be opened"));
}

TEST_CASE("safetensors: write/read round trip of every dtype, metadata and matrices", "[io][tensors]") {
  safetensors_writer w;
  const std::vector<std::int64_t> s23{2, 3};
  const std::vector<double> v{0.5, -1.25, 2.0, 3.0, -4.0, 0.0};
  const std::vector<double> vi{0, -1, 2, 3, -4, 0};
  for (tensor_dtype dt :
       {tensor_dtype::f64, tensor_dtype::f32, tensor_dtype::f16, tensor_dtype::bf16, tensor_dtype::f8_e4m3})
    w.add<double>(std::string("t_") + to_string(dt), s23, v, dt);
  for (tensor_dtype dt : {tensor_dtype::i64, tensor_dtype::i32, tensor_dtype::i16, tensor_dtype::i8})
    w.add<double>(std::string("t_") + to_string(dt), s23, vi, dt);
  const std::vector<int> bits{1, 0, 1};
  const std::vector<std::int64_t> s3{3};
  w.add<int>("mask", s3, bits, tensor_dtype::boolean);
  w.add<int>("bytes", s3, bits, tensor_dtype::u8);
  w.metadata("format", "pt");
  const auto p = tmp_path("all.safetensors");
  w.write(p);
  const safetensors_file f(p);
  CHECK(f.header().metadata.at("format") == "pt");
  for (tensor_dtype dt :
       {tensor_dtype::f64, tensor_dtype::f32, tensor_dtype::f16, tensor_dtype::bf16, tensor_dtype::f8_e4m3})
    CHECK(f.values<double>(std::string("t_") + to_string(dt)) == v);
  for (tensor_dtype dt : {tensor_dtype::i64, tensor_dtype::i32, tensor_dtype::i16, tensor_dtype::i8})
    CHECK(f.values<double>(std::string("t_") + to_string(dt)) == vi);
  CHECK_THROWS_WITH(w.add<double>("frac", s23, v, tensor_dtype::i32), Catch::Contains("integer"));
  CHECK(f.values<int>("mask") == bits);
  CHECK(f.matrix<float>("t_F32")(1, 1) == -4.0f);
  CHECK_THROWS_WITH(f.values<double>("nope"), Catch::Contains("all.safetensors") && Catch::Contains("not in the file"));
  CHECK_THROWS_WITH(w.add<double>("t_F64", s23, v, tensor_dtype::f64), Catch::Contains("unique"));
  CHECK_THROWS_WITH(w.add<double>("big", s3, std::vector<double>{1, 2, 500}, tensor_dtype::f8_e4m3),
                    Catch::Contains("448"));
}

TEST_CASE("safetensors: block-scaled F8 weights are dequantised on load", "[io][tensors]") {
  std::mt19937_64 g(7);
  std::normal_distribution<double> nd(0.0, 0.02);
  matrixd m(130, 300);  // partial blocks in both directions: scales 2 x 3
  for (index_t i = 0; i < m.rows(); ++i)
    for (index_t k = 0; k < m.cols(); ++k) m(i, k) = nd(g) * (1 + i / 64);
  safetensors_writer w;
  const matrixd back = w.add_f8_block_scaled<double>("layer.weight", m);
  const auto p = tmp_path("f8.safetensors");
  w.write(p);
  const safetensors_file f(p);
  CHECK(f.info("layer.weight_scale_inv").shape == std::vector<std::int64_t>{2, 3});
  const matrixd got = f.matrix<double>("layer.weight");
  // the reader's value is code * scale in float: equal to the writer's reconstruction
  CHECK((got - back).cwiseAbs().maxCoeff() == 0.0);
  // and within F8's half-ulp (2^-4 relative) of the original, scaled by the block maximum
  CHECK((got - m).cwiseAbs().maxCoeff() <= m.cwiseAbs().maxCoeff() * 0.0625);
  // a scale of the wrong shape is an error naming the tensor
  safetensors_writer w2;
  const std::vector<std::int64_t> s{130, 300}, bad{1, 3};
  w2.add<double>("x.weight", s, std::vector<double>(130 * 300, 1.0), tensor_dtype::f8_e4m3);
  w2.add<double>("x.weight_scale_inv", bad, std::vector<double>{1, 1, 1}, tensor_dtype::f32);
  const auto img = w2.bytes();
  CHECK_THROWS_WITH(safetensors_view(img, "q.safetensors").values<float>("x.weight"),
                    Catch::Contains("x.weight_scale_inv") && Catch::Contains("128x128"));
}

TEST_CASE("safetensors: every malformed-file rule is an error naming the file, the tensor and the rule",
          "[io][tensors]") {
  const std::string t = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(st_error(st_image(t, 8)) == "(no error)");
  CHECK_THAT(st_error(bytes_of("\x05\x00\x00")), Catch::Contains("w.safetensors") && Catch::Contains("truncated"));
  {
    auto img = st_image(t, 8);
    img[3] = std::byte(1);  // header length 2^24 + …: beyond the file
    CHECK_THAT(st_error(img), Catch::Contains("header length") && Catch::Contains("beyond"));
    img[5] = std::byte(1);
    CHECK_THAT(st_error(img), Catch::Contains("at most"));
  }
  CHECK_THAT(st_error(st_image("{\"a\":", 0)), Catch::Contains("not valid JSON"));
  CHECK_THAT(st_error(st_image("[1,2]", 0)), Catch::Contains("must be a JSON object"));
  CHECK_THAT(st_error(st_image(R"({"a":3})", 0)),
             Catch::Contains("tensor 'a'") && Catch::Contains("must be an object"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2]}})", 8)),
             Catch::Contains("'a'") && Catch::Contains("data_offsets") && Catch::Contains("required"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8)),
             Catch::Contains("only dtype, shape and data_offsets"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", 8)),
             Catch::Contains("'a' dtype") && Catch::Contains("unknown dtype"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
             Catch::Contains("'a' shape") && Catch::Contains("[0, 2^62)"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
             Catch::Contains("integers"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8)),
             Catch::Contains("'a' shape") && Catch::Contains("2^62"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
             Catch::Contains("begin must be <= end"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)),
             Catch::Contains("[begin, end]"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8)),
             Catch::Contains("'a' data_offsets") && Catch::Contains("beyond the data"));
  CHECK_THAT(st_error(st_image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
             Catch::Contains("'a' data_offsets") && Catch::Contains("must equal shape [3] x 4 bytes = 12"));
  CHECK_THAT(
      st_error(st_image(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12)),
      Catch::Contains("'b' data_offsets") && Catch::Contains("overlap tensor 'a'"));
  CHECK_THAT(
      st_error(st_image(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          8)),
      Catch::Contains("more than once"));
  CHECK_THAT(st_error(st_image(R"({"__metadata__":{"k":1}})", 0)),
             Catch::Contains("__metadata__.k") && Catch::Contains("string"));
  CHECK_THAT(st_error(st_image(R"({"__metadata__":[1]})", 0)), Catch::Contains("object of strings"));
  {  // a file truncated after the header: offsets reach beyond the data
    safetensors_writer w;
    const std::vector<std::int64_t> s{4};
    w.add<double>("x", s, std::vector<double>{1, 2, 3, 4}, tensor_dtype::f32);
    auto img = w.bytes();
    img.resize(img.size() - 3);
    CHECK_THAT(st_error(img), Catch::Contains("'x' data_offsets") && Catch::Contains("truncated"));
  }
  std::string deep(200, '[');
  CHECK_THAT(st_error(st_image(deep, 0)), Catch::Contains("nest"));
}

TEST_CASE("safetensors: sharded checkpoints through model.safetensors.index.json", "[io][tensors]") {
  const auto dir = std::filesystem::path(tmp_path("sharded"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::int64_t> s{2};
  safetensors_writer a, b;
  a.add<double>("x", s, std::vector<double>{1, 2}, tensor_dtype::f32);
  b.add<double>("y", s, std::vector<double>{3, 4}, tensor_dtype::bf16);
  a.write((dir / "model-00001-of-00002.safetensors").string());
  b.write((dir / "model-00002-of-00002.safetensors").string());
  auto index = [&](const std::string& text) { std::ofstream((dir / "model.safetensors.index.json").string()) << text; };
  index(
      R"({"metadata":{"total_size":12},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
  const safetensors_checkpoint ck(dir.string());
  CHECK(ck.file_count() == 2);
  CHECK(ck.values<double>("y") == std::vector<double>{3, 4});
  CHECK(ck.names() == std::vector<std::string>{"x", "y"});
  CHECK_THROWS_WITH(ck.values<double>("z"), Catch::Contains("not in the checkpoint"));
  index(R"({"weight_map":{"x":"../model-00001-of-00002.safetensors"}})");
  CHECK_THROWS_WITH(safetensors_checkpoint(dir.string()), Catch::Contains("plain file name"));
  index(R"({"weight_map":{"y":"model-00001-of-00002.safetensors"}})");
  CHECK_THROWS_WITH(safetensors_checkpoint(dir.string()), Catch::Contains("does not hold this tensor"));
  index(R"({"weight_map":{"y":"model-00009.safetensors"}})");
  CHECK_THROWS_WITH(safetensors_checkpoint(dir.string()), Catch::Contains("cannot be opened"));
  index(R"({"weight_map":[1]})");
  CHECK_THROWS_WITH(safetensors_checkpoint(dir.string()), Catch::Contains("weight_map"));
  index(R"({"weight_map":)");
  CHECK_THROWS_WITH(safetensors_checkpoint(dir.string()), Catch::Contains("not valid JSON"));
  // a single file opens directly
  CHECK(safetensors_checkpoint((dir / "model-00001-of-00002.safetensors").string()).values<float>("x") ==
        std::vector<float>{1, 2});
}

namespace {
/// Resident set size of this process in bytes (VmRSS).
std::size_t resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return static_cast<std::size_t>(std::stoull(line.substr(6))) * 1024;
  return 0;
}
}  // namespace

TEST_CASE("safetensors: a 1 GiB BF16 file streams with resident memory far below its size", "[io][tensors][slow]") {
  // written in pieces (never whole in memory): one BF16 tensor of 2^29 elements, value i mod 251
  const std::uint64_t n = std::uint64_t(1) << 29;
  const auto p = tmp_path("big.safetensors");
  {
    std::string h = R"({"big":{"dtype":"BF16","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
                    std::to_string(2 * n) + "]}}";
    h.append((8 - h.size() % 8) % 8, ' ');
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    const std::uint64_t hl = h.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f << h;
    std::vector<std::uint16_t> piece(std::size_t(1) << 20);
    for (std::uint64_t first = 0; first < n; first += piece.size()) {
      for (std::size_t i = 0; i < piece.size(); ++i)
        piece[i] = io::float_to_bf16(static_cast<float>((first + i) % 251));
      f.write(reinterpret_cast<const char*>(piece.data()), static_cast<std::streamsize>(2 * piece.size()));
    }
    REQUIRE(f.good());
  }
  const std::size_t before = resident_bytes();
  std::size_t peak = before;
  double sum = 0;
  std::uint64_t bad = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    const safetensors_file f(p);
    f.stream<float>("big", std::size_t(1) << 20, [&](std::span<const float> piece, std::uint64_t first) {
      for (std::size_t i = 0; i < piece.size(); i += 4099) bad += piece[i] != static_cast<float>((first + i) % 251);
      sum += piece[0];
      if ((first >> 20) % 64 == 0) peak = std::max(peak, resident_bytes());
    });
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(p);
  CHECK(bad == 0);
  CHECK(sum > 0);
  const double grown_mib = static_cast<double>(peak - std::min(peak, before)) / (1 << 20);
  std::cout << "1 GiB BF16 streamed in " << sec << " s (" << 1.0737e9 / sec / 1e9 << " GB/s of file), resident growth "
            << grown_mib << " MiB\n";
  CHECK(grown_mib < 64.0);  // far below the 1024 MiB file
}

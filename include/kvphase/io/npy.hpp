#pragma once
/// \file io/npy.hpp
/// NumPy `.npy` files: read (memory-mapped) and write.
///
/// Format (numpy.lib.format): magic "\x93NUMPY", major and minor version bytes, the header
/// length (versions 1.x: 2 bytes, 2.x and 3.x: 4 bytes, little-endian), then the header: a Python
/// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with spaces to
/// a multiple of 64 bytes and ended by '\n' (version 3 allows UTF-8 in it), then the data.
///
/// Read: versions 1–3; descr with byte order '<', '>', '|' or '=' and kinds f2 f4 f8, i1 i2 i4 i8,
/// u1 u2 u4 u8, b1 and '?' (bool); C and Fortran order. Values come back in C order (row-major),
/// converted to the requested type. Every inconsistency is a kvphase::error naming the file and
/// the rule: a truncated magic or header, an unknown version, a header that is not the dict
/// literal above (unknown or missing keys, bad values), an unsupported descr (structured,
/// strings, objects, complex), a negative or overflowing shape, and a data part whose length is
/// not shape × item size.
///
/// Write: version 1.0 (2.0 when the header needs more than 65535 bytes), little-endian or
/// big-endian, C or Fortran order (data given in C order is written in the requested order).
///
/// Library or own code: xtensor (Debian's xtensor-dev) has an npy reader, but it reads through
/// a stream into an xarray (no memory map), does not report malformed headers as errors of the
/// kinds above, and would add a dependency to every consumer of this header-only library; the
/// format is small enough to implement and test completely here (docs/io.md).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/io/tensor_data.hpp"
#include "kvphase/io/text.hpp"

namespace kvphase::io {

/// The parsed header of an .npy file.
struct npy_header {
  int major = 1, minor = 0;
  tensor_dtype dtype = tensor_dtype::f64;
  bool big_endian = false;  ///< stored byte order (single-byte types: false)
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
  std::size_t data_offset = 0;  ///< byte offset of the data
  std::size_t data_bytes = 0;   ///< shape × item size
  [[nodiscard]] std::uint64_t count() const { return checked_numel(shape, dtype_size(dtype), "npy"); }
};

namespace detail {

/// A cursor over the header's dict literal.
struct npy_lexer {
  std::string_view s;
  std::size_t i = 0;
  const std::string& src;
  [[noreturn]] void bad(std::string_view rule) const {
    fail(src + " npy header", "byte " + std::to_string(i), std::string(rule));
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c, std::string_view what) {
    if (!eat(c)) bad(what);
  }
  std::string str() {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) bad("expected a quoted string");
    const char q = s[i++];
    std::string out;
    while (i < s.size() && s[i] != q) {
      if (s[i] == '\\') bad("escapes are not supported in header strings");
      out += s[i++];
    }
    if (i >= s.size()) bad("unterminated string");
    ++i;
    return out;
  }
  bool boolean() {
    ws();
    if (s.substr(i, 4) == "True") {
      i += 4;
      return true;
    }
    if (s.substr(i, 5) == "False") {
      i += 5;
      return false;
    }
    bad("fortran_order must be True or False");
  }
  std::int64_t integer() {
    ws();
    const std::size_t start = i;
    std::int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (v > (std::int64_t(1) << 62) / 10) bad("shape dimension overflows (must be < 2^62)");
      v = v * 10 + (s[i++] - '0');
    }
    if (i == start) bad(s.substr(i, 1) == "-" ? "shape dimensions must be >= 0" : "expected a non-negative integer");
    if (i < s.size() && s[i] == 'L') ++i;  // Python 2 long suffix
    return v;
  }
  std::vector<std::int64_t> tuple() {
    expect('(', "shape must be a tuple");
    std::vector<std::int64_t> out;
    if (eat(')')) return out;
    for (;;) {
      out.push_back(integer());
      if (out.size() > 64) bad("shape has more than 64 dimensions");
      if (eat(')')) return out;
      expect(',', "expected ',' or ')' in the shape");
      if (eat(')')) return out;
    }
  }
};

inline void parse_descr(const std::string& d, npy_header& h, const std::string& src) {
  auto bad = [&](std::string_view rule) { fail(src + " npy descr", "'" + d + "'", std::string(rule)); };
  if (d.size() < 2 || d.size() > 3)
    bad("must be a simple type such as '<f4' (structured and string types are not supported)");
  const char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') bad("byte order must be <, >, | or =");
  const std::string_view t = std::string_view(d).substr(1);
  struct entry {
    std::string_view code;
    tensor_dtype dt;
  };
  static constexpr entry table[] = {
      {"f2", tensor_dtype::f16},   {"f4", tensor_dtype::f32}, {"f8", tensor_dtype::f64}, {"i1", tensor_dtype::i8},
      {"i2", tensor_dtype::i16},   {"i4", tensor_dtype::i32}, {"i8", tensor_dtype::i64}, {"u1", tensor_dtype::u8},
      {"u2", tensor_dtype::u16},   {"u4", tensor_dtype::u32}, {"u8", tensor_dtype::u64}, {"b1", tensor_dtype::boolean},
      {"?", tensor_dtype::boolean}};
  for (const auto& e : table)
    if (t == e.code) {
      h.dtype = e.dt;
      h.big_endian =
          dtype_size(e.dt) > 1 && (order == '>' || (order == '=' && std::endian::native == std::endian::big));
      return;
    }
  bad("unsupported type (f2 f4 f8, i1 i2 i4 i8, u1 u2 u4 u8, b1 and ? are read)");
}

}  // namespace detail

/// Parses and validates the header of the .npy file whose bytes are `file` (the whole file);
/// `source` names it in errors. Checks that the data part holds exactly shape × item size bytes.
inline npy_header parse_npy_header(std::span<const std::byte> file, std::string_view source) {
  const std::string src(source);
  const auto* b = reinterpret_cast<const unsigned char*>(file.data());
  const std::size_t n = file.size();
  if (n < 10) fail(src, n, "is not an .npy file: truncated before the end of the magic and version (10 bytes)");
  static constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (std::memcmp(b, magic, 6) != 0) fail(src, "(no magic)", "is not an .npy file: must start with \\x93NUMPY");
  npy_header h;
  h.major = b[6];
  h.minor = b[7];
  if (h.major < 1 || h.major > 3) fail(src + " npy version", h.major, "must be 1, 2 or 3");
  std::size_t hlen, hstart;
  if (h.major == 1) {
    hlen = static_cast<std::size_t>(b[8]) | (static_cast<std::size_t>(b[9]) << 8);
    hstart = 10;
  } else {
    if (n < 12) fail(src, n, "truncated: the 4-byte header length is incomplete");
    hlen = static_cast<std::size_t>(b[8]) | (static_cast<std::size_t>(b[9]) << 8) |
           (static_cast<std::size_t>(b[10]) << 16) | (static_cast<std::size_t>(b[11]) << 24);
    hstart = 12;
  }
  if (hlen > n - hstart)
    fail(src + " npy header length", hlen, "is beyond the end of the file (" + std::to_string(n) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(b + hstart), hlen);
  if (h.major < 3) {
    for (char c : text)
      if (static_cast<unsigned char>(c) >= 0x80)
        fail(src + " npy header", "(non-ASCII byte)", "versions 1 and 2 must be ASCII");
  }
  detail::npy_lexer lx{text, 0, src};
  lx.expect('{', "the header must be a dict literal starting with '{'");
  bool have_descr = false, have_order = false, have_shape = false;
  std::string descr;
  while (!lx.eat('}')) {
    const std::string key = lx.str();
    lx.expect(':', "expected ':' after a key");
    if (key == "descr" && !have_descr) {
      if (lx.eat('[')) lx.bad("structured dtypes (a list descr) are not supported");
      descr = lx.str();
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      h.fortran_order = lx.boolean();
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      h.shape = lx.tuple();
      have_shape = true;
    } else {
      lx.bad("unknown or repeated key '" + detail::excerpt(key, 40) + "' (descr, fortran_order and shape once each)");
    }
    if (!lx.eat(',')) {
      lx.expect('}', "expected ',' or '}'");
      break;
    }
  }
  lx.ws();
  if (lx.i != text.size()) lx.bad("only spaces and a newline may follow the dict");
  if (!have_descr || !have_order || !have_shape)
    fail(src + " npy header", "(incomplete)", "must have the keys descr, fortran_order and shape");
  detail::parse_descr(descr, h, src);
  h.data_offset = hstart + hlen;
  const std::uint64_t count = checked_numel(h.shape, dtype_size(h.dtype), src + " npy");
  h.data_bytes = static_cast<std::size_t>(count * dtype_size(h.dtype));
  const std::size_t have = n - h.data_offset;
  if (have != h.data_bytes)
    fail(src + " npy data", std::to_string(have) + " bytes",
         (have < h.data_bytes ? "truncated: " : "has trailing bytes: ") + std::string("shape ") + shape_text(h.shape) +
             " x " + std::to_string(dtype_size(h.dtype)) + " bytes needs " + std::to_string(h.data_bytes));
  return h;
}

/// A parsed .npy image over bytes owned elsewhere (a mapped file or a buffer).
struct npy_view {
  npy_header header;
  std::span<const std::byte> data;  ///< the data part, in stored order
  std::string source;

  /// Parses `file` (throws kvphase::error naming `source`).
  npy_view(std::span<const std::byte> file, std::string_view src)
      : header(parse_npy_header(file, src)), data(file.subspan(header.data_offset)), source(src) {}

  [[nodiscard]] std::uint64_t count() const { return header.count(); }

  /// All values in C (row-major) order converted to T.
  template <class T>
  [[nodiscard]] std::vector<T> values() const {
    const std::size_t n = static_cast<std::size_t>(header.count());
    std::vector<T> flat(n);
    const bool swap = header.big_endian != (std::endian::native == std::endian::big);
    convert_elements<T>(data.data(), header.dtype, n, swap, flat.data());
    if (!header.fortran_order || header.shape.size() < 2 || n == 0) return flat;
    // Fortran storage: the first index varies fastest. Walk C order, tracking the F offset.
    const std::size_t nd = header.shape.size();
    std::vector<std::size_t> fstride(nd), idx(nd, 0);
    std::size_t s = 1;
    for (std::size_t k = 0; k < nd; ++k) {
      fstride[k] = s;
      s *= static_cast<std::size_t>(header.shape[k]);
    }
    std::vector<T> out(n);
    std::size_t off = 0;
    for (std::size_t c = 0; c < n; ++c) {
      out[c] = flat[off];
      for (std::size_t k = nd; k-- > 0;) {
        if (++idx[k] < static_cast<std::size_t>(header.shape[k])) {
          off += fstride[k];
          break;
        }
        off -= fstride[k] * (idx[k] - 1);
        idx[k] = 0;
      }
    }
    return out;
  }

  /// A 2-D array as a row-major matrix (1-D: one column). Throws kvphase::error for other ranks
  /// or a non-float dtype.
  template <class Real>
  [[nodiscard]] matrix_t<Real> matrix() const {
    require(header.shape.size() == 1 || header.shape.size() == 2, source + " shape", shape_text(header.shape),
            "must be 1-D or 2-D for a matrix");
    require(is_float_dtype(header.dtype), source + " dtype", to_string(header.dtype),
            "must be a float type for a matrix");
    const auto v = values<Real>();
    const index_t r = static_cast<index_t>(header.shape[0]);
    const index_t c = header.shape.size() == 2 ? static_cast<index_t>(header.shape[1]) : 1;
    matrix_t<Real> m(r, c);
    if (!v.empty()) std::memcpy(m.data(), v.data(), v.size() * sizeof(Real));
    return m;
  }
};

/// An .npy file, memory-mapped for its lifetime.
class npy_file {
 public:
  /// Maps and parses `path` (throws kvphase::error naming the file).
  explicit npy_file(const std::string& path) : map_(path), view_(map_.bytes(), path) {}
  [[nodiscard]] const npy_header& header() const noexcept { return view_.header; }
  [[nodiscard]] const npy_view& view() const noexcept { return view_; }
  [[nodiscard]] std::span<const std::byte> data() const noexcept { return view_.data; }
  template <class T>
  [[nodiscard]] std::vector<T> values() const {
    return view_.values<T>();
  }
  template <class Real>
  [[nodiscard]] matrix_t<Real> matrix() const {
    return view_.matrix<Real>();
  }

 private:
  mapped_file map_;
  npy_view view_;
};

/// Options of write_npy.
struct npy_write_options {
  bool fortran_order = false;  ///< store in Fortran order (the data argument is C order either way)
  bool big_endian = false;     ///< store big-endian ('>' descr)
};

namespace detail {
inline std::string npy_descr(tensor_dtype dt, bool big) {
  const char* code = nullptr;
  switch (dt) {
    case tensor_dtype::f16: code = "f2"; break;
    case tensor_dtype::f32: code = "f4"; break;
    case tensor_dtype::f64: code = "f8"; break;
    case tensor_dtype::i8: code = "i1"; break;
    case tensor_dtype::i16: code = "i2"; break;
    case tensor_dtype::i32: code = "i4"; break;
    case tensor_dtype::i64: code = "i8"; break;
    case tensor_dtype::u8: code = "u1"; break;
    case tensor_dtype::u16: code = "u2"; break;
    case tensor_dtype::u32: code = "u4"; break;
    case tensor_dtype::u64: code = "u8"; break;
    case tensor_dtype::boolean: code = "b1"; break;
    default: fail("npy dtype", to_string(dt), "has no .npy type (bfloat16 and float8 are not numpy types)");
  }
  return std::string(dtype_size(dt) == 1 ? "|" : (big ? ">" : "<")) + code;
}
}  // namespace detail

/// The bytes of an .npy file holding `values` (C order, shape `shape`) stored as `dt`.
/// Throws kvphase::error when the value count does not match the shape, a value does not fit
/// `dt`, or `dt` has no numpy type.
template <class T>
std::vector<std::byte> npy_bytes(std::span<const T> values, std::span<const std::int64_t> shape, tensor_dtype dt,
                                 const npy_write_options& opt = {}) {
  const std::uint64_t n = checked_numel(shape, dtype_size(dt), "npy write");
  require(n == values.size(), "values.size()", values.size(),
          "must equal the shape's element count " + std::to_string(n));
  std::string hdr = "{'descr': '" + detail::npy_descr(dt, opt.big_endian) +
                    "', 'fortran_order': " + (opt.fortran_order ? "True" : "False") + ", 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i)
    hdr += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  if (shape.size() == 1) hdr.resize(hdr.size() - 1);  // "(3,)"
  hdr += "), }";
  const bool v2 = hdr.size() + 11 > 65535;
  const std::size_t pre = v2 ? 12 : 10;
  std::size_t total = pre + hdr.size() + 1;
  hdr.append((64 - total % 64) % 64, ' ');
  hdr += '\n';
  std::vector<std::byte> out;
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(v2 ? 2 : 1), 0};
  for (unsigned char c : magic) out.push_back(static_cast<std::byte>(c));
  const std::size_t hl = hdr.size();
  for (std::size_t k = 0; k < (v2 ? 4u : 2u); ++k) out.push_back(static_cast<std::byte>((hl >> (8 * k)) & 0xff));
  for (char c : hdr) out.push_back(static_cast<std::byte>(c));
  // reorder to Fortran storage if asked
  std::vector<T> ordered;
  std::span<const T> src = values;
  if (opt.fortran_order && shape.size() >= 2 && n > 0) {
    ordered.resize(static_cast<std::size_t>(n));
    const std::size_t nd = shape.size();
    std::vector<std::size_t> fstride(nd), idx(nd, 0);
    std::size_t s = 1;
    for (std::size_t k = 0; k < nd; ++k) {
      fstride[k] = s;
      s *= static_cast<std::size_t>(shape[k]);
    }
    std::size_t off = 0;
    for (std::size_t c = 0; c < n; ++c) {
      ordered[off] = values[c];
      for (std::size_t k = nd; k-- > 0;) {
        if (++idx[k] < static_cast<std::size_t>(shape[k])) {
          off += fstride[k];
          break;
        }
        off -= fstride[k] * (idx[k] - 1);
        idx[k] = 0;
      }
    }
    src = ordered;
  }
  const std::size_t at = out.size();
  encode_elements<T>(src.data(), src.size(), dt, out, "npy value");
  const std::size_t sz = dtype_size(dt);
  if (sz > 1 && opt.big_endian != (std::endian::native == std::endian::big)) {
    for (std::size_t p = at; p < out.size(); p += sz)
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(p), out.begin() + static_cast<std::ptrdiff_t>(p + sz));
  }
  return out;
}

/// Writes bytes to `path` (throws kvphase::error naming the file if it cannot be written).
inline void write_file_bytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("file", path, "cannot be opened for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) fail("file", path, "could not be written completely");
}

/// Writes an .npy file (see npy_bytes).
template <class T>
void write_npy(const std::string& path, std::span<const T> values, std::span<const std::int64_t> shape, tensor_dtype dt,
               const npy_write_options& opt = {}) {
  write_file_bytes(path, npy_bytes<T>(values, shape, dt, opt));
}

/// Writes a row-major matrix as a 2-D .npy file of dtype dt (default: the matrix's own type).
template <class Real>
void write_npy(const std::string& path, const matrix_t<Real>& m,
               tensor_dtype dt = std::is_same_v<Real, float> ? tensor_dtype::f32 : tensor_dtype::f64,
               const npy_write_options& opt = {}) {
  const std::int64_t shape[2] = {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
  write_npy<Real>(path, std::span<const Real>(m.data(), static_cast<std::size_t>(m.size())), shape, dt, opt);
}

}  // namespace kvphase::io

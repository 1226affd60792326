#pragma once
/// \file io/safetensors.hpp
/// safetensors files: read (memory-mapped, single files and sharded checkpoints) and write.
///
/// Format: an 8-byte little-endian header length N, N bytes of JSON, then the data. The JSON is
/// an object: each member but "__metadata__" is a tensor
///   "name": {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]}
/// with offsets relative to the start of the data; "__metadata__" (optional) maps strings to
/// strings. Dtypes read: F64 F32 F16 BF16 F8_E4M3 I64 I32 I16 I8 U64 U32 U16 U8 BOOL.
///
/// Untrusted input: every inconsistency is a kvphase::error naming the file, the tensor and the
/// rule — a file shorter than the 8-byte length, a header length beyond the file or above
/// max_safetensors_header, JSON that does not parse or is not an object, a tensor entry that is
/// not an object with exactly dtype, shape and data_offsets, an unknown dtype, a shape that is
/// not a list of integers in [0, 2^62) or whose product overflows, offsets that are not
/// [begin, end] with begin <= end, that reach beyond the data, whose length differs from
/// shape × item size, or that overlap another tensor's, a metadata entry that is not a string.
/// Reads never touch bytes outside the mapped file.
///
/// Block-scaled F8 (DeepSeek checkpoints): a 2-D F8_E4M3 tensor "X.weight" with a companion
/// "X.weight_scale_inv" of shape [ceil(rows/128), ceil(cols/128)] is dequantised on load:
/// value[i][j] = f8[i][j] · scale_inv[i/128][j/128], computed in float (as the reference
/// dequantisation does) whatever the requested type. A companion of another shape is an error.
///
/// Sharded checkpoints: safetensors_checkpoint opens a single file, a directory (its
/// model.safetensors.index.json, or its only .safetensors file) or an index file directly; the
/// index's "weight_map" maps tensor names to shard file names in the index's directory (plain
/// file names only: no directory part), and every mapped tensor must exist in its shard.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/tensor_data.hpp"

namespace kvphase::io {

/// Largest header accepted (the reference implementation's limit).
inline constexpr std::uint64_t max_safetensors_header = std::uint64_t(100) << 20;
/// Edge of the square blocks of DeepSeek-style F8 scales.
inline constexpr std::int64_t f8_scale_block = 128;

/// One tensor of a safetensors header.
struct tensor_info {
  std::string name;
  tensor_dtype dtype = tensor_dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  ///< byte range relative to the data start
  [[nodiscard]] std::uint64_t count() const { return checked_numel(shape, dtype_size(dtype), name); }
};

/// A parsed, validated safetensors header.
struct safetensors_header {
  std::vector<tensor_info> tensors;  ///< in header order
  std::map<std::string, std::string> metadata;
  std::size_t data_offset = 0;  ///< 8 + header length
  std::size_t data_size = 0;    ///< bytes after the header
  [[nodiscard]] const tensor_info* find(std::string_view name) const noexcept {
    for (const auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

/// Parses and validates the header of the safetensors file whose bytes are `file` (see the file
/// comment for the rules); `source` names the file in errors.
inline safetensors_header parse_safetensors_header(std::span<const std::byte> file, std::string_view source) {
  const std::string src(source);
  if (file.size() < 8)
    fail(src, std::to_string(file.size()) + " bytes", "truncated: the 8-byte header length is missing");
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<std::uint8_t>(file[static_cast<std::size_t>(k)]);
  if (n > max_safetensors_header)
    fail(src + " header length", n, "must be at most " + std::to_string(max_safetensors_header) + " bytes");
  if (n > file.size() - 8)
    fail(src + " header length", n,
         "is beyond the end of the file (" + std::to_string(file.size() - 8) + " bytes follow it)");
  safetensors_header h;
  h.data_offset = static_cast<std::size_t>(8 + n);
  h.data_size = file.size() - h.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, static_cast<std::size_t>(n));
  // duplicate top-level names: JSON objects keep the last one silently, so count them here
  std::vector<std::string> keys;
  const auto j = [&] {
    detail::require_json_depth(text, src + " header");
    try {
      return nlohmann::json::parse(text.begin(), text.end(),
                                   [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
                                     if (depth == 1 && ev == nlohmann::json::parse_event_t::key && parsed.is_string())
                                       keys.push_back(parsed.get<std::string>());
                                     return true;
                                   });
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      const auto colon = what.find(": ");
      if (colon != std::string::npos) what.erase(0, colon + 2);
      fail(src + " header", "(JSON)", "is not valid JSON: " + detail::excerpt(what, 160));
    }
  }();
  if (!j.is_object()) fail(src + " header", detail::json_excerpt(j), "must be a JSON object");
  std::sort(keys.begin(), keys.end());
  if (const auto d = std::adjacent_find(keys.begin(), keys.end()); d != keys.end())
    fail(src + " tensor '" + detail::excerpt(*d) + "'", "(twice)", "appears more than once in the header");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(src + " __metadata__", detail::json_excerpt(v), "must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(src + " __metadata__." + detail::excerpt(m.key()), detail::json_excerpt(m.value()), "must be a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = src + " tensor '" + detail::excerpt(name, 120) + "'";
    if (!v.is_object()) fail(where, detail::json_excerpt(v), "must be an object with dtype, shape and data_offsets");
    for (auto m = v.begin(); m != v.end(); ++m)
      if (m.key() != "dtype" && m.key() != "shape" && m.key() != "data_offsets")
        fail(where + " member '" + detail::excerpt(m.key()) + "'", "(unknown)",
             "only dtype, shape and data_offsets are allowed");
    tensor_info t;
    t.name = name;
    const auto& dt = require_member(v, "dtype", where);
    if (!dt.is_string() || !parse_dtype(dt.get<std::string>(), t.dtype))
      fail(where + " dtype", detail::json_excerpt(dt),
           "unknown dtype (F64 F32 F16 BF16 F8_E4M3 I64 I32 I16 I8 U64 U32 U16 U8 BOOL are read)");
    const auto& sh = require_member(v, "shape", where);
    if (!sh.is_array()) fail(where + " shape", detail::json_excerpt(sh), "must be a list of integers");
    for (const auto& d : sh) {
      if (!d.is_number_integer() ||
          (d.is_number_unsigned() ? d.get<std::uint64_t>() >= (std::uint64_t(1) << 62) : d.get<std::int64_t>() < 0))
        fail(where + " shape", detail::json_excerpt(d), "dimensions must be integers in [0, 2^62)");
      t.shape.push_back(d.get<std::int64_t>());
    }
    const std::uint64_t numel = checked_numel(t.shape, dtype_size(t.dtype), where);
    const auto& off = require_member(v, "data_offsets", where);
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(where + " data_offsets", detail::json_excerpt(off), "must be [begin, end]: two non-negative integers");
    t.begin = off[0].get<std::uint64_t>();
    t.end = off[1].get<std::uint64_t>();
    if (t.begin > t.end)
      fail(where + " data_offsets", "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]",
           "begin must be <= end");
    if (t.end > h.data_size)
      fail(where + " data_offsets", "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]",
           "reach beyond the data (" + std::to_string(h.data_size) +
               " bytes): the file is truncated or the offsets are wrong");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      fail(where + " data_offsets", "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]",
           "length " + std::to_string(t.end - t.begin) + " must equal shape " + shape_text(t.shape) + " x " +
               std::to_string(dtype_size(t.dtype)) + " bytes = " + std::to_string(numel * dtype_size(t.dtype)));
    h.tensors.push_back(std::move(t));
  }
  // overlapping ranges: sort by begin and compare neighbours (empty tensors overlap nothing)
  std::vector<const tensor_info*> order;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const tensor_info* a, const tensor_info* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      fail(src + " tensor '" + detail::excerpt(order[i]->name, 120) + "' data_offsets",
           "[" + std::to_string(order[i]->begin) + ", " + std::to_string(order[i]->end) + "]",
           "overlap tensor '" + detail::excerpt(order[i - 1]->name, 120) + "' [" + std::to_string(order[i - 1]->begin) +
               ", " + std::to_string(order[i - 1]->end) + ")");
  return h;
}

/// A parsed safetensors image over bytes owned elsewhere (a mapped file or a buffer).
class safetensors_view {
 public:
  safetensors_view(std::span<const std::byte> file, std::string_view source)
      : file_(file), header_(parse_safetensors_header(file, source)), source_(source) {}

  [[nodiscard]] const safetensors_header& header() const noexcept { return header_; }
  [[nodiscard]] const std::vector<tensor_info>& tensors() const noexcept { return header_.tensors; }
  [[nodiscard]] const std::string& source() const noexcept { return source_; }
  [[nodiscard]] bool contains(std::string_view name) const noexcept { return header_.find(name) != nullptr; }

  /// The tensor `name`; throws kvphase::error naming the file if absent.
  [[nodiscard]] const tensor_info& info(std::string_view name) const {
    const tensor_info* t = header_.find(name);
    if (t == nullptr) fail(source_ + " tensor", std::string(name), "is not in the file");
    return *t;
  }
  /// Raw stored bytes of a tensor.
  [[nodiscard]] std::span<const std::byte> raw(std::string_view name) const {
    const tensor_info& t = info(name);
    return file_.subspan(header_.data_offset + static_cast<std::size_t>(t.begin),
                         static_cast<std::size_t>(t.end - t.begin));
  }

  /// The companion scale of a block-scaled F8 tensor (nullptr if none), validated.
  [[nodiscard]] const tensor_info* scale_of(const tensor_info& t) const {
    if (t.dtype != tensor_dtype::f8_e4m3) return nullptr;
    const tensor_info* s = header_.find(t.name + "_scale_inv");
    if (s == nullptr) return nullptr;
    const std::string where = source_ + " tensor '" + detail::excerpt(s->name, 120) + "'";
    require(t.shape.size() == 2, source_ + " tensor '" + t.name + "' shape", shape_text(t.shape),
            "a block-scaled F8 tensor must be 2-D");
    const std::int64_t br = (t.shape[0] + f8_scale_block - 1) / f8_scale_block,
                       bc = (t.shape[1] + f8_scale_block - 1) / f8_scale_block;
    require(s->shape.size() == 2 && s->shape[0] == br && s->shape[1] == bc, where + " shape", shape_text(s->shape),
            "must be [" + std::to_string(br) + "," + std::to_string(bc) + "]: one scale per 128x128 block of " +
                shape_text(t.shape));
    require(is_float_dtype(s->dtype) && s->dtype != tensor_dtype::f8_e4m3, where + " dtype", to_string(s->dtype),
            "must be F32, F64, F16 or BF16");
    return s;
  }

  /// Streams tensor `name` converted to T (and dequantised) in pieces of at most `chunk`
  /// elements: f(std::span<const T> piece, std::uint64_t first_element). With `release`, the
  /// mapped pages of each processed piece are dropped (resident memory stays about one piece).
  template <class T, class F>
  void for_each_chunk(std::string_view name, std::size_t chunk, F&& f, const mapped_file* release = nullptr) const {
    const tensor_info& t = info(name);
    const std::uint64_t n = t.count();
    chunk = std::max<std::size_t>(chunk, 1);
    const std::size_t sz = dtype_size(t.dtype);
    const std::byte* base = file_.data() + header_.data_offset + t.begin;
    const bool swap = std::endian::native == std::endian::big;
    std::vector<float> scales;
    std::int64_t cols = 0, bc = 0;
    if (const tensor_info* s = scale_of(t)) {
      scales.resize(static_cast<std::size_t>(s->count()));
      convert_elements<float>(file_.data() + header_.data_offset + s->begin, s->dtype, scales.size(), swap,
                              scales.data());
      cols = t.shape[1];
      bc = s->shape[1];
    }
    std::vector<T> buf(static_cast<std::size_t>(std::min<std::uint64_t>(n, chunk)));
    if (release) release->advise_sequential(header_.data_offset + t.begin, static_cast<std::size_t>(t.end - t.begin));
    for (std::uint64_t first = 0; first < n; first += chunk) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, n - first));
      convert_elements<T>(base + first * sz, t.dtype, k, swap, buf.data());
      if (!scales.empty()) {
        for (std::size_t i = 0; i < k; ++i) {
          const std::uint64_t e = first + i;
          const auto r = static_cast<std::int64_t>(e / static_cast<std::uint64_t>(cols)),
                     c = static_cast<std::int64_t>(e % static_cast<std::uint64_t>(cols));
          buf[i] = static_cast<T>(static_cast<float>(buf[i]) *
                                  scales[static_cast<std::size_t>((r / f8_scale_block) * bc + c / f8_scale_block)]);
        }
      }
      f(std::span<const T>(buf.data(), k), first);
      if (release) release->release(header_.data_offset + t.begin + first * sz, k * sz);
    }
  }

  /// All values of tensor `name` (row-major) converted to T; block-scaled F8 is dequantised.
  template <class T>
  [[nodiscard]] std::vector<T> values(std::string_view name) const {
    const tensor_info& t = info(name);
    std::vector<T> out(static_cast<std::size_t>(t.count()));
    for_each_chunk<T>(name, std::max<std::size_t>(out.size(), 1), [&](std::span<const T> p, std::uint64_t first) {
      std::copy(p.begin(), p.end(), out.begin() + static_cast<std::ptrdiff_t>(first));
    });
    return out;
  }

  /// A 1-D or 2-D float tensor as a row-major matrix (1-D: one column).
  template <class Real>
  [[nodiscard]] matrix_t<Real> matrix(std::string_view name) const {
    const tensor_info& t = info(name);
    require(t.shape.size() == 1 || t.shape.size() == 2, source_ + " tensor '" + t.name + "' shape", shape_text(t.shape),
            "must be 1-D or 2-D for a matrix");
    require(is_float_dtype(t.dtype), source_ + " tensor '" + t.name + "' dtype", to_string(t.dtype),
            "must be a float type for a matrix");
    const auto v = values<Real>(name);
    matrix_t<Real> m(static_cast<index_t>(t.shape[0]), t.shape.size() == 2 ? static_cast<index_t>(t.shape[1]) : 1);
    if (!v.empty()) std::memcpy(m.data(), v.data(), v.size() * sizeof(Real));
    return m;
  }

 private:
  std::span<const std::byte> file_;
  safetensors_header header_;
  std::string source_;
};

/// A safetensors file, memory-mapped for its lifetime.
class safetensors_file : public safetensors_view {
 public:
  explicit safetensors_file(const std::string& path) : safetensors_file(std::make_unique<mapped_file>(path)) {}
  [[nodiscard]] const mapped_file& map() const noexcept { return *map_; }
  /// for_each_chunk releasing the mapped pages of each processed piece.
  template <class T, class F>
  void stream(std::string_view name, std::size_t chunk, F&& f) const {
    for_each_chunk<T>(name, chunk, std::forward<F>(f), map_.get());
  }

 private:
  explicit safetensors_file(std::unique_ptr<mapped_file> m)
      : safetensors_view(m->bytes(), m->path()), map_(std::move(m)) {}
  std::unique_ptr<mapped_file> map_;
};

/// A checkpoint of one or more safetensors files (see the file comment).
class safetensors_checkpoint {
 public:
  /// Opens `path`: a .safetensors file, an index .json, or a directory. Throws kvphase::error
  /// naming the path and the rule.
  explicit safetensors_checkpoint(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p(path);
    if (fs::is_directory(p, ec)) {
      const fs::path idx = p / "model.safetensors.index.json";
      if (fs::exists(idx, ec)) {
        open_index(idx.string());
        return;
      }
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
      require(files.size() == 1, "checkpoint", path,
              "a directory must hold model.safetensors.index.json or exactly one .safetensors file (found " +
                  std::to_string(files.size()) + ")");
      add_file(files[0].string());
      for (const auto& t : files_[0]->tensors()) where_[t.name] = 0;
      return;
    }
    if (p.extension() == ".json") {
      open_index(path);
      return;
    }
    add_file(path);
    for (const auto& t : files_[0]->tensors()) where_[t.name] = 0;
  }

  [[nodiscard]] bool contains(std::string_view name) const { return where_.count(std::string(name)) != 0; }
  /// Tensor names (sorted).
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : where_) out.push_back(k);
    return out;
  }
  /// The file holding tensor `name`; throws kvphase::error if absent.
  [[nodiscard]] const safetensors_file& file_of(std::string_view name) const {
    const auto it = where_.find(std::string(name));
    if (it == where_.end()) fail("checkpoint tensor", std::string(name), "is not in the checkpoint");
    return *files_[it->second];
  }
  [[nodiscard]] const tensor_info& info(std::string_view name) const { return file_of(name).info(name); }
  template <class T>
  [[nodiscard]] std::vector<T> values(std::string_view name) const {
    return file_of(name).template values<T>(name);
  }
  template <class Real>
  [[nodiscard]] matrix_t<Real> matrix(std::string_view name) const {
    return file_of(name).template matrix<Real>(name);
  }
  [[nodiscard]] std::size_t file_count() const noexcept { return files_.size(); }

 private:
  std::size_t add_file(const std::string& path) {
    for (std::size_t i = 0; i < paths_.size(); ++i)
      if (paths_[i] == path) return i;
    files_.push_back(std::make_unique<safetensors_file>(path));
    paths_.push_back(path);
    return files_.size() - 1;
  }
  void open_index(const std::string& index_path) {
    namespace fs = std::filesystem;
    mapped_file m(index_path);
    const std::string_view text(reinterpret_cast<const char*>(m.bytes().data()), m.size());
    const auto j = parse_json_as<nlohmann::json>(text, index_path);
    const auto& wm = require_member(j, "weight_map", index_path);
    if (!wm.is_object())
      fail(index_path + " weight_map", detail::json_excerpt(wm), "must be an object of tensor name -> file name");
    const fs::path dir = fs::path(index_path).parent_path();
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const std::string where = index_path + " weight_map['" + detail::excerpt(it.key(), 120) + "']";
      if (!it.value().is_string()) fail(where, detail::json_excerpt(it.value()), "must be a file name");
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos)
        fail(where, f, "must be a plain file name in the index's directory");
      const std::size_t k = add_file((dir / f).string());
      if (!files_[k]->contains(it.key())) fail(where, f, "the shard does not hold this tensor");
      where_[it.key()] = k;
    }
  }
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::vector<std::string> paths_;
  std::map<std::string, std::size_t> where_;
};

/// Builds a safetensors file in memory (tests, training checkpoints).
class safetensors_writer {
 public:
  /// Adds `values` (row-major, shape `shape`) stored as `dt`. Throws kvphase::error for a
  /// duplicate or reserved name, a count that differs from the shape, or a value `dt` cannot hold.
  template <class T>
  void add(const std::string& name, std::span<const std::int64_t> shape, std::span<const T> values, tensor_dtype dt) {
    const std::uint64_t n = checked_numel(shape, dtype_size(dt), name);
    require(n == values.size(), "tensor '" + name + "' values.size()", values.size(),
            "must equal the shape's element count " + std::to_string(n));
    std::vector<std::byte> bytes;
    encode_elements<T>(values.data(), values.size(), dt, bytes, "tensor '" + name + "'");
    add_raw(name, dt, shape, bytes);
  }
  /// Adds a matrix (2-D) stored as `dt`.
  template <class Real>
  void add(const std::string& name, const matrix_t<Real>& m, tensor_dtype dt) {
    const std::int64_t shape[2] = {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
    add<Real>(name, shape, std::span<const Real>(m.data(), static_cast<std::size_t>(m.size())), dt);
  }
  /// Adds a vector (1-D) stored as `dt`.
  template <class Real>
  void add(const std::string& name, const vector_t<Real>& v, tensor_dtype dt) {
    const std::int64_t shape[1] = {static_cast<std::int64_t>(v.size())};
    add<Real>(name, shape, std::span<const Real>(v.data(), static_cast<std::size_t>(v.size())), dt);
  }
  /// Adds a 2-D tensor as DeepSeek-style block-scaled F8: codes of value / s_b in `name` and the
  /// F32 scales s_b = max|value in block b| / 448 (1 for an all-zero block) in
  /// `name + "_scale_inv"`. Returns the values a reader gets back (code · scale).
  template <class Real>
  matrix_t<Real> add_f8_block_scaled(const std::string& name, const matrix_t<Real>& m) {
    const index_t R = m.rows(), C = m.cols(), B = f8_scale_block;
    const index_t br = (R + B - 1) / B, bc = (C + B - 1) / B;
    matrix_t<float> s(br, bc);
    matrix_t<float> q(R, C);
    matrix_t<Real> back(R, C);
    for (index_t a = 0; a < br; ++a)
      for (index_t b = 0; b < bc; ++b) {
        double mx = 0;
        for (index_t i = a * B; i < std::min(R, (a + 1) * B); ++i)
          for (index_t k = b * B; k < std::min(C, (b + 1) * B); ++k)
            mx = std::max(mx, std::fabs(static_cast<double>(m(i, k))));
        const float sc = mx > 0 ? static_cast<float>(mx / 448.0) : 1.0f;
        s(a, b) = sc;
        for (index_t i = a * B; i < std::min(R, (a + 1) * B); ++i)
          for (index_t k = b * B; k < std::min(C, (b + 1) * B); ++k) {
            float v = static_cast<float>(static_cast<double>(m(i, k)) / sc);
            v = std::clamp(v, -448.0f, 448.0f);
            const std::uint8_t code = float_to_f8_e4m3(v, name);
            q(i, k) = f8_e4m3_to_float(code);
            back(i, k) = static_cast<Real>(q(i, k) * sc);
          }
      }
    add<float>(name, q, tensor_dtype::f8_e4m3);
    add<float>(name + "_scale_inv", s, tensor_dtype::f32);
    return back;
  }
  /// Adds stored bytes as they are (their length must equal shape × item size).
  void add_raw(const std::string& name, tensor_dtype dt, std::span<const std::int64_t> shape,
               std::span<const std::byte> bytes) {
    require(name != "__metadata__" && !name.empty(), "tensor name", name, "must be non-empty and not __metadata__");
    for (const auto& e : entries_) require(e.name != name, "tensor name", name, "must be unique in a file");
    const std::uint64_t n = checked_numel(shape, dtype_size(dt), name);
    require(bytes.size() == n * dtype_size(dt), "tensor '" + name + "' bytes", bytes.size(),
            "must equal shape x item size = " + std::to_string(n * dtype_size(dt)));
    entries_.push_back(
        {name, dt, std::vector<std::int64_t>(shape.begin(), shape.end()), data_.size(), data_.size() + bytes.size()});
    data_.insert(data_.end(), bytes.begin(), bytes.end());
  }
  /// Sets a "__metadata__" entry.
  void metadata(const std::string& key, const std::string& value) { meta_[key] = value; }

  /// The file's bytes (header padded with spaces to a multiple of 8).
  [[nodiscard]] std::vector<std::byte> bytes() const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (!meta_.empty()) j["__metadata__"] = meta_;
    for (const auto& e : entries_)
      j[e.name] = {{"dtype", to_string(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
    std::string h = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    h.append((8 - h.size() % 8) % 8, ' ');
    std::vector<std::byte> out(8);
    const std::uint64_t n = h.size();
    for (int k = 0; k < 8; ++k) out[static_cast<std::size_t>(k)] = static_cast<std::byte>((n >> (8 * k)) & 0xff);
    for (char c : h) out.push_back(static_cast<std::byte>(c));
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }
  /// Writes the file (throws kvphase::error naming it if it cannot be written).
  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) fail("file", path, "cannot be opened for writing");
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    f.close();
    if (!f) fail("file", path, "could not be written completely");
  }

 private:
  struct entry {
    std::string name;
    tensor_dtype dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
  };
  std::vector<entry> entries_;
  std::vector<std::byte> data_;
  std::map<std::string, std::string> meta_;
};

}  // namespace kvphase::io

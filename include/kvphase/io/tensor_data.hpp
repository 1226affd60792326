#pragma once
/// \file io/tensor_data.hpp
/// What the tensor file readers (io/npy.hpp, io/safetensors.hpp) share: element types, the
/// conversion of stored elements to float / double / integers (the dequantisation kernel),
/// encoders for the writers, checked shape arithmetic and a read-only memory map.
///
/// Element decoding (F16, BF16, F8_E4M3 → float) is exact: every value of the narrow format is
/// representable in float, so a decoded element equals its mathematical value (tests compare
/// against a double reference built from the format's definition). F8_E4M3 is the "fn" variant
/// used by DeepSeek checkpoints: bias 7, no infinities, 0x7F / 0xFF are NaN, largest 448.
///
/// Encoders round to nearest, ties to even; the F8 encoder rejects values beyond ±448 and
/// non-finite values (a writer must not silently saturate a weight).
///
/// mapped_file maps a whole file read-only (POSIX mmap); release() drops the pages of a
/// processed range from the process (they stay in the page cache), so a streaming reader's
/// resident memory stays at its chunk size whatever the file size.

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvphase/core/error.hpp"

namespace kvphase::io {

/// Element type of a stored tensor.
enum class tensor_dtype { f64, f32, f16, bf16, f8_e4m3, i64, i32, i16, i8, u64, u32, u16, u8, boolean };

/// Bytes per element.
constexpr std::size_t dtype_size(tensor_dtype t) noexcept {
  switch (t) {
    case tensor_dtype::f64:
    case tensor_dtype::i64:
    case tensor_dtype::u64: return 8;
    case tensor_dtype::f32:
    case tensor_dtype::i32:
    case tensor_dtype::u32: return 4;
    case tensor_dtype::f16:
    case tensor_dtype::bf16:
    case tensor_dtype::i16:
    case tensor_dtype::u16: return 2;
    default: return 1;
  }
}

/// The safetensors name of a dtype (F32, BF16, F8_E4M3, BOOL, ...).
inline const char* to_string(tensor_dtype t) noexcept {
  switch (t) {
    case tensor_dtype::f64: return "F64";
    case tensor_dtype::f32: return "F32";
    case tensor_dtype::f16: return "F16";
    case tensor_dtype::bf16: return "BF16";
    case tensor_dtype::f8_e4m3: return "F8_E4M3";
    case tensor_dtype::i64: return "I64";
    case tensor_dtype::i32: return "I32";
    case tensor_dtype::i16: return "I16";
    case tensor_dtype::i8: return "I8";
    case tensor_dtype::u64: return "U64";
    case tensor_dtype::u32: return "U32";
    case tensor_dtype::u16: return "U16";
    case tensor_dtype::u8: return "U8";
    case tensor_dtype::boolean: return "BOOL";
  }
  return "?";
}

/// The dtype of a safetensors name; false if unknown.
inline bool parse_dtype(std::string_view s, tensor_dtype& out) noexcept {
  for (tensor_dtype t :
       {tensor_dtype::f64, tensor_dtype::f32, tensor_dtype::f16, tensor_dtype::bf16, tensor_dtype::f8_e4m3,
        tensor_dtype::i64, tensor_dtype::i32, tensor_dtype::i16, tensor_dtype::i8, tensor_dtype::u64, tensor_dtype::u32,
        tensor_dtype::u16, tensor_dtype::u8, tensor_dtype::boolean})
    if (s == to_string(t)) {
      out = t;
      return true;
    }
  return false;
}

constexpr bool is_float_dtype(tensor_dtype t) noexcept {
  return t == tensor_dtype::f64 || t == tensor_dtype::f32 || t == tensor_dtype::f16 || t == tensor_dtype::bf16 ||
         t == tensor_dtype::f8_e4m3;
}

// ---- scalar codecs ----------------------------------------------------------------------------

/// IEEE binary16 bits → float (exact).
inline float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  std::uint32_t bits;
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m · 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) bits = sign | 0x7f800000u | (m << 13);
  else bits = sign | ((e + 112u) << 23) | (m << 13);
  return std::bit_cast<float>(bits);
}

/// bfloat16 bits → float (exact: the upper half of a float).
inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {
/// float value of every F8_E4M3 (fn) code, computed from the definition.
inline std::array<float, 256> make_f8_table() noexcept {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int s = c >> 7, e = (c >> 3) & 0xf, m = c & 7;
    float v;
    if (e == 15 && m == 7) v = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0) v = std::ldexp(static_cast<float>(m), -9);
    else v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    t[static_cast<std::size_t>(c)] = s ? -v : v;
  }
  return t;
}
inline const std::array<float, 256>& f8_table() noexcept {
  static const std::array<float, 256> t = make_f8_table();
  return t;
}
}  // namespace detail

/// F8_E4M3 (fn) code → float (exact).
inline float f8_e4m3_to_float(std::uint8_t c) noexcept { return detail::f8_table()[c]; }

/// float → binary16 bits, round to nearest even (overflow → ±inf, NaN → quiet NaN).
inline std::uint16_t float_to_f16(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to inf
  if (x < 0x38800000u) {                                                    // below 2^-14: subnormal
    const std::uint32_t exp = x >> 23;
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t h = (x >> 13) - (112u << 10);
  const std::uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// float → bfloat16 bits, round to nearest even (NaN → quiet NaN).
inline std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// float → F8_E4M3 (fn) code, round to nearest, ties to the even code. Throws kvphase::error
/// naming `what` for a non-finite value or |value| > 448 (the format has no infinity).
inline std::uint8_t float_to_f8_e4m3(float f, std::string_view what = "value") {
  require(std::isfinite(f) && std::fabs(f) <= 448.0f, what, f,
          "must be finite with |x| <= 448 to be stored as F8_E4M3");
  const auto& t = detail::f8_table();
  const float a = std::fabs(f);
  int best = 0;
  for (int c = 1; c < 127; ++c) {  // positive finite codes in increasing order
    const float dc = std::fabs(t[static_cast<std::size_t>(c)] - a),
                db = std::fabs(t[static_cast<std::size_t>(best)] - a);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return static_cast<std::uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
}

// ---- the conversion kernel ----------------------------------------------------------------------

namespace detail {
template <class U>
inline U load_le(const std::byte* p, bool swap) noexcept {
  std::byte b[sizeof(U)];
  std::memcpy(b, p, sizeof(U));
  if (swap) std::reverse(b, b + sizeof(U));
  U v;
  std::memcpy(&v, b, sizeof(U));
  return v;
}
template <class T, class S, class F>
inline void convert_loop(const std::byte* src, std::size_t n, bool swap, T* dst, F&& f) noexcept {
  if (!swap) {
    for (std::size_t i = 0; i < n; ++i) {
      S s;
      std::memcpy(&s, src + i * sizeof(S), sizeof(S));
      dst[i] = f(s);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = f(load_le<S>(src + i * sizeof(S), true));
  }
}
}  // namespace detail

/// Converts n stored elements of type `dt` at `src` (byte order swapped when `swap`) to T
/// (float, double or an integer type) in `dst`. Floats convert to integers by truncation (the
/// caller decides whether that is wanted); bool is 0 / 1 (any non-zero byte is true).
/// No checks: the readers validate sizes before calling.
template <class T>
inline void convert_elements(const std::byte* src, tensor_dtype dt, std::size_t n, bool swap, T* dst) noexcept {
  using namespace detail;
  switch (dt) {
    case tensor_dtype::f64:
      convert_loop<T, double>(src, n, swap, dst, [](double v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::f32:
      if constexpr (std::is_same_v<T, float>) {
        if (!swap) {
          std::memcpy(dst, src, n * sizeof(float));
          break;
        }
      }
      convert_loop<T, float>(src, n, swap, dst, [](float v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::f16:
      convert_loop<T, std::uint16_t>(src, n, swap, dst,
                                     [](std::uint16_t v) { return static_cast<T>(f16_to_float(v)); });
      break;
    case tensor_dtype::bf16:
      convert_loop<T, std::uint16_t>(src, n, swap, dst,
                                     [](std::uint16_t v) { return static_cast<T>(bf16_to_float(v)); });
      break;
    case tensor_dtype::f8_e4m3: {
      const auto& t = f8_table();
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(t[static_cast<std::uint8_t>(src[i])]);
      break;
    }
    case tensor_dtype::i64:
      convert_loop<T, std::int64_t>(src, n, swap, dst, [](std::int64_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::i32:
      convert_loop<T, std::int32_t>(src, n, swap, dst, [](std::int32_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::i16:
      convert_loop<T, std::int16_t>(src, n, swap, dst, [](std::int16_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::i8:
      convert_loop<T, std::int8_t>(src, n, false, dst, [](std::int8_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::u64:
      convert_loop<T, std::uint64_t>(src, n, swap, dst, [](std::uint64_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::u32:
      convert_loop<T, std::uint32_t>(src, n, swap, dst, [](std::uint32_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::u16:
      convert_loop<T, std::uint16_t>(src, n, swap, dst, [](std::uint16_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::u8:
      convert_loop<T, std::uint8_t>(src, n, false, dst, [](std::uint8_t v) { return static_cast<T>(v); });
      break;
    case tensor_dtype::boolean:
      convert_loop<T, std::uint8_t>(src, n, false, dst, [](std::uint8_t v) { return static_cast<T>(v != 0 ? 1 : 0); });
      break;
  }
}

/// Encodes n values of T as `dt` little-endian bytes (appended to out). Throws kvphase::error
/// naming `what` when a value does not fit the type (F8 range, integer range, bool not 0/1).
template <class T>
inline void encode_elements(const T* src, std::size_t n, tensor_dtype dt, std::vector<std::byte>& out,
                            std::string_view what = "value") {
  const std::size_t sz = dtype_size(dt), at = out.size();
  out.resize(at + n * sz);
  std::byte* p = out.data() + at;
  // each case stores a value whose type is dt's width, so sizeof(v) == sz (copying sz bytes
  // from &v let the compiler see a read past a 1- or 2-byte value on paths it cannot rule out)
  auto put = [&](std::size_t i, auto v) {
    static_assert(std::is_trivially_copyable_v<decltype(v)>);
    KVPHASE_ASSERT(sizeof(v) == sz);
    std::memcpy(p + i * sz, &v, sizeof(v));
  };
  auto whole = [&](double v, double lo, double hi) {
    if (!(std::isfinite(v) && v == std::floor(v) && v >= lo && v <= hi))
      fail(what, v, std::string("must be an integer in the range of ") + to_string(dt));
  };
  for (std::size_t i = 0; i < n; ++i) {
    const T x = src[i];
    switch (dt) {
      case tensor_dtype::f64: put(i, static_cast<double>(x)); break;
      case tensor_dtype::f32: put(i, static_cast<float>(x)); break;
      case tensor_dtype::f16: put(i, float_to_f16(static_cast<float>(x))); break;
      case tensor_dtype::bf16: put(i, float_to_bf16(static_cast<float>(x))); break;
      case tensor_dtype::f8_e4m3: put(i, float_to_f8_e4m3(static_cast<float>(x), what)); break;
      case tensor_dtype::boolean:
        require(x == T(0) || x == T(1), what, static_cast<double>(x), "must be 0 or 1 to be stored as BOOL");
        put(i, static_cast<std::uint8_t>(x != T(0)));
        break;
      default: {
        if constexpr (std::is_integral_v<T>) {
          // integers pass through without a double round trip (int64 beyond 2^53)
          const bool ok = [&] {
            switch (dt) {
              case tensor_dtype::i64: return std::in_range<std::int64_t>(x);
              case tensor_dtype::i32: return std::in_range<std::int32_t>(x);
              case tensor_dtype::i16: return std::in_range<std::int16_t>(x);
              case tensor_dtype::i8: return std::in_range<std::int8_t>(x);
              case tensor_dtype::u64: return std::in_range<std::uint64_t>(x);
              case tensor_dtype::u32: return std::in_range<std::uint32_t>(x);
              case tensor_dtype::u16: return std::in_range<std::uint16_t>(x);
              default: return std::in_range<std::uint8_t>(x);
            }
          }();
          if (!ok) fail(what, x, std::string("must be in the range of ") + to_string(dt));
        } else {
          const double v = static_cast<double>(x);
          switch (dt) {
            case tensor_dtype::i64: whole(v, -9223372036854775808.0, 9223372036854774784.0); break;
            case tensor_dtype::i32: whole(v, -2147483648.0, 2147483647.0); break;
            case tensor_dtype::i16: whole(v, -32768.0, 32767.0); break;
            case tensor_dtype::i8: whole(v, -128.0, 127.0); break;
            case tensor_dtype::u64: whole(v, 0.0, 18446744073709549568.0); break;
            case tensor_dtype::u32: whole(v, 0.0, 4294967295.0); break;
            case tensor_dtype::u16: whole(v, 0.0, 65535.0); break;
            default: whole(v, 0.0, 255.0); break;
          }
        }
        switch (dt) {
          case tensor_dtype::i64: put(i, static_cast<std::int64_t>(x)); break;
          case tensor_dtype::i32: put(i, static_cast<std::int32_t>(x)); break;
          case tensor_dtype::i16: put(i, static_cast<std::int16_t>(x)); break;
          case tensor_dtype::i8: put(i, static_cast<std::int8_t>(x)); break;
          case tensor_dtype::u64: put(i, static_cast<std::uint64_t>(x)); break;
          case tensor_dtype::u32: put(i, static_cast<std::uint32_t>(x)); break;
          case tensor_dtype::u16: put(i, static_cast<std::uint16_t>(x)); break;
          default: put(i, static_cast<std::uint8_t>(x)); break;
        }
      }
    }
  }
}

// ---- shapes --------------------------------------------------------------------------------------

/// Elements of a shape; throws kvphase::error naming `what` when a dimension is negative or the
/// product (times `item_size` bytes) exceeds 2^62.
inline std::uint64_t checked_numel(std::span<const std::int64_t> shape, std::size_t item_size, std::string_view what) {
  constexpr std::uint64_t cap = std::uint64_t(1) << 62;
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) fail(std::string(what) + " shape[" + std::to_string(i) + "]", shape[i], "must be >= 0");
    const auto d = static_cast<std::uint64_t>(shape[i]);
    if (d != 0 && n > cap / d)
      fail(std::string(what) + " shape", "(product overflows)", "element count must be < 2^62");
    n *= d;
  }
  if (item_size != 0 && n > cap / item_size)
    fail(std::string(what) + " shape", n, "byte size (elements x item size) must be < 2^62");
  return n;
}

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---- the memory map --------------------------------------------------------------------------------

/// A whole file mapped read-only. Move-only.
class mapped_file {
 public:
  mapped_file() = default;
  /// Throws kvphase::error naming the file when it cannot be opened, is not a regular file or
  /// cannot be mapped.
  explicit mapped_file(std::string path) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("file", path_, std::string("cannot be opened: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail("file", path_, "must be a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        fail("file", path_, std::string("cannot be memory-mapped: ") + std::strerror(err));
      }
      data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept { swap(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      swap(o);
    }
    return *this;
  }
  ~mapped_file() { unmap(); }

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  /// Advises the kernel that [offset, offset + length) will be read sequentially.
  void advise_sequential(std::size_t offset, std::size_t length) const noexcept {
    page_range(offset, length, [](void* p, std::size_t n) { ::madvise(p, n, MADV_SEQUENTIAL); });
  }
  /// Drops the whole pages inside [offset, offset + length) from this process (re-read on the
  /// next access; the data is unchanged).
  void release(std::size_t offset, std::size_t length) const noexcept {
    page_range(offset, length, [](void* p, std::size_t n) { ::madvise(p, n, MADV_DONTNEED); });
  }

 private:
  template <class F>
  void page_range(std::size_t offset, std::size_t length, F&& f) const noexcept {
    if (data_ == nullptr || offset >= size_) return;
    length = std::min(length, size_ - offset);
    const std::size_t pg = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t a = (offset + pg - 1) / pg * pg, b = (offset + length) / pg * pg;
    if (b > a) f(const_cast<std::byte*>(data_) + a, b - a);
  }
  void unmap() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
  void swap(mapped_file& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(path_, o.path_);
  }
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace kvphase::io

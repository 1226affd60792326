#pragma once
/// \file core/rng.hpp
/// Counter-based randomness (Random123 Philox4x32-10). A stream is keyed by (seed, stream id)
/// and positioned by a 64-bit block counter, so any draw is a pure function of
/// (seed, stream, position): trial k of a sweep is regenerated alone, in any order, on any
/// thread or shard, with the same bits.
///
/// Mapping: Philox key = the 64-bit seed split into two 32-bit words; counter = (stream low,
/// stream high, block low, block high). Each block yields four 32-bit words.

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

#include <Random123/philox.h>

#include "kvphase/core/error.hpp"

namespace kvphase::rng {

/// 64-bit finaliser (splitmix64 constants): a bijective mixer used to derive stream ids.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// Order-dependent combination of two 64-bit values into one well-mixed id.
constexpr std::uint64_t combine(std::uint64_t a, std::uint64_t b) noexcept {
  return mix64(a + 0x9e3779b97f4a7c15ULL + mix64(b));
}

/// FNV-1a hash of a text, for keying streams by configuration strings.
constexpr std::uint64_t hash_text(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// Uniform double in the open interval (0, 1) from 53 random bits.
constexpr double u64_to_open01(std::uint64_t x) noexcept {
  return (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
}
/// Uniform float in (0, 1) from 24 random bits.
constexpr float u32_to_open01f(std::uint32_t x) noexcept {
  return (static_cast<float>(x >> 8) + 0.5f) * 0x1.0p-24f;
}

/// A Philox4x32-10 stream keyed by (seed, stream) with a sequential reader on top of the pure
/// block function. Copying a stream copies its position.
class philox_stream {
 public:
  using block_type = std::array<std::uint32_t, 4>;

  explicit philox_stream(std::uint64_t seed, std::uint64_t stream = 0,
                         std::uint64_t block_index = 0) noexcept
      : seed_(seed), stream_(stream), next_block_(block_index) {}

  /// The four words of block `index`: a pure function of (seed, stream, index).
  [[nodiscard]] block_type block(std::uint64_t index) const noexcept {
    r123::Philox4x32 gen;
    r123::Philox4x32::ctr_type c = {{static_cast<std::uint32_t>(stream_),
                                     static_cast<std::uint32_t>(stream_ >> 32),
                                     static_cast<std::uint32_t>(index),
                                     static_cast<std::uint32_t>(index >> 32)}};
    r123::Philox4x32::key_type k = {{static_cast<std::uint32_t>(seed_),
                                     static_cast<std::uint32_t>(seed_ >> 32)}};
    auto r = gen(c, k);
    return {r[0], r[1], r[2], r[3]};
  }

  /// Moves the reader to block `index` (discarding buffered words).
  void seek(std::uint64_t index) noexcept {
    next_block_ = index;
    avail_ = 0;
    have_normal_ = false;
  }

  [[nodiscard]] std::uint32_t next_u32() noexcept {
    if (avail_ == 0) {
      buf_ = block(next_block_++);
      avail_ = 4;
    }
    return buf_[4 - avail_--];
  }
  [[nodiscard]] std::uint64_t next_u64() noexcept {
    const std::uint64_t lo = next_u32();
    const std::uint64_t hi = next_u32();
    return lo | (hi << 32);
  }
  /// Uniform in (0, 1), 53 bits.
  [[nodiscard]] double uniform() noexcept { return u64_to_open01(next_u64()); }
  /// Uniform integer in [0, n) for n ≥ 1 (Lemire's multiply-shift with rejection: unbiased).
  /// Precondition (asserted): n ≥ 1 (n = 0 would return 0, outside the empty range).
  [[nodiscard]] std::uint64_t below(std::uint64_t n) noexcept {
    KVPHASE_ASSERT(n >= 1);
    std::uint64_t x = next_u64();
    __uint128_t m = static_cast<__uint128_t>(x) * n;
    std::uint64_t l = static_cast<std::uint64_t>(m);
    if (l < n) {
      const std::uint64_t t = (0 - n) % n;
      while (l < t) {
        x = next_u64();
        m = static_cast<__uint128_t>(x) * n;
        l = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }
  /// Standard normal by Box–Muller (both outputs used, in order).
  [[nodiscard]] double normal() noexcept {
    if (have_normal_) {
      have_normal_ = false;
      return spare_;
    }
    const double u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    have_normal_ = true;
    return r * std::cos(a);
  }

  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  [[nodiscard]] std::uint64_t stream() const noexcept { return stream_; }

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t next_block_;
  block_type buf_{};
  int avail_ = 0;
  bool have_normal_ = false;
  double spare_ = 0.0;
};

/// Stream id for trial `trial` of the configuration identified by `config_id`: every random
/// draw of a sweep is keyed by (seed, config, trial) through this one function.
constexpr std::uint64_t trial_stream(std::uint64_t config_id, std::uint64_t trial) noexcept {
  return combine(config_id, trial);
}

}  // namespace kvphase::rng

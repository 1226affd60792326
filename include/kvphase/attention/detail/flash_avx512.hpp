#pragma once
/// \file attention/detail/flash_avx512.hpp
/// Not API. Placeholder for the AVX-512 flash-style fast path of attend_batch.
#include "kvphase/core/types.hpp"

namespace kvphase::attention::detail {
template <class Real, class Arch>
inline constexpr bool flash_avx512_enabled = false;
inline bool flash_avx512_applicable(index_t, index_t, index_t, const index_t*) noexcept { return false; }
template <class Real>
void flash_avx512(const Real*, index_t, index_t, const Real*, index_t, const Real*, index_t, index_t, index_t,
                  index_t, const index_t*, Real, Real, Real*, index_t, int) noexcept {}
}  // namespace kvphase::attention::detail

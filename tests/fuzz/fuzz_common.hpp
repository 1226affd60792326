#pragma once
// Shared by the libFuzzer targets: what counts as a finding.
//
// A target feeds its input to one parser. Legal input must give a result; illegal input must
// throw kvphase::error. Anything else — another exception type, a crash, a sanitizer report, a
// leak, a hang (-timeout) or an allocation over -malloc_limit_mb — is a finding: the exception
// escapes LLVMFuzzerTestOneInput and libFuzzer aborts with the input saved.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <kvphase/core/error.hpp>

namespace kvphase::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A property a parsed result must have; a violation is a finding.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

/// Runs `f`; a kvphase::error is the expected outcome of bad input, anything else propagates.
template <class F>
void expect_result_or_error(F&& f) {
  try {
    f();
  } catch (const kvphase::error&) {
  }
}

}  // namespace kvphase::fuzz

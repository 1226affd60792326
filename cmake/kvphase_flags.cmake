# Flags for kvphase's own tests, benchmarks and examples. Never applied to the INTERFACE target:
# a consumer chooses its own -march.
add_library(kvphase_flags INTERFACE)
# Designated initializers leave fields at their defaults on purpose: no missing-initializer noise.
target_compile_options(kvphase_flags INTERFACE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 + Eigen 3.4 + AVX-512 emits false -Wmaybe-uninitialized from inlined intrinsics.
  # (the __Y = __Y idiom in avx512fintrin.h also trips -Wuninitialized in GCC 12).
  target_compile_options(kvphase_flags INTERFACE -Wno-maybe-uninitialized -Wno-uninitialized)
endif()
if(KVPHASE_NATIVE)
  target_compile_options(kvphase_flags INTERFACE -march=native)
endif()
if(KVPHASE_SANITIZE)
  target_compile_options(kvphase_flags INTERFACE -fsanitize=${KVPHASE_SANITIZE} -fno-omit-frame-pointer
                                                 -fno-sanitize-recover=all)
  target_link_options(kvphase_flags INTERFACE -fsanitize=${KVPHASE_SANITIZE})
endif()

# Random123 (Debian package librandom123-dev) is header-only and ships no CMake package. This file
# finds its headers and gives them a target, kvphase::random123, which kvphase::kvphase links. The
# build tree and the installed package config (kvphaseConfig.cmake) both include it, so an
# installed kvphase finds Random123 wherever the consumer's machine has it (set
# KVPHASE_RANDOM123_INCLUDE, or CMAKE_PREFIX_PATH, for a non-standard location).
if(NOT TARGET kvphase::random123)
  find_path(KVPHASE_RANDOM123_INCLUDE Random123/philox.h
            DOC "Random123 headers (Debian package librandom123-dev)")
  if(KVPHASE_RANDOM123_INCLUDE)
    add_library(kvphase::random123 INTERFACE IMPORTED)
    set_target_properties(kvphase::random123 PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KVPHASE_RANDOM123_INCLUDE}")
  endif()
endif()

# Script mode: writes the provenance header; called at build time by kvphase_build_info.
set(hash "unknown")
if(GIT AND EXISTS "${SRC}/.git")
  execute_process(COMMAND ${GIT} rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE h OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND h)
    set(hash "${h}")
    execute_process(COMMAND ${GIT} status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                    OUTPUT_VARIABLE d OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(d)
      set(hash "${hash}-dirty")
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/kvphase_write_build_info.cmake. Do not edit.
#pragma once
#define KVPHASE_BUILD_GIT_HASH \"${hash}\"
#define KVPHASE_BUILD_COMPILER \"${COMPILER}\"
#define KVPHASE_BUILD_FLAGS \"${FLAGS}\"
#define KVPHASE_BUILD_TYPE \"${BUILD_TYPE}\"
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

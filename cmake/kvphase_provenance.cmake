# Build-time provenance for outputs: git hash, compiler and flags go into a generated header that
# io/provenance.hpp includes when KVPHASE_HAVE_BUILD_INFO is defined. The git hash is refreshed at
# every build (not only at configure time), and the header is rewritten only when it changes.
find_package(Git QUIET)
get_target_property(_kv_opts kvphase_flags INTERFACE_COMPILE_OPTIONS)
# the per-configuration flags (-O3 -DNDEBUG, …) live in CMAKE_CXX_FLAGS_<CONFIG> with CONFIG upper-case
string(TOUPPER "${CMAKE_BUILD_TYPE}" _kv_config)
string(REPLACE ";" " " KVPHASE_BUILD_FLAGS "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_kv_config}} ${_kv_opts}")
string(STRIP "${KVPHASE_BUILD_FLAGS}" KVPHASE_BUILD_FLAGS)
set(KVPHASE_COMPILER "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
set(_kv_out ${PROJECT_BINARY_DIR}/generated/kvphase_build_info.hpp)
add_custom_target(kvphase_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${_kv_out} -DGIT=${GIT_EXECUTABLE}
          -DCOMPILER=${KVPHASE_COMPILER} -DFLAGS=${KVPHASE_BUILD_FLAGS} -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
          -P ${PROJECT_SOURCE_DIR}/cmake/kvphase_write_build_info.cmake
  BYPRODUCTS ${_kv_out}
  COMMENT "kvphase build provenance")
target_include_directories(kvphase_flags INTERFACE ${PROJECT_BINARY_DIR}/generated)
target_compile_definitions(kvphase_flags INTERFACE KVPHASE_HAVE_BUILD_INFO=1)

# Every binary of ours that links kvphase_flags should depend on the generated header.
function(kvphase_binary target)
  target_link_libraries(${target} PRIVATE kvphase::kvphase kvphase_flags)
  add_dependencies(${target} kvphase_build_info)
endfunction()

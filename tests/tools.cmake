# Tests of what surrounds the library (included from tests/CMakeLists.txt): the README example as
# a user compiles it, the plot script on sweep files it writes itself, and the installed programs.

# None of these runs code of ours that a sanitizer build would check: only in plain builds.
if(KVPHASE_SANITIZE)
  return()
endif()

# README: identical to examples/quickstart.cpp and warning-free under -Wall -Wextra -Werror with
# -I include (no -march: GCC 12's AVX-512 intrinsics warn on their own, README says so).
set(_kv_deps "")
foreach(_t Eigen3::Eigen xsimd Boost::headers nlohmann_json::nlohmann_json kvphase::random123)
  list(APPEND _kv_deps "$<TARGET_PROPERTY:${_t},INTERFACE_INCLUDE_DIRECTORIES>")
endforeach()
set(_kv_flags "")
if(OpenMP_CXX_FOUND)
  separate_arguments(_kv_flags UNIX_COMMAND "${OpenMP_CXX_FLAGS}")
endif()
add_test(NAME readme.example_warning_free
  COMMAND ${CMAKE_COMMAND} -DREADME=${PROJECT_SOURCE_DIR}/README.md
          -DQUICKSTART=${PROJECT_SOURCE_DIR}/examples/quickstart.cpp -DINCLUDE=${PROJECT_SOURCE_DIR}/include
          -DCXX=${CMAKE_CXX_COMPILER} "-DDEPS=${_kv_deps}" "-DFLAGS=${_kv_flags}"
          "-DIMPLICIT=${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES}"
          -DOUT=${CMAKE_CURRENT_BINARY_DIR}/readme_example
          -P ${CMAKE_CURRENT_SOURCE_DIR}/readme_example_check.cmake)
set_tests_properties(readme.example_warning_free PROPERTIES LABELS "unit;readme")

# scripts/plot.py: CSV (configuration in the data rows or only in '# config:') and JSON inputs,
# several files and concatenated runs; line plot and heatmaps written, heatmap shapes and cells
# checked (tests/plot_check.py writes its own input files). Skipped (77) without matplotlib.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME scripts.plot_check
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/plot_check.py ${PROJECT_SOURCE_DIR}/scripts
            ${CMAKE_CURRENT_BINARY_DIR}/plot_check)
  set_tests_properties(scripts.plot_check PROPERTIES LABELS "unit;scripts" SKIP_RETURN_CODE 77)
  # scripts/lm_report.py on two stored train_lm runs (tests/data/lm_runs): its numbers against
  # the files, the stopped-run label, exit 2 on bad options and files, and a seeded mutation
  # fuzz of the files (report or refuse, never a traceback). Skipped (77) without numpy.
  add_test(NAME scripts.lm_report_check
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/lm_report_check.py ${PROJECT_SOURCE_DIR}/scripts
            ${CMAKE_CURRENT_SOURCE_DIR}/data/lm_runs ${CMAKE_CURRENT_BINARY_DIR}/lm_report_check)
  set_tests_properties(scripts.lm_report_check PROPERTIES LABELS "unit;scripts" SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()

# the programs that `cmake --install` puts in bin/ run from there (kvphase-plot is a link into
# share/kvphase/ and finds its helper module beside its target)
if(KVPHASE_BUILD_EXAMPLES)
  add_test(NAME consumer.installed_programs
    COMMAND sh -c "set -e; for p in kvphase-sweep kvphase-merge kvphase-analyze kvphase-theory kvphase-plot; do
      '${_kv_cbin}/prefix/bin/'$p --help > /dev/null; echo $p runs; done")
  set_tests_properties(consumer.installed_programs PROPERTIES FIXTURES_REQUIRED kvphase_installed
    LABELS "consumer" PASS_REGULAR_EXPRESSION "kvphase-plot runs")
endif()

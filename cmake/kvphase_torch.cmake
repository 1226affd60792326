# Optional libtorch component: the LM trainer (examples/torch/train_lm.cpp) and its test
# (tests/torch/). Nothing else links libtorch; the library stays header-only and torch-free.
#   KVPHASE_WITH_TORCH  AUTO (default: on when Debian's libtorch-dev is found), ON (required), OFF.
# Always off in sanitizer builds: libtorch is not built with ASan, and its OpenMP / static
# initialisers report there; the torch code has no parser of untrusted input.
set(KVPHASE_WITH_TORCH AUTO CACHE STRING "Build the libtorch LM trainer and its test (AUTO, ON, OFF)")
set_property(CACHE KVPHASE_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set(_kv_torch OFF)
if(KVPHASE_SANITIZE)
  if(KVPHASE_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "KVPHASE_WITH_TORCH=ON cannot be combined with KVPHASE_SANITIZE (libtorch is not sanitizer-built)")
  endif()
elseif(NOT KVPHASE_WITH_TORCH STREQUAL "OFF")
  if(KVPHASE_WITH_TORCH STREQUAL "ON")
    find_package(Torch REQUIRED CONFIG)
  else()
    find_package(Torch QUIET CONFIG)
  endif()
  if(Torch_FOUND OR TORCH_FOUND)
    set(_kv_torch ON)
  endif()
endif()
if(NOT _kv_torch)
  message(STATUS "kvphase: libtorch LM trainer not built (KVPHASE_WITH_TORCH=${KVPHASE_WITH_TORCH}; Debian: libtorch-dev, scripts/setup.sh --with-libtorch)")
  return()
endif()
message(STATUS "kvphase: libtorch LM trainer built (Torch ${Torch_VERSION})")

if(KVPHASE_BUILD_EXAMPLES)
  find_package(CLI11 CONFIG REQUIRED)
  add_executable(train_lm ${PROJECT_SOURCE_DIR}/examples/torch/train_lm.cpp)
  kvphase_binary(train_lm)
  target_link_libraries(train_lm PRIVATE CLI11::CLI11 ${TORCH_LIBRARIES})
  target_include_directories(train_lm PRIVATE ${PROJECT_SOURCE_DIR}/examples ${PROJECT_SOURCE_DIR}/benchmarks)
  set_target_properties(train_lm PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/examples)
endif()
if(KVPHASE_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)  # imported targets of tests/ are not visible here
  include(Catch)
  add_executable(kvphase_tests_lm ${PROJECT_SOURCE_DIR}/tests/torch/test_lm_model.cpp)
  kvphase_binary(kvphase_tests_lm)
  target_link_libraries(kvphase_tests_lm PRIVATE Catch2::Catch2WithMain ${TORCH_LIBRARIES})
  target_include_directories(kvphase_tests_lm PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  set_target_properties(kvphase_tests_lm PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  catch_discover_tests(kvphase_tests_lm TEST_SPEC "~[slow]" TEST_PREFIX "lm." PROPERTIES FAIL_REGULAR_EXPRESSION "No test cases matched" LABELS "torch")
  catch_discover_tests(kvphase_tests_lm TEST_SPEC "[slow]" TEST_PREFIX "slow.lm." PROPERTIES FAIL_REGULAR_EXPRESSION "No test cases matched" LABELS "slow")
endif()

# train_lm end to end on a tiny setting (seconds): csa with the indexer, nsa, and a full twin
# stopped at a recall; its outputs carry provenance and scripts/lm_report.py reads them; --load of
# the saved checkpoints evaluates them again to the same rows and records the same gate profiles
# as the run's last snapshot. Bad values exit 2 naming the field.
if(KVPHASE_BUILD_EXAMPLES AND KVPHASE_BUILD_TESTS)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_kv_lm_out ${PROJECT_BINARY_DIR}/examples/train_lm_quick)
  set(_kv_lm_args --context 32 --pairs 4 --queries 4 --keys 8 --values 8 --gap 4 --modulus 32 --eval 64 --threads 1 --quiet)
  string(REPLACE ";" " " _kv_lm_argstr "${_kv_lm_args}")
  set(_kv_lm_report "")
  if(Python3_Interpreter_FOUND)
    set(_kv_lm_report "'${Python3_EXECUTABLE}' '${PROJECT_SOURCE_DIR}/scripts/lm_report.py' a b --permutations 99 > r.txt; grep -q '| full (stopped at step' r.txt")
  endif()
  add_test(NAME example.train_lm_quick
    COMMAND sh -c "set -e; rm -rf '${_kv_lm_out}'; mkdir -p '${_kv_lm_out}'; cd '${_kv_lm_out}'
      '$<TARGET_FILE:train_lm>' --preset csa,nsa --steps 20 --eval-every 10 ${_kv_lm_argstr} --out a > a.txt
      '$<TARGET_FILE:train_lm>' --preset csa --top-k 2 --indexer-dim 16 --steps 20 --eval-every 10 ${_kv_lm_argstr} --out c > c.txt
      '$<TARGET_FILE:train_lm>' --preset full --steps 60 --eval-every 10 --stop-recall 0.01 ${_kv_lm_argstr} --out b > b.txt
      grep -q '^# kvphase ' a/lm_phase.csv; grep -q '\"provenance\"' a/lm_summary.json; grep -q '\"blas\": {' a/lm_summary.json
      grep -q '\"top_k\": 2' c/lm_summary.json; grep -q '\"steps_trained\": 1,' b/lm_summary.json
      test -f a/ckpt_nsa_seed1/model.safetensors
      '$<TARGET_FILE:train_lm>' --load a/ckpt_csa_seed1,a/ckpt_nsa_seed1 --ablate ${_kv_lm_argstr} --out l > l.txt
      grep -v '^#' a/lm_phase.csv | grep '^csa,' | cut -d, -f2- > a.rows
      grep -v '^#' l/lm_phase.csv | grep '^ckpt_csa_seed1,' | cut -d, -f2- > l.rows
      test -s a.rows; cmp a.rows l.rows; grep -q '^ckpt_nsa_seed1,' l/lm_ablation.csv
      grep -v '^#' a/lm_history.csv | grep '^csa,1,20,' | cut -d, -f8- > ah.rows
      grep -v '^#' l/lm_history.csv | grep '^ckpt_csa_seed1,1,0,' | cut -d, -f8- > lh.rows
      test -s ah.rows; cmp ah.rows lh.rows
      rc=0; '$<TARGET_FILE:train_lm>' --load a/ckpt_csa_seed1 --preset csa ${_kv_lm_argstr} --out x 2> x.err || rc=$?
      test $rc -eq 2; grep -q 'excludes' x.err
      ${_kv_lm_report}
      echo ok")
  set_tests_properties(example.train_lm_quick PROPERTIES LABELS "example;torch" TIMEOUT 120 PASS_REGULAR_EXPRESSION "ok")
  foreach(_kv_case
      "topk_nsa|--preset nsa --top-k 2|top_k = 2: cannot be combined with nsa layers"
      "stop_recall_range|--stop-recall 1.5|--stop-recall: value 1.5 must be"
      "indexer_dim_rope|--preset csa --top-k 2 --indexer-dim 8|indexer_dim = 8: must be >= rope_dim")
    string(REPLACE "|" ";" _kv_parts "${_kv_case}")
    list(GET _kv_parts 0 _kv_name)
    list(GET _kv_parts 1 _kv_args)
    list(GET _kv_parts 2 _kv_expect)
    add_test(NAME example.train_lm_hostile_${_kv_name}
      COMMAND sh -c "'$<TARGET_FILE:train_lm>' ${_kv_args} --steps 1 --out '${_kv_lm_out}_hostile' > /dev/null 2> '${_kv_lm_out}_${_kv_name}.err'; rc=$?; cat '${_kv_lm_out}_${_kv_name}.err'; test $rc -eq 2 && echo exit-2")
    set_tests_properties(example.train_lm_hostile_${_kv_name} PROPERTIES LABELS "example;torch" TIMEOUT 30
      PASS_REGULAR_EXPRESSION "${_kv_expect}.*exit-2")
  endforeach()
endif()

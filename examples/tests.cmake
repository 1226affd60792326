# train: the short variant of the training experiment (small task, plain + full attention, 1 seed)
add_test(NAME example.train_phase_quick
  COMMAND train_phase --quick --threads 1 --out ${CMAKE_CURRENT_BINARY_DIR}/train_phase_quick)
set_tests_properties(example.train_phase_quick PROPERTIES LABELS "example;train"
  PASS_REGULAR_EXPRESSION "headline: plain periodicity p 0\\.00[0-9]")

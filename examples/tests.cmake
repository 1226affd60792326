# train: the short variant of the training experiment (small task, plain + full attention, 1 seed)
add_test(NAME example.train_phase_quick
  COMMAND train_phase --quick --threads 1 --out ${CMAKE_CURRENT_BINARY_DIR}/train_phase_quick)
set_tests_properties(example.train_phase_quick PROPERTIES LABELS "example;train"
  PASS_REGULAR_EXPRESSION "plain periodic in phase \\(p < 0.01\\): yes, full attention periodic: no")
# train: hostile values (issue 15) exit 2 naming the flag, the value and the rule, before any
# training (an unwritable --out is found first, not after the run). Case: name|arguments|expected.
foreach(_kv_case
    "variants_empty|--variants ''|--variants = : must be all or a comma list"
    "variants_empty_item|--variants plain,,full_attention|--variants = plain,,full_attention: has an empty item"
    "variants_unknown|--variants plain,nothing|mitigation = nothing: must be one of"
    "out_unwritable|--quick --out /proc/kvphase_no_such_dir|--out = /proc/kvphase_no_such_dir: cannot be created"
    "seed_negative|--seed -1|--seed: value -1 must be a decimal integer in \\[0,"
    "steps_trailing_junk|--steps 1x|--steps: value 1x must be a decimal integer"
    "lr_nan|--lr nan|--lr: value nan must be a finite number"
    "threads_zero|--threads 0|--threads: value 0 must be a decimal integer in \\[1, 64\\]")
  string(REPLACE "|" ";" _kv_parts "${_kv_case}")
  list(GET _kv_parts 0 _kv_name)
  list(GET _kv_parts 1 _kv_args)
  list(GET _kv_parts 2 _kv_expect)
  add_test(NAME example.train_phase_hostile_${_kv_name}
    COMMAND sh -c "'$<TARGET_FILE:train_phase>' ${_kv_args} > /dev/null 2> '${CMAKE_CURRENT_BINARY_DIR}/train_hostile_${_kv_name}.err'; rc=$?; cat '${CMAKE_CURRENT_BINARY_DIR}/train_hostile_${_kv_name}.err'; test $rc -eq 2 && echo exit-2")
  set_tests_properties(example.train_phase_hostile_${_kv_name} PROPERTIES LABELS "example;train" TIMEOUT 30
    PASS_REGULAR_EXPRESSION "${_kv_expect}.*exit-2")
endforeach()

# kvphase-merge: two shards (CSV + JSON) merge to the unsharded run's bytes (provenance lines
# aside); a missing shard, a duplicate shard, a mismatched config, a missing (model, phase) row,
# trials edited beyond the config and a bad flag exit 2.
set(_kv_merge_data ${PROJECT_SOURCE_DIR}/tests/data/merge)
set(_kv_merge_out ${CMAKE_CURRENT_BINARY_DIR}/merge_test)
add_test(NAME example.merge_shards
  COMMAND sh -c "set -e; mkdir -p '${_kv_merge_out}'; cd '${_kv_merge_out}'
    '$<TARGET_FILE:kvphase-merge>' '${_kv_merge_data}/whole.csv' --out whole.csv
    '$<TARGET_FILE:kvphase-merge>' '${_kv_merge_data}/shard_1_of_2.json' '${_kv_merge_data}/shard_0_of_2.csv' --out merged.csv
    '$<TARGET_FILE:kvphase-merge>' '${_kv_merge_data}/shard_0_of_2.csv' '${_kv_merge_data}/shard_1_of_2.json' --out merged.json
    grep -v -e '^# [a-z_]*:' -e '^# kvphase ' whole.csv > a.txt
    grep -v -e '^# [a-z_]*:' -e '^# kvphase ' merged.csv > b.txt
    cmp a.txt b.txt
    grep -q '\"merged_from\": 2' merged.json
    grep -q '^compressed,1,200,121,' merged.csv
    echo merge-identical")
set_tests_properties(example.merge_shards PROPERTIES LABELS "example;io" PASS_REGULAR_EXPRESSION "merge-identical")
foreach(_kv_case
    "missing|shard_0_of_2.csv|are missing"
    "duplicate|shard_0_of_2.csv shard_0_of_2.csv shard_1_of_2.json|is a duplicate"
    "mismatched_config|shard_0_of_2.csv shard_1_of_2_other_config.csv|config of"
    "missing_row|shard_0_of_2_missing_row.csv shard_1_of_2.json|shard_0_of_2_missing_row.csv model full phase 7"
    "edited_trials|shard_0_of_2_edited_trials.csv shard_1_of_2.json|shard_0_of_2_edited_trials.csv model full phase 3 trials = 150"
    "bad_flag|--no-such-flag shard_0_of_2.csv|no-such-flag")
  string(REPLACE "|" ";" _kv_parts "${_kv_case}")
  list(GET _kv_parts 0 _kv_name)
  list(GET _kv_parts 1 _kv_args)
  list(GET _kv_parts 2 _kv_expect)
  add_test(NAME example.merge_fails_${_kv_name}
    COMMAND sh -c "cd '${_kv_merge_data}'; '$<TARGET_FILE:kvphase-merge>' ${_kv_args} > /dev/null 2> '${_kv_merge_out}_${_kv_name}.err'; rc=$?; cat '${_kv_merge_out}_${_kv_name}.err'; test $rc -eq 2 && echo exit-2")
  set_tests_properties(example.merge_fails_${_kv_name} PROPERTIES LABELS "example;io"
    PASS_REGULAR_EXPRESSION "${_kv_expect}.*exit-2")
endforeach()
# sim: phase sweeps. A gated operator whose slot bias prefers slot 0 makes recall periodic with
# period S while full attention on the same inputs stays flat (S = 2, 4, 8; 8 phase groups).
foreach(_s 2 4 8)
  if(_s EQUAL 2)
    set(_bias "3,0")
  elseif(_s EQUAL 4)
    set(_bias "3,0,0,0")
  else()
    set(_bias "3,0,0,0,0,0,0,0")
  endif()
  add_test(NAME example.sweep_gated_period_${_s}
    COMMAND ${CMAKE_COMMAND} -DPROG=$<TARGET_FILE:kvphase-sweep>
            "-DARGS=--preset;gated;--stride;${_s};--gate-bias;${_bias};--modulus;8;--task;needle;--context;2048;--dim;32;--query-noise;0.5;--trials;400;--threads;2;--seed;1"
            -DPERIOD=${_s} -DOUT=${CMAKE_CURRENT_BINARY_DIR}/sweep_gated_period_${_s}.json
            -P ${CMAKE_CURRENT_SOURCE_DIR}/sweep_periodicity_check.cmake)
  set_tests_properties(example.sweep_gated_period_${_s} PROPERTIES LABELS "example;sim")
endforeach()
# sim: identical bytes (provenance aside) for 1 vs 2 threads and for 1 run vs 2 merged shards,
# on each task and engine.
foreach(_case "needle;key" "kv-pairs;score" "padding;key")
  list(GET _case 0 _task)
  list(GET _case 1 _engine)
  add_test(NAME example.sweep_determinism_${_task}_${_engine}
    COMMAND ${CMAKE_COMMAND} -DPROG=$<TARGET_FILE:kvphase-sweep> -DMERGE=$<TARGET_FILE:kvphase-merge>
            "-DARGS=--preset;gated;--gate-bias;1,0,0.5,0;--gate-content-std;0.5;--task;${_task};--engine;${_engine};--context;1024;--pairs;100;--dim;16;--trials;37;--seed;7"
            -DDIR=${CMAKE_CURRENT_BINARY_DIR}/sweep_determinism_${_task}_${_engine}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/sweep_determinism_check.cmake)
  set_tests_properties(example.sweep_determinism_${_task}_${_engine} PROPERTIES LABELS "example;sim")
endforeach()
# sim: random NSA parameters (a random MLP) keep little of the query-key alignment: recall near
# chance at every phase prints a warning naming the cause.
add_test(NAME example.sweep_chance_warning
  COMMAND kvphase-sweep --preset nsa --task needle --context 2048 --dim 16 --modulus 16 --trials 20 --threads 2 -q)
set_tests_properties(example.sweep_chance_warning PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "warning: compressed recall is near chance at every phase .*params random")
# sim: an untrained V4 indexer (--indexer-align 0) keeps a random pick of the entries: recall near
# that level at every phase prints a warning naming the indexer.
add_test(NAME example.sweep_indexer_warning
  COMMAND kvphase-sweep --preset v4-csa --rope none --task kv-pairs --context 4096 --pairs 500 --dim 16 --model csa
          --topk 64 --indexer-dim 16 --indexer-heads 4 --indexer-align 0 --params planted-early --trials 40 --threads 2 -q)
set_tests_properties(example.sweep_indexer_warning PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "warning: compressed recall is near chance at every phase .*indexer align 0")
add_test(NAME example.sweep_indexer_needs_csa COMMAND kvphase-sweep --indexer-dim 8)
set_tests_properties(example.sweep_indexer_needs_csa PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "indexer-dim = 8: applies only to --model csa")
add_test(NAME example.sweep_indexer_align_needs_dim COMMAND kvphase-sweep --model csa --indexer-align 0.5)
set_tests_properties(example.sweep_indexer_align_needs_dim PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "indexer-align = 0.5: needs --indexer-dim > 0")
add_test(NAME example.sweep_gate_std_needs_nsa COMMAND kvphase-sweep --gate-std 1)
set_tests_properties(example.sweep_gate_std_needs_nsa PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "gate-std = 1: applies only to --model nsa")
# sim: a bad flag value exits 2 with a message naming it.
add_test(NAME example.sweep_bad_value COMMAND kvphase-sweep --stride 0)
set_tests_properties(example.sweep_bad_value PROPERTIES LABELS "example;sim" WILL_FAIL TRUE)
add_test(NAME example.sweep_bad_value_message COMMAND kvphase-sweep --task haystack)
set_tests_properties(example.sweep_bad_value_message PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "task = haystack")
# guides: each docs/<module>.md example runs and prints a checked line, so the guides cannot rot.
add_test(NAME example.guide_compress COMMAND guide_compress)
set_tests_properties(example.guide_compress PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "stream: 25 entries, identical to one-shot: yes")
add_test(NAME example.guide_attention COMMAND guide_attention)
set_tests_properties(example.guide_attention PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "matches full attention: yes.*t = 7 and t = 63: 2 and 3 selected")
# demo: the flagship demo's short form (200 trials per group): periodic compressed model, flat
# full attention on the same inputs, CSV and JSON written.
add_test(NAME example.demo_quick
  COMMAND demo --trials 200 --threads 2 --out ${CMAKE_CURRENT_BINARY_DIR}/demo_quick)
set_tests_properties(example.demo_quick PROPERTIES LABELS "example;demo"
  PASS_REGULAR_EXPRESSION "periodic compressed model: yes; flat full attention: yes")
# README: the code example in README.md (examples/quickstart.cpp) runs and shows the weak spots.
add_test(NAME example.quickstart COMMAND quickstart)
set_tests_properties(example.quickstart PROPERTIES LABELS "example"
  PASS_REGULAR_EXPRESSION "phase 1: compressed 0\\.0[0-9]+ \\(theory 0\\.0")
# paper_findings: short forms of the six reproduced findings (docs/reproduce.md); each checks
# the finding's verdict line (fixed seed, claims at p < 0.001 with margins far beyond it).
foreach(_case
    "1|finding 1 verdict: compressed prefers A at 8 of 16 lengths, B at L mod 4 in \\{0,1\\}, period detected: 4; full attention prefers A at 16 of 16, period detected: none"
    "2|finding 2 verdict: compressed phase-dependent: yes, period detected: 4; full phase-dependent: no"
    "3|finding 3 verdict: period detected: 2, 4, 8 for S = 2, 4, 8; full attention flat: yes, yes, yes"
    "4|finding 4 verdict: mean_span2 periodic: yes; mean_span1 periodic: no; gate_nope periodic: yes"
    "5|finding 5 verdict: control period detected: none; control padding prefers A at 16 of 16 lengths"
    "6|finding 6 verdict: gate_rope periodic: yes; gate_nope periodic: yes; uniform_span2 periodic: yes; uniform_span1 periodic: no; mean_general periodic: yes")
  string(FIND "${_case}" "|" _kv_bar)
  string(SUBSTRING "${_case}" 0 ${_kv_bar} _kv_n)
  math(EXPR _kv_bar "${_kv_bar} + 1")
  string(SUBSTRING "${_case}" ${_kv_bar} -1 _kv_expect)
  add_test(NAME example.paper_finding_${_kv_n}_quick
    COMMAND paper_findings --finding ${_kv_n} --quick --threads 2 --out ${CMAKE_CURRENT_BINARY_DIR}/paper_findings_quick)
  set_tests_properties(example.paper_finding_${_kv_n}_quick PROPERTIES LABELS "example;findings"
    PASS_REGULAR_EXPRESSION "${_kv_expect}")
endforeach()
# theory column of the padding task (theory/padding_task.hpp): at L = 26 A's evidence is on the
# slot of weight 0.3 and B's on 0.1, predicted P(A preferred) = 0.99829 (theory/padding.md).
add_test(NAME example.sweep_padding_theory
  COMMAND kvphase-sweep --task padding --pool weights --slot-weights 0.1,0.2,0.3,0.4 --trials 200 --theory
          --engine score -q --threads 2)
set_tests_properties(example.sweep_padding_theory PROPERTIES LABELS "example;theory"
  PASS_REGULAR_EXPRESSION "compressed,2,200,[0-9]+,[0-9.]+,[0-9.]+,[0-9.]+,26,0\\.9982")
add_test(NAME example.guide_sim COMMAND guide_sim)
set_tests_properties(example.guide_sim PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "    0              397        388.*equal the whole run: yes")
add_test(NAME example.guide_stats COMMAND guide_stats)
set_tests_properties(example.guide_stats PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "compressed: phase 0 792/800 [^\n]*period 4 p 0.0001;.*full: [^\n]*period 4 p 0.0546;")
add_test(NAME example.guide_io COMMAND guide_io)
set_tests_properties(example.guide_io PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "round trip keeps the counts: yes.*merged_from 2, counts equal the whole run: yes.*is a duplicate")
add_test(NAME example.guide_theory COMMAND guide_theory)
set_tests_properties(example.guide_theory PROPERTIES LABELS "example;guide"
  PASS_REGULAR_EXPRESSION "covered: yes.*    0     0.9883    0.9925 .*phases 0..3: 1 1 2 2")
# sim: operators that are not linear in the keys (learned projections, channel gates) run the
# kv-pairs and padding tasks in the general key-space path: one row per (model, group) with the
# full control on the same inputs (shape checked, not the counts), and the same bytes for 1 vs 2
# threads and for 2 merged shards.
add_test(NAME example.sweep_general_kv_pairs
  COMMAND kvphase-sweep --preset v4-csa --rope none --task kv-pairs --context 4096 --pairs 400 --dim 32 --trials 40
          --threads 2 -q)
set_tests_properties(example.sweep_general_kv_pairs PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "model,phase,trials,hits,recall,ci_low,ci_high,[^\n]*\ncompressed,0,40,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[^\n]*\n.*compressed,7,40,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[^\n]*\nfull,0,40,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[^\n]*\n.*full,7,40,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+")
add_test(NAME example.sweep_general_padding
  COMMAND kvphase-sweep --preset paper-ref --rope none --task padding --dim 32 --trials 30 --threads 2 -q)
set_tests_properties(example.sweep_general_padding PROPERTIES LABELS "example;sim"
  PASS_REGULAR_EXPRESSION "model,phase,trials,hits,recall,ci_low,ci_high,padding_length,[^\n]*\ncompressed,0,30,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,24,[^\n]*\n.*compressed,31,30,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,55,[^\n]*\nfull,0,30,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,24,[^\n]*\n.*full,31,30,[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,[01]\\.[0-9]+,55")
add_test(NAME example.sweep_determinism_general_kv-pairs
  COMMAND ${CMAKE_COMMAND} -DPROG=$<TARGET_FILE:kvphase-sweep> -DMERGE=$<TARGET_FILE:kvphase-merge>
          "-DARGS=--preset;v41;--rope;none;--task;kv-pairs;--context;2048;--pairs;200;--dim;16;--trials;23;--seed;7"
          -DDIR=${CMAKE_CURRENT_BINARY_DIR}/sweep_determinism_general_kv-pairs
          -P ${CMAKE_CURRENT_SOURCE_DIR}/sweep_determinism_check.cmake)
set_tests_properties(example.sweep_determinism_general_kv-pairs PROPERTIES LABELS "example;sim")
# Every program exits 2 (not CLI11's own 100+ codes) on an unknown flag or a value that does not
# convert, with a message naming it (examples/cli_common.hpp).
foreach(_prog kvphase-sweep kvphase-merge kvphase-analyze demo paper_findings train_phase)
  add_test(NAME example.bad_flag_exit_2.${_prog}
    COMMAND sh -c "\"$0\" --no-such-flag; test $? -eq 2" $<TARGET_FILE:${_prog}>)
  set_tests_properties(example.bad_flag_exit_2.${_prog} PROPERTIES LABELS "example")
endforeach()
add_test(NAME example.bad_value_exit_2.kvphase-sweep
  COMMAND sh -c "\"$0\" --window abc; test $? -eq 2" $<TARGET_FILE:kvphase-sweep>)
set_tests_properties(example.bad_value_exit_2.kvphase-sweep PROPERTIES LABELS "example")

# kvphase-inspect on a tiny checkpoint and activation file written by the check itself: the
# planted slot preference (slot 2) comes back from the weights and from the activations, and the
# compressed per-phase profile is periodic with period m (tests/inspect_check.py).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME example.inspect_planted_slot
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/inspect_check.py $<TARGET_FILE:kvphase-inspect>
            ${CMAKE_CURRENT_BINARY_DIR}/inspect_check)
  set_tests_properties(example.inspect_planted_slot PROPERTIES LABELS "example;inspect")
endif()

# train_phase and paper_findings --shard: two shards joined (train_phase --merge, kvphase-merge
# per sweep) equal the unsharded run's data; a missing or repeated train unit is refused.
add_test(NAME example.train_phase_shard_merge
  COMMAND ${CMAKE_COMMAND} -DMODE=train -DPROG=$<TARGET_FILE:train_phase>
          "-DARGS=--quick;--threads;1" -DDIR=${CMAKE_CURRENT_BINARY_DIR}/train_shard_merge
          -P ${CMAKE_CURRENT_SOURCE_DIR}/shard_merge_check.cmake)
set_tests_properties(example.train_phase_shard_merge PROPERTIES LABELS "example;train" TIMEOUT 60)
add_test(NAME example.paper_findings_shard_merge
  COMMAND ${CMAKE_COMMAND} -DMODE=findings -DPROG=$<TARGET_FILE:paper_findings> -DMERGE=$<TARGET_FILE:kvphase-merge>
          "-DARGS=--finding;3;--quick;--threads;1" -DDIR=${CMAKE_CURRENT_BINARY_DIR}/paper_findings_shard_merge
          -P ${CMAKE_CURRENT_SOURCE_DIR}/shard_merge_check.cmake)
set_tests_properties(example.paper_findings_shard_merge PROPERTIES LABELS "example;findings" TIMEOUT 60)

# kvphase-bench: each subcommand on a tiny shape (seconds), its CSV/JSON outputs with provenance,
# a study file of two operators, --compare-torch without torch (a message, not an error), and a
# bad value exits 2 naming the flag.
set(_kv_bench_out ${CMAKE_CURRENT_BINARY_DIR}/bench_smoke)
add_test(NAME bench_smoke.kvphase_bench_compress
  COMMAND sh -c "set -e; mkdir -p '${_kv_bench_out}'; cd '${_kv_bench_out}'
    '$<TARGET_FILE:kvphase-bench>' compress --all --context 256 --dim 64 --threads 1,2 --reps 2 --quiet --csv c.csv --json c.json > c.txt
    grep -q '^# kvphase ' c.csv; grep -q '\"provenance\"' c.json
    test $(grep -c '^compress,' c.csv) -eq 20
    grep -q 'rw_gb_per_s,rw_fraction' c.csv; grep -q ' rw_frac ' c.txt
    '$<TARGET_FILE:kvphase-bench>' compress --preset mean --context 256 --dim 64 --reps 2 --cold --quiet | grep -q ' cold '
    '$<TARGET_FILE:kvphase-bench>' compress --preset mean --context 256 --dim 64 --reps 2 --pages small --quiet --csv s.csv
    grep -q '^compress,.*--pages small' s.csv
    rc=0; '$<TARGET_FILE:kvphase-bench>' compress --preset mean --pages tiny --quiet 2> p.err || rc=$?
    test $rc -eq 2; grep -q 'pages: tiny not in' p.err
    rc=0; '$<TARGET_FILE:kvphase-bench>' compress --preset mean --compare-torch --torch-script no/such.py --quiet 2> t.err || rc=$?
    test $rc -eq 2; grep -q 'torch-script = no/such.py: no such file' t.err
    grep -q 'v4-csa .*two_stream .*fma_peak\\|v4-csa .*two_stream .*read_bw' c.txt
    '$<TARGET_FILE:kvphase-bench>' compress --preset v4-csa --context 256 --dim 128 --head-dim 64 --reps 3 --quiet --compare-torch > t.txt
    echo ok")
set_tests_properties(bench_smoke.kvphase_bench_compress PROPERTIES LABELS "bench_smoke;example" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "ok")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bench_smoke_study.json
  "{\"study\": \"bench-smoke\", \"fixed\": {\"context\": 128, \"dim\": 32}, \"axes\": {\"preset\": [\"mean\", \"gated\"]}}\n")
add_test(NAME bench_smoke.kvphase_bench_study
  COMMAND kvphase-bench compress --study ${CMAKE_CURRENT_BINARY_DIR}/bench_smoke_study.json --reps 2 --quiet)
set_tests_properties(bench_smoke.kvphase_bench_study PROPERTIES LABELS "bench_smoke;example" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "preset=mean +mean .*preset=gated +slot_gate ")
add_test(NAME bench_smoke.kvphase_bench_attention
  COMMAND kvphase-bench attention --context 512 --dim 32 --queries 16 --raw-window 32 --topk 8 --select-blocks 4
          --select-block 16 --threads 1,2 --reps 2 --quiet)
set_tests_properties(bench_smoke.kvphase_bench_attention PROPERTIES LABELS "bench_smoke;example" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "compressed\\+window.*topk.*nsa.*decode")
# --arch: a bad name exits 2 naming the flag; where the build has the AVX2 path beside its own
# (the error lists it), the rows run on it and say so in the table and the JSON configuration.
add_test(NAME bench_smoke.kvphase_bench_attention_arch
  COMMAND sh -c "set -e; mkdir -p '${_kv_bench_out}'; cd '${_kv_bench_out}'
    rc=0; '$<TARGET_FILE:kvphase-bench>' attention --arch sse9 --quiet 2> a.err || rc=$?
    test $rc -eq 2; grep -q 'arch: sse9 not in' a.err
    if grep -q avx2 a.err; then
      '$<TARGET_FILE:kvphase-bench>' attention --arch avx2 --context 512 --dim 32 --queries 16 --raw-window 32 --topk 8 --select-blocks 4 --select-block 16 --reps 2 --quiet --json a.json > a.txt
      grep -q '^# fma3+avx2;' a.txt; grep -q '\"arch\": *\"fma3+avx2\"' a.json
      grep -q 'compressed+window' a.txt
    fi
    echo ok")
set_tests_properties(bench_smoke.kvphase_bench_attention_arch PROPERTIES LABELS "bench_smoke;example" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "ok")
add_test(NAME bench_smoke.kvphase_bench_trial
  COMMAND kvphase-bench trial --reps 5 --quiet)
set_tests_properties(bench_smoke.kvphase_bench_trial PROPERTIES LABELS "bench_smoke;example" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "needle-mean.*gen_share 0\\.")
add_test(NAME bench_smoke.kvphase_bench_bad_value
  COMMAND sh -c "'$<TARGET_FILE:kvphase-bench>' compress --preset mean --head-dim 16 --dim 32 --context 64 --quiet 2>&1; test $? -eq 2 && echo exit-2")
set_tests_properties(bench_smoke.kvphase_bench_bad_value PROPERTIES LABELS "bench_smoke;example" TIMEOUT 30
  PASS_REGULAR_EXPRESSION "head-dim = 16: needs a pool with a payload projection.*exit-2")

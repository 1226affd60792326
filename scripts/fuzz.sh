#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset "fuzz": clang++, address + undefined sanitizers)
# and runs each on its checked-in seed corpus (tests/fuzz/corpus/<target>/); fails on any finding
# (crash, sanitizer report, leak, uncaught non-kvphase exception, violated round trip, a hang over
# 10 s, an allocation over 1 GB).
#   scripts/fuzz.sh [seconds]        each target for `seconds` (-max_total_time); without it,
#                                    a wall-clock budget of KVPHASE_FUZZ_BUDGET seconds (default
#                                    90) shared by the targets, at least 10 s each; they run
#                                    KVPHASE_FUZZ_JOBS (default: nproc) at a time
#   KVPHASE_FUZZ_RUNS=N scripts/fuzz.sh   each target for N executions instead (the long run)
#   KVPHASE_FUZZ_TARGETS="sweep_csv cli"  only these targets (default: every tests/fuzz/fuzz_*.cpp)
# New inputs go to build/fuzz/corpus/<target>/ (the checked-in seeds are never changed); a
# finding is saved as build/fuzz/artifacts/<target>-crash-… with the libFuzzer log beside it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
runs="${KVPHASE_FUZZ_RUNS:-}"
all_targets=$(for f in tests/fuzz/fuzz_*.cpp; do basename "$f" .cpp; done | sed 's/^fuzz_//' | tr '\n' ' ')
targets="${KVPHASE_FUZZ_TARGETS:-$all_targets}"
count=$(echo $targets | wc -w)
budget="${KVPHASE_FUZZ_BUDGET:-90}"
lanes="${KVPHASE_FUZZ_JOBS:-$(nproc)}"
# the budget is wall-clock time: `lanes` targets run side by side
per=$(( budget * lanes / count )); if [ "$per" -lt 10 ]; then per=10; fi
seconds="${1:-$per}"
if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ not found (scripts/setup.sh installs clang)" >&2
  exit 2
fi
cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "${KVPHASE_FUZZ_JOBS:-$(nproc)}"
out=build/fuzz
mkdir -p "$out/artifacts"
run_one() {
  local t="$1"
  local bin="$out/tests/fuzz/fuzz_$t" seeds="tests/fuzz/corpus/$t" work="$out/corpus/$t" log="$out/artifacts/$t.log"
  mkdir -p "$work"
  local limit=(-max_total_time="$seconds")
  if [ -n "$runs" ]; then limit=(-runs="$runs"); fi
  local start; start=$(date +%s)
  # -close_fd_mask=3: the parsers' own output (CLI errors, help) is not the fuzzer's log.
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=16384 \
       -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" "$work" "$seeds" > "$log" 2>&1; then
    local execs cov
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    echo "fuzz: $t: $execs executions in $(( $(date +%s) - start )) s, coverage $cov edges, 0 findings"
  else
    echo "fuzz: $t: FINDING (log: $log)" >&2
    grep -E 'ERROR|SUMMARY|runtime error|property violated|terminate|Test unit written' "$log" | head -20 >&2 || tail -30 "$log" >&2
    return 1
  fi
}
# `lanes` targets at a time (one core each: a libFuzzer process is single-threaded)
status=0
running=0
for t in $targets; do
  if [ "$running" -ge "$lanes" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status

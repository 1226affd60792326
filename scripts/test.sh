#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine if needed, builds kvphase, and runs every test:
#   1. release build (-O3 -march=native): unit tests, header checks, consumer projects,
#      example runs and benchmark smoke runs; then, when slurm-wlm, munge and openmpi-bin are
#      installed, the scale-out tests (label scaleout: a local Slurm and mpirun, one at a time);
#   2. address + undefined sanitizer build of the tests.
#   3. when clang++ is present, a fuzz smoke run of every libFuzzer target (scripts/fuzz.sh: a
#      120 s budget shared by the targets, at least 10 s each).
# Options: KVPHASE_SKIP_ASAN=1 skips step 2; KVPHASE_SKIP_FUZZ=1 skips step 3;
# KVPHASE_FUZZ_SECONDS=N sets its time per target; KVPHASE_WITH_SLOW=1 also runs tests labelled slow.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh

label_args=(-LE "slow|scaleout")
if [ "${KVPHASE_WITH_SLOW:-0}" = "1" ]; then label_args=(-LE scaleout); fi

echo "== release build =="
scripts/build.sh build/release
echo "== release tests =="
ctest --test-dir build/release --output-on-failure -j "$(nproc)" "${label_args[@]}"
# Slurm job array and mpirun with real daemons (registered only when the packages are present).
# The list is read whole before the match: `ctest … | grep -q` under pipefail can be false when
# grep exits at its first match while ctest is still writing (SIGPIPE kills ctest).
scaleout_tests="$(ctest --test-dir build/release -N -L scaleout)"
if grep -q "scaleout\." <<< "$scaleout_tests"; then
  echo "== scale-out tests (local Slurm, mpirun) =="
  ctest --test-dir build/release --output-on-failure -L scaleout
fi

if [ "${KVPHASE_SKIP_ASAN:-0}" != "1" ]; then
  echo "== address+undefined sanitizer build =="
  # -Og -g1 (line tables): a third of -O2 -g's compile time for the instrumented TUs, the same
  # stack traces with file:line (docs/contributing.md, "Sanitizer build").
  scripts/build.sh build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG" \
    -DKVPHASE_SANITIZE=address,undefined \
    -DKVPHASE_BUILD_BENCHMARKS=OFF -DKVPHASE_BUILD_EXAMPLES=OFF -DKVPHASE_HEADER_CHECK=OFF
  echo "== sanitizer tests =="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$(nproc)" -LE "slow|consumer"
fi
if [ "${KVPHASE_SKIP_FUZZ:-0}" != "1" ] && command -v clang++ > /dev/null; then
  echo "== fuzz smoke run =="
  scripts/fuzz.sh ${KVPHASE_FUZZ_SECONDS:+"$KVPHASE_FUZZ_SECONDS"}
fi
echo "== all tests passed =="

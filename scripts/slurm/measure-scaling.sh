#!/usr/bin/env bash
# Scaling of a sweep over array tasks on this machine: the same sweep as one process (1 thread)
# and as a job array of K tasks (1 CPU, 1 thread each) on a local Slurm (local-cluster.sh, in a
# temporary directory, stopped by pid afterwards). Prints trials/s of both, their ratio, and the
# load average before and after (the ratio means little on a loaded machine). The array's time
# runs from submission to the end of its last task, so it includes Slurm's scheduling; then the
# same split as mpirun ranks when mpirun is installed.
#   scripts/slurm/measure-scaling.sh BIN_DIR [TASKS=2] [TRIALS=40000]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$(cd "$1" && pwd)"; tasks="${2:-2}"; trials="${3:-40000}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvphase-scaling.XXXXXX")"
trap '"$here/local-cluster.sh" stop "$work/cluster" || true; rm -rf "$work"' EXIT
flags=(--preset mean --stride 4 --context 8192 --dim 64 --engine key --trials "$trials" --seed 5)
groups=4
"$here/local-cluster.sh" start "$work/cluster" > /dev/null
# shellcheck disable=SC1091
source "$work/cluster/env.sh"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
"$bin/kvphase-sweep" "${flags[@]}" --threads 1 --quiet --out "$work/one.csv"
t1=$(date +%s.%N)
one=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
export KVPHASE_SWEEP="$bin/kvphase-sweep"
t0=$(date +%s.%N)
# submitted, then polled every 0.2 s until no task is left (`sbatch --wait` polls at growing
# intervals: it returned ~20 s after a 22 s array had ended)
id=$(sbatch --parsable --chdir="$work" --array="0-$((tasks - 1))" "$here/sweep-array.sbatch" \
  --out "$work/part.{index}-of-{count}.csv" "${flags[@]}")
id="${id%%;*}"
while [ -n "$(squeue -h -j "$id" -o %i 2> /dev/null)" ]; do sleep 0.2; done
t1=$(date +%s.%N)
arr=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
"$bin/kvphase-merge" "$work"/part.*-of-"$tasks".csv --out "$work/merged.csv" 2> /dev/null
cmp <(grep -v '^#' "$work/one.csv") <(grep -v '^#' "$work/merged.csv") && echo "merged = single run: yes"
for t in $(seq 0 $((tasks - 1))); do
  test -s "$work/part.$t-of-$tasks.csv" || { echo "array task $t wrote no output (log: $work/kvphase-sweep-*_$t.log)" >&2; exit 1; }
done
total=$((groups * trials))
mpi=""
if command -v mpirun > /dev/null; then  # the same split as mpirun ranks (no scheduler in the time)
  root=(); if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
  t0=$(date +%s.%N)
  mpirun "${root[@]}" --oversubscribe -np "$tasks" "$bin/kvphase-sweep" "${flags[@]}" --shard auto --threads 1 --quiet \
    --out "$work/rank.{index}-of-{count}.csv"
  t1=$(date +%s.%N)
  mpi=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  "$bin/kvphase-merge" "$work"/rank.*-of-"$tasks".csv --out "$work/merged_mpi.csv" 2> /dev/null
  cmp <(grep -v '^#' "$work/one.csv") <(grep -v '^#' "$work/merged_mpi.csv") && echo "merged ranks = single run: yes"
fi
awk -v one="$one" -v arr="$arr" -v mpi="$mpi" -v n="$total" -v k="$tasks" 'BEGIN {
  printf "1 process, 1 thread: %.1f s, %.0f trials/s\n", one, n / one
  printf "%d array tasks:      %.1f s, %.0f trials/s, ratio %.2fx\n", k, arr, n / arr, one / arr
  if (mpi != "") printf "mpirun -np %d:        %.1f s, %.0f trials/s, ratio %.2fx\n", k, mpi, n / mpi, one / mpi }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

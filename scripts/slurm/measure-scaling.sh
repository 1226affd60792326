#!/usr/bin/env bash
# Scaling of a sweep over array tasks on this machine: the same sweep as one process (1 thread)
# and as a job array of K tasks (1 CPU, 1 thread each) on a local Slurm (local-cluster.sh, in a
# temporary directory, stopped by pid afterwards). Prints trials/s of both, their ratio, and the
# load average before and after (the ratio means little on a loaded machine). The array's time
# runs from submission to the end of its last task, so it includes Slurm's scheduling.
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
sbatch --wait --quiet --chdir="$work" --array="0-$((tasks - 1))" "$here/sweep-array.sbatch" \
  --out "$work/part.{index}-of-{count}.csv" "${flags[@]}"
t1=$(date +%s.%N)
arr=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
"$bin/kvphase-merge" "$work"/part.*-of-"$tasks".csv --out "$work/merged.csv" 2> /dev/null
cmp <(grep -v '^#' "$work/one.csv") <(grep -v '^#' "$work/merged.csv") && echo "merged = single run: yes"
total=$((groups * trials))
awk -v one="$one" -v arr="$arr" -v n="$total" -v k="$tasks" 'BEGIN {
  printf "1 process, 1 thread: %.1f s, %.0f trials/s\n", one, n / one
  printf "%d array tasks:      %.1f s, %.0f trials/s\n", k, arr, n / arr
  printf "ratio: %.2fx\n", one / arr }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# ctest scaleout.mpirun: `mpirun --oversubscribe -np 3 kvphase-sweep --shard auto` writes one
# shard file per rank (the rank and size come from OMPI_COMM_WORLD_RANK / _SIZE); kvphase-merge
# joins them into data rows byte-identical to the unsharded run. Bounded in time (timeout).
# Usage: mpi_test.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvphase-mpi.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root=()
if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
flags=(--preset mean --stride 4 --context 2048 --dim 16 --trials 301 --seed 11 --threads 1 --quiet)
"$bin/kvphase-sweep" "${flags[@]}" --out "$work/whole.csv"
timeout 60 mpirun "${root[@]}" --oversubscribe -np 3 "$bin/kvphase-sweep" --shard auto "${flags[@]}" \
  --out "$work/rank.{index}-of-{count}.csv" || { echo "FAIL: mpirun exited $?" >&2; exit 1; }
for r in 0 1 2; do
  grep -q "^# launcher: openmpi OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=3" "$work/rank.$r-of-3.csv" ||
    { echo "FAIL: rank $r output missing or without its launcher provenance" >&2; exit 1; }
done
"$bin/kvphase-merge" "$work"/rank.*-of-3.csv --out "$work/merged.csv"
cmp <(grep -v '^#' "$work/whole.csv") <(grep -v '^#' "$work/merged.csv") ||
  { echo "FAIL: merged rows differ from the unsharded run" >&2; exit 1; }
echo "ok: mpirun -np 3 --shard auto -> 3 rank files -> merge = unsharded run, byte for byte"

#!/usr/bin/env bash
# ctest scaleout.slurm_array: a single-node Slurm (munged, slurmctld, slurmd started by
# scripts/slurm/local-cluster.sh in a temporary directory, stopped by their process ids) runs
#  1. a 4-task array of a small sweep plus the dependent merge: the merged data rows must be
#     byte-identical to the unsharded run; the same for one `srun -n 2` job step;
#  2. a study of 12 configurations x 2 shards (24 array tasks) plus the dependent study merge:
#     one tidy table with every unit's rows, equal per unit to the unsharded run of that unit,
#     and one heatmap (scripts/plot.py --heatmap context).
# Every wait is bounded; on failure the daemons' logs are printed. Usage: slurm_array_test.sh
# BIN_DIR SOURCE_DIR (BIN_DIR holds kvphase-sweep and kvphase-merge).
set -euo pipefail
bin="$(cd "$1" && pwd)"; src="$(cd "$2" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvphase-slurm.XXXXXX")"
cluster="$work/cluster"
cleanup() {
  "$src/scripts/slurm/local-cluster.sh" stop "$cluster" || true
  if [ "${KVPHASE_KEEP_SCALEOUT:-0}" = "1" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $1" >&2
  for l in "$cluster"/log/*.log "$work"/run*/kvphase-*.log; do
    [ -f "$l" ] && { echo "--- $l (last lines)" >&2; tail -n 20 "$l" >&2; }
  done
  exit 1
}
"$src/scripts/slurm/local-cluster.sh" start "$cluster"
# shellcheck disable=SC1091
source "$cluster/env.sh"
export KVPHASE_SWEEP="$bin/kvphase-sweep" KVPHASE_MERGE="$bin/kvphase-merge"

wait_jobs() {  # wait_jobs SECONDS ID...: until no job of the ids is queued; fails on a stuck dependency
  local secs="$1"; shift
  local end=$((SECONDS + secs)) ids
  ids="$(IFS=,; echo "$*")"
  while [ -n "$(squeue -h -j "$ids" -o '%i' 2>/dev/null)" ]; do
    if squeue -h -j "$ids" -o '%r' 2>/dev/null | grep -q DependencyNeverSatisfied; then
      fail "a job of the array failed (the merge's dependency can never be satisfied)"
    fi
    [ "$SECONDS" -lt "$end" ] || fail "jobs $ids still queued after $secs s"
    sleep 0.5
  done
}
data_rows() { grep -v '^#' "$1"; }

# 1. a sharded sweep
sweep_flags=(--preset gated --stride 4 --gate-bias 3,0,0,0 --context 1024 --dim 16 --trials 203 --seed 7)
"$bin/kvphase-sweep" "${sweep_flags[@]}" --threads 1 --quiet --out "$work/whole.csv"
t0=$SECONDS
read -r array merge < <("$src/scripts/slurm/submit.sh" --dir "$work/run" --shards 4 -- "${sweep_flags[@]}")
wait_jobs 60 "$array" "$merge"
[ -f "$work/run/merged.csv" ] || fail "the merge job wrote no $work/run/merged.csv"
for i in 0 1 2 3; do
  grep -q "^# launcher: slurm-array SLURM_ARRAY_JOB_ID=$array SLURM_ARRAY_TASK_ID=$i" "$work/run/part.$i-of-4.csv" ||
    fail "part $i does not record its array job and task in the provenance"
done
cmp <(data_rows "$work/whole.csv") <(data_rows "$work/run/merged.csv") || fail "merged rows differ from the unsharded run"
grep -q '^# merged_from: 4' "$work/run/merged.csv" || fail "merged output does not say merged_from: 4"
echo "ok: 4-task array + afterok merge = unsharded run, byte for byte ($((SECONDS - t0)) s)"

# 1b. the same sweep as one job step of 2 tasks (srun -n 2: SLURM_PROCID / SLURM_NTASKS)
mkdir -p "$work/step"
timeout 60 srun -n 2 --chdir="$work/step" "$bin/kvphase-sweep" --shard auto "${sweep_flags[@]}" --threads 1 --quiet \
  --out "$work/step/part.{index}-of-{count}.csv" || fail "srun -n 2 kvphase-sweep --shard auto failed"
grep -q "^# launcher: slurm-step .*SLURM_PROCID=1 SLURM_NTASKS=2" "$work/step/part.1-of-2.csv" ||
  fail "step task 1 does not record its step in the provenance"
"$bin/kvphase-merge" "$work"/step/part.*-of-2.csv --out "$work/step/merged.csv" 2> /dev/null
cmp <(data_rows "$work/whole.csv") <(data_rows "$work/step/merged.csv") || fail "srun step rows differ from the unsharded run"
echo "ok: srun -n 2 step + merge = unsharded run, byte for byte"

# 2. a study of 12 configurations
cat > "$work/study.json" <<'JSON'
{
  "study": "context-noise",
  "shards": 2,
  "fixed": {"task": "needle", "preset": "gated", "stride": 4, "gate-bias": [3, 0, 0, 0],
            "dim": 16, "trials": 60, "seed": 3},
  "axes": {"context": [256, 512, 1024, 2048], "query-noise": [0, 0.5, 1]}
}
JSON
t0=$SECONDS
read -r array merge < <("$src/scripts/slurm/submit.sh" --dir "$work/run2" --study "$work/study.json")
wait_jobs 90 "$array" "$merge"
table="$work/run2/study.csv"
[ -f "$table" ] || fail "the study merge wrote no $table"
rows="$(data_rows "$table" | tail -n +2 | wc -l)"
[ "$rows" -eq $((12 * 2 * 4)) ] || fail "study table has $rows data rows, want 12 units x 2 models x 4 phases = 96"
for k in 0 5 11; do  # a unit of the table equals its unsharded run
  "$bin/kvphase-sweep" --grid "$work/study.json" --unit "$k" --threads 1 --quiet > "$work/unit$k.csv"
  cmp <(data_rows "$table" | awk -F, -v k="$k" 'NR > 1 && $NF == k' | sed 's/,[0-9]*$//') \
      <(data_rows "$work/unit$k.csv" | tail -n +2) || fail "unit $k of the study table differs from its unsharded run"
done
python3 "$src/scripts/plot.py" "$table" --heatmap context --out "$work/heatmap.png" > /dev/null ||
  fail "plot.py --heatmap context failed on the study table"
[ -s "$work/heatmap.png" ] || fail "no heatmap written"
echo "ok: study of 12 units x 2 shards (24 array tasks) -> one tidy table ($rows rows) + heatmap ($((SECONDS - t0)) s)"

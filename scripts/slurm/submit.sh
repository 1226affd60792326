#!/usr/bin/env bash
# Submits a sharded sweep, or a whole study, as one Slurm job array plus the merge that runs after
# it (--dependency=afterok), and prints the two job ids ("ARRAY_ID MERGE_ID").
#   scripts/slurm/submit.sh --dir run --shards 4 [--sbatch "ARGS"] -- SWEEP_FLAGS...
#        → run/part.I-of-4.csv (one per array task), run/merged.csv
#   scripts/slurm/submit.sh --dir run --study study.json [--sbatch "ARGS"] [-- SWEEP_FLAGS...]
#        → run/unit-K.shard-I-of-N.csv, run/study.csv (one tidy table of every unit)
# --sbatch passes extra sbatch arguments to both jobs (e.g. "--partition=cpu --time=02:00:00");
# --cpus C gives each array task C CPUs (and C threads). KVPHASE_SWEEP / KVPHASE_MERGE name the
# programs (default: on PATH). See docs/scale-out.md for picking the array size.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="" shards="" study="" extra="" cpus=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --shards) shards="$2"; shift 2 ;;
    --study) study="$2"; shift 2 ;;
    --sbatch) extra="$2"; shift 2 ;;
    --cpus) cpus="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "submit.sh: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "submit.sh: --dir is required" >&2; exit 2; }
if [ -n "$study" ] && [ -n "$shards" ]; then echo "submit.sh: --shards comes from the study file with --study" >&2; exit 2; fi
if [ -z "$study" ] && [ -z "$shards" ]; then echo "submit.sh: give --shards N or --study FILE" >&2; exit 2; fi
case "$cpus" in ''|*[!0-9]*|0) echo "submit.sh: --cpus must be a positive integer" >&2; exit 2 ;; esac
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
sweep="${KVPHASE_SWEEP:-kvphase-sweep}"
export KVPHASE_SWEEP="$sweep" KVPHASE_MERGE="${KVPHASE_MERGE:-kvphase-merge}"
# shellcheck disable=SC2206  # extra sbatch arguments are words
sb=(sbatch --parsable --chdir="$dir" $extra)
if [ -n "$study" ]; then
  study="$(cd "$(dirname "$study")" && pwd)/$(basename "$study")"
  tasks="$("$sweep" --grid "$study" --list | sed -n '1s/.* = \([0-9]*\) array tasks.*/\1/p')"
  case "$tasks" in ''|*[!0-9]*) echo "submit.sh: cannot read the array size of $study" >&2; exit 2 ;; esac
  array="$("${sb[@]}" --array="0-$((tasks - 1))" --cpus-per-task="$cpus" "$here/sweep-array.sbatch" \
           --grid "$study" --out-dir "$dir" "$@")"
  merge="$("${sb[@]}" --dependency="afterok:${array%%;*}" "$here/merge.sbatch" \
           --study "$study" --out "$dir/study.csv" "$dir/unit-*.csv")"
else
  case "$shards" in ''|*[!0-9]*|0) echo "submit.sh: --shards must be a positive integer" >&2; exit 2 ;; esac
  array="$("${sb[@]}" --array="0-$((shards - 1))" --cpus-per-task="$cpus" "$here/sweep-array.sbatch" \
           --out "$dir/part.{index}-of-{count}.csv" "$@")"
  merge="$("${sb[@]}" --dependency="afterok:${array%%;*}" "$here/merge.sbatch" \
           --out "$dir/merged.csv" "$dir/part.*-of-$shards.csv")"
fi
echo "${array%%;*} ${merge%%;*}"

#!/usr/bin/env bash
# A single-node Slurm on this machine, all state in one directory, for tests and trials:
#   scripts/slurm/local-cluster.sh start DIR   # munged, slurmctld, slurmd; waits until the node is idle
#   scripts/slurm/local-cluster.sh stop DIR    # stops the three daemons by their process ids
# After start, `source DIR/env.sh` points sbatch/squeue/sinfo at it (SLURM_CONF). Every wait is
# bounded (KVPHASE_SLURM_UP_SECONDS, default 30): a daemon that does not come up fails the start
# with its log, and the daemons already started are stopped again. Needs slurm-wlm and munge.
set -euo pipefail
cmd="${1:-}"; dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then echo "usage: $0 start|stop DIR" >&2; exit 2; fi
up_seconds="${KVPHASE_SLURM_UP_SECONDS:-30}"

stop_pid_file() {  # stop the process whose id is in $1 (TERM, then KILL after 5 s)
  local f="$1" pid
  [ -s "$f" ] || return 0
  pid="$(cat "$f")"
  case "$pid" in ''|*[!0-9]*) return 0 ;; esac
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop_all() {
  stop_pid_file "$dir/slurmd.pid"
  stop_pid_file "$dir/slurmctld.pid"
  stop_pid_file "$dir/munged.pid"
}

if [ "$cmd" = "stop" ]; then stop_all; exit 0; fi
if [ "$cmd" != "start" ]; then echo "$0: unknown command '$cmd' (start or stop)" >&2; exit 2; fi

for p in munged slurmctld slurmd sinfo; do
  command -v "$p" > /dev/null || { echo "$0: $p not found (scripts/setup.sh installs slurm-wlm munge)" >&2; exit 2; }
done
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"
fail() {
  echo "$0: $1" >&2
  for l in "$dir"/log/*.log; do [ -f "$l" ] && { echo "--- $l (last lines)" >&2; tail -n 15 "$l" >&2; }; done
  stop_all
  exit 1
}
wait_for() {  # wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s
  local secs="$1" what="$2"; shift 2
  local end=$((SECONDS + secs))
  until "$@" > /dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || fail "$what did not come up within $secs s"
    sleep 0.2
  done
}

# munge: own key and socket
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
munged --force --key-file="$dir/munge/munge.key" --socket="$socket" --pid-file="$dir/munged.pid" \
  --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log" --num-threads=2
wait_for "$up_seconds" munged test -S "$socket"

host="$(hostname -s)"
user="$(id -un)"
# ports from the directory's name, so two clusters on one machine do not collide
port_base=$((20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 20000))
cpus="$(nproc)"
mem_mb="$(awk '/MemTotal/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)"
cat > "$dir/slurm.conf" <<CONF
ClusterName=kvphase-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=root
SlurmctldPort=$port_base
SlurmdPort=$((port_base + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
cat > "$dir/env.sh" <<ENV
export SLURM_CONF="$dir/slurm.conf"
ENV
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$dir/slurm.conf" -i || fail "slurmctld did not start"
wait_for "$up_seconds" slurmctld scontrol ping
slurmd -f "$dir/slurm.conf" -N "$host" || fail "slurmd did not start"
node_idle() { sinfo -h -N -o '%T' | grep -qx 'idle'; }
wait_for "$up_seconds" "slurmd (node $host idle)" node_idle
echo "local Slurm up in $dir (node $host, $cpus CPUs, ports $port_base-$((port_base + 1)))"

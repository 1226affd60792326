#!/usr/bin/env bash
# Compile cost of kvphase for a consumer: CPU seconds (user + sys) and peak memory (max RSS) of
# one g++ -c of tests/compile_cost/umbrella_sweep.cpp (umbrella header + one sim::run_sweep),
# measured with /usr/bin/time -v. The flags are the ones the kvphase::kvphase INTERFACE target
# gives a consumer, read from a throw-away CMake consumer project, plus -O2 (no -march).
#
#   scripts/compile_cost.sh                 umbrella TU, 3 runs, then again with -march=native
#   scripts/compile_cost.sh --headers       also each public header alone in a TU with an empty
#                                           main (1 run each; sim/sweep.hpp with run_sweep)
#   options: --repeat N (default 3), --cxx g++ (compiler), --no-native, --only (skip umbrella),
#            --tu FILE (another probe TU), --define X (add -DX, repeatable)
# Output: one line per measurement, "label  cpu_s  rss_MB" (each run, then min / median for the
# repeated ones). CPU time and RSS do not depend much on other load; wall time does, so it is not
# reported. Needs cmake, GNU time (/usr/bin/time) and the kvphase dependencies.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeat=3
cxx=g++
native=1
headers=0
umbrella=1
tu="$here/tests/compile_cost/umbrella_sweep.cpp"
defines=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="$2"; shift 2 ;;
    --cxx) cxx="$2"; shift 2 ;;
    --no-native) native=0; shift ;;
    --headers) headers=1; shift ;;
    --only) umbrella=0; shift ;;
    --tu) tu="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --define) defines+=("-D$2"); shift 2 ;;
    *) echo "compile_cost.sh: unknown option '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
[ -x /usr/bin/time ] || { echo "compile_cost.sh: /usr/bin/time missing (Debian package: time)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ---- the consumer's flags, as CMake computes them for kvphase::kvphase ------------------------
mkdir -p "$work/consumer"
cat >"$work/consumer/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.25)
project(kvphase_compile_cost LANGUAGES CXX)
add_subdirectory("$here" kvphase EXCLUDE_FROM_ALL)
add_executable(probe probe.cpp)
target_link_libraries(probe PRIVATE kvphase::kvphase)
EOF
echo 'int main() {}' >"$work/consumer/probe.cpp"
CXX="$cxx" cmake -S "$work/consumer" -B "$work/consumer/build" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
# The compile command of probe.cpp, minus compiler, -o and -c parts: defines, includes, -fopenmp, -std.
flags="$(sed -n 's/^ *"command": "\(.*\)",$/\1/p' "$work/consumer/build/compile_commands.json" |
  sed -e 's/^[^ ]* //' -e 's/ -o [^ ]*//' -e 's/ -c [^ ]*$//')"
read -r -a base_flags <<<"$flags"
echo "# compiler: $("$cxx" --version | head -1)"
echo "# flags: ${base_flags[*]} -O2 ${defines[*]}"
echo "# host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %8s %8s\n' "# translation unit" "cpu_s" "rss_MB"

# measure LABEL ARGS...: one compile, prints "LABEL cpu_s rss_MB" and appends "cpu rss" to $work/last
measure() {
  local label="$1"
  shift
  /usr/bin/time -v "$cxx" "${base_flags[@]}" -O2 "${defines[@]}" "$@" -c -o "$work/probe.o" 2>"$work/time.txt" >/dev/null ||
    { cat "$work/time.txt" >&2; echo "compile_cost.sh: compile failed: $label" >&2; exit 1; }
  local u s k
  u="$(sed -n 's/^\tUser time (seconds): //p' "$work/time.txt")"
  s="$(sed -n 's/^\tSystem time (seconds): //p' "$work/time.txt")"
  k="$(sed -n 's/^\tMaximum resident set size (kbytes): //p' "$work/time.txt")"
  awk -v l="$label" -v u="$u" -v s="$s" -v k="$k" 'BEGIN { printf "%-44s %8.2f %8.0f\n", l, u + s, k / 1024 }'
  awk -v u="$u" -v s="$s" -v k="$k" 'BEGIN { printf "%.2f %.0f\n", u + s, k / 1024 }' >>"$work/last"
}

# repeated LABEL ARGS...: $repeat compiles, then the min and median of CPU and RSS.
repeated() {
  local label="$1"
  shift
  : >"$work/last"
  for ((i = 1; i <= repeat; ++i)); do measure "$label [run $i]" "$@"; done
  local c r
  c="$(cut -d' ' -f1 "$work/last" | sort -g | awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)] }')"
  r="$(cut -d' ' -f2 "$work/last" | sort -g | awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)] }')"
  printf '%-44s %8.2f %8.0f   median %.2f s, %.0f MB\n' "$label [min of $repeat]" ${c%% *} ${r%% *} ${c##* } ${r##* }
}

if [ "$umbrella" = 1 ]; then
  repeated "$(basename "$tu")" "$tu"
  if [ "$native" = 1 ]; then repeated "$(basename "$tu") -march=native" -march=native "$tu"; fi
fi

if [ "$headers" = 1 ]; then
  cd "$here/include"
  for h in $(find kvphase -name '*.hpp' -not -path '*/detail/*' | LC_ALL=C sort); do
    if [ "$h" = kvphase/sim/sweep.hpp ]; then
      : >"$work/last"
      measure "$h + run_sweep" "-DKVPHASE_CC_HEADER=<$h>" "$tu"
    fi
    printf '#include <%s>\nint main() {}\n' "$h" >"$work/one.cpp"
    : >"$work/last"
    measure "$h" "$work/one.cpp"
  done
fi

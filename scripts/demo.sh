#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine if needed, builds kvphase and runs the flagship demo:
# a V4-CSA-like compressed model against full attention on the same inputs, per phase, with
# intervals, the phase gap, the periodicity test, the theory's prediction, a terminal chart and
# a PNG figure. Extra arguments go to the demo program (e.g. --trials 500).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
mkdir -p build
echo "building (first build takes a few minutes) ..."
scripts/build.sh build/release > build/demo-build.log 2>&1 || { tail -50 build/demo-build.log; exit 1; }
out="$here/build/demo"
build/release/examples/demo --out "$out" "$@"
png="$out/demo.png"
if scripts/plot.py "$out/demo.csv" "$png" \
     --title "V4-CSA-like (W=8, S=4, gated) vs full attention: recall by position mod 8" > /dev/null; then
  echo "figure: $png"
else
  echo "figure: not rendered (python3-matplotlib missing); data in $out/demo.csv"
fi

#!/usr/bin/env bash
# Shared by demo.sh and test.sh: configure and build one preset-like build directory (with
# compile_commands.json for clangd / clang-tidy).
#   scripts/build.sh <build-dir> [extra cmake args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$1"; shift
jobs="${KVPHASE_JOBS:-$(nproc)}"
cmake -S "$here" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" >/dev/null
cmake --build "$dir" -j "$jobs"

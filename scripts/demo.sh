#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine if needed, builds kvphase and runs the flagship demo.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
scripts/build.sh build/release
exec build/release/examples/demo "$@"

#!/usr/bin/env bash
# Installs every Debian 12 package kvphase needs that is not installed yet.
# Idempotent: runs `apt-get update` once, and only when something is missing.
# --with-torch also installs Debian's python3-torch, used only by benchmarks/compare_torch.py
# (the PyTorch comparison of the sweep trial); nothing in the build or the tests needs it.
# --with-libtorch installs Debian's libtorch-dev (1.13, CPU; about 510 MB with its dependencies):
# the build then adds the LM trainer train_lm and its test kvphase_tests_lm (KVPHASE_WITH_TORCH
# AUTO, cmake/kvphase_torch.cmake). CI does not install it: its two TUs cost about 1 CPU-minute
# and 2 GB each to compile. With it comes libopenblas0-openmp: libtorch's products go through the
# system's libblas.so.3, which Debian points at the reference BLAS unless another is installed,
# and train_lm ran 8x slower there (kvphase/lm/blas.hpp). Installing it makes OpenBLAS the
# system-wide libblas.so.3 / liblapack.so.3 (update-alternatives), numpy's included.
set -euo pipefail

with_torch=0
with_libtorch=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --with-libtorch) with_libtorch=1 ;;
    *) echo "setup: unknown argument '$arg' (known: --with-torch, --with-libtorch)" >&2; exit 2 ;;
  esac
done

packages=(
  cmake ninja-build g++ git ca-certificates pkg-config
  libeigen3-dev libxsimd-dev xtl-dev libboost-dev libboost-math-dev
  catch2 libbenchmark-dev librandom123-dev libcli11-dev nlohmann-json3-dev
  libomp-dev python3 python3-matplotlib python3-numpy time
  python3-dev pybind11-dev python3-pybind11 python3-pytest
  clang libclang-rt-14-dev
  slurm-wlm munge openmpi-bin
)
if [ "$with_torch" -eq 1 ]; then packages+=(python3-torch); fi
if [ "$with_libtorch" -eq 1 ]; then packages+=(libtorch-dev libopenblas0-openmp); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# The performance model of fflite's ARM kernels (and, with --arch x86, of the x86 ones it is
# checked against): scripts/arm_model.py does the work; see its top for what it prints and how.
# Needs the cross compiler (g++-aarch64-linux-gnu) and llvm-mca (Debian: llvm-16, or llvm for
# LLVM 14); scripts/test.sh installs both. Example (the README's table):
#   scripts/arm_model.sh
#   scripts/arm_model.sh --arch x86 --cpus icelake-server
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/arm_model.py "$@"

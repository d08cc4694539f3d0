#!/usr/bin/env bash
# The README's first command: installs what is missing, builds fflite, and runs the main job on
# built-in examples, printing outputs and timings. Outputs go to ./out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFFLITE_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$jobs" --target fflite-example >/dev/null

mkdir -p out
echo "== Writing two small models (dense SwiGLU, Mixtral-style MoE) and running them =="
build/examples/fflite-example --demo out --tokens 16

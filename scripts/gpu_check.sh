#!/usr/bin/env bash
# The one script to run on a machine with an NVIDIA GPU (a few minutes): builds with the cuda
# backend required, runs the cuda tests (the conformance suite's cuda cases and
# cuda_backend_test, which are skipped without a GPU), then fflite-bench on the cuda backend at
# the shapes of its goals. Usage: scripts/gpu_check.sh [BUILD_DIR] (default build-gpu).
# Prints everything to stdout; exits non-zero if the build or a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 2)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFFLITE_CUDA=ON -DFFLITE_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES=native >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
status=0
(cd "$dir" && ctest -j4 --output-on-failure -R 'cuda|Cuda') 2>&1 | tee "$dir.ctest.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# No cuda case may be skipped here: a skip means the GPU was not usable.
if grep -q '(Skipped)' "$dir.ctest.log"; then
  echo "gpu_check: cuda cases were skipped on this machine"; status=1
fi
bench="$dir/runtime/tools/fflite-bench --backend cuda --reps 20"
$bench --synthetic llama-70b --dtype bf16 --tokens 1,512 || status=1
$bench --synthetic qwen-moe --dtype bf16 --tokens 1,128 || status=1
$bench --synthetic llama --tokens 1,128 || status=1
exit $status

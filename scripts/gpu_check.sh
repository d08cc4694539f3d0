#!/usr/bin/env bash
# The one script to run on a machine with an NVIDIA GPU (a few minutes): builds with the cuda
# backend required, runs the cuda tests (the conformance suite's cuda cases and
# cuda_backend_test, which are skipped without a GPU) with quantised matrices dequantised on
# upload and kept quantised, then fflite-bench on the cuda backend at the shapes of its goals.
# Usage: scripts/gpu_check.sh [BUILD_DIR] (default build-gpu).
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
# Twice: quantised matrices dequantised to f32 on upload (the default), then kept quantised
# (FFLITE_CUDA_QUANT=packed, cuda_quant.h), which has not yet passed on a GPU.
for quant in f32 packed; do
  (cd "$dir" && FFLITE_CUDA_QUANT=$quant ctest -j4 --output-on-failure -R 'cuda|Cuda') 2>&1 |
    tee "$dir.ctest.$quant.log" | tail -25
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    echo "gpu_check: cuda tests FAILED with FFLITE_CUDA_QUANT=$quant"; status=1
  fi
  # No cuda case may be skipped here: a skip means the GPU was not usable.
  if grep -q '(Skipped)' "$dir.ctest.$quant.log"; then
    echo "gpu_check: cuda cases were skipped on this machine"; status=1
  fi
done
bench="$dir/runtime/tools/fflite-bench --backend cuda --reps 20"
$bench --synthetic llama-70b --dtype bf16 --tokens 1,512 || status=1
$bench --synthetic qwen-moe --dtype bf16 --tokens 1,128 || status=1
$bench --synthetic llama --tokens 1,128 || status=1
# Quantised weights both ways, each model quantised once (--synthetic_out) and read twice: i8, i4
# and q4_k at the Llama-7B shape (the quantiser takes about 15 s there for i8/i4, longer for q4_k's
# search), i4 MoE experts (the fused decode on packed experts), then i4 kept quantised at the
# goal's Llama-70B shape (about 80 s to quantise). --rotate=false: a block-rotated matrix (the
# synthetic i8/i4 default) is dequantised on upload either way.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT  # the quantised models, also when the run is cut short
for model in llama:i8 llama:i4 llama:q4_k qwen-moe:i4; do
  shape=${model%:*} dtype=${model#*:} file="$tmp/$shape-$dtype.fflite"
  echo "== $shape $dtype, FFLITE_CUDA_QUANT=f32 (dequantised on upload) =="
  FFLITE_CUDA_QUANT=f32 $bench --synthetic "$shape" --dtype "$dtype" --rotate=false \
    --synthetic_out "$file" --tokens 1,8,512 || status=1
  echo "== $shape $dtype, FFLITE_CUDA_QUANT=packed =="
  FFLITE_CUDA_QUANT=packed $bench --model "$file" --tokens 1,8,512 || status=1
  rm -f "$file"  # a model's GBs gone before the next is written
done
FFLITE_CUDA_QUANT=packed $bench --synthetic llama-70b --dtype i4 --rotate=false --tokens 1,512 ||
  status=1
exit $status

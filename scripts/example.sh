#!/usr/bin/env bash
# The README's first command: installs what is missing, builds fflite, then runs the main job on
# two built-in examples: writes a Llama-style and a Mixtral-style checkpoint in Hugging Face layout
# (config.json + safetensors), converts each to .fflite (the Llama one also quantised to i4),
# inspects them, and runs every layer through the C API, printing outputs and timings. Everything it writes goes to ./out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
echo "== Building fflite (Release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target fflite-make-example fflite-convert fflite-inspect \
  fflite-example >/dev/null
bin=build

rm -rf out
mkdir -p out
echo
echo "== 1. Two example checkpoints in Hugging Face layout =="
$bin/converter/fflite-make-example out/llama-ckpt --arch llama --layers 4 --hidden_size 512 \
  --intermediate_size 1376
$bin/converter/fflite-make-example out/mixtral-ckpt --arch mixtral --layers 2 --hidden_size 256 \
  --intermediate_size 704 --experts 8 --top_k 2 --dtype bf16

echo
echo "== 2. Convert them to .fflite =="
$bin/converter/fflite-convert out/llama-ckpt out/llama.fflite
$bin/converter/fflite-convert out/mixtral-ckpt out/mixtral.fflite
# The Llama example again, its FFN weights quantised to 4 bits (blocks of 32, f16 scales); the
# converter prints each matrix's error against the source.
$bin/converter/fflite-convert out/llama-ckpt out/llama-i4.fflite --dtype i4

echo
echo "== 3. Inspect =="
$bin/converter/fflite-inspect out/llama.fflite
echo
$bin/converter/fflite-inspect out/mixtral.fflite
echo
$bin/converter/fflite-inspect out/llama-i4.fflite

echo
echo "== 4. Run every layer through the C API (1 and 16 tokens) =="
$bin/examples/fflite-example --tokens 16 out/llama.fflite out/mixtral.fflite out/llama-i4.fflite

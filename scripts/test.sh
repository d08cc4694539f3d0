#!/usr/bin/env bash
# The README's second command: installs what is missing, then builds and runs every test:
#   1. native Release build, the whole suite;
#   2. the whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer, built with clang
#      and libFuzzer's instrumentation (-DFFLITE_FUZZ=ON), so that the tree also builds
#      warning-free with the other compiler users have and stage 4 fuzzes this build's targets;
#   3. the suite under ThreadSanitizer (its multi-session tests are the point; the converter's
#      single-threaded tests, the fuzz regressions and a few single-threaded units left out:
#      tests/CMakeLists.txt), built with clang;
#   4. every fuzz target of stage 2's build for 30 s of a core with its seeds (scripts/fuzz.sh);
#   5. cross-built for aarch64 and armhf, the whole suite under qemu-user (scripts/test_arm.sh).
# Exits non-zero if any build or test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh valgrind clang libclang-rt-14-dev python3-cffi python3-numpy llvm-16 \
  libsimde-dev || exit 1

jobs=$(nproc 2>/dev/null || echo 2)
total_passed=0
total_failed=0
total_skipped=0
status=0

# run_suite NAME BUILD_DIR [cmake args...]: configure, build, ctest; adds to the totals.
run_suite() {
  local name=$1 dir=$2 t0=$SECONDS
  shift 2
  echo "== [$name] configure + build ($dir) =="
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFFLITE_WERROR=ON "$@" >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; echo "[$name] configure FAILED"; status=1; total_failed=$((total_failed + 1)); return
  fi
  if ! cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1; then
    tail -50 "$dir.build.log"; echo "[$name] build FAILED"; status=1; total_failed=$((total_failed + 1)); return
  fi
  echo "== [$name] test =="
  local log="$dir.ctest.log"
  (cd "$dir" && ctest -j"$jobs" --output-on-failure --timeout 1200) 2>&1 | tee "$log" | grep -vE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed|^ +Start +[0-9]+: '
  local rc=${PIPESTATUS[0]}
  local line passed failed skipped
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
  failed=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
  local all
  all=$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')
  if [ -z "$line" ]; then failed=1; all=1; fi
  # A skipped test (GTEST_SKIP, with its reason in the log) is not counted as passed.
  skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$log" || true)
  passed=$((all - failed - skipped))
  total_passed=$((total_passed + passed))
  total_skipped=$((total_skipped + skipped))
  total_failed=$((total_failed + failed))
  if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ]; then status=1; echo "[$name] FAILED"; else echo "[$name] OK: $passed passed, $skipped skipped"; fi
  echo "[$name] took $((SECONDS - t0)) s (build and tests)"
}

# Where a CUDA toolkit is found the cuda backend is built too, here for sm_80 and sm_90 only (CI
# has no GPU: the build is a compile check, and its cuda tests are skipped, each saying why);
# the default's five architectures (cmake/FfliteCuda.cmake) take 93 s of nvcc where these take
# 44 (same machine), and sm_87/sm_89 compile the same code under sm_80's limits.
run_suite native build "-DCMAKE_CUDA_ARCHITECTURES=80-real;90-real"
# One clang build for the sanitizers and the fuzzers: g++ 12 took 512 s to build the instrumented
# tree and clang 14 another 300 s for the fuzz targets' own tree; this build takes about 565 s
# (same machine; its tests 115 s against 80: libFuzzer's coverage counters). g++ builds the
# native and ARM stages, so both compilers build everything.
CC=clang CXX=clang++ run_suite sanitizers build-asan -DFFLITE_FUZZ=ON
# clang 14's ThreadSanitizer ran the suite in 59 s where g++ 12's took 205 s (same machine).
# Without the converter's tests and the fuzz regressions: single-threaded code, no race to find
# (they run in every other stage).
CC=clang CXX=clang++ run_suite threads build-tsan -DFFLITE_TSAN=ON -DFFLITE_BUILD_TOOLS=OFF \
  -DFFLITE_CONVERTER_TESTS=OFF

# 4. Every libFuzzer target for about 30 s of a core with its generated seeds and saved crashes
#    (four targets on two cores: 60 s of wall time; 45 s each put the command over CI's 45 minutes).
t0=$SECONDS
scripts/fuzz.sh 30 build-asan 2>&1 | tee build-fuzz.log; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
read -r p f < <(sed -nE 's/^fuzz: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2/p' build-fuzz.log)
total_passed=$((total_passed + ${p:-0})); total_failed=$((total_failed + ${f:-1}))
echo "[fuzz] took $((SECONDS - t0)) s (build and runs)"

# 5. Cross-built for aarch64 and armhf, the whole suite under qemu-user with two CPU models each
#    (the second without the tests labelled cpu_independent, above_backend or
#    threads_and_shapes).
scripts/test_arm.sh 2>&1 | tee build-arm.log; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
read -r p f s < <(sed -nE 's/^arm: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/\1 \2 \3/p' build-arm.log)
total_passed=$((total_passed + ${p:-0})); total_failed=$((total_failed + ${f:-1})); total_skipped=$((total_skipped + ${s:-0}))

echo
echo "total: $total_passed passed, $total_failed failed, $total_skipped skipped, in $((SECONDS / 60)) min (CI's budget for this command: 45)"
exit $status

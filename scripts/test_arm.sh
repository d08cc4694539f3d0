#!/usr/bin/env bash
# The ARM stages of the test command: cross-builds fflite for each ARM Linux target and runs the
# whole suite under qemu-user, once per emulated CPU model, so that both sides of every CPU
# feature test in the kernels run:
#   aarch64 (build-aarch64/, qemu-aarch64): QEMU_CPU=max (fp16 arithmetic, dot product, SVE...)
#           and QEMU_CPU=cortex-a53 (plain ARMv8.0 NEON: the Raspberry Pi 3's core);
#   armhf   (build-armhf/, qemu-arm): QEMU_CPU=cortex-a7 (ARMv7 NEON + VFPv4 FMA + fp16
#           conversions: the Raspberry Pi 2's core) and QEMU_CPU=cortex-a8 (NEON, no FMA).
# The second model runs only the tests of the code whose paths depend on the CPU's features: the
# kernels, their registry, the platform probe and the CPU backend (every test labelled neither
# cpu_independent nor above_backend in tests/CMakeLists.txt).
# Installs what is missing (as root; platforms/raspberrypi/build.sh), builds with -Werror.
# FFLITE_ARM_TARGETS chooses the targets (default "aarch64 armhf").
# Prints ctest's summary per run and a total line (skipped tests are listed, not counted as
# passed); exits non-zero if any build or test fails.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
passed=0
failed=0
skipped=0
start=$SECONDS
for target in ${FFLITE_ARM_TARGETS:-aarch64 armhf}; do
  t0=$SECONDS
  echo "== [$target] cross-build + the whole suite under qemu (build-$target) =="
  rm -f build-"$target".ctest-*.log
  if ! platforms/raspberrypi/build.sh "$target" --test --build-dir "build-$target" \
      -- -DFFLITE_WERROR=ON; then
    status=1
  fi
  # Totals from every ctest run of this target; a build that failed counts as one failure.
  runs=0
  for logf in build-"$target".ctest-*.log; do
    [ -f "$logf" ] || continue
    runs=$((runs + 1))
    line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$logf" | tail -1)
    if [ -z "$line" ]; then
      failed=$((failed + 1))
      continue
    fi
    all=$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of.*/\1/')
    # A skipped test (GTEST_SKIP, with its reason in the log) is not counted as passed.
    s=$(grep -cE '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$logf" || true)
    grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$logf" | sed "s/^[[:space:]]*/  [$logf] skipped: /"
    passed=$((passed + all - f - s))
    failed=$((failed + f))
    skipped=$((skipped + s))
  done
  [ $runs -eq 0 ] && failed=$((failed + 1))
  echo "[$target] took $((SECONDS - t0)) s"
done
echo "arm: $passed passed, $failed failed, $skipped skipped ($((SECONDS - start)) s)"
[ $failed -ne 0 ] && status=1
exit $status

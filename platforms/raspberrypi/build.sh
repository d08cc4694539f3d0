#!/usr/bin/env bash
# Cross-builds fflite for a Raspberry Pi (or any ARM Linux board running Debian 12 / Raspberry Pi
# OS bookworm) on a Debian 12 x86-64 machine, installing what it needs; optionally runs the tests
# under qemu-user. Run as root (uses sudo otherwise). Idempotent: a second run only rebuilds.
#
# Usage: platforms/raspberrypi/build.sh aarch64|armhf [--test] [--build-dir DIR] [-- CMAKE_ARGS...]
#   aarch64   64-bit Raspberry Pi OS (Pi 3, 4, 5, Zero 2): arm64
#   armhf     32-bit Raspberry Pi OS on ARMv7 or later (Pi 2 v1.1+, 3, 4, 5, Zero 2): armhf
#   --test    after building, run the whole suite under qemu once per CPU model in
#             FFLITE_QEMU_CPUS (default for aarch64: "max cortex-a53"; armhf: "cortex-a7 cortex-a8");
#             after the first model, the tests labelled cpu_independent, above_backend or
#             threads_and_shapes are left out
#   --build-dir DIR   default build-<arch> in the repository root
# Environment: FFLITE_SYSROOT_BASE (default /opt/fflite-sysroot): where the target's libraries are
# unpacked, one folder per architecture; nothing of the target is installed into the host's /usr.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() { sed -n '6,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
arch=$1
shift
case "$arch" in
  aarch64) debarch=arm64; triple=aarch64-linux-gnu; qemu=qemu-aarch64; cpus_default="max cortex-a53" ;;
  armhf) debarch=armhf; triple=arm-linux-gnueabihf; qemu=qemu-arm; cpus_default="cortex-a7 cortex-a8" ;;
  *) usage ;;
esac
run_tests=0
build_dir=$repo/build-$arch
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --test) run_tests=1 ;;
    --build-dir) build_dir=$2; shift ;;
    --) shift; cmake_args=("$@"); break ;;
    *) usage ;;
  esac
  shift
done
case "$build_dir" in /*) ;; *) build_dir=$PWD/$build_dir ;; esac

sysroot_base=${FFLITE_SYSROOT_BASE:-/opt/fflite-sysroot}
sysroot=$sysroot_base/$debarch
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
log() { echo "fflite[$arch]: $*" >&2; }

# ---- 1. Host packages: the native build's dependencies (flatc among them), the cross compiler
# and qemu-user. All are amd64 packages; nothing of another architecture enters dpkg.
host_deps() {
  "$repo/scripts/deps.sh" "g++-$triple" qemu-user-static || return 1
}

# ---- 2. The target's libraries, unpacked into $sysroot.
# Debian's XNNPACK and pthreadpool packages are not multi-arch (installing the arm64 ones would
# remove the native ones), and adding armhf to dpkg makes `apt-get update` fail while the armhf
# security index is out of sync on the mirror. So the target's packages are fetched with a
# private apt state (its own architecture, lists and cache, the host's sources) and unpacked with
# dpkg-deb -x: the host's package database is never touched, and the host's `apt-get update` is
# not affected.
target_packages=(
  libxnnpack0 libxnnpack-dev libpthreadpool0 libpthreadpool-dev libcpuinfo0 libcpuinfo-dev
  libabsl20220623 libabsl-dev libflatbuffers2 libflatbuffers-dev libgtest-dev libgmock-dev
  nlohmann-json3-dev
)

sysroot_deps() {
  local stamp=$sysroot/.fflite-packages want
  want="${target_packages[*]}"
  if [ -f "$stamp" ] && [ "$(head -1 "$stamp")" = "$want" ]; then
    return 0
  fi
  log "fetching ${#target_packages[@]} $debarch packages into $sysroot"
  local state=$sysroot_base/apt-$debarch
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/debs" || return 1
  touch "$state/status"
  local apt_opts=(
    -o "APT::Architecture=$debarch" -o "APT::Architectures::=$debarch"
    -o "Dir::State=$state" -o "Dir::State::Lists=$state/lists" -o "Dir::State::status=$state/status"
    -o "Dir::Cache=$state/cache" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root"
    -o "Acquire::Languages=none" -q
  )
  # Errors from sources that lack this architecture or are unreachable are expected here (and
  # harmless): what matters is that every package below can be downloaded.
  apt-get "${apt_opts[@]}" update >"$state/update.log" 2>&1 ||
    log "apt-get update reported errors (see $state/update.log); continuing with what it fetched"
  rm -f "$state/debs"/*.deb
  if ! (cd "$state/debs" && apt-get "${apt_opts[@]}" download "${target_packages[@]}") \
      >"$state/download.log" 2>&1; then
    cat "$state/update.log" "$state/download.log" >&2
    log "could not download the $debarch packages"
    return 1
  fi
  rm -rf "$sysroot.tmp"
  mkdir -p "$sysroot.tmp" || return 1
  local deb
  for deb in "$state/debs"/*.deb; do
    dpkg-deb -x "$deb" "$sysroot.tmp" || return 1
  done
  # Versions unpacked, for the record; line 1 is what a later run compares.
  { echo "$want"; (cd "$state/debs" && ls); } >"$sysroot.tmp/.fflite-packages"
  rm -rf "$sysroot" && mv "$sysroot.tmp" "$sysroot"
}

# ---- 3. Configure + build with the toolchain file.
build() {
  log "configure + build in $build_dir (sysroot $sysroot)"
  mkdir -p "$build_dir"
  if ! cmake -S "$repo" -B "$build_dir" \
      -DCMAKE_TOOLCHAIN_FILE="$here/$triple.cmake" -DFFLITE_SYSROOT="$sysroot" \
      -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >"$build_dir.configure.log" 2>&1; then
    cat "$build_dir.configure.log" >&2; log "configure FAILED"; return 1
  fi
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  if ! cmake --build "$build_dir" -j"$jobs" >"$build_dir.build.log" 2>&1; then
    tail -60 "$build_dir.build.log" >&2; log "build FAILED"; return 1
  fi
  if grep -q 'warning:' "$build_dir.build.log"; then
    grep -B2 -A4 'warning:' "$build_dir.build.log" | head -60 >&2
    log "the build has warnings (see $build_dir.build.log)"
  fi
  log "built: $build_dir"
}

# ---- 4. A folder to copy to the device: bin/ (the tools that were built), lib/ (libfflite.so and
# every library they need that is not part of the device's base system: XNNPACK, pthreadpool,
# cpuinfo, Abseil, from the same Debian packages), include/fflite/ (fflite.h and the
# fflite_version.h it includes), and `run`, which starts a
# tool with lib/ on the library path. The device needs only glibc 2.36 and GCC 12's libstdc++
# (Debian 12 / Raspberry Pi OS bookworm).
make_dist() {
  local dist=$build_dir/dist libdir=$sysroot/usr/lib/$triple f lib
  rm -rf "$dist" && mkdir -p "$dist/bin" "$dist/lib" "$dist/include/fflite" || return 1
  local queue=()
  for f in runtime/tools/fflite-bench runtime/tools/fflite-neurons runtime/tools/fflite-imatrix \
      examples/fflite-example converter/fflite-inspect; do
    [ -f "$build_dir/$f" ] && cp "$build_dir/$f" "$dist/bin/" && queue+=("$dist/bin/$(basename "$f")")
  done
  cp -P "$build_dir"/runtime/libfflite.so* "$dist/lib/" && queue+=("$dist/lib/libfflite.so")
  cp "$repo/runtime/include/fflite/fflite.h" "$build_dir/runtime/include/fflite/fflite_version.h" \
    "$dist/include/fflite/"
  # Copy the dependencies, following DT_NEEDED from the binaries through the libraries.
  while [ ${#queue[@]} -gt 0 ]; do
    f=${queue[0]}
    queue=("${queue[@]:1}")
    for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
      if [ -f "$libdir/$lib" ] && [ ! -f "$dist/lib/$lib" ]; then
        cp -L "$libdir/$lib" "$dist/lib/$lib" && queue+=("$dist/lib/$lib")
      fi
    done
  done
  cat >"$dist/run" <<'RUN'
#!/bin/sh
# Runs one of bin/ with lib/ on the library path: ./run fflite-bench --synthetic llama
here=$(cd "$(dirname "$0")" && pwd)
tool=$1
shift
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/$tool" "$@"
RUN
  chmod +x "$dist/run"
  log "to copy to the device: $dist ($(du -sh "$dist" | cut -f1); $(ls "$dist/bin" | tr '\n' ' '))"
}

# ---- 5. The whole suite under qemu, once per emulated CPU model (different feature sets make
# XNNPACK and fflite's own kernels pick different code paths).
test_under_qemu() {
  local jobs status=0 cpu
  jobs=$(nproc 2>/dev/null || echo 2)
  # The first model runs every test; each later one leaves out the tests labelled
  # cpu_independent (no code path of theirs depends on the CPU's features), above_backend (their
  # CPU-dependent paths are the backend's, tested under each model by its own tests) or
  # threads_and_shapes (the backend's longest variations: tests/test_costs.cmake).
  local select=()
  for cpu in ${FFLITE_QEMU_CPUS:-$cpus_default}; do
    local logf="$build_dir.ctest-$cpu.log" start=$SECONDS
    log "ctest under $qemu with QEMU_CPU=$cpu ${select[*]}"
    (cd "$build_dir" && QEMU_CPU=$cpu ctest -j"$jobs" --output-on-failure --timeout 1200 "${select[@]}") \
      >"$logf" 2>&1
    local rc=$?
    # What the library detected on this emulated CPU (printed by platform_test).
    grep -m1 -h 'fflite platform:' "$build_dir"/Testing/Temporary/LastTest.log 2>/dev/null |
      sed "s/^/  [$arch QEMU_CPU=$cpu] /" >&2
    grep -E '^[0-9]+% tests passed|^Total Test time|^The following tests|^[[:space:]]+[0-9]+ - ' "$logf" |
      sed "s/^/  [$arch QEMU_CPU=$cpu] /"
    echo "  [$arch QEMU_CPU=$cpu] ctest took $((SECONDS - start)) s"
    if [ $rc -ne 0 ]; then
      status=1
      grep -A40 -E '\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception' "$logf" | head -120 >&2
      log "tests FAILED with QEMU_CPU=$cpu (log: $logf)"
    fi
    select=(-LE 'cpu_independent|above_backend|threads_and_shapes')
  done
  return $status
}

host_deps || { log "installing host packages FAILED"; exit 1; }
sysroot_deps || { log "setting up the $debarch sysroot FAILED"; exit 1; }
build || exit 1
make_dist || { log "assembling $build_dir/dist FAILED"; exit 1; }
if [ $run_tests -eq 1 ]; then
  test_under_qemu || exit 1
fi
exit 0

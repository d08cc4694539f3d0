#!/usr/bin/env bash
# Cross-builds fflite for Android with the NDK on a Debian 12 x86-64 machine: fetches the Debian
# source packages of its dependencies (the same versions the Linux builds use), builds them with
# the NDK as static PIC libraries into a prefix, then configures and builds fflite.
# Run as root (uses sudo otherwise) for the host packages. Idempotent: built dependencies are kept.
#
# Usage: platforms/android/build.sh arm64-v8a|armeabi-v7a [--ndk DIR] [--api N] [--with-tests]
#                                   [--build-dir DIR] [-- CMAKE_ARGS...]
#   --ndk DIR       the Android NDK (r23 or newer); default $ANDROID_NDK_HOME or $ANDROID_NDK_ROOT
#   --api N         lowest Android API level to support; default 24 (Android 7.0)
#   --with-tests    also build GoogleTest and the test suite (to run on a device with adb)
#   --build-dir DIR default build-android-<abi> in the repository root
# Environment: FFLITE_ANDROID_DEPS (default /opt/fflite-android): sources and per-ABI prefixes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() { sed -n '7,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
abi=$1
shift
case "$abi" in arm64-v8a | armeabi-v7a) ;; *) usage ;; esac
ndk=${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-${ANDROID_NDK:-}}}
api=24
with_tests=0
build_dir=$repo/build-android-$abi
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ndk) ndk=$2; shift ;;
    --api) api=$2; shift ;;
    --with-tests) with_tests=1 ;;
    --build-dir) build_dir=$2; shift ;;
    --) shift; cmake_args=("$@"); break ;;
    *) usage ;;
  esac
  shift
done
log() { echo "fflite[android $abi]: $*" >&2; }
if [ -z "$ndk" ] || [ ! -f "$ndk/build/cmake/android.toolchain.cmake" ]; then
  log "no Android NDK: pass --ndk DIR or set ANDROID_NDK_HOME (download it from"
  log "https://developer.android.com/ndk/downloads and unzip it anywhere)"
  exit 2
fi
ndk=$(cd "$ndk" && pwd)
deps=${FFLITE_ANDROID_DEPS:-/opt/fflite-android}
prefix=$deps/$abi-android-$api
jobs=$(nproc 2>/dev/null || echo 2)
toolchain=(-DCMAKE_TOOLCHAIN_FILE="$here/android.cmake" -DANDROID_NDK="$ndk" -DANDROID_ABI="$abi"
           -DANDROID_PLATFORM="android-$api" -DFFLITE_ANDROID_PREFIX="$prefix")

# ---- 1. Host packages: fflite's native dependencies (flatc among them), dpkg-source to unpack
# source packages, and the header-only libraries XNNPACK and pthreadpool compile against.
"$repo/scripts/deps.sh" dpkg-dev cmake make

# ---- 2. Debian's source packages of the dependencies (with Debian's patches applied), fetched
# with a private apt state so that the host's sources.list needs no deb-src lines.
sources=(xnnpack pthreadpool cpuinfo fp16 fxdiv psimd abseil flatbuffers nlohmann-json3)
[ $with_tests -eq 1 ] && sources+=(googletest)
fetch_sources() {
  local src=$deps/src state=$deps/apt-src missing=() s
  mkdir -p "$src"
  for s in "${sources[@]}"; do
    compgen -G "$src/$s-[0-9]*/CMakeLists.txt" >/dev/null || missing+=("$s")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "fetching Debian source packages: ${missing[*]}"
  . /etc/os-release
  local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
  local key=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
  touch "$state/status"
  cat >"$state/sources.list" <<EOF
deb-src [signed-by=$key] $mirror $VERSION_CODENAME main
deb-src [signed-by=$key] $mirror $VERSION_CODENAME-updates main
deb-src [signed-by=$key] $security $VERSION_CODENAME-security main
EOF
  local apt_opts=(
    -o "Dir::Etc::SourceList=$state/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State=$state" -o "Dir::State::Lists=$state/lists" -o "Dir::State::status=$state/status"
    -o "Dir::Cache=$state/cache" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -q
  )
  apt-get "${apt_opts[@]}" update >"$state/update.log" 2>&1 ||
    log "apt-get update reported errors (see $state/update.log); continuing"
  (cd "$src" && apt-get "${apt_opts[@]}" source "${missing[@]}") >"$state/source.log" 2>&1 || {
    cat "$state/source.log" >&2; log "fetching the sources FAILED"; exit 1; }
}
srcdir() { compgen -G "$deps/src/$1-[0-9]*/CMakeLists.txt" | head -1 | xargs dirname; }

# ---- 3. The dependencies, built with the NDK into $prefix (static, position-independent: they
# end up inside libfflite.so and the tools). A stamp per package makes reruns skip it.
build_dep() {
  local name=$1 dir
  shift
  [ -f "$prefix/.built-$name" ] && return 0
  dir=$(srcdir "$name")
  log "building $name ($(basename "$dir"))"
  rm -rf "$deps/build/$abi-$api/$name"
  cmake -S "$dir" -B "$deps/build/$abi-$api/$name" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF \
    -DBUILD_TESTING=OFF "$@" >"$deps/build/$abi-$api-$name.log" 2>&1 &&
    cmake --build "$deps/build/$abi-$api/$name" -j"$jobs" >>"$deps/build/$abi-$api-$name.log" 2>&1 &&
    cmake --install "$deps/build/$abi-$api/$name" >>"$deps/build/$abi-$api-$name.log" 2>&1 || {
    tail -40 "$deps/build/$abi-$api-$name.log" >&2; log "building $name FAILED"; exit 1; }
  touch "$prefix/.built-$name"
}
build_deps() {
  mkdir -p "$prefix/include" "$deps/build/$abi-$api"
  # Header-only: FP16 (with psimd) and FXdiv, used by XNNPACK and pthreadpool.
  cp -r "$(srcdir fp16)/include/." "$(srcdir psimd)/include/." "$(srcdir fxdiv)/include/." \
    "$prefix/include/"
  build_dep cpuinfo -DCPUINFO_LIBRARY_TYPE=static -DCPUINFO_BUILD_TOOLS=OFF \
    -DCPUINFO_BUILD_UNIT_TESTS=OFF -DCPUINFO_BUILD_MOCK_TESTS=OFF -DCPUINFO_BUILD_BENCHMARKS=OFF \
    -DCLOG_BUILD_TESTS=OFF
  build_dep pthreadpool -DPTHREADPOOL_LIBRARY_TYPE=static -DPTHREADPOOL_BUILD_TESTS=OFF \
    -DPTHREADPOOL_BUILD_BENCHMARKS=OFF -DFXDIV_SOURCE_DIR="$(srcdir fxdiv)" \
    -DFXDIV_BUILD_TESTS=OFF -DFXDIV_BUILD_BENCHMARKS=OFF
  build_dep xnnpack -DXNNPACK_LIBRARY_TYPE=static -DXNNPACK_USE_SYSTEM_LIBS=ON \
    -DXNNPACK_BUILD_TESTS=OFF -DXNNPACK_BUILD_BENCHMARKS=OFF
  # XNNPACK's install rule installs the library and xnnpack.h; make sure of the header.
  cp "$(srcdir xnnpack)/include/xnnpack.h" "$prefix/include/"
  build_dep abseil -DABSL_PROPAGATE_CXX_STD=ON -DABSL_BUILD_TESTING=OFF -DCMAKE_CXX_STANDARD=17
  build_dep flatbuffers -DFLATBUFFERS_BUILD_TESTS=OFF -DFLATBUFFERS_BUILD_FLATC=OFF \
    -DFLATBUFFERS_BUILD_FLATHASH=OFF -DFLATBUFFERS_INSTALL=ON
  build_dep nlohmann-json3 -DJSON_BuildTests=OFF -DJSON_Install=ON
  if [ $with_tests -eq 1 ]; then
    build_dep googletest -DINSTALL_GTEST=ON -DBUILD_GMOCK=ON
  fi
}

# ---- 4. fflite itself.
build_fflite() {
  log "configure + build in $build_dir"
  local tests=OFF
  [ $with_tests -eq 1 ] && tests=ON
  cmake -S "$repo" -B "$build_dir" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFFLITE_BUILD_TESTS=$tests "${cmake_args[@]}"
  cmake --build "$build_dir" -j"$jobs"
  log "built: $build_dir (libfflite.so in runtime/, fflite-bench in runtime/tools/, fflite-example in examples/)"
}

fetch_sources
build_deps
build_fflite

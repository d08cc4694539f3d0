#!/usr/bin/env bash
# Installs the Debian 12 packages fflite needs that are missing (as root; uses sudo otherwise).
# Usage: scripts/deps.sh [extra-package ...]
set -euo pipefail

packages=(
  pkg-config
  libxnnpack-dev libpthreadpool-dev libcpuinfo-dev
  libflatbuffers-dev flatbuffers-compiler
  libabsl-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "fflite: installing missing Debian packages: ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq || echo "fflite: apt-get update reported errors; trying the install anyway" >&2
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

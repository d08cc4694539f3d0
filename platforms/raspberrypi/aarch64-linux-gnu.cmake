# CMake toolchain file: 64-bit ARM Linux (Raspberry Pi OS 64-bit, Debian arm64), from Debian 12
# x86-64 with g++-aarch64-linux-gnu; tests run under qemu-aarch64. See platforms/raspberrypi/.
set(FFLITE_CROSS_TRIPLE aarch64-linux-gnu)
set(FFLITE_CROSS_PROCESSOR aarch64)
set(FFLITE_CROSS_DEBARCH arm64)
set(FFLITE_CROSS_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/linux-cross.cmake)

# CMake toolchain file: 32-bit ARM Linux, ARMv7-A + VFPv3 hard float (Raspberry Pi OS 32-bit on a
# Pi 2 v1.1 or later, Debian armhf), from Debian 12 x86-64 with g++-arm-linux-gnueabihf; tests run
# under qemu-arm. Debian's armhf baseline has no NEON: fflite's NEON code is compiled with NEON
# enabled per function and chosen at run time, as XNNPACK does. See platforms/raspberrypi/.
set(FFLITE_CROSS_TRIPLE arm-linux-gnueabihf)
set(FFLITE_CROSS_PROCESSOR armv7l)
set(FFLITE_CROSS_DEBARCH armhf)
set(FFLITE_CROSS_QEMU qemu-arm)
include(${CMAKE_CURRENT_LIST_DIR}/linux-cross.cmake)

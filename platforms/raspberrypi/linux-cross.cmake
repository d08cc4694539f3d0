# Shared body of the ARM Linux toolchain files (aarch64-linux-gnu.cmake, arm-linux-gnueabihf.cmake):
# Debian's cross compiler, the target's libraries in a private sysroot folder, qemu-user for ctest.
#
# The including file sets FFLITE_CROSS_TRIPLE, FFLITE_CROSS_PROCESSOR, FFLITE_CROSS_DEBARCH and
# FFLITE_CROSS_QEMU. FFLITE_SYSROOT (a -D option or the environment variable) is the folder that
# holds the target's usr/include and usr/lib/<triple> (XNNPACK, pthreadpool, cpuinfo, Abseil,
# FlatBuffers, GoogleTest, nlohmann-json), as platforms/raspberrypi/build.sh unpacks them from
# Debian's packages; default /opt/fflite-sysroot/<debian arch>.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${FFLITE_CROSS_PROCESSOR})
set(CMAKE_LIBRARY_ARCHITECTURE ${FFLITE_CROSS_TRIPLE})
set(CMAKE_C_COMPILER ${FFLITE_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${FFLITE_CROSS_TRIPLE}-g++)

if(NOT FFLITE_SYSROOT)
  if(DEFINED ENV{FFLITE_SYSROOT})
    set(FFLITE_SYSROOT "$ENV{FFLITE_SYSROOT}")
  else()
    set(FFLITE_SYSROOT "/opt/fflite-sysroot/${FFLITE_CROSS_DEBARCH}")
  endif()
endif()
set(FFLITE_SYSROOT "${FFLITE_SYSROOT}" CACHE PATH "The target's libraries (usr/include, usr/lib/<triple>)")
if(NOT EXISTS "${FFLITE_SYSROOT}/usr/include/xnnpack.h")
  message(FATAL_ERROR "FFLITE_SYSROOT=${FFLITE_SYSROOT} holds no usr/include/xnnpack.h; "
          "run platforms/raspberrypi/build.sh ${FFLITE_CROSS_PROCESSOR} (or set FFLITE_SYSROOT)")
endif()
# try_compile projects re-read this file: hand them the same sysroot.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FFLITE_SYSROOT)

# GCC notes ABI changes of GCC 7.1 (armhf) and 9.1 (aarch64) at every affected call: everything
# here is built with one GCC, so they say nothing; silenced to keep the build log readable.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")

# Libraries, headers and CMake packages come only from the sysroot and the cross toolchain's own
# folder (/usr/<triple>: libc, libstdc++); programs (flatc) only from the host.
set(CMAKE_FIND_ROOT_PATH "${FFLITE_SYSROOT}" "/usr/${FFLITE_CROSS_TRIPLE}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# libXNNPACK.so needs libpthreadpool.so.0 and libcpuinfo.so.0: tell the linker where they are.
set(_fflite_target_libdir "${FFLITE_SYSROOT}/usr/lib/${FFLITE_CROSS_TRIPLE}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_fflite_target_libdir}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_fflite_target_libdir}")

# ctest (and gtest discovery) run the target's programs through qemu-user: the cross toolchain's
# folder stands in for / (the dynamic loader, libc, libstdc++), and the sysroot's libraries are on
# the guest's library path. QEMU_CPU in the environment picks the emulated CPU model.
find_program(FFLITE_QEMU_EXECUTABLE NAMES ${FFLITE_CROSS_QEMU}-static ${FFLITE_CROSS_QEMU})
if(FFLITE_QEMU_EXECUTABLE)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${FFLITE_QEMU_EXECUTABLE};-L;/usr/${FFLITE_CROSS_TRIPLE};-E;LD_LIBRARY_PATH=${_fflite_target_libdir};-E;FFLITE_UNDER_QEMU=1")
endif()

# CMake toolchain file for Android: wraps the NDK's own toolchain file and adds where the
# Android builds of fflite's dependencies live. See platforms/android/README.md.
#
#   cmake -S . -B build-android-arm64-v8a \
#     -DCMAKE_TOOLCHAIN_FILE=platforms/android/android.cmake \
#     -DANDROID_NDK=/path/to/android-ndk-r26d -DANDROID_ABI=arm64-v8a -DANDROID_PLATFORM=android-24 \
#     -DFFLITE_ANDROID_PREFIX=/opt/fflite-android/arm64-v8a-android-24
#
# ANDROID_NDK: the NDK's folder (or the ANDROID_NDK_HOME / ANDROID_NDK_ROOT environment variable).
# ANDROID_ABI: arm64-v8a (default) or armeabi-v7a (built with NEON, as the NDK does by default).
# ANDROID_PLATFORM: the lowest Android API level to run on; default android-24 (Android 7.0), the
#   first with every 64-bit file-offset function that 32-bit builds use (_FILE_OFFSET_BITS=64).
# FFLITE_ANDROID_PREFIX: an install prefix holding XNNPACK, pthreadpool, cpuinfo (libraries and
#   headers), FlatBuffers, Abseil, nlohmann-json (CMake packages) and, for the tests, GoogleTest,
#   all built for this ABI, as platforms/android/build.sh builds them. flatc is the host's.
if(NOT ANDROID_NDK)
  foreach(var ANDROID_NDK_HOME ANDROID_NDK_ROOT ANDROID_NDK)
    if(DEFINED ENV{${var}} AND NOT ANDROID_NDK)
      set(ANDROID_NDK "$ENV{${var}}")
    endif()
  endforeach()
endif()
if(NOT ANDROID_NDK OR NOT EXISTS "${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
  message(FATAL_ERROR "platforms/android/android.cmake: set ANDROID_NDK (-DANDROID_NDK=... or the "
          "ANDROID_NDK_HOME environment variable) to an Android NDK folder (r23 or newer); "
          "got '${ANDROID_NDK}'")
endif()
if(NOT ANDROID_ABI)
  set(ANDROID_ABI arm64-v8a)
endif()
if(NOT ANDROID_PLATFORM)
  set(ANDROID_PLATFORM android-24)
endif()
if(NOT FFLITE_ANDROID_PREFIX AND DEFINED ENV{FFLITE_ANDROID_PREFIX})
  set(FFLITE_ANDROID_PREFIX "$ENV{FFLITE_ANDROID_PREFIX}")
endif()
# try_compile projects re-read this file: hand them the same choices.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANDROID_NDK FFLITE_ANDROID_PREFIX)

include("${ANDROID_NDK}/build/cmake/android.toolchain.cmake")

# The NDK's toolchain searches only its own sysroot for libraries, headers and packages; add the
# dependencies' prefix. Programs (flatc) come from the host.
if(FFLITE_ANDROID_PREFIX)
  list(APPEND CMAKE_FIND_ROOT_PATH "${FFLITE_ANDROID_PREFIX}")
  list(APPEND CMAKE_PREFIX_PATH "/")  # the prefix's own lib/cmake, include and lib, re-rooted
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

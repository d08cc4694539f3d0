# Installs fflite into a scratch prefix, then builds the README's C example against the installed
# copy twice (find_package(fflite) and pkg-config) and runs both on a model. Also checks that the
# README shows the example exactly as it is compiled here.
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/fflite/fflite.h include/fflite/fflite_version.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
file(GLOB_RECURSE config ${prefix}/*/fflite-config.cmake)
file(GLOB_RECURSE pc ${prefix}/*/fflite.pc)
file(GLOB_RECURSE static_lib ${prefix}/*/libfflite.a)
if(NOT config OR NOT pc OR NOT static_lib)
  message(FATAL_ERROR "missing from the install: config='${config}' pc='${pc}' static='${static_lib}'")
endif()

# 1. CMake: find_package(fflite).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/consumer -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DEXAMPLE_SOURCE=${SOURCE_DIR}/examples/c_example.c)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/c_example ${MODEL})
if(NOT last_output MATCHES "layer 1 \\(")
  message(FATAL_ERROR "c_example (CMake) printed:\n${last_output}")
endif()

# 2. pkg-config.
get_filename_component(pc_dir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
find_program(PKG_CONFIG pkg-config REQUIRED)
run(${PKG_CONFIG} --cflags --libs fflite)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
get_filename_component(lib_dir ${static_lib} DIRECTORY)
run(${CC} -std=c99 -Wall -Wextra -o ${WORK_DIR}/c_example_pc ${SOURCE_DIR}/examples/c_example.c
    ${flags} -Wl,-rpath,${lib_dir})
run(${WORK_DIR}/c_example_pc ${MODEL})
if(NOT last_output MATCHES "layer 1 \\(")
  message(FATAL_ERROR "c_example (pkg-config) printed:\n${last_output}")
endif()

# 3. The README shows this very example.
file(READ ${SOURCE_DIR}/README.md readme)
file(READ ${SOURCE_DIR}/examples/c_example.c example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain examples/c_example.c verbatim; update the README")
endif()
message(STATUS "install + find_package + pkg-config + README example: OK")

# The CPU-only build's C++ (-DNVFP4_ENABLE_CUDA=OFF, README's "Building by hand"), checked from a CUDA build: every
# source under src/ that branches on NVFP4_HAVE_CUDA or on the CPU intrinsics (NVFP4_CPU_AVX2, NVFP4_CPU_PORTABLE:
# common/cpu_isa.h) is compiled (syntax only) with this build's own command for it, less NVFP4_HAVE_CUDA and with
# NVFP4_CPU_PORTABLE (the portable CPU code alone, as on a CPU other than x86), so that code only a CPU-only
# build compiles cannot break unnoticed (it did once: a CUDA-only member set outside the CUDA branch).
# Usage: cmake -DBUILD=<build directory> -DSRC=<source directory> -P cpu_only_sources.cmake
include(${CMAKE_CURRENT_LIST_DIR}/compile_db.cmake)
nvfp4_read_compile_db(cpu_only_sources BUILD SRC)
set(checked 0)
foreach(i RANGE ${last})
  string(JSON file GET "${json}" ${i} file)
  if(NOT file MATCHES "^${SRC}/src/.*\\.cpp$")
    continue()
  endif()
  file(READ "${file}" text)
  if(NOT text MATCHES "NVFP4_HAVE_CUDA|NVFP4_CPU_AVX2|NVFP4_CPU_PORTABLE")
    continue()
  endif()
  string(JSON command GET "${json}" ${i} command)
  string(JSON dir GET "${json}" ${i} directory)
  separate_arguments(args UNIX_COMMAND "${command}")
  # drop the object output (-o FILE); -fsyntax-only writes nothing
  list(FIND args "-o" at)
  if(at GREATER -1)
    list(REMOVE_AT args ${at} ${at})
  endif()
  list(APPEND args -UNVFP4_HAVE_CUDA -DNVFP4_CPU_PORTABLE -fsyntax-only)
  execute_process(COMMAND ${args} WORKING_DIRECTORY "${dir}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cpu_only_sources: ${file} does not compile without CUDA:\n${err}")
  endif()
  math(EXPR checked "${checked} + 1")
  message(STATUS "compiles without CUDA: ${file}")
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "cpu_only_sources: no source under ${SRC}/src branches on NVFP4_HAVE_CUDA in ${db}")
endif()
message(STATUS "cpu_only_sources: ${checked} sources compile without CUDA")

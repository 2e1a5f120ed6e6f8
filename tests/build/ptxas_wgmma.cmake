# Compiles the Hopper GEMM (src/backends/cuda/gemm_wgmma.cu) for sm_90a with ptxas's report and fails where ptxas
# says it serializes warpgroup MMAs ("wgmma.mma_async instructions are serialized", C7512 / C7513 / C7515): then
# the asynchronous MMAs wait for each other and the kernel loses what they exist for, with no error and correct
# results (a form with three A-fragment buffers that ptxas serialized ran 16-26% slower; docs/PERF.md, change 127).
# Usage: cmake -DNVCC=<nvcc> -DSRC=<repo>/src -DOUT=<object file> [-DEXTRA=<flags;...>] -P ptxas_wgmma.cmake
foreach(v NVCC SRC OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "ptxas_wgmma.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(
  COMMAND ${NVCC} -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG -DNVFP4_HAVE_CUDA=1 -I${SRC} ${EXTRA}
          -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c ${SRC}/backends/cuda/gemm_wgmma.cu -o ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ptxas_wgmma: nvcc failed (${rc}):\n${err}")
endif()
string(REGEX MATCHALL "[^\n]*instructions are serialized[^\n]*" hits "${out}\n${err}")
list(LENGTH hits n)
string(REGEX MATCHALL "Compiling entry function '[^']*wgmma_gemm_kernel" kernels "${out}\n${err}")
list(LENGTH kernels nk)
if(nk EQUAL 0)
  message(FATAL_ERROR "ptxas_wgmma: ptxas reported no wgmma_gemm_kernel (was the sm_90a image built?)")
endif()
if(n GREATER 0)
  string(REPLACE ";" "\n" lines "${hits}")
  message(FATAL_ERROR "ptxas_wgmma: ptxas serializes the warpgroup MMAs of ${n} of ${nk} kernels:\n${lines}")
endif()
message(STATUS "ptxas_wgmma: ${nk} wgmma kernels, none with serialized warpgroup MMAs")

// The x86 instruction sets the CPU kernels may use, highest first where the CPU has them: CpuLinear
// (backends/cpu/linear.cpp) and the model's dense matmul and attention row products (model/cpu_ops.cpp). Every
// kernel's paths give the same bits. set_cpu_max_isa caps them process-wide (tests run every path on one machine);
// cpu_isa says what the CPU and the cap allow. NVFP4_CPU_AVX2 is defined where the intrinsics are compiled: x86-64,
// unless the compile definition NVFP4_CPU_PORTABLE asks for the portable code alone.
#pragma once

#if defined(__x86_64__) && !defined(NVFP4_CPU_PORTABLE)
#define NVFP4_CPU_AVX2 1
#endif

namespace nvfp4 {

// Avx2: AVX2 and F16C; Avx512: AVX-512F as well.
enum class CpuIsa { Portable, Avx2, Avx512 };
void set_cpu_max_isa(CpuIsa isa);
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);

}  // namespace nvfp4

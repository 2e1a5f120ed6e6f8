#include "common/cpu_isa.h"

#include <algorithm>
#include <atomic>

#ifdef NVFP4_CPU_AVX2
#include <cpuid.h>
#endif

namespace nvfp4 {

namespace {

#ifdef NVFP4_CPU_AVX2
bool have_avx2() {
  // F16C by cpuid: clang's __builtin_cpu_supports does not know "f16c".
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return yes;
}
bool have_avx512() {
  static const bool yes = have_avx2() && __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

std::atomic<int> g_max_isa{static_cast<int>(CpuIsa::Avx512)};

}  // namespace

void set_cpu_max_isa(CpuIsa isa) { g_max_isa.store(static_cast<int>(isa), std::memory_order_relaxed); }

CpuIsa cpu_isa() {
  CpuIsa have = CpuIsa::Portable;
#ifdef NVFP4_CPU_AVX2
  if (have_avx512()) have = CpuIsa::Avx512;
  else if (have_avx2()) have = CpuIsa::Avx2;
#endif
  return static_cast<CpuIsa>(std::min(static_cast<int>(have), g_max_isa.load(std::memory_order_relaxed)));
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Portable: break;
  }
  return "portable";
}

}  // namespace nvfp4

// Runs a test body once per instruction set of common/cpu_isa.h that this CPU has, with the process-wide cap set
// to it (so the CPU kernels take that path), and prints the ones it lacks; the cap is lifted afterwards.
#pragma once
#include <cstdio>

#include "common/cpu_isa.h"

namespace nvfp4::testing {

template <class Body>
void for_each_cpu_isa(Body body) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512}) {
    set_cpu_max_isa(isa);
    if (cpu_isa() != isa) {
      std::printf("CPU without %s: its path not run\n", cpu_isa_name(isa));
      continue;
    }
    body(isa);
  }
  set_cpu_max_isa(CpuIsa::Avx512);
}

}  // namespace nvfp4::testing

// Shared by the GPU benchmarks: the CUDA error check and the timer of docs/PERF.md's method (a CUDA graph of
// `calls` calls, 3 warm-up replays, the median of `reps` timed replays, µs per call).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace nvfp4::bench {

inline void check_cuda(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench: %s: %s (line %d)\n", what, cudaGetErrorString(e), line);
  std::exit(1);
}
#define CK(x) ::nvfp4::bench::check_cuda((x), #x, __LINE__)

inline double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// µs per call of `calls` calls that enqueue(stream) issues, captured in one graph.
template <class F>
double time_graph(F enqueue, int calls, int reps, cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue(s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return median(ms) * 1000.0 / calls;
}

}  // namespace nvfp4::bench

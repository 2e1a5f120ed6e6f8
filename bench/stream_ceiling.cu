// bench_stream: how fast this GPU streams a read-only buffer of a layer's size, the ceiling of the decode
// kernels. A kernel reads every 16-byte word of the buffer once (ld.global.nc.L1::no_allocate, as the GEMM
// kernels read weights) and folds them into one word per warp. Timed as bench_gemm times a linear: CUDA
// graphs of R launches over R buffers (R·bytes > 240 MB, past L2), 3 warm-up replays, median of 50.
//
// Layouts of the work:
//   even:   grid = b blocks per SM x SMs, 8 warps each; warp w reads the lines (512 bytes, 16 per lane)
//           [L·w/W, L·(w+1)/W) of the buffer (every SM gets the same bytes, one wave)
//   blocks: blocks of 8 warps x `per` lines each (the decode kernel's grid: as many blocks as the work needs,
//           several waves when that is more than b per SM)
// Each lane keeps `depth` 16-byte loads in flight per register stage, two stages (the decode kernel's
// pipeline). programmatic: launched with programmatic serialization, the first stage requested before
// griddepcontrol.wait (as the decode kernel does).
// Usage: bench_stream [--mb 9.4,47,264] [--reps 50]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/mma_frag.cuh"
#include "graph_timing.cuh"

namespace {

using nvfp4::bench::time_graph;
using nvfp4::cuda::detail::launch_maybe_programmatic;
using nvfp4::cuda::detail::ld_stream;
using nvfp4::cuda::detail::pdl_launch_dependents;
using nvfp4::cuda::detail::pdl_wait;

// Reads lines [l0, l1) (32 words of 16 bytes each) with two stages of kD lines in flight per lane.
template <int kD>
__device__ __forceinline__ uint32_t read_lines(const uint4* buf, int64_t l0, int64_t l1) {
  const int lane = threadIdx.x & 31;
  uint32_t acc = 0;
  uint4 a[kD], b[kD];
  auto load = [&](uint4 (&st)[kD], int64_t l) {
#pragma unroll
    for (int d = 0; d < kD; ++d)
      st[d] = l + d < l1 ? ld_stream(buf + (l + d) * 32 + lane) : make_uint4(0, 0, 0, 0);
  };
  auto use = [&](const uint4 (&st)[kD]) {
#pragma unroll
    for (int d = 0; d < kD; ++d) acc ^= st[d].x ^ st[d].y ^ st[d].z ^ st[d].w;
  };
  load(a, l0);
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t l = l0; l < l1; l += 2 * kD) {
    load(b, l + kD);
    use(a);
    load(a, l + 2 * kD);
    use(b);
  }
  return acc;
}

template <int kD>
__global__ void __launch_bounds__(256) even_kernel(const uint4* buf, int64_t lines, uint32_t* out) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const uint32_t acc = read_lines<kD>(buf, lines * w / nw, lines * (w + 1) / nw);
  if (acc == 0x9E3779B9u) out[w] = acc;  // never true for the fill below; keeps the loads
}

template <int kD>
__global__ void __launch_bounds__(256) blocks_kernel(const uint4* buf, int64_t lines, int per, uint32_t* out) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t l0 = w * per;
  const uint32_t acc = read_lines<kD>(buf, l0, std::min<int64_t>(lines, l0 + per));
  if (acc == 0x9E3779B9u) out[w] = acc;
}

__global__ void fill(uint4* p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = make_uint4(static_cast<uint32_t>(i), 1u, 2u, 3u);
}

std::vector<double> parse_list(const char* s) {
  std::vector<double> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atof(p));
    const char* c = std::strchr(p, ',');
    if (!c) break;
    p = c + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  // The bench layers' NVFP4 bytes: 4096², 6144x4096, 4096x14336, 10240x8192, 28672x4096, 8192x28672, 57344x8192.
  std::vector<double> mbs = {9.44, 14.2, 33.0, 47.2, 66.1, 132.1, 264.2};
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      mbs = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_stream [--mb 9.4,47,...] [--reps 50]\n");
      return 2;
    }
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs\n\n", prop.name, sms);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint32_t* out = nullptr;
  CK(cudaMalloc(&out, 1 << 24));

  std::printf("| MB | layout | blocks/SM or lines/warp | depth | programmatic | µs | TB/s |\n");
  std::printf("|---:|---|---:|---:|---|---:|---:|\n");
  for (double mb : mbs) {
    const int64_t lines = static_cast<int64_t>(mb * 1e6 / 512);
    const int64_t bytes = lines * 512;
    const int copies = static_cast<int>(std::max<int64_t>(2, (240ll << 20) / bytes + 1));
    std::vector<uint4*> bufs(copies);
    for (auto& b : bufs) {
      CK(cudaMalloc(&b, bytes));
      fill<<<1024, 256, 0, s>>>(b, bytes / 16);
    }
    CK(cudaStreamSynchronize(s));
    auto row = [&](const char* layout, int param, int depth, bool prog, auto enqueue_one) {
      const double us = time_graph(
          [&](cudaStream_t st) {
            for (int c = 0; c < copies; ++c) enqueue_one(bufs[c], st);
          },
          copies, reps, s);
      std::printf("| %.1f | %s | %d | %d | %s | %.2f | %.2f |\n", bytes / 1e6, layout, param, depth,
                  prog ? "yes" : "no", us, bytes / us / 1e6);
    };
    for (int prog = 0; prog < 2; ++prog) {
      for (int bpsm : {1, 2, 3, 4}) {
        for (int depth : {1, 2, 4}) {
          auto go = [&](auto kernel) {
            row("even", bpsm, depth, prog, [&](const uint4* b, cudaStream_t st) {
              launch_maybe_programmatic(prog, kernel, dim3(bpsm * sms), dim3(256), 0, st, b, lines, out);
            });
          };
          if (depth == 1) go(even_kernel<1>);
          if (depth == 2) go(even_kernel<2>);
          if (depth == 4) go(even_kernel<4>);
        }
      }
      for (int per : {16, 32, 64}) {
        const int grid = static_cast<int>((lines + 8 * per - 1) / (8 * per));
        row("blocks", per, 2, prog, [&](const uint4* b, cudaStream_t st) {
          launch_maybe_programmatic(prog, blocks_kernel<2>, dim3(grid), dim3(256), 0, st, b, lines, per, out);
        });
      }
    }
    for (auto b : bufs) CK(cudaFree(b));
  }
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  return 0;
}

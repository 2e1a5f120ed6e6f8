// QuantizedLinear on this machine's GPU, through the real dispatch (select_linear on the detected device):
// for a W4A4 layer by default (w4a16 below Blackwell, native w4a4 on Blackwell) and with emulation (w4a4,
// w4a4-vllm), forward() on device buffers agrees with the CPU f64 reference within the bound of
// backends/cuda/linear_bound.h. Skips with the reason when there is no usable GPU (or a CPU-only build).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cuda/linear_bound.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "linear/linear.h"
#include "linear/select.h"

#ifdef NVFP4_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace nvfp4 {
namespace {

#ifdef NVFP4_HAVE_CUDA

LinearWeights make_layer(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = round_to(DType::BF16, nd(rng));
  LinearWeights lw;
  lw.name = "model.layers.0.self_attn.o_proj";
  lw.weight = ct_quantize(w.data(), n, k, DType::BF16, ct_global_enc(abs_max(w.data(), w.size()), DType::BF16));
  lw.has_input_scale = true;
  lw.input_global = GlobalScale::from_enc(ct_global_enc(6.0f, DType::BF16));
  for (int64_t i = 0; i < n; ++i) lw.bias.push_back(round_to(DType::BF16, 0.02f * static_cast<float>(i % 7 - 3)));
  return lw;
}

// |W| and |x| give Σ|products| for the bound (same semantics, signs stripped).
LinearWeights abs_layer(const LinearWeights& w) {
  LinearWeights a = w;
  for (auto& b : a.weight.codes) b &= 0x77;
  a.bias.clear();
  return a;
}

TEST(DeviceLinear, ForwardOnThisGpuMatchesReference) {
  const DeviceInfo dev = detect_device({});
  if (!dev.is_gpu) GTEST_SKIP() << "no usable GPU: " << dev.note;
  const BuildInfo build = query_build();
  const int64_t n = 256, k = 512;
  for (const char* emu : {"", "native", "vllm"}) {
    Overrides ov;
    if (*emu) {
      ov.emulation = true;
      ov.emulation_from = "test emulation";
      EmulationFlavor f;
      flavor_from_name(emu, &f);
      ov.flavor = f;
      ov.flavor_from = emu;
    }
    const Selection sel = select_linear(dev, build, LayerScheme::W4A4, ov);
    std::printf("  %s: %s\n", *emu ? emu : "default", sel.str().c_str());
    if (sel.executor == Executor::Cpu) continue;  // nothing device-side to check
    const LinearWeights lw = make_layer(n, k, 3);
    auto q = QuantizedLinear::create(lw, sel, DType::BF16);
    ASSERT_TRUE(q->on_device());
    for (int64_t m : {1, 33}) {
      SCOPED_TRACE(std::string(emu) + " m=" + std::to_string(m));
      std::mt19937 rng(static_cast<uint32_t>(m));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<uint16_t> x(static_cast<size_t>(m * k)), xa(x.size()), y(static_cast<size_t>(m * n));
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = to_bits16(DType::BF16, nd(rng));
        xa[i] = x[i] & 0x7FFF;
      }
      void *dx = nullptr, *dy = nullptr;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dy, y.size() * 2), cudaSuccess);
      cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
      cudaMemset(dy, 0xFF, y.size() * 2);  // NaN poison
      q->forward(dx, m, dy, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost);
      cudaFree(dx);
      cudaFree(dy);
      std::vector<double> ref(y.size()), pabs(y.size());
      cpu_linear_reference_f64(lw, sel.semantics, DType::BF16, x.data(), m, ref.data());
      cpu_linear_reference_f64(abs_layer(lw), sel.semantics, DType::BF16, xa.data(), m, pabs.data());
      int bad = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n && bad < 5; ++j) {
          const size_t e = static_cast<size_t>(i * n + j);
          const double want =
              from_bits16(DType::BF16, linear_output(DType::BF16, static_cast<float>(ref[e]), &lw.bias[j]));
          const double got = from_bits16(DType::BF16, y[e]);
          const double bound = cuda::linear_error_bound(DType::BF16, k, ref[e], std::fabs(pabs[e]), got);
          if (!(std::fabs(got - want) <= bound)) {
            ++bad;
            ADD_FAILURE() << "y[" << i << "," << j << "] = " << got << ", want " << want << ", bound " << bound;
          }
        }
    }
  }
}

#else

TEST(DeviceLinear, ForwardOnThisGpuMatchesReference) { GTEST_SKIP() << "CPU-only build (no NVFP4_HAVE_CUDA)"; }

#endif

}  // namespace
}  // namespace nvfp4

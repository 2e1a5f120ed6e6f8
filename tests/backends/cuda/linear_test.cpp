// CudaLinear against backends/cpu's f64 reference, every semantics, bf16 and fp16, fused and large-M paths.
//
// Error bound (derived, see docs/TESTING.md): in every semantics the operands that reach the tensor cores
// are exact in T (w4a16: x and e2m1·S·2^-c; w4a4: e2m1·sx·2^-c and e2m1·S·2^-c; w4a4-vllm: x_dq and w_dq),
// so each product is exact in f32 and the only errors are the f32 additions (any order, tensor-core adds
// treated as at most 2 ulp: u = 2^-22 per addition), the f32 output factor (one rounding) and the two
// roundings to T of y = T(T(acc) + bias). With P = Σ_k |product_k| (computed by the same f64 reference on
// |x| and |W|; quantizing |x| gives |codes| because every rounding is symmetric):
//   |y - (acc + bias)| <= γ·P + u_T·(|acc| + γ·P) + u_T·|y| + 2·tiny_T,   γ = (K + 2)·2^-22 / (1 - (K + 2)·2^-22)
// with u_T = 2^-8 (bf16) or 2^-11 (fp16) and tiny_T the half-spacing of T's subnormals (0 for bf16, 2^-25 fp16).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "backends/cpu/linear.h"
#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/cuda_linear_internal.h"
#include "backends/cuda/gemm.cuh"
#include "backends/cuda/linear_bound.h"
#include "common/error.h"
#include "cuda_test_util.h"

namespace nvfp4::cuda::test {
namespace {

const Semantics kAllSemantics[] = {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM};

LinearWeights abs_layer(const LinearWeights& w) {
  LinearWeights a = w;
  for (auto& c : a.weight.codes) c &= 0x77;
  for (auto& sc : a.weight.scales) sc &= 0x7F;  // negative block scales too
  a.bias.clear();
  return a;
}

std::vector<uint16_t> abs_act(DType t, const std::vector<uint16_t>& x) {
  std::vector<uint16_t> a(x);
  for (auto& v : a) v = to_bits16(t, std::fabs(from_bits16(t, v)));
  return a;
}

// Runs the layer on the GPU with a poisoned output (and poisoned guard rows after it); returns y bits.
std::vector<uint16_t> run_gpu(const LinearWeights& w, Semantics s, DType t, const std::vector<uint16_t>& x,
                              int64_t m, int tile_rows = 0, int grid_rule = -1, int64_t fused_max_m = -1,
                              const std::function<void(CudaLinear&)>& setup = nullptr) {
  const int64_t n = w.out_features(), k = w.in_features();
  auto lin = CudaLinear::create(w, s, t, 0);
  if (tile_rows) set_weight_tile_rows(*lin, tile_rows);
  set_fused_grid_rule(*lin, grid_rule);
  set_fused_max_m(*lin, fused_max_m);
  if (setup) setup(*lin);
  DeviceBytes dx(static_cast<size_t>(m * k * 2)), dy(static_cast<size_t>((m + 2) * n * 2));
  dx.upload(x.data(), static_cast<size_t>(m * k * 2));
  dy.fill(0xFF);  // NaN in bf16 and fp16
  lin->run(dx.p, m, dy.p, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> y(static_cast<size_t>((m + 2) * n));
  dy.download(y.data(), y.size() * 2);
  for (size_t i = static_cast<size_t>(m * n); i < y.size(); ++i)
    if (y[i] != 0xFFFF) {
      ADD_FAILURE() << "write past the end of y at element " << i;
      break;
    }
  y.resize(static_cast<size_t>(m * n));
  return y;
}

// The f64 reference of a layer on x: acc (Σ products) and pabs (Σ |products|, the bound's P).
struct Reference {
  std::vector<double> acc, pabs;
};
Reference reference(const LinearWeights& w, Semantics s, DType t, const std::vector<uint16_t>& x, int64_t m) {
  const int64_t n = w.out_features();
  Reference r{std::vector<double>(static_cast<size_t>(m * n)), std::vector<double>(static_cast<size_t>(m * n))};
  cpu_linear_reference_f64(w, s, t, x.data(), m, r.acc.data());
  const LinearWeights wa = abs_layer(w);
  const std::vector<uint16_t> xa = abs_act(t, x);
  cpu_linear_reference_f64(wa, s, t, xa.data(), m, r.pabs.data());
  return r;
}

// y (m, N) against the reference within the derived bound, no NaN.
void check_y(const LinearWeights& w, DType t, int64_t m, const std::vector<uint16_t>& y, const Reference& ref,
             const std::string& what) {
  const int64_t n = w.out_features(), k = w.in_features();
  const std::vector<double>& acc = ref.acc;
  const std::vector<double>& pabs = ref.pabs;
  int64_t bad = 0, nan = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double yv = from_bits16(t, y[static_cast<size_t>(i)]);
    if (std::isnan(yv)) {
      ++nan;
      continue;
    }
    const double b = w.bias.empty() ? 0.0 : w.bias[static_cast<size_t>(i % n)];
    const double a = acc[static_cast<size_t>(i)];
    const double bound = linear_error_bound(t, k, a, pabs[static_cast<size_t>(i)], yv);
    const double err = std::fabs(yv - (a + b));
    if (!(err <= bound)) {
      if (bad < 3)
        ADD_FAILURE() << what << ": element (" << i / n << ", " << i % n << ") y=" << yv << " ref=" << a + b
                      << " err=" << err << " bound=" << bound;
      ++bad;
    }
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  EXPECT_EQ(nan, 0) << what << ": NaN (unwritten or poisoned) outputs";
  EXPECT_EQ(bad, 0) << what << ": elements outside the bound";
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

// Output features [r0, r1) of a layer (its codes, scales and bias rows; the global scales as they are).
LinearWeights rows_of(const LinearWeights& w, int64_t r0, int64_t r1) {
  LinearWeights o = w;
  const int64_t k = w.in_features();
  o.weight.resize(r1 - r0, k);
  std::copy(w.weight.codes.begin() + r0 * (k / 2), w.weight.codes.begin() + r1 * (k / 2), o.weight.codes.begin());
  std::copy(w.weight.scales.begin() + r0 * (k / 16), w.weight.scales.begin() + r1 * (k / 16),
            o.weight.scales.begin());
  if (!w.bias.empty()) o.bias.assign(w.bias.begin() + r0, w.bias.begin() + r1);
  return o;
}

// check_y on output features [r0, r1) of y (m, N) only: the reference of those rows alone, for layers whose whole
// f64 reference would take the test most of a minute.
void check_y_rows(const LinearWeights& w, Semantics s, DType t, const std::vector<uint16_t>& x, int64_t m,
                  const std::vector<uint16_t>& y, int64_t r0, int64_t r1, const std::string& what) {
  const int64_t n = w.out_features();
  const LinearWeights part = rows_of(w, r0, r1);
  std::vector<uint16_t> yp(static_cast<size_t>(m * (r1 - r0)));
  for (int64_t i = 0; i < m; ++i)
    std::copy(y.begin() + i * n + r0, y.begin() + i * n + r1, yp.begin() + i * (r1 - r0));
  check_y(part, t, m, yp, reference(part, s, t, x, m),
          what + "/rows " + std::to_string(r0) + ".." + std::to_string(r1));
}

void check_bound(const LinearWeights& w, Semantics s, DType t, const std::vector<uint16_t>& x, int64_t m,
                 const std::string& what, int tile_rows = 0, int grid_rule = -1, int64_t fused_max_m = -1) {
  check_y(w, t, m, run_gpu(w, s, t, x, m, tile_rows, grid_rule, fused_max_m), reference(w, s, t, x, m), what);
}

std::string label(Semantics s, DType t, int64_t m, int64_t n, int64_t k) {
  return std::string(semantics_name(s)) + "/" + dtype_name(t) + "/m" + std::to_string(m) + "/n" +
         std::to_string(n) + "/k" + std::to_string(k);
}

TEST(CudaLinear, AllSemanticsWithinDerivedBound) {
  NVFP4_REQUIRE_GPU();
  const int64_t ms[] = {1, 2, 7, 16, 33, 128, 1000, 4096};
  const int64_t shapes[][2] = {{72, 208}, {33, 16}};
  uint32_t seed = 100;
  for (DType t : {DType::BF16, DType::F16})
    for (const auto& sh : shapes)
      for (Semantics s : kAllSemantics) {
        // Realistic scale codes (e4m3 around 0.25..64) and global scales of real checkpoints.
        const LinearWeights w = random_layer(sh[0], sh[1], scale_range(0x28, 0x5F), 2688.0f / 0.37f, true,
                                             2688.0f / 9.0f, true, t, seed++);
        for (int64_t m : ms) {
          const auto x = random_activations(t, m, sh[1], 1.0f, seed++);
          check_bound(w, s, t, x, m, label(s, t, m, sh[0], sh[1]));
        }
      }
}

TEST(CudaLinear, LargeLayersBothPaths) {
  NVFP4_REQUIRE_GPU();
  uint32_t seed = 300;
  for (Semantics s : kAllSemantics) {
    const DType t = DType::BF16;
    const LinearWeights w = random_layer(1100, 4096, scale_range(0x28, 0x5F), 2688.0f / 0.2f, true,
                                         2688.0f / 12.0f, false, t, seed++);
    for (int64_t m : {1, 16, 65, 200}) {
      const auto x = random_activations(t, m, 4096, 1.0f, seed++);
      check_bound(w, s, t, x, m, label(s, t, m, 1100, 4096));
      // Large-M path with many weight tiles (two buffers alternating, side-stream dequantization).
      if (m > 64) check_bound(w, s, t, x, m, label(s, t, m, 1100, 4096) + "/tiles128", 128, -1, 0);
    }
    // A wide, short layer on the dequantize + cuBLAS path at small M: cuBLAS picks split-K here, whose
    // partial sums must stay in f32 (this shape once exceeded the bound when cuBLAS reduced them in bf16).
    const LinearWeights wide = random_layer(4100, 1024, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true,
                                            2688.0f / 7.0f, true, t, seed++);
    for (int64_t m : {40, 100}) {
      const auto x = random_activations(t, m, 1024, 1.0f, seed++);
      check_bound(wide, s, t, x, m, label(s, t, m, 4100, 1024) + "/cublas", 0, -1, 0);
    }
  }
  const LinearWeights w = random_layer(1100, 16384, scale_range(0x28, 0x5F), 2688.0f / 0.2f, false, 1.0f, true,
                                       DType::F16, seed++);
  const auto x = random_activations(DType::F16, 130, 16384, 1.0f, seed++);
  check_bound(w, Semantics::W4A16, DType::F16, x, 130, label(Semantics::W4A16, DType::F16, 130, 1100, 16384), 304,
              -1, 0);
}

// The two W4A4 flavours on both paths: the GPU output must round to the same T value as its own flavour's
// reference more often than to the other flavour's. On this data the two references round to different
// values for about half the outputs (asserted), while an executor of the right flavour differs from its own
// reference only where its f32 summation order flips a rounding: an executor computing the other flavour
// (or a mixture) fails. The derived bound cannot tell them apart: both flavours are within it of each other.
TEST(CudaLinear, FlavoursAreNotInterchangedOnEitherPath) {
  NVFP4_REQUIRE_GPU();
  const DType t = DType::BF16;
  const int64_t n = 256, k = 1024;
  // Global scales as calibration produces them (T-rounded 2688/amax), not powers of two.
  const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), ct_global_enc(0.37f, t), true,
                                       ct_global_enc(11.3f, t), false, t, 4242);
  const Semantics sems[2] = {Semantics::W4A4, Semantics::W4A4_VLLM};
  // decode kernel, M > 32 fused kernel (wgmma on sm_90), dequantize + cuBLAS path
  const int64_t runs[][2] = {{16, -1}, {100, 1 << 30}, {100, 0}};
  for (const auto& run : runs) {
    const int64_t m = run[0], fused_max_m = run[1];
    const std::vector<uint16_t> x = random_activations(t, m, k, 1.0f, 77 + static_cast<uint32_t>(m));
    std::vector<uint16_t> rounded[2];
    for (int f = 0; f < 2; ++f) {
      std::vector<double> ref(static_cast<size_t>(m * n));
      cpu_linear_reference_f64(w, sems[f], t, x.data(), m, ref.data());
      for (double r : ref) rounded[f].push_back(linear_output(t, static_cast<float>(r), nullptr));
    }
    int64_t apart = 0;
    for (int64_t i = 0; i < m * n; ++i) apart += rounded[0][i] != rounded[1][i];
    ASSERT_GT(apart, m * n / 4) << "the data does not tell the flavours apart";
    for (int f = 0; f < 2; ++f) {
      const std::vector<uint16_t> y = run_gpu(w, sems[f], t, x, m, 0, -1, fused_max_m);
      int64_t own = 0, other = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        own += y[i] == rounded[f][i];
        other += y[i] == rounded[1 - f][i];
      }
      EXPECT_GT(own, other) << semantics_name(sems[f]) << " M=" << m << " fused_max_m=" << fused_max_m << ": "
                            << own << " outputs match its own "
                            << "flavour, " << other << " the other flavour, of " << m * n;
    }
  }
}

// Every grid rule of the fused kernel on layers whose shapes give 1, 2 and 4 weight tiles per warp, K splits,
// a partial last tile, few chunks per warp (16400x192: 3), a chunk count that 8 warps cannot share (512x1040:
// 17 chunks, the last reaching past K; 8 warps of 3 would leave two without any) and one or two token tiles
// (the rules differ only at M <= 16); rule 8 runs the light (3 blocks per SM) kernels on every shape.
TEST(CudaLinear, FusedGridRulesWithinDerivedBound) {
  NVFP4_REQUIRE_GPU();
  const int64_t shapes[][2] = {{1100, 4096}, {40, 512}, {4100, 1024}, {16, 64}, {16400, 192}, {512, 1040}};
  uint32_t seed = 900;
  for (const auto& sh : shapes)
    for (Semantics s : kAllSemantics) {
      const LinearWeights w = random_layer(sh[0], sh[1], scale_range(0x28, 0x5F), 2688.0f / 0.3f, true,
                                           2688.0f / 7.0f, true, DType::BF16, seed++);
      for (int64_t m : {1, 5, 9, 16}) {
        const auto x = random_activations(DType::BF16, m, sh[1], 1.0f, seed++);
        for (int rule : {0, 1, 2, 3, 6, 7, 8, 10})
          check_bound(w, s, DType::BF16, x, m,
                      label(s, DType::BF16, m, sh[0], sh[1]) + "/grid" + std::to_string(rule), 0, rule);
      }
    }
}

// A decode grid of 90-100% of 2 blocks per SM on the one-tile kernel (which fits 3) runs with the shared-memory
// request that caps it at 2 per SM (rule 7; rule 10 runs such grids in the wide form where K has >= 24 chunks):
// N = 16·(2·SMs - 6) rows (1 tile per warp, K split 8 ways at K = 1024), M = 1 and 8, every semantics, within
// the bound and bit-identical on a second call.
TEST(CudaLinear, DecodeGridCappedAtTwoBlocksPerSm) {
  NVFP4_REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t n = 16 * (2 * sms - 6), k = 1024;
  const DecodeGrid g = decode_grid(1, n / 16, k / 64, sms, 7);
  ASSERT_EQ(g.slots, 3 * sms) << "the grid must be one of the 3-blocks-per-SM kernel";
  ASSERT_GE(10 * g.blocks, 9 * 2 * sms);
  ASSERT_LE(g.blocks, 2 * sms);
  uint32_t seed = 2500;
  for (Semantics s : kAllSemantics) {
    const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                         true, DType::BF16, seed++);
    for (int64_t m : {1, 8}) {
      const auto x = random_activations(DType::BF16, m, k, 1.0f, seed++);
      const std::string what = label(s, DType::BF16, m, n, k) + "/two per SM";
      const std::vector<uint16_t> y = run_gpu(w, s, DType::BF16, x, m, 0, 7);
      check_y(w, DType::BF16, m, y, reference(w, s, DType::BF16, x, m), what);
      EXPECT_EQ(run_gpu(w, s, DType::BF16, x, m, 0, 7), y) << what << ": two calls differ";
    }
  }
}

// The decode kernel's wide form (rule 10: one tile per block of 12 warps, K split 12 ways as evenly as the chunks
// divide; rule 11 at M = 9-16: the light 16-token kernel in that form): K with a partial last chunk (1552: 25
// chunks, 4160: 65), whole chunks (4096), grids of 256 and 69 blocks and of 3; M = 1, 3, 8, 12, 16; every
// semantics, bf16 and fp16, with bias; within the bound, bit-identical on a second call, and at M = 1 in W4A4 the
// kernel's own row quantization equal to the quantizer kernel's.
TEST(CudaLinear, WideDecodeFormWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  struct Case {
    int64_t n, k;
    DType t;
  };
  const Case cases[] = {{4096, 1552, DType::BF16}, {1100, 4160, DType::BF16}, {40, 4096, DType::BF16},
                        {1100, 1552, DType::F16}};
  uint32_t seed = 7700;
  for (const Case& c : cases) {
    const int64_t kc = (c.k + 63) / 64;
    if ((c.n + 15) / 16 > 2 * sms) continue;  // a smaller GPU runs rule 7's grid there
    for (Semantics s : kAllSemantics) {
      const LinearWeights w =
          random_layer(c.n, c.k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, c.t, seed++);
      for (int64_t m : {1, 3, 8, 12, 16}) {
        const int rule = m <= 8 ? 10 : 11;  // 11: the light 16-token kernel's wide form (measurements)
        const DecodeGrid g = decode_grid(m, (c.n + 15) / 16, kc, sms, rule, detail::Mode::Exact, c.k % 64 != 0);
        ASSERT_EQ(g.wk, detail::kWideWarps) << c.n << "x" << c.k << " m" << m;
        const auto x = random_activations(c.t, m, c.k, 1.0f, seed++);
        const std::string what = label(s, c.t, m, c.n, c.k) + "/wide";
        const std::vector<uint16_t> y = run_gpu(w, s, c.t, x, m, 0, rule);
        check_y(w, c.t, m, y, reference(w, s, c.t, x, m), what);
        EXPECT_EQ(run_gpu(w, s, c.t, x, m, 0, rule), y) << what << ": two calls differ";
        if (m == 1 && s != Semantics::W4A16) {
          auto lin = CudaLinear::create(w, s, c.t, 0);
          set_fused_grid_rule(*lin, 10);
          EXPECT_TRUE(own_quant_active(*lin, 1)) << what;
          const auto quantizer = run_gpu(w, s, c.t, x, m, 0, 10, -1, [](CudaLinear& l) { set_own_quant(l, false); });
          EXPECT_EQ(quantizer, y) << what << ": the kernel's own row quantization differs from the quantizer's";
        }
      }
    }
  }
}

// The decode kernel's tail split (rule 13): layers whose light two-tile grid at M <= 8 is one wave of 2·SMs + r
// blocks, r = SMs / 4 (4 parts over K; N = 16·(4·SMs + 2r) - 5: a partial last tile) and r = SMs / 2 - 1 (2 parts),
// each part 32 chunks (4 per warp); every semantics, M = 1, 8 and 16 (whatever grid that takes), within the bound
// and bit-identical on a second call (which also needs every group's counter back at zero). The bound is checked
// on the first 128 output features and on the last 32·r + 64 (the split block rows, of 32 features each, and the
// whole ones before them): the f64 reference of the whole layers took ~57 s.
TEST(CudaLinear, TailSplitWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  if (sms < 8) GTEST_SKIP() << "a GPU of " << sms << " SMs has no such grid worth testing";
  struct Case {
    int64_t r, k;
    int parts;
    DType t;
  };
  const Case cases[] = {{sms / 4, 8192, 4, DType::BF16}, {sms / 2 - 1, 4096, 2, DType::F16}};
  const int rule = 13;
  uint32_t seed = 9100;
  for (const Case& c : cases) {
    const int64_t n = 16 * (4 * static_cast<int64_t>(sms) + 2 * c.r) - 5;
    for (Semantics s : kAllSemantics) {
      const LinearWeights w =
          random_layer(n, c.k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, c.t, seed++);
      for (int64_t m : {1, 8, 16}) {
        if (m <= 8 && s != Semantics::W4A4_VLLM) {
          auto lin = CudaLinear::create(w, s, c.t, 0);
          set_fused_grid_rule(*lin, rule);
          ASSERT_EQ(tail_split_parts(*lin, m), c.parts) << n << "x" << c.k << " m" << m;
        }
        const auto x = random_activations(c.t, m, c.k, 1.0f, seed++);
        const std::string what = label(s, c.t, m, n, c.k) + "/tail split";
        const std::vector<uint16_t> y = run_gpu(w, s, c.t, x, m, 0, rule);
        EXPECT_EQ(std::count_if(y.begin(), y.end(), [&](uint16_t v) { return std::isnan(from_bits16(c.t, v)); }), 0)
            << what << ": NaN (unwritten or poisoned) outputs";
        check_y_rows(w, s, c.t, x, m, y, 0, 128, what);
        check_y_rows(w, s, c.t, x, m, y, n - 32 * c.r - 64, n, what);
        EXPECT_EQ(run_gpu(w, s, c.t, x, m, 0, rule), y) << what << ": two calls differ";
      }
    }
  }
}

// Rule 14's longer blocks on a grid that it changes: N = 64·(8·SMs - 40) - 3 rows (8·SMs - 40 four-tile groups: more
// than two waves of 2·SMs blocks at a K split of 8, 2·SMs - 10 blocks, one wave of >= 80%, at a split of 2), K = 1024,
// every semantics, M = 1 and 16; within the bound on the first and last rows and bit-identical on a second call.
TEST(CudaLinear, LongBlockRuleWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  if (sms < 32) GTEST_SKIP() << "a GPU of " << sms << " SMs has no such grid worth testing";
  const int64_t n = 64 * (8 * static_cast<int64_t>(sms) - 40) - 3, k = 1024;
  ASSERT_LT(decode_grid(1, (n + 15) / 16, k / 64, sms, 14).wk, decode_grid(1, (n + 15) / 16, k / 64, sms, 13).wk);
  uint32_t seed = 9400;
  for (Semantics s : kAllSemantics) {
    const LinearWeights w =
        random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, DType::BF16, seed++);
    for (int64_t m : {1, 16}) {
      const auto x = random_activations(DType::BF16, m, k, 1.0f, seed++);
      const std::string what = label(s, DType::BF16, m, n, k) + "/grid14";
      const std::vector<uint16_t> y = run_gpu(w, s, DType::BF16, x, m, 0, 14);
      EXPECT_EQ(std::count_if(y.begin(), y.end(), [&](uint16_t v) { return std::isnan(from_bits16(DType::BF16, v)); }), 0)
          << what << ": NaN (unwritten or poisoned) outputs";
      check_y_rows(w, s, DType::BF16, x, m, y, 0, 256, what);
      check_y_rows(w, s, DType::BF16, x, m, y, n - 256, n, what);
      EXPECT_EQ(run_gpu(w, s, DType::BF16, x, m, 0, 14), y) << what << ": two calls differ";
    }
  }
}

// Forced decode grids (the bench's measurement grids), including every block row split over K (the tail split's
// finishing step on all rows, not only the last ones): a layer of a partial last tile group, every semantics, bf16
// and fp16, M = 1, 8, 13, 16 and 32 as each grid's kernel takes them; within the bound, every output written, and
// bit-identical on a second call.
TEST(CudaLinear, ForcedDecodeGridsWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  struct Case {
    ForcedDecodeGrid f;
    std::vector<int64_t> ms;
  };
  const Case cases[] = {{ForcedDecodeGrid{1, 4, true, 2}, {13, 16}}, {ForcedDecodeGrid{2, 8, false, 2}, {1, 16, 32}},
                        {ForcedDecodeGrid{4, 2, false, 4}, {8, 16}},  {ForcedDecodeGrid{1, 12, true, 2}, {16}},
                        {ForcedDecodeGrid{1, 12, false, 2}, {1}},     {ForcedDecodeGrid{2, 4, true, 1}, {1, 8}}};
  const int64_t n = 16 * 83 - 5, k = 4096;
  uint32_t seed = 9300;
  for (DType t : {DType::BF16, DType::F16})
    for (Semantics s : kAllSemantics) {
      const LinearWeights w =
          random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, t, seed++);
      for (const Case& c : cases)
        for (int64_t m : c.ms) {
          const auto x = random_activations(t, m, k, 1.0f, seed++);
          const std::string what = label(s, t, m, n, k) + "/forced grid nw" + std::to_string(c.f.nw) + " wk" +
                                   std::to_string(c.f.wk) + (c.f.light ? " light" : "") + " parts " +
                                   std::to_string(c.f.parts);
          const auto setup = [&](CudaLinear& l) { set_forced_decode_grid(l, c.f); };
          const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, -1, -1, setup);
          EXPECT_EQ(std::count_if(y.begin(), y.end(), [&](uint16_t v) { return std::isnan(from_bits16(t, v)); }), 0)
              << what << ": NaN (unwritten or poisoned) outputs";
          check_y_rows(w, s, t, x, m, y, 0, n, what);
          EXPECT_EQ(run_gpu(w, s, t, x, m, 0, -1, -1, setup), y) << what << ": two calls differ";
        }
    }
}

// The vLLM flavour's decode kernel of 16-token tiles and four weight tiles per warp takes its activations through
// a shared-memory ring (act_ring_chunks). A layer whose M = 9-16 grid is that kernel under the default rule (11):
// N = 16·(8·SMs + 3) - 5 (over 90% of a wave of four-tile groups, a partial last group and a partial last tile),
// K = 1040 (17 chunks, the last past K, split over 4 warps: 5, 5, 5, 2); both forms of the flavour (bf16: the
// power-of-two form; fp16, whose w_dq fall in its subnormals: the per-weight rounding); M = 9, 13, 16 (rows past
// M read as zeros); within the bound and bit-identical on a second call.
TEST(CudaLinear, ActivationRingKernelWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t n = 16 * (8 * static_cast<int64_t>(sms) + 3) - 5, k = 1040, kc = (k + 63) / 64;
  const int rule = 11;
  uint32_t seed = 8100;
  for (DType t : {DType::BF16, DType::F16}) {
    const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                         true, t, seed++);
    const bool pow2 = vllm_weights_pow2(*CudaLinear::create(w, Semantics::W4A4_VLLM, t, 0));
    ASSERT_EQ(pow2, t == DType::BF16) << dtype_name(t) << ": the form of the vLLM flavour this test means to run";
    const detail::Mode mode = pow2 ? detail::Mode::VllmPow2 : detail::Mode::Vllm;
    for (int64_t m : {9, 13, 16}) {
      const DecodeGrid g = decode_grid(m, (n + 15) / 16, kc, sms, rule, mode, true);
      ASSERT_TRUE(g.nt == 2 && g.nw == 4 && !g.light) << "m" << m << ": nt " << g.nt << " nw " << g.nw;
      ASSERT_GT(detail::act_ring_chunks(g.nt, g.nw, static_cast<int>(mode)), 0);
      const auto x = random_activations(t, m, k, 1.0f, seed++);
      const std::string what = label(Semantics::W4A4_VLLM, t, m, n, k) + "/ring";
      const std::vector<uint16_t> y = run_gpu(w, Semantics::W4A4_VLLM, t, x, m, 0, rule);
      check_y(w, t, m, y, reference(w, Semantics::W4A4_VLLM, t, x, m), what);
      EXPECT_EQ(run_gpu(w, Semantics::W4A4_VLLM, t, x, m, 0, rule), y) << what << ": two calls differ";
    }
  }
}

// M > 16 on the fused path (forced): M <= 32 runs the decode kernel's 32-token tiles on these small layers, and the
// wgmma kernel where set_wgmma_from(17) asks for it (on sm_90a; the default where default_wgmma_from says so); above, on
// sm_90, the wgmma kernel (rule 3, as the default above M = 32: 64-token tiles up to M = 64, 128 above, 4 consumer
// warpgroups at M = 65-128; rules 4 and 5: 4 or 2 consumer warpgroups forced; rules 9 and 12: blocks of 128 and 192
// rows) and the decode kernel's 32-token tiles that other GPUs run (rule 2). Full and partial 64-token blocks, row
// blocks past the weight (40 rows: one stored tile group of four), K not a multiple of 64 (208: the permuted
// activations are zero-padded), fewer chunks than ring stages (64, 192), K splits (4100x1024 and 1100x4096 launch few
// blocks), fp16 too; bit-identical on a second call. M = 33 and 64 also on the decode kernel under the default rule
// (set_wgmma_from(65), as default_wgmma_from's small layers run them).
TEST(CudaLinear, MidMKernelWithinDerivedBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  const int64_t shapes[][2] = {{1100, 4096}, {40, 512}, {4100, 1024}, {16, 64}, {16400, 192}, {72, 208}};
  uint32_t seed = 1700;
  for (const auto& sh : shapes)
    for (Semantics s : kAllSemantics) {
      const DType t = sh[0] == 72 ? DType::F16 : DType::BF16;
      const LinearWeights w = random_layer(sh[0], sh[1], scale_range(0x28, 0x5F), 2688.0f / 0.3f, true,
                                           2688.0f / 7.0f, true, t, seed++);
      for (int64_t m : {17, 32, 33, 64, 65, 130}) {
        const auto x = random_activations(t, m, sh[1], 1.0f, seed++);
        const Reference ref = reference(w, s, t, x, m);
        for (int rule : {3, 4, 5, 9, 12, 2}) {
          const std::string what = label(s, t, m, sh[0], sh[1]) + "/grid" + std::to_string(rule);
          const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, rule, 1 << 30);
          check_y(w, t, m, y, ref, what);
          if (m == 65) {
            EXPECT_EQ(run_gpu(w, s, t, x, m, 0, rule, 1 << 30), y) << what << ": two calls differ";
          }
          if (m <= 32) break;  // the rules differ only above M = 32
        }
        if (m <= 32) {  // the wgmma kernel's one 64-token tile, as default_wgmma_from's layers run it
          const std::string what = label(s, t, m, sh[0], sh[1]) + "/wgmma-from-17";
          auto from17 = [](CudaLinear& l) { set_wgmma_from(l, 17); };
          const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, -1, 1 << 30, from17);
          check_y(w, t, m, y, ref, what);
          EXPECT_EQ(run_gpu(w, s, t, x, m, 0, -1, 1 << 30, from17), y) << what << ": two calls differ";
        }
        if (m == 33 || m == 64) {  // the decode kernel's two token tile rows under the default rule (wgmma from 65)
          const std::string what = label(s, t, m, sh[0], sh[1]) + "/wgmma-from-65";
          auto from65 = [](CudaLinear& l) { set_wgmma_from(l, 65); };
          const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, -1, 1 << 30, from65);
          check_y(w, t, m, y, ref, what);
          EXPECT_EQ(run_gpu(w, s, t, x, m, 0, -1, 1 << 30, from65), y) << what << ": two calls differ";
        }
      }
    }
}

// Which kernel M = 16-65 runs by default: the wgmma kernel from default_wgmma_from's M on (the layer of 20 Mi weights,
// 5120x4096, from 17 always; 5104x4096, 4096x4096 and 2048x2048 as the estimates say for this device's SMs: on 132
// from 17, 33 and 65), the decode kernel's 32-token tiles below it and at M = 16, and everywhere on devices without
// the wgmma kernel; set_wgmma_from forces either way and 0 restores the default.
TEST(CudaLinear, WgmmaFromM17FollowsTheHostRule) {
  NVFP4_REQUIRE_GPU();
  const bool wgmma = detail::wgmma_available(0);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  if (sms == 132) {
    EXPECT_EQ(default_wgmma_from(Semantics::W4A16, 5104, 4096, sms), 17);
    EXPECT_EQ(default_wgmma_from(Semantics::W4A16, 4096, 4096, sms), 33);
    EXPECT_EQ(default_wgmma_from(Semantics::W4A16, 2048, 2048, sms), 65);
  }
  const int64_t shapes[][2] = {{5120, 4096}, {5104, 4096}, {4096, 4096}, {2048, 2048}};
  for (const auto& [n, k] : shapes)
    for (Semantics s : {Semantics::W4A16, Semantics::W4A4}) {
      const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 1.0f, true, 1.0f, true, DType::BF16, 9);
      auto lin = CudaLinear::create(w, s, DType::BF16, 0);
      const int64_t from = default_wgmma_from(s, n, k, sms);
      if (n == 5120) {
        EXPECT_EQ(from, 17);
      }
      for (int64_t m : {16, 17, 24, 32, 33, 48, 64, 65}) {
        const bool on_wgmma = wgmma && m >= from;
        EXPECT_EQ(decode_grid_name(*lin, m) == "-", on_wgmma) << n << "x" << k << " at M = " << m << ": "
                                                              << decode_grid_name(*lin, m);
      }
      set_wgmma_from(*lin, 17);  // forced either way, then back to the layer's default
      EXPECT_EQ(decode_grid_name(*lin, 24) == "-", wgmma);
      set_wgmma_from(*lin, 33);
      EXPECT_NE(decode_grid_name(*lin, 24), "-");
      set_wgmma_from(*lin, 0);
      EXPECT_EQ(decode_grid_name(*lin, 24) == "-", wgmma && from == 17);
    }
}

// The wgmma kernel at large M, forced on the fused path: many 128-token tiles with a
// partial last one, a row block past the weight (300 rows: the second block has one live row block of four, or two
// of three in blocks of 192 rows), K not a multiple of 64, fp16 too, 2, 3 and 4 consumer warpgroups; bit-identical
// on a second call.
TEST(CudaLinear, WgmmaKernelAtLargeM) {
  NVFP4_REQUIRE_GPU();
  const int64_t shapes[][2] = {{520, 1024}, {300, 208}};
  uint32_t seed = 2100;
  for (const auto& sh : shapes)
    for (Semantics s : kAllSemantics) {
      const DType t = sh[0] == 300 ? DType::F16 : DType::BF16;
      const LinearWeights w = random_layer(sh[0], sh[1], scale_range(0x28, 0x5F), 2688.0f / 0.3f, true,
                                           2688.0f / 7.0f, true, t, seed++);
      for (int64_t m : {257, 1000}) {
        const auto x = random_activations(t, m, sh[1], 1.0f, seed++);
        const Reference ref = reference(w, s, t, x, m);
        // default (2 consumer warpgroups above M = 128), 4 consumer warpgroups, blocks of 128 and 192 rows
        for (int rule : {-1, 4, 9, 12}) {
          const std::string what = label(s, t, m, sh[0], sh[1]) + "/grid" + std::to_string(rule);
          const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, rule, 1 << 30);
          check_y(w, t, m, y, ref, what);
          EXPECT_EQ(run_gpu(w, s, t, x, m, 0, rule, 1 << 30), y) << what << ": two calls differ";
        }
      }
    }
}

// K split of the wgmma kernel, forced: over every 256-row block, and over the trailing blocks only (the others whole),
// 2-6 ways, on a layer of 4 blocks whose last block is partly past N (1000 rows) and K of 17 chunks (the last one
// partial), at M = 50 (64-token tiles) and 200 (two 128-token tiles, the second partial), and at M = 50 on 1003 rows
// (split columns not a multiple of 4 or 8): within the bound, bias included, and bit-identical on a second call (the
// partial sums are added in a fixed order).
TEST(CudaLinear, WgmmaSplitBlocksWithinBoundAndDeterministic) {
  NVFP4_REQUIRE_GPU();
  const int64_t k = 1040;
  uint32_t seed = 2400;
  const int splits[][2] = {{3, 0}, {2, 2}, {3, 2}, {4, 3}, {6, 1}};  // splits, first split 256-row block
  for (const int64_t n : {1000, 1003}) {
    for (Semantics s : kAllSemantics) {
      const DType t = s == Semantics::W4A4 ? DType::F16 : DType::BF16;
      const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true,
                                           t, seed++);
      for (int64_t m : {50, 200}) {
        if (n == 1003 && m != 50) continue;
        const auto x = random_activations(t, m, k, 1.0f, seed++);
        const Reference ref = reference(w, s, t, x, m);
        for (int rule : {-1, 9, 12})  // blocks of 256 rows, of 128 and of 192 (the split block indices count those)
          for (const auto& sp : splits) {
            const std::string what = label(s, t, m, n, k) + "/grid" + std::to_string(rule) + "/splits" +
                                     std::to_string(sp[0]) + "from" + std::to_string(sp[1]);
            auto force = [&](CudaLinear& l) { set_wgmma_splits(l, sp[0], sp[1]); };
            const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, rule, 1 << 30, force);
            check_y(w, t, m, y, ref, what);
            EXPECT_EQ(run_gpu(w, s, t, x, m, 0, rule, 1 << 30, force), y) << what << ": two calls differ";
          }
      }
    }
  }
}

// The wgmma kernel's own activation permutation (blocks of 128 rows, 64-token tiles: set_wgmma_raw_x) against the
// permutation kernel: the same MMAs on the same values, so y must be bit-identical, and within the bound. 900 rows
// (the last 128-row block has one row block inside), K of 17 chunks (the last one partial: zeros past K), M = 17, 50
// and 64 (token rows past M in the tile), unsplit and split 2, 4 and 8 ways (blocks of 17, 9, 5 and 3 chunks; the
// last ones shorter, the last two of 8 splits empty), every semantics.
TEST(CudaLinear, WgmmaOwnPermutationEqualsThePermutationKernel) {
  NVFP4_REQUIRE_GPU();
  if (!detail::wgmma_available(0)) GTEST_SKIP() << "no wgmma kernel here (it needs sm_90a)";
  const int64_t n = 900, k = 1040;
  uint32_t seed = 2600;
  for (Semantics s : kAllSemantics) {
    const DType t = s == Semantics::W4A4 ? DType::F16 : DType::BF16;
    const LinearWeights w =
        random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, t, seed++);
    for (int64_t m : {17, 50, 64}) {
      const auto x = random_activations(t, m, k, 1.0f, seed++);
      const Reference ref = reference(w, s, t, x, m);
      for (int splits : {1, 2, 4, 8}) {
        const std::string what = label(s, t, m, n, k) + "/splits" + std::to_string(splits);
        auto with = [&](int raw) {
          return [raw, splits](CudaLinear& l) {
            set_wgmma_from(l, 17);
            set_wgmma_splits(l, splits, 0);
            set_wgmma_raw_x(l, raw);
          };
        };
        const std::vector<uint16_t> y_own = run_gpu(w, s, t, x, m, 0, 9, 1 << 30, with(1));
        check_y(w, t, m, y_own, ref, what);
        EXPECT_EQ(y_own, run_gpu(w, s, t, x, m, 0, 9, 1 << 30, with(0))) << what << ": differs from the kernel path";
      }
    }
  }
}

// W4A4 on the wgmma kernel: the permutation kernel quantizing the activations as it permutes them gives the bits of
// the path with the quantizer kernel before it (set_own_quant false; there the permutation kernel, or with
// set_wgmma_raw_x 1 on 64-token tiles the kernel's own permuter), in both flavours (the vLLM one in its power-of-two
// and per-weight forms), bf16 and fp16. 900x1040 (K not a multiple of 64: zeros past K), M = 17, 50 and 64 (64-token
// tiles, rows past M) and 130 (128-token tiles), unsplit and split 4 ways; in every row a group of zeros, one of
// 10^4 and one of 10^-6 (scales 0, saturated codes, subnormal scales).
TEST(CudaLinear, WgmmaOwnQuantizationEqualsTheQuantizerKernel) {
  NVFP4_REQUIRE_GPU();
  if (!detail::wgmma_available(0)) GTEST_SKIP() << "no wgmma kernel here (it needs sm_90a)";
  const int64_t n = 900, k = 1040;
  uint32_t seed = 2700;
  for (DType t : {DType::BF16, DType::F16})
    for (Semantics s : {Semantics::W4A4, Semantics::W4A4_VLLM}) {
      const float w_enc = t == DType::F16 && s == Semantics::W4A4_VLLM ? ct_global_enc(0.37f, t) : 2688.0f / 0.3f;
      const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), w_enc, true, 2688.0f / 7.0f, true, t, seed++);
      for (int64_t m : {17, 50, 64, 130}) {
        auto x = random_activations(t, m, k, 1.0f, seed++);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t i = 0; i < 16; ++i) {
            auto at = [&](int64_t col) -> uint16_t& { return x[static_cast<size_t>(r * k + col)]; };
            at(48 + i) = to_bits16(t, 0.0f);
            at(80 + i) = to_bits16(t, from_bits16(t, at(80 + i)) * 1e4f);
            at(1008 + i) = to_bits16(t, from_bits16(t, at(1008 + i)) * 1e-6f);
          }
        const Reference ref = reference(w, s, t, x, m);
        for (int splits : {1, 4})
          for (int raw : {0, 1}) {
            const std::string what =
                label(s, t, m, n, k) + "/splits" + std::to_string(splits) + "/raw" + std::to_string(raw);
            auto with = [&](bool own) {
              return [=](CudaLinear& l) {
                set_wgmma_from(l, 17);
                set_wgmma_splits(l, splits, 0);
                set_wgmma_raw_x(l, raw);
                set_own_quant(l, own);
                EXPECT_EQ(own_quant_active(l, m), own) << what;
              };
            };
            const std::vector<uint16_t> y = run_gpu(w, s, t, x, m, 0, 9, 1 << 30, with(true));
            check_y(w, t, m, y, ref, what);
            EXPECT_EQ(y, run_gpu(w, s, t, x, m, 0, 9, 1 << 30, with(false))) << what << ": differs from the quantizer's";
          }
      }
    }
}

// A first split block past the layer is refused with a message.
TEST(CudaLinear, WgmmaSplitOutsideTheLayerIsRefused) {
  NVFP4_REQUIRE_GPU();
  const LinearWeights w = random_layer(300, 64, scale_range(0x28, 0x5F), 1.0f, false, 1.0f, true, DType::BF16, 7);
  auto lin = CudaLinear::create(w, Semantics::W4A16, DType::BF16, 0);
  EXPECT_THROW(set_wgmma_splits(*lin, 2, 3), Error);  // 300 rows: blocks 0-2 of 128 rows
  EXPECT_NO_THROW(set_wgmma_splits(*lin, 2, 2));
  if (!detail::wgmma_available(0)) return;  // elsewhere rule 4 runs the decode kernel's 32-token tiles
  // Blocks of 256 rows (rule 4) hold 300 rows in blocks 0 and 1: the call is refused, y left as it was (K of 16
  // chunks, so that the split is not capped at one).
  const LinearWeights w2 = random_layer(300, 1024, scale_range(0x28, 0x5F), 1.0f, false, 1.0f, true, DType::BF16, 8);
  lin = CudaLinear::create(w2, Semantics::W4A16, DType::BF16, 0);
  set_wgmma_splits(*lin, 2, 2);
  set_fused_grid_rule(*lin, 4);
  set_fused_max_m(*lin, 1 << 30);
  set_wgmma_from(*lin, 33);  // a layer this small keeps the decode kernel to M = 64 by default
  const int64_t m = 40;
  DeviceBytes dx(static_cast<size_t>(m * 1024 * 2)), dy(static_cast<size_t>(m * 300 * 2));
  dx.fill(0);
  dy.fill(0xFF);
  EXPECT_THROW(lin->run(dx.p, m, dy.p, nullptr), Error);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> y(static_cast<size_t>(m * 300));
  dy.download(y.data(), y.size() * 2);
  for (uint16_t v : y) ASSERT_EQ(v, 0xFFFF);
}

// A layer where 4 weight tiles per warp are chosen (on a 132-SM H200) and the last group has 3 tiles, the
// last tile 8 rows, K = 65 chunks (odd: the two-stage pipeline ends on a half stage), fp16 too: within the
// bound, and bit-identical on a second call (fixed summation order of the K split).
TEST(CudaLinear, OddShapeDeterministicAndWithinBound) {
  NVFP4_REQUIRE_GPU();
  const int64_t n = 17000, k = 4160;
  uint32_t seed = 1300;
  for (DType t : {DType::BF16, DType::F16})
    for (Semantics s : kAllSemantics) {
      const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                           true, t, seed++);
      for (int64_t m : {1, 16}) {
        const auto x = random_activations(t, m, k, 1.0f, seed++);
        const std::string what = label(s, t, m, n, k);
        check_bound(w, s, t, x, m, what);
        EXPECT_EQ(run_gpu(w, s, t, x, m), run_gpu(w, s, t, x, m)) << what << ": two calls differ";
      }
    }
}

// Exact arithmetic: integer activations, power-of-two global scale, scales with few bits (subnormal E4M3
// included) and K small enough that every partial sum is exact in f32 (|Σ| < 2^13 on a 2^-10 grid).
// Any summation order then gives the exact value, so y must equal the reference bit for bit: one wrong
// nibble or scale anywhere shows.
TEST(CudaLinear, W4A16ExactWhenArithmeticIsExact) {
  NVFP4_REQUIRE_GPU();
  std::vector<uint8_t> scales = scale_range(0x01, 0x07);  // subnormal: m · 2^-9
  for (uint8_t c : {0x28, 0x30, 0x34, 0x38}) scales.push_back(c);  // 0.25, 0.5, 0.75, 1
  uint32_t seed = 500;
  for (DType t : {DType::BF16, DType::F16})
    for (int64_t k : {16, 208, 512})
      for (int64_t m : {1, 7, 16, 33, 100}) {
        const int64_t n = 40;
        const LinearWeights w = random_layer(n, k, scales, 0.25f, false, 1.0f, true, t, seed++);  // D_w = 4
        const auto x = integer_activations(t, m, k, 2, seed++);
        const std::vector<uint16_t> y = run_gpu(w, Semantics::W4A16, t, x, m);
        std::vector<double> acc(static_cast<size_t>(m * n));
        cpu_linear_reference_f64(w, Semantics::W4A16, t, x.data(), m, acc.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < m * n; ++i) {
          const uint16_t want = linear_output(t, static_cast<float>(acc[static_cast<size_t>(i)]),
                                              w.bias.data() + i % n);
          if (y[static_cast<size_t>(i)] != want && bad++ < 3)
            ADD_FAILURE() << label(Semantics::W4A16, t, m, n, k) << " element " << i << ": got "
                          << from_bits16(t, y[static_cast<size_t>(i)]) << " want " << from_bits16(t, want);
        }
        EXPECT_EQ(bad, 0) << label(Semantics::W4A16, t, m, n, k);
      }
}

TEST(CudaLinear, TinyScalesAndGlobalScaleOne) {
  NVFP4_REQUIRE_GPU();
  // Checkpoints with global scale 1 keep tiny E4M3 block scales (subnormals): exact in this executor.
  uint32_t seed = 700;
  for (DType t : {DType::BF16, DType::F16})
    for (Semantics s : kAllSemantics) {
      const LinearWeights w = random_layer(48, 256, scale_range(0x01, 0x10), 1.0f, true, 1.0f, true, t, seed++);
      for (int64_t m : {1, 16, 100}) {
        const auto x = random_activations(t, m, 256, 1.0f, seed++);
        check_bound(w, s, t, x, m, label(s, t, m, 48, 256) + "/tiny");
        // the dequantize + cuBLAS path too (its weight tile holds e2m1·S·2^-c: the smallest products exact)
        check_bound(w, s, t, x, m, label(s, t, m, 48, 256) + "/tiny/cublas", 0, -1, 0);
      }
      // Negative block scales (sign bit set; the integer scale conversion keeps it), fused and large-M paths.
      const LinearWeights neg = random_layer(48, 256, scale_range(0xA8, 0xC0), 2688.0f / 0.3f, true,
                                             2688.0f / 7.0f, true, t, seed++);
      for (int64_t m : {1, 16, 100}) {
        const auto x = random_activations(t, m, 256, 1.0f, seed++);
        check_bound(neg, s, t, x, m, label(s, t, m, 48, 256) + "/negative-scales");
      }
    }
}

// The vLLM flavour's weights bit for bit on every path. One-hot activation rows (row r: 1 at column j_r) make
// y[r, n] = T(x_dq · w_dq[n, j_r]), one product, exact in f32: any kernel must give the reference exactly, so
// every weight value shows. The layer holds every finite block scale (both signs) and every code in every
// block. Global scales as calibration makes them and global scale 1; the fp16 layer with the calibrated scale
// has w_dq in fp16's subnormals (the per-weight f32 rounding), the others take the power-of-two form
// (vllm_weights.h): both forms must be exercised. The last layer holds only block scales 0.125-0.94 against a
// global scale of 2688/0.05 (a random checkpoint's), whose power-of-two form needs the smaller shift.
TEST(CudaLinear, VllmWeightsBitExactOnEveryPath) {
  NVFP4_REQUIRE_GPU();
  const int64_t n = 512, k = 128;
  struct Case {
    DType t;
    float w_enc;
    bool pow2;
    int scale_lo = 0, scale_hi = 255;  // the block scale bytes used (the finite ones in this range)
  };
  const Case cases[] = {{DType::BF16, ct_global_enc(0.37f, DType::BF16), true},
                        {DType::BF16, 1.0f, true},
                        {DType::F16, 1.0f, true},
                        {DType::F16, ct_global_enc(0.37f, DType::F16), false},
                        {DType::BF16, 2688.0f / 0.05f, true, 0x28, 0x37}};
  for (const Case& c : cases) {
    LinearWeights w = random_layer(n, k, {0x38}, c.w_enc, true, ct_global_enc(1.0f, c.t), false, c.t, 900);
    std::vector<uint8_t> finite;
    for (int b = c.scale_lo; b <= c.scale_hi; ++b)
      if ((b & 0x7F) != 0x7F) finite.push_back(static_cast<uint8_t>(b));
    for (size_t i = 0; i < w.weight.scales.size(); ++i) w.weight.scales[i] = finite[i % finite.size()];
    for (int64_t row = 0; row < n; ++row)
      for (int64_t col = 0; col < k; col += 2)
        w.weight.codes[static_cast<size_t>((row * k + col) / 2)] =
            pack_e2m1x2(static_cast<uint8_t>((row + col) % 16), static_cast<uint8_t>((row + col + 1) % 16));
    const std::string what = std::string(dtype_name(c.t)) + " global scale " + std::to_string(c.w_enc);
    EXPECT_EQ(vllm_weights_pow2(*CudaLinear::create(w, Semantics::W4A4_VLLM, c.t, 0)), c.pow2) << what;
    // (rows, one-hot column of row 0, column step per row, grid rule, fused_max_m): decode kernel calls that
    // together cover every column, the M > 32 kernel, and the dequantize + cuBLAS path; then the decode kernel
    // with two tiles per warp (grid rule 8 at M <= 8; its power-of-two form reads the scale registers from a
    // table), 16 calls of 8 rows that cover every column.
    std::vector<std::array<int64_t, 5>> runs = {{1, 5, 1, -1, -1},   {7, 40, 1, -1, -1},  {32, 0, 1, -1, -1},
                                                {32, 32, 1, -1, -1}, {32, 64, 1, -1, -1}, {32, 96, 1, -1, -1},
                                                {128, 0, 1, -1, -1}, {128, 0, 1, -1, 0}};
    for (int64_t c0 = 0; c0 < 16; ++c0) runs.push_back({8, c0, 16, 8, -1});
    for (const auto& run : runs) {
      const int64_t m = run[0];
      std::vector<uint16_t> x(static_cast<size_t>(m * k), to_bits16(c.t, 0.0f));
      for (int64_t r = 0; r < m; ++r)
        x[static_cast<size_t>(r * k + (run[1] + run[2] * r) % k)] = to_bits16(c.t, 1.0f);
      const std::vector<uint16_t> y =
          run_gpu(w, Semantics::W4A4_VLLM, c.t, x, m, 0, static_cast<int>(run[3]), run[4]);
      std::vector<double> acc(static_cast<size_t>(m * n));
      cpu_linear_reference_f64(w, Semantics::W4A4_VLLM, c.t, x.data(), m, acc.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        const float want = from_bits16(c.t, linear_output(c.t, static_cast<float>(acc[static_cast<size_t>(i)]), nullptr));
        const float got = from_bits16(c.t, y[static_cast<size_t>(i)]);
        if (!(got == want) && bad++ < 3)
          ADD_FAILURE() << what << " M=" << m << " grid rule " << run[3] << " fused_max_m=" << run[4]
                        << " element (" << i / n << ", " << i % n << "): got " << got << " want " << want;
      }
      EXPECT_EQ(bad, 0) << what << " M=" << m << " grid rule " << run[3] << " fused_max_m=" << run[4];
    }
  }
}

// W4A4 at M = 1: the decode kernel quantizing the activation row itself (set_own_quant) gives the bits of the
// path with the quantizer kernel before it, in both flavours (the vLLM one in its power-of-two and per-weight
// forms), bf16 and fp16: one tile per warp, two (the 2-block and, rule 8, the light kernel) and four; K split
// over 8 warps and fewer; K not a multiple of 64 (1040); a group of zeros, one of 10^4 and one of 10^-6 in the
// row (scales 0, saturated codes, subnormal scales). Layers whose warps' K ranges would not fit the shared memory
// the form may take (K = 32768 at M = 1) keep the quantizer kernel.
TEST(CudaLinear, RowQuantEqualsTheQuantizerKernel) {
  NVFP4_REQUIRE_GPU();
  struct Case {
    int64_t n, k;
    int rule;
  };
  const Case cases[] = {{4096, 1024, -1}, {1100, 4096, -1}, {40, 512, -1},    {512, 1040, -1},
                        {4100, 1024, 8},  {57344, 256, -1}, {16400, 192, -1}, {16, 64, -1}};
  uint32_t seed = 7100;
  int active = 0, total = 0;
  for (DType t : {DType::BF16, DType::F16})
    for (Semantics s : {Semantics::W4A4, Semantics::W4A4_VLLM})
      for (const Case& c : cases) {
        // fp16 vLLM: a weight global scale whose power-of-two plan does not fit (per-weight rounding).
        const float w_enc = t == DType::F16 && s == Semantics::W4A4_VLLM ? ct_global_enc(0.37f, t) : 2688.0f / 0.3f;
        const LinearWeights w =
            random_layer(c.n, c.k, scale_range(0x28, 0x5F), w_enc, true, 2688.0f / 7.0f, true, t, seed++);
        auto x = random_activations(t, 1, c.k, 1.0f, seed++);
        for (int64_t i = 0; i < 16 && 48 + i < c.k; ++i) {
          x[static_cast<size_t>(i)] = to_bits16(t, 0.0f);
          x[static_cast<size_t>(16 + i)] = to_bits16(t, from_bits16(t, x[static_cast<size_t>(16 + i)]) * 1e4f);
          x[static_cast<size_t>(32 + i)] = to_bits16(t, from_bits16(t, x[static_cast<size_t>(32 + i)]) * 1e-6f);
        }
        const std::string what = label(s, t, 1, c.n, c.k) + "/rule" + std::to_string(c.rule);
        auto with = [&](bool on) {
          return run_gpu(w, s, t, x, 1, 0, c.rule, -1, [on](CudaLinear& l) { set_own_quant(l, on); });
        };
        {
          auto lin = CudaLinear::create(w, s, t, 0);
          set_fused_grid_rule(*lin, c.rule);
          active += own_quant_active(*lin, 1);
          ++total;
        }
        const std::vector<uint16_t> y = with(true);
        check_y(w, t, 1, y, reference(w, s, t, x, 1), what);
        EXPECT_EQ(y, with(false)) << what << ": the two forms differ";
      }
  EXPECT_EQ(active, total) << "every case must take the kernel's own quantization";
  const LinearWeights big = random_layer(16, 32768, {0x38}, 2688.0f, true, 2688.0f, false, DType::BF16, seed);
  EXPECT_FALSE(own_quant_active(*CudaLinear::create(big, Semantics::W4A4, DType::BF16, 0), 1));
  EXPECT_FALSE(own_quant_active(*CudaLinear::create(big, Semantics::W4A16, DType::BF16, 0), 1));
}

// Thread i calls layers[i] `calls` times on x = xs[i] (its first m rows), on `shared` or, if null, on a
// stream of its own, each call into a NaN-poisoned y; counts the calls whose y differs from want[i] and the
// CUDA or executor errors.
struct ThreadCounts {
  std::vector<int64_t> mismatches, failures;
};
ThreadCounts call_from_threads(const std::vector<std::unique_ptr<CudaLinear>>& layers,
                               const std::vector<std::vector<uint16_t>>& xs,
                               const std::vector<std::vector<uint16_t>>& want, int64_t m, int calls,
                               cudaStream_t shared) {
  const size_t nthreads = layers.size();
  ThreadCounts r{std::vector<int64_t>(nthreads, 0), std::vector<int64_t>(nthreads, 0)};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nthreads; ++i)
    threads.emplace_back([&, i] {
      const int64_t n = layers[i]->out_features(), k = layers[i]->in_features();
      const size_t x_bytes = static_cast<size_t>(m * k * 2), y_bytes = static_cast<size_t>(m * n * 2);
      cudaStream_t st = shared;
      if (cudaSetDevice(0) != cudaSuccess || (!shared && cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) !=
                                                             cudaSuccess)) {
        ++r.failures[i];
        return;
      }
      {
        DeviceBytes dx(x_bytes), dy(y_bytes);
        dx.upload(xs[i].data(), x_bytes);
        std::vector<uint16_t> y(static_cast<size_t>(m * n));
        for (int c = 0; c < calls; ++c) {
          if (cudaMemsetAsync(dy.p, 0xFF, y_bytes, st) != cudaSuccess) ++r.failures[i];
          try {
            layers[i]->run(dx.p, m, dy.p, st);
          } catch (const Error&) {
            ++r.failures[i];
          }
          if (cudaStreamSynchronize(st) != cudaSuccess) ++r.failures[i];
          dy.download(y.data(), y_bytes);
          r.mismatches[i] += y != want[i];
        }
      }
      if (!shared) cudaStreamDestroy(st);
    });
  for (auto& th : threads) th.join();
  return r;
}

// W4A4 at decode sizes writes its dequantized activations to one buffer per stream. Layers called from
// several threads on one shared stream, each with its own weights and activations (M = 1 and 16, both
// flavours): every output must equal the same layer's lone call bit for bit. A call whose GEMM read the
// buffer after another thread's quantizer had overwritten it (quantizer A, quantizer B, GEMM A) would differ.
TEST(CudaLinear, W4A4DecodeFromSeveralThreadsOnOneStream) {
  NVFP4_REQUIRE_GPU();
  const DType t = DType::BF16;
  const int64_t n = 1024, k = 2048;
  const int kThreads = 4, kCalls = 50;
  std::vector<std::unique_ptr<CudaLinear>> layers;
  std::vector<std::vector<uint16_t>> xs;
  for (int i = 0; i < kThreads; ++i) {
    const Semantics s = i % 2 ? Semantics::W4A4_VLLM : Semantics::W4A4;
    const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                         true, t, 2600 + static_cast<uint32_t>(i));
    layers.push_back(CudaLinear::create(w, s, t, 0));
    xs.push_back(random_activations(t, 16, k, 1.0f, 2700 + static_cast<uint32_t>(i)));
  }
  cudaStream_t shared = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking), cudaSuccess);
  for (int64_t m : {1, 16}) {
    const size_t x_bytes = static_cast<size_t>(m * k * 2), y_bytes = static_cast<size_t>(m * n * 2);
    std::vector<std::vector<uint16_t>> want;
    for (int i = 0; i < kThreads; ++i) {  // references: one call at a time
      DeviceBytes dx(x_bytes), dy(y_bytes);
      dx.upload(xs[i].data(), x_bytes);
      dy.fill(0xFF);
      layers[i]->run(dx.p, m, dy.p, shared);
      CUDA_OK(cudaStreamSynchronize(shared));
      want.emplace_back(static_cast<size_t>(m * n));
      dy.download(want.back().data(), y_bytes);
    }
    for (int i = 1; i < kThreads; ++i) ASSERT_NE(want[i], want[0]) << "layers " << i << " and 0 agree";
    const ThreadCounts r = call_from_threads(layers, xs, want, m, kCalls, shared);
    for (int i = 0; i < kThreads; ++i) {
      EXPECT_EQ(r.failures[i], 0) << "m " << m << ", thread " << i << ": CUDA or executor errors";
      EXPECT_EQ(r.mismatches[i], 0) << "m " << m << ", thread " << i << ": " << r.mismatches[i] << " of "
                                    << kCalls << " calls differ from the lone call";
    }
  }
  cudaStreamDestroy(shared);
}

// Every layer of a device shares one cuBLAS handle, whose stream and workspace each call sets. Layers run from
// several threads, each on its own stream, with many weight tiles (one GEMM each) per call: every output must
// equal, bit for bit, the same layer's output from a lone call on the default stream (cuBLAS is bit-wise
// reproducible on one GPU for a given shape and workspace size, and every stream's workspace has the same
// size). A call whose GEMMs ran on another thread's stream would read its weight tile before or while it is
// written and differ.
TEST(CudaLinear, LayersOnSeveralThreadsShareTheCublasHandle) {
  NVFP4_REQUIRE_GPU();
  const DType t = DType::BF16;
  const int64_t n = 1100, k = 1024, m = 100;
  const int kThreads = 4, kCalls = 20;
  std::vector<std::unique_ptr<CudaLinear>> layers;
  std::vector<std::vector<uint16_t>> xs, want;
  for (int i = 0; i < kThreads; ++i) {
    const Semantics s = i % 2 ? Semantics::W4A4 : Semantics::W4A16;
    const LinearWeights w = random_layer(n, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                         true, t, 2000 + static_cast<uint32_t>(i));
    layers.push_back(CudaLinear::create(w, s, t, 0));
    set_fused_max_m(*layers.back(), 0);             // every M on the dequantize + cuBLAS path
    set_weight_tile_rows(*layers.back(), 128);      // 9 weight tiles, 9 GEMMs per call
    xs.push_back(random_activations(t, m, k, 1.0f, 3000 + static_cast<uint32_t>(i)));
  }
  const size_t x_bytes = static_cast<size_t>(m * k * 2), y_bytes = static_cast<size_t>(m * n * 2);
  for (int i = 0; i < kThreads; ++i) {  // references: one call at a time, default stream
    DeviceBytes dx(x_bytes), dy(y_bytes);
    dx.upload(xs[i].data(), x_bytes);
    dy.fill(0xFF);
    layers[i]->run(dx.p, m, dy.p, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    want.emplace_back(static_cast<size_t>(m * n));
    dy.download(want.back().data(), y_bytes);
    int64_t nonzero = 0, nan = 0;
    for (uint16_t v : want.back()) {
      nonzero += (v & 0x7FFF) != 0;
      nan += std::isnan(from_bits16(t, v));
    }
    ASSERT_EQ(nan, 0) << "layer " << i << ": reference output has NaN";
    ASSERT_GT(nonzero, m * n / 2) << "layer " << i << ": reference output is mostly zero";
  }
  const ThreadCounts r = call_from_threads(layers, xs, want, m, kCalls, nullptr);
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(r.failures[i], 0) << "thread " << i << ": CUDA or executor errors";
    EXPECT_EQ(r.mismatches[i], 0) << "thread " << i << " (" << semantics_name(layers[i]->semantics()) << "): "
                                  << r.mismatches[i] << " of " << kCalls << " calls differ from the lone call";
  }
}

// Two layers of one semantics back to back on one stream, the second reading the first's output: on sm_90 the
// kernels are launched programmatically and start streaming weights while the previous kernel still runs, so
// each must wait for it before reading its input (and, for W4A4 decode, before its quantizer overwrites the
// stream's activation buffer that the first layer's GEMM reads). The intermediate buffer is poisoned (NaN)
// before each pair: a read before the first layer's writes shows as NaN or a changed output. Every path
// (decode kernel with 8- and 16-token tiles, the wgmma kernel and its permutation, the K-split reduction,
// the W4A4 quantizer in front) must give, bit for bit, the output of a pair run with a full synchronization,
// also when the pairs are replayed from a CUDA graph.
TEST(CudaLinear, ChainedLayersWaitForTheirInput) {
  NVFP4_REQUIRE_GPU();
  const DType t = DType::BF16;
  const int64_t k = 4096, n1 = 4096, n2 = 1024;
  cudaStream_t st = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  uint32_t seed = 4200;
  for (Semantics s : kAllSemantics) {
    const LinearWeights w1 = random_layer(n1, k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f,
                                          false, t, seed++);
    const LinearWeights w2 = random_layer(n2, n1, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true,
                                          2688.0f / 7.0f, true, t, seed++);
    auto l1 = CudaLinear::create(w1, s, t, 0);
    auto l2 = CudaLinear::create(w2, s, t, 0);
    for (int64_t m : {1, 16, 48, 100}) {
      const std::string what = std::string(semantics_name(s)) + "/m" + std::to_string(m);
      const auto x = random_activations(t, m, k, 1.0f, seed++);
      const size_t hb = static_cast<size_t>(m * n1 * 2), yb = static_cast<size_t>(m * n2 * 2);
      DeviceBytes dx(static_cast<size_t>(m * k * 2)), dh(hb), dy(yb);
      dx.upload(x.data(), static_cast<size_t>(m * k * 2));
      // Reference: the two calls with a full synchronization between them.
      l1->run(dx.p, m, dh.p, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      l2->run(dh.p, m, dy.p, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint16_t> want(static_cast<size_t>(m * n2)), got(want.size());
      dy.download(want.data(), yb);
      int64_t nan = 0;
      for (uint16_t v : want) nan += std::isnan(from_bits16(t, v));
      ASSERT_EQ(nan, 0) << what << ": reference output has NaN";
      int64_t differ = 0;
      for (int rep = 0; rep < 5; ++rep) {
        CUDA_OK(cudaMemsetAsync(dh.p, 0xFF, hb, st));
        CUDA_OK(cudaMemsetAsync(dy.p, 0xFF, yb, st));
        l1->run(dx.p, m, dh.p, st);
        l2->run(dh.p, m, dy.p, st);
        CUDA_OK(cudaStreamSynchronize(st));
        dy.download(got.data(), yb);
        differ += got != want;
      }
      EXPECT_EQ(differ, 0) << what << ": " << differ << " of 5 chained calls differ from the synchronized one";
      // The same chain three times over in a CUDA graph, replayed five times.
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < 3; ++i) {
        CUDA_OK(cudaMemsetAsync(dh.p, 0xFF, hb, st));
        l1->run(dx.p, m, dh.p, st);
        l2->run(dh.p, m, dy.p, st);
      }
      CUDA_OK(cudaStreamEndCapture(st, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      differ = 0;
      for (int rep = 0; rep < 5; ++rep) {
        CUDA_OK(cudaMemsetAsync(dy.p, 0xFF, yb, st));
        CUDA_OK(cudaGraphLaunch(exec, st));
        CUDA_OK(cudaStreamSynchronize(st));
        dy.download(got.data(), yb);
        differ += got != want;
      }
      CUDA_OK(cudaGraphExecDestroy(exec));
      CUDA_OK(cudaGraphDestroy(graph));
      EXPECT_EQ(differ, 0) << what << ": " << differ << " of 5 graph replays differ from the synchronized calls";
    }
  }
  cudaStreamDestroy(st);
}

// kernels_available answers by capability.h's rule (the dispatch table's): no device is a "no" with the reason,
// on any machine; a usable device is a "yes" that clears the reason.
// The decode kernel's epilogues (format/quant.h's Epilogue) against the decoder's ops applied to the very outputs
// run() gives (the same kernel, grid and summation order), bit for bit:
//   Swiglu: the layer read as gate/up rows alternating in blocks of 8; per token and feature T(T(silu(gate))·up)
//     (silu in f64 on both sides: CUDA's exp and the host's differ by at most an ulp of f64, far below the f32 and
//     T roundings after it);
//   AddToResidual: a residual buffer of random T values (f32) becomes T(r + y).
// Every semantics (the vLLM flavour in its power-of-two form; its per-weight rounding has no epilogue form and
// refuses), bias, M = 1-8 (the epilogues exist for one token tile), layers whose grids take one, two and
// four tiles per warp and the wide form, K not a multiple of 64; nothing written past the output. M of two token
// tiles (9), M on another kernel (the wgmma kernel above 32 on sm_90) and, for Swiglu, N not a multiple of 16 are
// refused.
TEST(CudaLinear, EpiloguesEqualTheDecoderOpsOnTheOutputs) {
  NVFP4_REQUIRE_GPU();
  struct Case {
    int64_t n, k;
    DType t;
  };
  const Case cases[] = {{96, 1040, DType::BF16}, {3072, 576, DType::BF16}, {4096, 1552, DType::F16},
                        {8192, 4096, DType::BF16}, {28672, 4096, DType::BF16}};
  uint32_t seed = 9100;
  int vllm_pow2 = 0;
  for (const Case& c : cases)
    for (Semantics s : kAllSemantics) {
      const LinearWeights w =
          random_layer(c.n, c.k, scale_range(0x28, 0x5F), 2688.0f / 0.3f, true, 2688.0f / 7.0f, true, c.t, seed++);
      auto lin = CudaLinear::create(w, s, c.t, 0);
      if (s == Semantics::W4A4_VLLM && !vllm_weights_pow2(*lin)) {  // per-weight rounding: no epilogue form
        EXPECT_FALSE(lin->epilogue_in_kernel(Epilogue::Swiglu, 1)) << c.n << "x" << c.k;
        EXPECT_FALSE(lin->epilogue_in_kernel(Epilogue::AddToResidual, 1)) << c.n << "x" << c.k;
        continue;
      }
      vllm_pow2 += s == Semantics::W4A4_VLLM;
      for (int64_t m : {1, 2, 8}) {
        const std::string what = label(s, c.t, m, c.n, c.k);
        ASSERT_TRUE(lin->epilogue_in_kernel(Epilogue::Swiglu, m)) << what;
        ASSERT_TRUE(lin->epilogue_in_kernel(Epilogue::AddToResidual, m)) << what;
        const auto x = random_activations(c.t, m, c.k, 1.0f, seed++);
        const auto r0 = random_activations(c.t, m, c.n, 4.0f, seed++);
        std::vector<float> r0f(r0.size());
        for (size_t i = 0; i < r0.size(); ++i) r0f[i] = from_bits16(c.t, r0[i]);
        const int64_t half = c.n / 2;
        DeviceBytes dx(static_cast<size_t>(m * c.k * 2)), dy(static_cast<size_t>(m * c.n * 2)),
            dh(static_cast<size_t>((m + 2) * half * 2)), dr(static_cast<size_t>((m + 2) * c.n * 4));
        dx.upload(x.data(), static_cast<size_t>(m * c.k * 2));
        dy.fill(0xFF);
        dh.fill(0xFF);
        dr.fill(0xFF);
        dr.upload(r0f.data(), r0f.size() * 4);
        lin->run(dx.p, m, dy.p, nullptr);
        lin->run_epilogue(Epilogue::Swiglu, dx.p, m, dh.p, nullptr);
        lin->run_epilogue(Epilogue::AddToResidual, dx.p, m, dr.p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        std::vector<uint16_t> y(static_cast<size_t>(m * c.n)), h(static_cast<size_t>((m + 2) * half));
        std::vector<uint32_t> r(static_cast<size_t>((m + 2) * c.n));
        dy.download(y.data(), y.size() * 2);
        dh.download(h.data(), h.size() * 2);
        dr.download(r.data(), r.size() * 4);
        int64_t bad = 0, finite = 0;
        for (int64_t tok = 0; tok < m; ++tok)
          for (int64_t f = 0; f < half; ++f) {
            const int64_t row = f / 8 * 16 + f % 8;
            const float g = from_bits16(c.t, y[static_cast<size_t>(tok * c.n + row)]);
            const float u = from_bits16(c.t, y[static_cast<size_t>(tok * c.n + row + 8)]);
            const double gd = g;
            const float sl = round_to(c.t, static_cast<float>(gd / (1.0 + std::exp(-gd))));
            const uint16_t want = to_bits16(c.t, round_to(c.t, sl * u));
            const uint16_t got = h[static_cast<size_t>(tok * half + f)];
            finite += std::isfinite(from_bits16(c.t, got)) ? 1 : 0;
            if (got != want && bad++ < 3)
              ADD_FAILURE() << what << " swiglu: (" << tok << ", " << f << ") got " << from_bits16(c.t, got)
                            << ", want " << from_bits16(c.t, want) << " (gate " << g << ", up " << u << ")";
          }
        EXPECT_EQ(bad, 0) << what << " swiglu";
        EXPECT_EQ(finite, m * half) << what << " swiglu: non-finite outputs";
        bad = 0;
        for (int64_t i = 0; i < m * c.n; ++i) {
          const float want = round_to(c.t, r0f[static_cast<size_t>(i)] + from_bits16(c.t, y[static_cast<size_t>(i)]));
          float got;
          std::memcpy(&got, &r[static_cast<size_t>(i)], 4);
          if (!(std::memcmp(&got, &want, 4) == 0) && bad++ < 3)
            ADD_FAILURE() << what << " residual: element " << i << " got " << got << ", want " << want;
        }
        EXPECT_EQ(bad, 0) << what << " residual";
        for (size_t i = static_cast<size_t>(m * half); i < h.size(); ++i)
          if (h[i] != 0xFFFF) {
            ADD_FAILURE() << what << " swiglu: write past the end of the output at element " << i;
            break;
          }
        for (size_t i = static_cast<size_t>(m * c.n); i < r.size(); ++i)
          if (r[i] != 0xFFFFFFFFu) {
            ADD_FAILURE() << what << " residual: write past the end of the buffer at element " << i;
            break;
          }
      }
      DeviceBytes buf(static_cast<size_t>(64 * c.k * 2 + 64 * c.n * 4));
      for (Epilogue e : {Epilogue::Swiglu, Epilogue::AddToResidual})
        for (int64_t m : {9, 16, 64}) {
          EXPECT_FALSE(lin->epilogue_in_kernel(e, m)) << c.n << "x" << c.k << " m" << m;
          EXPECT_THROW(lin->run_epilogue(e, buf.p, m, buf.p, nullptr), Error);
        }
      EXPECT_TRUE(lin->epilogue_in_kernel(Epilogue::Store, 64));
    }
  EXPECT_GE(vllm_pow2, 3) << "w4a4-vllm layers in the power-of-two form";
  LinearWeights odd = random_layer(40, 64, scale_range(0x30, 0x38), 1.0f, false, 1.0f, false, DType::BF16, 3);
  auto lin = CudaLinear::create(odd, Semantics::W4A16, DType::BF16, 0);
  EXPECT_FALSE(lin->epilogue_in_kernel(Epilogue::Swiglu, 1));
  EXPECT_TRUE(lin->epilogue_in_kernel(Epilogue::AddToResidual, 1));
  DeviceBytes buf(4096);
  EXPECT_THROW(lin->run_epilogue(Epilogue::Swiglu, buf.p, 1, buf.p, nullptr), Error);
}

TEST(CudaLinear, KernelsAvailableSaysWhyNot) {
  for (int device : {-1, 999}) {
    std::string why;
    EXPECT_FALSE(kernels_available(device, &why)) << device;
    EXPECT_NE(why.find("the cuda executor needs a CUDA device"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
  EXPECT_FALSE(kernels_available(999, nullptr));
  if (kernels_available(0, nullptr)) {
    std::string why = "stale";
    EXPECT_TRUE(kernels_available(0, &why));
    EXPECT_TRUE(why.empty()) << why;
  }
}

TEST(CudaLinear, RejectsBadInput) {
  NVFP4_REQUIRE_GPU();
  LinearWeights w = random_layer(16, 32, scale_range(0x30, 0x38), 1.0f, false, 1.0f, false, DType::BF16, 1);
  EXPECT_THROW(CudaLinear::create(w, Semantics::W4A4, DType::BF16, 0), Error);  // no input scale
  EXPECT_THROW(CudaLinear::create(w, Semantics::W4A16, DType::F32, 0), Error);
  EXPECT_THROW(CudaLinear::create(w, Semantics::W4A16, DType::BF16, 999), Error);
  LinearWeights bad = w;
  bad.bias.assign(3, 0.0f);
  EXPECT_THROW(CudaLinear::create(bad, Semantics::W4A16, DType::BF16, 0), Error);
  bad = w;
  bad.weight.cols = 24;
  EXPECT_THROW(CudaLinear::create(bad, Semantics::W4A16, DType::BF16, 0), Error);
  for (uint8_t nan : {0x7F, 0xFF}) {  // NaN block scales
    bad = w;
    bad.weight.scales[5] = nan;
    EXPECT_THROW(CudaLinear::create(bad, Semantics::W4A16, DType::BF16, 0), Error);
  }
  auto lin = CudaLinear::create(w, Semantics::W4A16, DType::BF16, 0);
  DeviceBytes buf(4096);
  EXPECT_THROW(lin->run(buf.as<uint8_t>() + 2, 1, buf.p, nullptr), Error);
  EXPECT_THROW(lin->run(buf.p, -1, buf.p, nullptr), Error);
  EXPECT_NO_THROW(lin->run(buf.p, 0, buf.p, nullptr));
}

}  // namespace
}  // namespace nvfp4::cuda::test

// The CUDA activation quantizer is bit-exact with format/quant.h's CPU quantize_activations (SPEC §4), in
// both scale layouts, and writes the swizzled padding as zeros; its quantize-dequantize (the W4A4 GEMMs'
// input) writes exactly the CPU executor's dequantized activations.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/quantize.cuh"
#include "common/error.h"
#include "cuda_test_util.h"
#include "format/swizzle.h"

namespace nvfp4::cuda::test {
namespace {

struct CpuQuant {
  std::vector<uint8_t> codes, scales;
};

CpuQuant cpu_quantize(DType t, const std::vector<uint16_t>& x, int64_t m, int64_t k, float gs) {
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = from_bits16(t, x[i]);
  CpuQuant q;
  q.codes.resize(static_cast<size_t>(m * k / 2));
  q.scales.resize(static_cast<size_t>(m * k / 16));
  ::nvfp4::quantize_activations(xf.data(), m, k, gs, q.codes.data(), q.scales.data());
  return q;
}

// codes_at, scales_at: byte offsets of the outputs in their buffers (8 and odd offsets take the quantizer's
// narrow stores); the bytes before them must stay untouched.
void check_layouts(DType t, const std::vector<uint16_t>& x, int64_t m, int64_t k, float gs, size_t codes_at = 0,
                   size_t scales_at = 0) {
  const CpuQuant ref = cpu_quantize(t, x, m, k, gs);
  DeviceBytes dx(x.size() * 2);
  dx.upload(x.data(), x.size() * 2);
  for (ScaleLayout layout : {ScaleLayout::Linear, ScaleLayout::Swizzled128x4}) {
    const bool sw = layout == ScaleLayout::Swizzled128x4;
    const size_t sbytes = sw ? static_cast<size_t>(swizzled_bytes(m, k / 16)) : ref.scales.size();
    DeviceBytes dc(codes_at + ref.codes.size()), ds(scales_at + sbytes);
    dc.fill(0xEE);
    ds.fill(0xEE);
    quantize_activations(dx.p, t, m, k, gs, dc.as<uint8_t>() + codes_at, ds.as<uint8_t>() + scales_at, layout,
                         nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> codes(dc.n), scales(ds.n);
    dc.download(codes.data(), codes.size());
    ds.download(scales.data(), scales.size());
    size_t bad = 0;
    for (size_t i = 0; i < codes_at; ++i) bad += codes[i] != 0xEE;
    for (size_t i = 0; i < ref.codes.size(); ++i) bad += codes[codes_at + i] != ref.codes[i];
    EXPECT_EQ(bad, 0u) << "codes differ, " << dtype_name(t) << " m=" << m << " k=" << k << " gs=" << gs
                       << " at offset " << codes_at;
    std::vector<uint8_t> want(sbytes);
    if (sw) swizzle_scales(ref.scales.data(), m, k / 16, want.data());
    else want = ref.scales;
    bad = 0;
    for (size_t i = 0; i < scales_at; ++i) bad += scales[i] != 0xEE;
    for (size_t i = 0; i < sbytes; ++i) bad += scales[scales_at + i] != want[i];
    EXPECT_EQ(bad, 0u) << (sw ? "swizzled" : "linear") << " scales differ, " << dtype_name(t) << " m=" << m
                       << " k=" << k << " at offset " << scales_at;
  }
}

// Random activations of each shape at three amplitudes, bf16 and fp16, each with three global scales: from the
// data like a calibration would (2688 / amax), a non-round value, and 1.
template <size_t N, typename F>
void for_random_cases(const int64_t (&shapes)[N][2], uint32_t seed, F check) {
  for (DType t : {DType::BF16, DType::F16}) {
    uint32_t sd = seed;
    for (const auto& s : shapes)
      for (float amp : {1.0f, 0.01f, 37.0f}) {
        const auto x = random_activations(t, s[0], s[1], amp, sd++);
        float amax = 0.0f;
        for (uint16_t v : x) amax = std::max(amax, std::fabs(from_bits16(t, v)));
        for (float gs : {2688.0f / amax, 1.0f, 0.37f * 2688.0f / amax}) check(t, x, s[0], s[1], gs);
      }
  }
}

// Shapes with 1 to 516 group columns (the swizzled quantizer's pairs of columns, padded ones in 1x16, 7x48,
// 33x208 and 3x8256, whose 516 columns take a second block of 512 for the last 4), rows short of 128 and past
// it, rows of 24 and 104 code bytes (not a multiple of 16).
TEST(CudaQuantize, BitExactWithCpuOnRandomData) {
  NVFP4_REQUIRE_GPU();
  const int64_t shapes[][2] = {{1, 16},     {7, 48},     {33, 208},   {128, 4096},
                               {300, 1024}, {1000, 64}, {129, 1216}, {3, 8256}};
  for_random_cases(shapes, 1, [](DType t, const std::vector<uint16_t>& x, int64_t m, int64_t k, float gs) {
    check_layouts(t, x, m, k, gs);
  });
}

// Outputs at addresses that are not 16-byte (codes) or 2- and 4-byte (scales) aligned.
TEST(CudaQuantize, BitExactAtUnalignedOutputs) {
  NVFP4_REQUIRE_GPU();
  const int64_t shapes[][2] = {{33, 208}, {300, 1024}};
  for (const auto& s : shapes) {
    const auto x = random_activations(DType::BF16, s[0], s[1], 1.0f, 77);
    check_layouts(DType::BF16, x, s[0], s[1], 448.0f, 8, 1);
    check_layouts(DType::BF16, x, s[0], s[1], 448.0f, 0, 2);
  }
}

// All 65536 bf16 bit patterns except NaN, 16 to a group, partly shuffled, zero-padded to 65536 values: E2M1
// ties, E4M3 subnormal and clamped scales, infinities.
std::vector<uint16_t> every_bf16_value() {
  std::vector<uint16_t> x;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    if (std::isnan(bf16_to_f32(v))) continue;
    x.push_back(v);
  }
  std::mt19937 rng(5);
  std::shuffle(x.begin() + 1000, x.end(), rng);
  while (x.size() % 256) x.push_back(0);
  return x;
}
const float kEveryValueScales[] = {1.0f, 448.0f, 2688.0f / 3.0e38f, 1.0e30f};

TEST(CudaQuantize, BitExactOnEveryBf16Value) {
  NVFP4_REQUIRE_GPU();
  const std::vector<uint16_t> x = every_bf16_value();
  const int64_t k = 256, m = static_cast<int64_t>(x.size()) / k;
  for (float gs : kEveryValueScales) {
    if (!(gs > 0.0f) || !std::isfinite(gs)) continue;
    check_layouts(DType::BF16, x, m, k, gs);
  }
}

TEST(CudaQuantize, TiesAndTinyGroups) {
  NVFP4_REQUIRE_GPU();
  // Each group: its max picks scale 1 for gs = 2688/6·... values on every E2M1 interval end.
  const float ends[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.25f, -0.75f, -2.5f, -5.0f,
                        0.0f,  -0.0f, 1e-30f, -1e-30f};
  std::vector<uint16_t> x;
  for (int r = 0; r < 64; ++r)
    for (float e : ends) x.push_back(to_bits16(DType::F16, e * std::ldexp(1.0f, r % 8 - 4)));
  for (DType t : {DType::F16}) {
    for (float gs : {448.0f, 1.0f, 3.0f, 1000.0f}) check_layouts(t, x, 64, 16, gs);
  }
}

// Quantize-dequantize against the CPU quantizer's codes and scales, dequantized as the CPU executor does
// (backends/cpu/linear.cpp): w4a4 e2m1·sx (exact), w4a4-vllm T(e2m1·f32(sx/gs)). Every output bit-equal.
void check_dequant(DType t, const std::vector<uint16_t>& x, int64_t m, int64_t k, float gs) {
  const CpuQuant ref = cpu_quantize(t, x, m, k, gs);
  DeviceBytes dx(x.size() * 2), dy(x.size() * 2);
  dx.upload(x.data(), x.size() * 2);
  for (bool vllm : {false, true}) {
    dy.fill(0xFF);
    detail::launch_quantize_dequant(dx.p, t, m, k, gs, vllm, dy.p, false, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> y(x.size());
    dy.download(y.data(), y.size() * 2);
    size_t bad = 0;
    for (int64_t i = 0; i < m * k; ++i) {
      const uint8_t code = (ref.codes[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xF;
      const float sx = e4m3_decode(ref.scales[static_cast<size_t>(i / 16)]);
      const float q = e2m1_decode(code);
      const float want = vllm ? round_to(t, q * (sx / gs)) : q * sx;
      const uint16_t wb = to_bits16(t, want);
      if (y[static_cast<size_t>(i)] != wb && !(std::isnan(want) && std::isnan(from_bits16(t, y[static_cast<size_t>(i)])))) {
        if (bad < 3)
          ADD_FAILURE() << dtype_name(t) << (vllm ? " vllm" : " exact") << " m=" << m << " k=" << k << " gs=" << gs
                        << " element " << i << ": got " << from_bits16(t, y[static_cast<size_t>(i)]) << " want "
                        << want;
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0u);
  }
}

// The table of group factors a W4A4 layer makes at load (the decode kernel's own quantization reads it): every
// entry bit-equal to the CPU quantizer's os (format/quant.h's activation_scale_reciprocal) and the dequantization
// factor sx (exact) or f32(sx / gs) (vLLM), including scale byte 0 (os = 0) and the subnormal scales.
TEST(CudaQuantize, GroupFactorTableMatchesTheQuantizerArithmetic) {
  NVFP4_REQUIRE_GPU();
  DeviceBytes dtab(detail::kGroupFactors * sizeof(float2));
  for (float gs : {1.0f, 3.0f, 448.0f * 6.0f / 7.3f, 1e-3f, 1e20f}) {
    for (bool vllm : {false, true}) {
      dtab.fill(0xFF);  // NaN: an entry the kernel did not write shows
      detail::launch_group_factor_table(gs, vllm, dtab.as<float2>(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> tab(2 * detail::kGroupFactors);
      dtab.download(tab.data(), tab.size() * sizeof(float));
      const float inv_gs = 1.0f / gs;
      for (int s8 = 0; s8 < 0x7F; ++s8) {  // 0x7F is NaN, never a group's scale
        const float sx = e4m3_decode(static_cast<uint8_t>(s8));
        const float os = activation_scale_reciprocal(static_cast<uint8_t>(s8), inv_gs);
        const float sc = vllm ? sx / gs : sx;
        EXPECT_EQ(f32_bits(tab[2 * s8]), f32_bits(os)) << "gs " << gs << " scale byte " << s8 << ": os";
        EXPECT_EQ(f32_bits(tab[2 * s8 + 1]), f32_bits(sc)) << "gs " << gs << (vllm ? " vllm" : " exact")
                                                       << " scale byte " << s8 << ": sc";
      }
    }
  }
}

TEST(CudaQuantize, QuantizeDequantMatchesCpuExecutorValues) {
  NVFP4_REQUIRE_GPU();
  // Odd group counts (the two-group threads' tail), one row, and a wide range of magnitudes and scales; up to
  // 32 rows the four-lanes-per-group kernel (a block's last groups past the end: 7x48), above the other.
  const int64_t shapes[][2] = {{1, 16}, {1, 4096}, {7, 48}, {32, 28672}, {33, 208}, {128, 1024}};
  for_random_cases(shapes, 77, check_dequant);
}

TEST(CudaQuantize, QuantizeDequantOnEveryBf16Value) {
  NVFP4_REQUIRE_GPU();
  // As 256 rows (two groups per thread) and as 32 (four lanes per group).
  const std::vector<uint16_t> x = every_bf16_value();
  for (int64_t m : {256, 32})
    for (float gs : kEveryValueScales) {
      if (!(gs > 0.0f) || !std::isfinite(gs)) continue;
      check_dequant(DType::BF16, x, m, static_cast<int64_t>(x.size()) / m, gs);
    }
}

TEST(CudaQuantize, RejectsBadArguments) {
  NVFP4_REQUIRE_GPU();
  DeviceBytes buf(4096);
  uint8_t* p = buf.as<uint8_t>();
  EXPECT_THROW(quantize_activations(p, DType::BF16, 1, 24, 1.0f, p, p, ScaleLayout::Linear, nullptr), Error);
  EXPECT_THROW(quantize_activations(p, DType::F32, 1, 16, 1.0f, p, p, ScaleLayout::Linear, nullptr), Error);
  EXPECT_THROW(quantize_activations(p, DType::BF16, 1, 16, 0.0f, p, p, ScaleLayout::Linear, nullptr), Error);
  EXPECT_THROW(quantize_activations(p, DType::BF16, 1, 16, INFINITY, p, p, ScaleLayout::Linear, nullptr), Error);
  EXPECT_THROW(quantize_activations(p + 2, DType::BF16, 1, 16, 1.0f, p, p, ScaleLayout::Linear, nullptr), Error);
  EXPECT_NO_THROW(quantize_activations(p, DType::BF16, 0, 16, 1.0f, p, p, ScaleLayout::Linear, nullptr));
}

}  // namespace
}  // namespace nvfp4::cuda::test

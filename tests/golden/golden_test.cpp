// Byte-for-byte agreement with the ecosystem's own implementations (tests/data/golden/README.md):
// compressed-tensors' NVFP4 weight compressor and vLLM's reference activation quantizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "format/numerics.h"
#include "format/quant.h"
#include "io/safetensors.h"

namespace nvfp4 {
namespace {

const std::string kDir = std::string(NVFP4_TEST_DATA_DIR) + "/golden/";

std::vector<uint8_t> bytes_of(const io::TensorView& t) { return std::vector<uint8_t>(t.data, t.data + t.nbytes); }

// Index of the first differing byte, or -1.
long first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  auto it = std::mismatch(a.begin(), a.end(), b.begin());
  return it.first == a.end() ? -1 : static_cast<long>(it.first - a.begin());
}

std::vector<std::string> cases(const io::SafetensorsFile& f, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& t : f.tensors())
    if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(t.name.substr(0, t.name.size() - suffix.size()));
  return out;
}

TEST(Golden, CompressedTensorsWeightCompressorByteForByte) {
  auto f = io::SafetensorsFile::open(kDir + "ct_nvfp4.safetensors");
  const auto names = cases(*f, ".input");
  ASSERT_EQ(names.size(), 11u);
  // Fused sets share the global scale computed from the largest amax of the set (SPEC §3.1).
  std::map<std::string, float> fused_amax;
  for (const auto& c : names)
    if (c.rfind("fused_", 0) == 0) {
      const auto w = io::to_f32(f->get(c + ".input"));
      fused_amax["fused"] = std::max(fused_amax["fused"], abs_max(w.data(), static_cast<int64_t>(w.size())));
    }
  for (const auto& c : names) {
    SCOPED_TRACE(c);
    const auto& in = f->get(c + ".input");
    ASSERT_EQ(in.shape.size(), 2u);
    const auto w = io::to_f32(in);
    const float amax = c.rfind("fused_", 0) == 0 ? fused_amax["fused"] : abs_max(w.data(), in.numel());
    const float gs = ct_global_enc(amax, in.dtype);
    const auto& want_gs = f->get(c + ".weight_global_scale");
    EXPECT_EQ(gs, io::to_f32(want_gs)[0]);
    const Nvfp4Matrix q = ct_quantize(w.data(), in.shape[0], in.shape[1], in.dtype, gs);
    const auto want_codes = bytes_of(f->get(c + ".weight_packed"));
    const auto want_scales = bytes_of(f->get(c + ".weight_scale"));
    EXPECT_EQ(first_diff(q.scales, want_scales), -1) << "block scales differ";
    EXPECT_EQ(first_diff(q.codes, want_codes), -1) << "codes differ";
  }
}

TEST(Golden, VllmReferenceActivationQuantizerByteForByte) {
  auto f = io::SafetensorsFile::open(kDir + "act_quant.safetensors");
  const auto names = cases(*f, ".x");
  ASSERT_EQ(names.size(), 4u);
  for (const auto& c : names) {
    SCOPED_TRACE(c);
    const auto& xt = f->get(c + ".x");
    const auto x = io::to_f32(xt);
    const float gs = io::to_f32(f->get(c + ".input_global_scale"))[0];
    const int64_t m = xt.shape[0], k = xt.shape[1];
    std::vector<uint8_t> codes(static_cast<size_t>(m * k / 2)), scales(static_cast<size_t>(m * k / 16));
    quantize_activations(x.data(), m, k, gs, codes.data(), scales.data());
    EXPECT_EQ(first_diff(scales, bytes_of(f->get(c + ".scales"))), -1) << "scales differ";
    EXPECT_EQ(first_diff(codes, bytes_of(f->get(c + ".codes"))), -1) << "codes differ";
  }
}

}  // namespace
}  // namespace nvfp4

// QuantizedLinear (linear/linear.h): the cpu executor gives exactly CpuLinear's output for every semantics,
// owns its weights (the caller's copy may go away), keeps the input scale under w4a16, and refuses what it
// cannot do with a one-line error.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "linear/linear.h"

namespace nvfp4 {
namespace {

LinearWeights make_layer(int64_t n, int64_t k, bool input_scale, bool bias) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = round_to(DType::BF16, nd(rng));
  LinearWeights lw;
  lw.name = "model.layers.0.mlp.down_proj";
  lw.weight = ct_quantize(w.data(), n, k, DType::BF16, ct_global_enc(abs_max(w.data(), w.size()), DType::BF16));
  lw.has_input_scale = input_scale;
  if (input_scale) lw.input_global = GlobalScale::from_enc(ct_global_enc(4.0f, DType::BF16));
  if (bias)
    for (int64_t i = 0; i < n; ++i) lw.bias.push_back(round_to(DType::BF16, 0.01f * static_cast<float>(i - n / 2)));
  return lw;
}

std::vector<uint16_t> make_x(int64_t m, int64_t k) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = to_bits16(DType::BF16, nd(rng));
  return x;
}

Selection cpu_selection(Semantics s) {
  Selection sel;
  sel.semantics = s;
  sel.executor = Executor::Cpu;
  sel.reason = "test";
  return sel;
}

TEST(QuantizedLinear, CpuExecutorEqualsCpuLinearForEverySemantics) {
  const int64_t n = 48, k = 96, m = 5;
  const std::vector<uint16_t> x = make_x(m, k);
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
    SCOPED_TRACE(semantics_name(s));
    const LinearWeights lw = make_layer(n, k, true, true);
    std::vector<uint16_t> want(static_cast<size_t>(m * n)), got(want.size(), 0xFFFF), got2(want.size(), 0xFFFF);
    CpuLinear(lw, s, DType::BF16).run(x.data(), m, want.data());
    auto q = QuantizedLinear::create(lw, cpu_selection(s), DType::BF16);
    EXPECT_FALSE(q->on_device());
    EXPECT_EQ(q->out_features(), n);
    EXPECT_EQ(q->in_features(), k);
    EXPECT_EQ(q->selection().semantics, s);
    q->forward(x.data(), m, got.data(), nullptr);
    EXPECT_EQ(got, want);
    // The rvalue overload takes the weights over; the caller's copy is gone before forward().
    LinearWeights moved = make_layer(n, k, true, true);
    auto q2 = QuantizedLinear::create(std::move(moved), cpu_selection(s), DType::BF16);
    moved = LinearWeights{};
    q2->forward(x.data(), m, got2.data(), nullptr);
    EXPECT_EQ(got2, want);
  }
}

TEST(QuantizedLinear, OwnsACopyOfTheWeights) {
  const int64_t n = 16, k = 32, m = 2;
  const std::vector<uint16_t> x = make_x(m, k);
  std::vector<uint16_t> want(static_cast<size_t>(m * n)), got(want.size());
  std::unique_ptr<QuantizedLinear> q;
  {
    const LinearWeights lw = make_layer(n, k, false, false);
    CpuLinear(lw, Semantics::W4A16, DType::BF16).run(x.data(), m, want.data());
    q = QuantizedLinear::create(lw, cpu_selection(Semantics::W4A16), DType::BF16);
  }  // lw destroyed
  q->forward(x.data(), m, got.data(), nullptr);
  EXPECT_EQ(got, want);
}

// Executors without epilogue forms (cpu here): Store is forward itself; SwiGLU and the residual addition are
// refused by epilogue_in_kernel and, if asked anyway, with an error naming the executor and what was asked.
TEST(QuantizedLinear, EpiloguesOtherThanStoreRefusedWhereTheExecutorHasNone) {
  const int64_t n = 16, k = 32, m = 2;
  const std::vector<uint16_t> x = make_x(m, k);
  auto q = QuantizedLinear::create(make_layer(n, k, false, false), cpu_selection(Semantics::W4A16), DType::BF16);
  std::vector<uint16_t> want(static_cast<size_t>(m * n)), got(want.size(), 0xFFFF);
  q->forward(x.data(), m, want.data(), nullptr);
  EXPECT_TRUE(q->epilogue_in_kernel(Epilogue::Store, m));
  q->forward_epilogue(Epilogue::Store, x.data(), m, got.data(), nullptr);
  EXPECT_EQ(got, want);
  for (Epilogue e : {Epilogue::Swiglu, Epilogue::AddToResidual}) {
    EXPECT_FALSE(q->epilogue_in_kernel(e, m));
    try {
      q->forward_epilogue(e, x.data(), m, got.data(), nullptr);
      ADD_FAILURE() << "an epilogue the cpu executor does not have was accepted";
    } catch (const Error& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find("executor cpu"), std::string::npos) << what;
      EXPECT_NE(what.find(e == Epilogue::Swiglu ? "SwiGLU" : "residual"), std::string::npos) << what;
    }
  }
}

TEST(QuantizedLinear, KeepsTheInputScaleUnderW4A16) {
  const LinearWeights lw = make_layer(16, 32, true, false);
  auto q = QuantizedLinear::create(lw, cpu_selection(Semantics::W4A16), DType::BF16);
  EXPECT_TRUE(q->has_input_scale());
  EXPECT_EQ(q->input_global().enc, lw.input_global.enc);
  EXPECT_EQ(q->input_global().dec, lw.input_global.dec);
}

TEST(QuantizedLinear, Refusals) {
  const LinearWeights w4a16 = make_layer(16, 32, false, false);
  try {
    QuantizedLinear::create(w4a16, cpu_selection(Semantics::W4A4), DType::BF16);
    ADD_FAILURE() << "W4A4 semantics without an input scale accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.down_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs an input global scale"), std::string::npos) << e.what();
  }
  EXPECT_THROW(QuantizedLinear::create(w4a16, cpu_selection(Semantics::W4A16), DType::F32), Error);
  const LinearWeights w4a4 = make_layer(16, 32, true, false);
  Selection lt = cpu_selection(Semantics::W4A4_VLLM);
  lt.executor = Executor::Cublaslt;
  lt.device = 0;
  EXPECT_THROW(QuantizedLinear::create(w4a4, lt, DType::BF16), Error);  // cublaslt computes w4a4 only
  // The device executors: in a CPU-only build they are not compiled in; in a CUDA build on a machine
  // without a usable GPU their create() refuses. Either way an nvfp4::Error, never a crash.
  if (query_device(0).is_gpu) GTEST_SKIP() << "a GPU is present: the device executors may be created here";
  Selection cuda = cpu_selection(Semantics::W4A16);
  cuda.executor = Executor::Cuda;
  cuda.device = 0;
  try {
    QuantizedLinear::create(w4a4, cuda, DType::BF16);
    ADD_FAILURE() << "cuda executor created without a GPU";
  } catch (const Error& e) {
    std::printf("  cuda executor refused: %s\n", e.what());
  }
  Selection native = cpu_selection(Semantics::W4A4);
  native.executor = Executor::Cublaslt;
  native.device = 0;
  try {
    QuantizedLinear::create(w4a4, native, DType::BF16);
    ADD_FAILURE() << "cublaslt executor created without a GPU";
  } catch (const Error& e) {
    std::printf("  cublaslt executor refused: %s\n", e.what());
  }
}

TEST(QuantizedLinear, ZeroRowsIsANoOp) {
  const LinearWeights lw = make_layer(16, 32, true, false);
  auto q = QuantizedLinear::create(lw, cpu_selection(Semantics::W4A4), DType::BF16);
  q->forward(nullptr, 0, nullptr, nullptr);
}

}  // namespace
}  // namespace nvfp4

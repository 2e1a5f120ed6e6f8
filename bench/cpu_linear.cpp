// CPU micro-benchmarks: one quantized linear (CpuLinear), each semantics, bf16 activations; and the dense matmul of
// the unquantized linears such as lm_head (model/cpu_ops.h's dense_matmul).
//   build/bench/bench_cpu --benchmark_filter=. --benchmark_repetitions=3
// BM_CpuLinear's args are {M, N, K, semantics}, BM_DenseMatmul's {M, N, K, dtype (0 bf16, 1 f16, 2 f32)}:
// N = out features, K = in features.
#include <benchmark/benchmark.h>

#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/linear.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "model/cpu_ops.h"

namespace {

// count values of N(0, 0.05²) times `gain`, from the benchmarks' fixed generator.
std::vector<float> normal_values(int64_t count, std::mt19937& rng, float gain = 1.0f) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& e : v) e = gain * d(rng);
  return v;
}

void BM_CpuLinear(benchmark::State& st) {
  using namespace nvfp4;
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  const auto s = static_cast<Semantics>(st.range(3));
  std::mt19937 rng(1);
  std::vector<float> w = normal_values(n * k, rng);
  for (auto& v : w) v = round_to(DType::BF16, v);
  LinearWeights lw;
  lw.weight = ct_quantize(w.data(), n, k, DType::BF16, ct_global_enc(abs_max(w.data(), n * k), DType::BF16));
  lw.has_input_scale = true;
  lw.input_global = GlobalScale::from_enc(100.0f);
  std::vector<uint16_t> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  const std::vector<float> xf = normal_values(m * k, rng, 20.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16(xf[i]);
  CpuLinear lin(lw, s, DType::BF16);
  for (auto _ : st) {
    lin.run(x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetLabel(semantics_name(s));
  st.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(n * k) * 0.5625, benchmark::Counter::kIsIterationInvariantRate);
}
// Args: {M, N, K, semantics (0 w4a16, 1 w4a4, 2 w4a4-vllm)}. M = 1 is decode, M > 1 prefill/perplexity.
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 16, 128})
    for (auto nk : {std::pair<int64_t, int64_t>{4096, 4096}, {2048, 8192}})
      for (int64_t s : {0, 1, 2}) b->Args({m, nk.first, nk.second, s});
  b->Args({64, 576, 1536, 0});
}
BENCHMARK(BM_CpuLinear)->Apply(Shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DenseMatmul(benchmark::State& st) {
  using namespace nvfp4;
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  const int dt = static_cast<int>(st.range(3));
  std::mt19937 rng(1);
  const std::vector<float> wf = normal_values(n * k, rng), x = normal_values(m * k, rng);
  std::vector<float> acc(static_cast<size_t>(m * n));
  std::vector<uint16_t> wb(dt == 2 ? 0 : wf.size());
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = dt == 0 ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
  model::DenseWeight w;
  w.n = n;
  w.k = k;
  w.dtype = dt == 0 ? DType::BF16 : dt == 1 ? DType::F16 : DType::F32;
  w.bits = wb.empty() ? nullptr : wb.data();
  w.f32 = dt == 2 ? wf.data() : nullptr;
  for (auto _ : st) {
    model::dense_matmul(x.data(), m, w, acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetLabel(dt == 0 ? "bf16" : dt == 1 ? "f16" : "f32");
  st.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(n * k) * (dt == 2 ? 4 : 2),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
// SmolLM2-135M's lm_head (49152 x 576, bf16 and f16) and an 8B-shaped projection, at one token and short prompts.
void DenseShapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 16}) {
    for (int64_t dt : {0, 1}) b->Args({m, 49152, 576, dt});
    b->Args({m, 4096, 4096, 0});
  }
}
BENCHMARK(BM_DenseMatmul)->Apply(DenseShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

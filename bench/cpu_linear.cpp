// CPU executor micro-benchmark: one quantized linear, each semantics, bf16 activations.
//   build/bench/bench_cpu --benchmark_filter=. --benchmark_repetitions=3
// Args are {M, N, K, semantics}: N = out features, K = in features.
#include <benchmark/benchmark.h>

#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/linear.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace {

void BM_CpuLinear(benchmark::State& st) {
  using namespace nvfp4;
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  const auto s = static_cast<Semantics>(st.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = round_to(DType::BF16, d(rng));
  LinearWeights lw;
  lw.weight = ct_quantize(w.data(), n, k, DType::BF16, ct_global_enc(abs_max(w.data(), n * k), DType::BF16));
  lw.has_input_scale = true;
  lw.input_global = GlobalScale::from_enc(100.0f);
  std::vector<uint16_t> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (auto& v : x) v = f32_to_bf16(20 * d(rng));
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

}  // namespace

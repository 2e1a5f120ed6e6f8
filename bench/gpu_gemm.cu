// bench_gemm: the CUDA executor's NVFP4 linears against cuBLAS bf16 on the shapes of docs/PERF.md.
// Method (PERF.md): every call's output is first checked (subsample) against the CPU f64 reference within the
// derived bound, on a NaN-poisoned buffer; then CUDA graphs of R calls over R weight copies (R·bytes >
// 240 MB, so weights come from HBM, not L2), 3 warm-up replays, median of 50 timed replays.
// Usage: bench_gemm [--quick] [--shapes i,j,...] [--m 1,16,...] [--xover 64,...|none] [--reps 50]
//                   [--grid-rules 0,1,2,3,4,5,6] (fused-kernel grid rules, set_fused_grid_rule's numbering;
//                   one row each on the fused path; default: the executor's default) [--no-quant]
//                   [--no-programmatic] (every kernel launched after the previous one has finished)
//                   [--splits 1,2,4,8] (wgmma kernel's K split forced; one row each where it runs)
//                   [--split-from RB] (--splits over the row blocks from RB on only: the tail split's form)
//                   [--wgmma-from M] (the wgmma kernel from that M on, >= 17; default: default_wgmma_from)
//                   [--wgmma-raw-x 0|1] (0: the activation permutation kernel always; 1: the wgmma kernel's own
//                   permutation wherever it has that form; default: wgmma_raw_x_pays)
//                   [--tile-mb 16,32,64] (large-M path's dequantized tile size; one row each there)
//                   [--custom 12672x8192,...] (other layer shapes: alone, instead of the listed ones; with
//                   --shapes, after them; no Marlin column)
//                   [--quantizer-rows] (W4A4 at M = 1 and on the wgmma kernel: also a row with the quantizer
//                   kernel before the GEMM, path "fused-qk", where the default has the GEMM quantize x itself)
//                   [--semantics w4a16,w4a4,w4a4-vllm] (only these; default: all three)
//                   [--decode-grids 1.4.l.p2,2.8,...] (decode kernel's grid forced, one row each where the M
//                   runs it: tiles per warp . K split [. l: light variant] [. pN: every block row in N parts];
//                   set_forced_decode_grid; a grid with no kernel for that M is reported and skipped)
// The path column names the decode grid of each decode-kernel row (decode_grid_name).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/cuda_linear_internal.h"
#include "backends/cuda/linear_bound.h"
#include "backends/cuda/weight_layout.h"
#include "format/numerics.h"
#include "graph_timing.cuh"

using namespace nvfp4;

namespace {

using bench::time_graph;

struct Shape {
  int64_t n, k;
  double marlin_us[5];  // PERF.md: vLLM Marlin at M = 1, 16, 128, 1024, 4096
};
const Shape kShapes[] = {
    {6144, 4096, {12.2, 13.1, 31.6, 160.0, 644}},     {4096, 4096, {9.6, 10.2, 22.4, 109.4, 411}},
    {28672, 4096, {33.4, 36.3, 100.0, 735.2, 3026}},  {4096, 14336, {22.8, 24.6, 69.9, 349.7, 1368}},
    {10240, 8192, {24.0, 26.2, 72.9, 502.3, 2048}},   {57344, 8192, {107.0, 117.7, 362.7, 2943, 11908}},
    {8192, 28672, {57.3, 61.2, 184.1, 1380, 5635}},
};
const int64_t kMarlinM[5] = {1, 16, 128, 1024, 4096};
const Semantics kSems[3] = {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM};  // the rows' order

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
inline uint64_t next_rand() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed, float amp) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xFFFFFF) / 16777216.0f;
    p[i] = __float2bfloat16_rn((u * 2.0f - 1.0f) * amp);
  }
}


// Checks token rows {0, m/2, m-1} x 96 sampled output features against the CPU reference; returns the
// largest err/bound (> 1 is a failure; NaN counts as failure).
double check_output(const LinearWeights& w, Semantics sem, const __nv_bfloat16* dx, int64_t m,
                    const __nv_bfloat16* dy) {
  const int64_t n = w.out_features(), k = w.in_features();
  std::vector<int64_t> toks = {0, m / 2, m - 1};
  toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
  std::vector<int64_t> feats;
  for (int i = 0; i < 96; ++i) feats.push_back(static_cast<int64_t>(next_rand() % n));
  LinearWeights sub;
  sub.weight.resize(static_cast<int64_t>(feats.size()), k);
  sub.weight.global = w.weight.global;
  sub.has_input_scale = w.has_input_scale;
  sub.input_global = w.input_global;
  for (size_t r = 0; r < feats.size(); ++r) {
    std::memcpy(&sub.weight.codes[r * (k / 2)], &w.weight.codes[feats[r] * (k / 2)], k / 2);
    std::memcpy(&sub.weight.scales[r * (k / 16)], &w.weight.scales[feats[r] * (k / 16)], k / 16);
  }
  std::vector<uint16_t> x(toks.size() * k), xa(toks.size() * k), yrow(n);
  for (size_t i = 0; i < toks.size(); ++i)
    CK(cudaMemcpy(&x[i * k], dx + toks[i] * k, k * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < x.size(); ++i) xa[i] = x[i] & 0x7FFF;
  LinearWeights suba = sub;
  for (auto& c : suba.weight.codes) c &= 0x77;
  const int64_t ms = static_cast<int64_t>(toks.size()), ns = static_cast<int64_t>(feats.size());
  std::vector<double> acc(ms * ns), pabs(ms * ns);
  cpu_linear_reference_f64(sub, sem, DType::BF16, x.data(), ms, acc.data());
  cpu_linear_reference_f64(suba, sem, DType::BF16, xa.data(), ms, pabs.data());
  double worst = 0.0;
  for (int64_t i = 0; i < ms; ++i) {
    CK(cudaMemcpy(yrow.data(), dy + toks[i] * n, n * 2, cudaMemcpyDeviceToHost));
    for (int64_t j = 0; j < ns; ++j) {
      const double yv = bf16_to_f32(yrow[feats[j]]);
      const double a = acc[i * ns + j];
      const double bound = cuda::linear_error_bound(DType::BF16, k, a, pabs[i * ns + j], yv);
      const double r = std::fabs(yv - a) / bound;
      if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r;
    }
  }
  return worst;
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  if (!std::strcmp(s, "none")) return v;
  while (*s) {
    v.push_back(std::strtoll(s, const_cast<char**>(&s), 10));
    if (*s == ',') ++s;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> shape_ids = {0, 1, 2, 3, 4, 5, 6};
  std::vector<int64_t> ms = {1, 16, 128, 1024, 4096};
  std::vector<int64_t> xover = {48, 64, 96, 128, 192};
  std::vector<int64_t> rules = {-1};
  std::vector<int64_t> splits_list, tile_mbs;
  std::vector<Shape> custom;
  std::vector<std::pair<std::string, cuda::ForcedDecodeGrid>> grids;  // --decode-grids
  bool shapes_set = false;
  bool quant = true, quantizer_rows = false;
  bool use_sem[3] = {true, true, true};  // per kSems entry
  int reps = 50;
  int64_t wgmma_from = 0;  // --wgmma-from: the smallest M on the wgmma kernel (0: the default)
  int wgmma_raw_x = -1;    // --wgmma-raw-x: set_wgmma_raw_x's mode (-1: the default)
  int split_from = 0;       // --split-from: the first split row block of every --splits variant
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      shape_ids = {1, 5};
      ms = {1, 16, 128};
      xover = {64, 128};
    } else if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) {
      shape_ids = parse_list(argv[++i]);
      shapes_set = true;
    } else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) {
      ms = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--xover") && i + 1 < argc) {
      xover = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--grid-rules") && i + 1 < argc) {
      rules = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--splits") && i + 1 < argc) {
      splits_list = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tile-mb") && i + 1 < argc) {
      tile_mbs = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--custom") && i + 1 < argc) {
      for (const char* c = argv[++i]; *c;) {
        char* end = nullptr;
        const long long n = std::strtoll(c, &end, 10);
        const long long k = (*end == 'x') ? std::strtoll(end + 1, &end, 10) : 0;
        if (n <= 0 || k <= 0 || k % 16 != 0 || (*end && *end != ',')) {
          std::fprintf(stderr, "bench_gemm: --custom wants NxK[,NxK...] with K a multiple of 16, got '%s'\n", c);
          return 2;
        }
        custom.push_back({n, k, {0, 0, 0, 0, 0}});
        c = *end ? end + 1 : end;
      }
    } else if (!std::strcmp(argv[i], "--semantics") && i + 1 < argc) {
      use_sem[0] = use_sem[1] = use_sem[2] = false;
      for (const char* c = argv[++i]; *c;) {
        const char* end = std::strchr(c, ',');
        const std::string name = end ? std::string(c, end) : std::string(c);
        Semantics sem{};
        if (!semantics_from_name(name, &sem)) {
          std::fprintf(stderr, "bench_gemm: --semantics wants w4a16, w4a4 or w4a4-vllm, got '%s'\n", name.c_str());
          return 2;
        }
        use_sem[std::find(kSems, kSems + 3, sem) - kSems] = true;
        c = end ? end + 1 : c + name.size();
      }
    } else if (!std::strcmp(argv[i], "--decode-grids") && i + 1 < argc) {
      for (const char* c = argv[++i]; *c;) {
        const char* end = std::strchr(c, ',');
        const std::string spec = end ? std::string(c, end) : std::string(c);
        cuda::ForcedDecodeGrid g;
        bool bad = false;
        int field = 0;
        for (size_t a = 0; a <= spec.size() && !bad; ++field) {  // fields between dots
          const size_t b = std::min(spec.find('.', a), spec.size());
          const std::string t = spec.substr(a, b - a);
          const char* digits = t.c_str() + (field >= 2 && !t.empty() && t[0] == 'p' ? 1 : 0);
          char* e = nullptr;
          const long v = std::strtol(digits, &e, 10);
          const bool number = e != digits && *e == '\0';  // the whole field is a number
          if (field == 0 && number) g.nw = static_cast<int>(v);
          else if (field == 1 && number) g.wk = static_cast<int>(v);
          else if (field >= 2 && t == "l") g.light = true;
          else if (field >= 2 && t[0] == 'p' && number) g.parts = static_cast<int>(v);
          else bad = true;
          a = b + 1;
        }
        if (bad || field < 2 || g.nw <= 0 || g.wk <= 0 || g.parts <= 0) {
          std::fprintf(stderr, "bench_gemm: --decode-grids wants NW.WK[.l][.pN],... got '%s'\n", spec.c_str());
          return 2;
        }
        grids.emplace_back(spec, g);
        c = end ? end + 1 : c + spec.size();
      }
    } else if (!std::strcmp(argv[i], "--no-quant")) {
      quant = false;
    } else if (!std::strcmp(argv[i], "--quantizer-rows")) {
      quantizer_rows = true;
    } else if (!std::strcmp(argv[i], "--no-programmatic")) {
      cuda::set_programmatic_launch(false);
    } else if (!std::strcmp(argv[i], "--split-from") && i + 1 < argc) {
      split_from = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--wgmma-from") && i + 1 < argc) {
      wgmma_from = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--wgmma-raw-x") && i + 1 < argc) {
      wgmma_raw_x = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_gemm [--quick] [--shapes 0,1,..] [--m 1,16,..] [--xover 32,..|none] [--grid-rules 0,1,2,3,4,5,6] "
                           "[--no-quant] [--no-programmatic] [--splits 1,2,..] [--tile-mb 16,32,..] [--custom NxK,..] "
                           "[--quantizer-rows] [--semantics w4a16,w4a4,w4a4-vllm] [--decode-grids NW.WK[.l][.pN],..] "
                           "[--split-from RB] [--wgmma-from M] [--wgmma-raw-x 0|1] [--reps N]\n");
      return 2;
    }
  }
  std::string why;
  if (!cuda::kernels_available(0, &why)) {
    std::fprintf(stderr, "bench_gemm: %s\n", why.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t blas;
  cublasCreate(&blas);
  void* blas_ws = nullptr;
  CK(cudaMalloc(&blas_ws, 64 << 20));
  cublasSetWorkspace(blas, blas_ws, 64 << 20);
  cublasSetStream(blas, s);
  const double kRotateBytes = 241e6;

  std::printf("# bench_gemm on %s (sm_%d%d, %d SMs), bf16 activations\n\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);

  // ---- activation quantizer, 8192 x 8192 bf16 ----
  if (quant) {
    const int64_t qm = 8192, qk = 8192;
    __nv_bfloat16* qx;
    uint8_t *qc, *qs;
    CK(cudaMalloc(&qx, qm * qk * 2));
    CK(cudaMalloc(&qc, qm * qk / 2));
    CK(cudaMalloc(&qs, qm * qk / 16 + 4096));
    fill_bf16<<<1024, 256, 0, s>>>(qx, qm * qk, 7, 3.0f);
    const double bytes = qm * qk * 2.0 + qm * qk / 2.0 + qm * qk / 16.0;
    for (auto layout : {cuda::ScaleLayout::Linear, cuda::ScaleLayout::Swizzled128x4}) {
      const double us = time_graph(
          [&](cudaStream_t st) { cuda::quantize_activations(qx, DType::BF16, qm, qk, 448.0f, qc, qs, layout, st); }, 1,
          reps, s);
      std::printf("quantize_activations 8192x8192 bf16 (%s scales): %.1f us, %.2f TB/s\n",
                  layout == cuda::ScaleLayout::Linear ? "linear" : "swizzled", us, bytes / us / 1e6);
    }
    cudaFree(qx);
    cudaFree(qc);
    cudaFree(qs);
  }
  std::printf("\n| N×K | M | semantics | µs | weight TB/s | TFLOP/s | cuBLAS bf16 µs | vs cuBLAS | vs Marlin | path | check |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|\n");
  // "path": fused (default grid rule), fused-gN (grid rule N of set_fused_grid_rule) or cublas.
  std::vector<std::string> xover_rows;
  bool all_ok = true;

  std::vector<Shape> shapes;
  if (!custom.empty() && !shapes_set) shape_ids.clear();  // --custom alone: only those
  for (int64_t si : shape_ids) {
    if (si < 0 || si >= static_cast<int64_t>(sizeof kShapes / sizeof kShapes[0])) {
      std::fprintf(stderr, "bench_gemm: no shape %lld (0-6)\n", static_cast<long long>(si));
      return 2;
    }
    shapes.push_back(kShapes[si]);
  }
  shapes.insert(shapes.end(), custom.begin(), custom.end());
  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    LinearWeights w;
    w.name = "bench";
    w.weight.resize(n, k);
    for (size_t i = 0; i < w.weight.codes.size(); i += 8) {
      const uint64_t r = next_rand();
      std::memcpy(&w.weight.codes[i], &r, std::min<size_t>(8, w.weight.codes.size() - i));
    }
    for (auto& c : w.weight.scales) c = static_cast<uint8_t>(0x28 + next_rand() % 0x30);
    w.weight.global = GlobalScale::from_enc(2688.0f / 0.05f);
    w.has_input_scale = true;
    w.input_global = GlobalScale::from_enc(2688.0f / 8.0f);
    const cuda::FragmentWeights f = cuda::make_fragment_weights(w.weight, DType::BF16);
    const double wbytes = n * k * 0.5625;
    const int R = static_cast<int>(std::ceil(kRotateBytes / wbytes));
    const int Rb = static_cast<int>(std::ceil(kRotateBytes / (n * k * 2.0)));
    std::vector<std::vector<std::unique_ptr<cuda::CudaLinear>>> lin(3);
    for (int si2 = 0; si2 < 3; ++si2)
      for (int r = 0; r < R && use_sem[si2]; ++r)
        lin[si2].push_back(cuda::create_prepared(w, f, kSems[si2], DType::BF16, 0));
    for (auto& ls : lin)
      for (auto& l : ls) {
        cuda::set_wgmma_from(*l, wgmma_from);
        cuda::set_wgmma_raw_x(*l, wgmma_raw_x);
      }
    int64_t mmax = 1;
    for (int64_t v : ms) mmax = std::max(mmax, v);
    for (int64_t v : xover) mmax = std::max(mmax, v);
    __nv_bfloat16 *dx, *dy;
    CK(cudaMalloc(&dx, mmax * k * 2));
    CK(cudaMalloc(&dy, mmax * n * 2));
    fill_bf16<<<1024, 256, 0, s>>>(dx, mmax * k, 11, 2.0f);
    std::vector<__nv_bfloat16*> wb(Rb);
    for (auto& p : wb) {
      CK(cudaMalloc(&p, n * k * 2));
      fill_bf16<<<1024, 256, 0, s>>>(p, n * k, static_cast<uint32_t>(next_rand()), 0.05f);
    }
    CK(cudaStreamSynchronize(s));
    const float one = 1.0f, zero = 0.0f;

    auto run_all = [&](int sidx, int64_t m, cudaStream_t st) {
      for (int r = 0; r < R; ++r) lin[sidx][r]->run(dx, m, dy, st);
    };
    auto ours = [&](int sidx, int64_t m, double* check) {
      CK(cudaMemsetAsync(dy, 0xFF, m * n * 2, s));
      run_all(sidx, m, s);  // also grows every replica's workspace before capture
      CK(cudaStreamSynchronize(s));
      *check = check_output(w, kSems[sidx], dx, m, dy);
      return time_graph([&](cudaStream_t st) { run_all(sidx, m, st); }, R, reps, s);
    };

    for (int64_t m : ms) {
      const double cub = time_graph(
          [&](cudaStream_t) {
            for (int r = 0; r < Rb; ++r)
              cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                           static_cast<int>(k), &one, wb[r], CUDA_R_16BF, static_cast<int>(k), dx, CUDA_R_16BF,
                           static_cast<int>(k), &zero, dy, CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
          },
          Rb, reps, s);
      double marlin = 0;
      for (int i = 0; i < 5; ++i)
        if (kMarlinM[i] == m) marlin = sh.marlin_us[i];
      // Row variants: one per grid rule on the fused path, per forced K split where the wgmma kernel runs,
      // per tile size on the large-M path; one row otherwise.
      struct Variant {
        int rule, splits, tile_mb;
        bool quantizer = false;  // W4A4: the quantizer kernel instead of the GEMM's own quantization
        int grid = -1;           // index into --decode-grids
      };
      std::vector<Variant> variants;
      for (int64_t r : rules) variants.push_back({static_cast<int>(r), 0, 0});
      for (int64_t sp : splits_list) variants.push_back({static_cast<int>(rules.front()), static_cast<int>(sp), 0});
      for (int64_t t : tile_mbs) variants.push_back({static_cast<int>(rules.front()), 0, static_cast<int>(t)});
      if (quantizer_rows) variants.push_back({static_cast<int>(rules.front()), 0, 0, true});
      for (size_t gi = 0; gi < grids.size(); ++gi)
        variants.push_back({static_cast<int>(rules.front()), 0, 0, false, static_cast<int>(gi)});
      for (int sidx = 0; sidx < 3; ++sidx) {
        if (!use_sem[sidx]) continue;
        const bool fused_path = cuda::uses_fused_kernel(*lin[sidx][0], m);
        // whether the default grid rule runs the decode kernel here (else the wgmma kernel or the cuBLAS path)
        const bool decode_runs = cuda::decode_grid_name(*lin[sidx][0], m) != "-";
        bool printed = false;
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          const Variant& v = variants[vi];
          const bool per_quantizer = v.quantizer && fused_path && sidx > 0 && (m == 1 || !decode_runs);
          const bool per_grid = v.grid >= 0 && fused_path && decode_runs;
          const bool per_rule = v.rule >= 0 && fused_path && !v.splits && !v.tile_mb && !v.quantizer && v.grid < 0;
          const bool per_split = v.splits > 0 && fused_path && !decode_runs;
          const bool per_tile = v.tile_mb > 0 && !fused_path;
          const bool plain = !v.splits && !v.tile_mb && !per_rule && !v.quantizer && v.grid < 0;
          if (!(per_quantizer || per_grid || per_rule || per_split || per_tile || (plain && !printed))) continue;
          printed = true;
          for (auto& l : lin[sidx]) {
            cuda::set_fused_grid_rule(*l, per_rule || per_split || per_quantizer ? v.rule : -1);
            cuda::set_own_quant(*l, !per_quantizer);
            cuda::set_wgmma_splits(*l, per_split ? v.splits : 0, per_split ? split_from : 0);
            cuda::set_forced_decode_grid(*l, per_grid ? grids[v.grid].second : cuda::ForcedDecodeGrid{});
            if (per_tile)
              cuda::set_weight_tile_rows(*l, static_cast<int>(std::max<int64_t>(16, (int64_t{v.tile_mb} << 20) / (2 * k) / 16 * 16)));
          }
          std::string grid_name = "-";
          double chk = 0, us = 0;
          try {
            grid_name = cuda::decode_grid_name(*lin[sidx][0], m);
            us = ours(sidx, m, &chk);
          } catch (const std::exception& e) {  // a forced grid with no kernel here (before any capture)
            if (!per_grid) throw;
            std::printf("| %lld×%lld | %lld | %s | - | - | - | %.1f | - | - | fused-d%s | skipped: %s |\n",
                        static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m),
                        semantics_name(kSems[sidx]), cub, grids[v.grid].first.c_str(), e.what());
            us = -1;
          }
          for (auto& l : lin[sidx]) {
            cuda::set_forced_decode_grid(*l, cuda::ForcedDecodeGrid{});
            cuda::set_fused_grid_rule(*l, -1);
            cuda::set_wgmma_splits(*l, 0);
            cuda::set_weight_tile_rows(*l, 0);
            cuda::set_own_quant(*l, true);
          }
          if (us < 0) continue;
          char path[96];
          if (per_quantizer)
            std::snprintf(path, sizeof path, "fused-qk");
          else if (per_tile)
            std::snprintf(path, sizeof path, "cublas-t%dMB", v.tile_mb);
          else if (!fused_path)
            std::snprintf(path, sizeof path, "cublas");
          else if (per_split && split_from)
            std::snprintf(path, sizeof path, "fused-s%d@%d", v.splits, split_from);
          else if (per_split)
            std::snprintf(path, sizeof path, "fused-s%d", v.splits);
          else if (per_grid)
            std::snprintf(path, sizeof path, "fused-d%s (%s)", grids[v.grid].first.c_str(), grid_name.c_str());
          else if (!per_rule)
            std::snprintf(path, sizeof path, "fused%s%s%s", grid_name != "-" ? " (" : "",
                          grid_name != "-" ? grid_name.c_str() : "", grid_name != "-" ? ")" : "");
          else
            std::snprintf(path, sizeof path, "fused-g%d (%s)", v.rule, grid_name.c_str());
          const bool ok = chk <= 1.0;
          all_ok = all_ok && ok;
          char mar[32] = "-";
          if (marlin > 0) std::snprintf(mar, sizeof mar, "%.2fx", marlin / us);
          std::printf("| %lld×%lld | %lld | %s | %.1f | %.2f | %.1f | %.1f | %.2fx | %s | %s | %s (%.2f) |\n",
                      static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m),
                      semantics_name(kSems[sidx]), us, wbytes / us / 1e6, 2.0 * m * n * k / us / 1e6, cub,
                      cub / us, mar, path, ok ? "ok" : "FAIL", chk);
          std::fflush(stdout);
        }
      }
    }
    // Crossover scan (every semantics): fused kernel (first grid rule listed) vs dequantize + cuBLAS.
    for (int64_t m : xover)
      for (int sidx : {0, 1, 2}) {
        if (!use_sem[sidx]) continue;
        double us_f, us_l, c1, c2;
        // fused kernel with the first grid rule listed (or the default)
        for (auto& l : lin[sidx]) cuda::set_fused_grid_rule(*l, static_cast<int>(rules.front()));
        for (auto& l : lin[sidx]) cuda::set_fused_max_m(*l, 1 << 30);
        us_f = ours(sidx, m, &c1);
        for (auto& l : lin[sidx]) cuda::set_fused_grid_rule(*l, -1);
        for (auto& l : lin[sidx]) cuda::set_fused_max_m(*l, 0);
        us_l = ours(sidx, m, &c2);
        for (auto& l : lin[sidx]) cuda::set_fused_max_m(*l, -1);
        char row[256];
        std::snprintf(row, sizeof row, "| %lld×%lld | %lld | %s | %.1f | %.1f | %s |", static_cast<long long>(n),
                      static_cast<long long>(k), static_cast<long long>(m), semantics_name(kSems[sidx]), us_f, us_l,
                      (c1 <= 1 && c2 <= 1) ? "ok" : "FAIL");
        all_ok = all_ok && c1 <= 1 && c2 <= 1;
        xover_rows.push_back(row);
      }
    cudaFree(dx);
    cudaFree(dy);
    for (auto p : wb) cudaFree(p);
  }
  std::printf("\nCrossover: fused kernel vs dequantize+cuBLAS (µs)\n\n| N×K | M | semantics | fused | cuBLAS path | check |\n|---|---:|---|---:|---:|---|\n");
  for (auto& r : xover_rows) std::printf("%s\n", r.c_str());
  std::printf("\n%s\n", all_ok ? "all outputs within bound" : "SOME OUTPUTS FAILED THE CHECK");
  return all_ok ? 0 : 1;
}

#include "backends/cuda/weight_layout.h"

#include <string>

#include "backends/cuda/dequant_bits.h"
#include "common/error.h"
#include "format/numerics.h"

namespace nvfp4::cuda {

namespace {
// For lane (g, t), step s, register p, value j: the (row-in-tile, k-in-chunk) it holds.
inline void fragment_coord(int lane, int s, int p, int j, int* row, int* kk) {
  const int g = lane / 4, t = lane % 4;
  *row = g + 8 * (p & 1);
  *kk = 16 * t + 4 * s + 2 * (p >> 1) + j;
}
}  // namespace

FragmentWeights make_fragment_weights(const Nvfp4Matrix& w, DType act) {
  NVFP4_CHECK(act == DType::BF16 || act == DType::F16,
              std::string("cuda: weight layout for activation type ") + dtype_name(act) + ", expected BF16 or F16");
  NVFP4_CHECK(w.cols > 0 && w.cols % 16 == 0,
              "cuda: weight in_features " + std::to_string(w.cols) + " is not a positive multiple of 16");
  NVFP4_CHECK(w.rows > 0, "cuda: weight has no rows");
  NVFP4_CHECK(static_cast<int64_t>(w.codes.size()) == w.rows * w.cols / 2 &&
                  static_cast<int64_t>(w.scales.size()) == w.rows * w.cols / 16,
              "cuda: weight codes/scales sizes do not match its (" + std::to_string(w.rows) + ", " +
                  std::to_string(w.cols) + ") shape");
  FragmentWeights f;
  f.act = act;
  const bool bf16 = act == DType::BF16;
  f.n = w.rows;
  f.k = w.cols;
  f.n16 = (w.rows + kTileN - 1) / kTileN;
  f.kc = (w.cols + kChunkK - 1) / kChunkK;
  f.codes.assign(static_cast<size_t>(stored_tiles(f.n16) * f.kc * 32 * 16), 0);
  f.scales.assign(static_cast<size_t>(stored_tiles(f.n16) * f.kc * 32 * 2), 0);
  const int64_t groups = w.cols / 16, row_bytes = w.cols / 2;
  // (lane, value) -> (row in tile, k in chunk, step word, register and value as 2·p + j), built once.
  struct Entry {
    int row, kk, s, pj;
  };
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t;
    for (int lane = 0; lane < 32; ++lane)
      for (int s = 0; s < 4; ++s)
        for (int p = 0; p < 4; ++p)
          for (int j = 0; j < 2; ++j) {
            Entry e{0, 0, s, 2 * p + j};
            fragment_coord(lane, s, p, j, &e.row, &e.kk);
            t.push_back(e);
          }
    return t;
  }();
  // The word bits of every code at every (register, value) position, for this activation type.
  uint32_t placed[8][16];
  for (int p = 0; p < 4; ++p)
    for (int j = 0; j < 2; ++j)
      for (uint32_t code = 0; code < 16; ++code) placed[2 * p + j][code] = place_code(bf16, p, j, code);
  const uint8_t* src = w.codes.data();
  for (int64_t nt = 0; nt < f.n16; ++nt)
    for (int64_t c = 0; c < f.kc; ++c) {
      const bool full = (nt + 1) * kTileN <= w.rows && (c + 1) * kChunkK <= w.cols;
      const int64_t n_base = nt * kTileN, k_base = c * kChunkK;
      for (int lane = 0; lane < 32; ++lane) {
        const size_t base = static_cast<size_t>(fragment_block(nt, c, f.kc) * 32 + lane);
        uint32_t words[4] = {0, 0, 0, 0};
        const Entry* e = table.data() + lane * 32;
        for (int i = 0; i < 32; ++i) {
          const int64_t n = n_base + e[i].row, k = k_base + e[i].kk;
          if (!full && (n >= w.rows || k >= w.cols)) continue;
          const uint32_t code = (src[n * row_bytes + (k >> 1)] >> ((k & 1) * 4)) & 0xF;
          words[e[i].s] |= placed[e[i].pj][code];
        }
        uint8_t* out = f.codes.data() + base * 16;
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < 4; ++b) out[4 * s + b] = static_cast<uint8_t>(words[s] >> (8 * b));
        const int g = lane / 4, t = lane % 4;
        const int64_t grp = c * 4 + t;
        for (int h = 0; h < 2; ++h) {
          const int64_t n = n_base + g + 8 * h;
          if (n < w.rows && grp < groups)
            f.scales[base * 2 + h] = w.scales[static_cast<size_t>(n * groups + grp)];
        }
      }
    }
  return f;
}

void unpack_fragment_weights(const FragmentWeights& f, std::vector<uint8_t>* codes,
                             std::vector<uint8_t>* scales) {
  codes->assign(static_cast<size_t>(f.n * f.k / 2), 0);
  scales->assign(static_cast<size_t>(f.n * f.k / 16), 0);
  const int64_t groups = f.k / 16;
  for (int64_t nt = 0; nt < f.n16; ++nt)
    for (int64_t c = 0; c < f.kc; ++c)
      for (int lane = 0; lane < 32; ++lane) {
        const size_t base = static_cast<size_t>(fragment_block(nt, c, f.kc) * 32 + lane);
        const uint8_t* in = f.codes.data() + base * 16;
        for (int s = 0; s < 4; ++s)
          for (int p = 0; p < 4; ++p)
            for (int j = 0; j < 2; ++j) {
              int row, kk;
              fragment_coord(lane, s, p, j, &row, &kk);
              const int64_t n = nt * kTileN + row, k = c * kChunkK + kk;
              if (n >= f.n || k >= f.k) continue;
              const uint32_t word = in[4 * s] | in[4 * s + 1] << 8 | in[4 * s + 2] << 16 |
                                    static_cast<uint32_t>(in[4 * s + 3]) << 24;
              const uint32_t code = code_at(f.act == DType::BF16, p, j, word);
              uint8_t& b = (*codes)[static_cast<size_t>(n * (f.k / 2) + k / 2)];
              b = static_cast<uint8_t>(b | (code << (4 * (k % 2))));
            }
        const int g = lane / 4, t = lane % 4;
        const int64_t grp = c * 4 + t;
        for (int h = 0; h < 2; ++h) {
          const int64_t n = nt * kTileN + g + 8 * h;
          if (n < f.n && grp < groups)
            (*scales)[static_cast<size_t>(n * groups + grp)] = f.scales[base * 2 + h];
        }
      }
}

}  // namespace nvfp4::cuda

// GGUF reader: a file built byte by byte here (header, every metadata value type, arrays, alignment, tensor
// infos) and block dequantization against values computed by hand from ggml's formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/error.h"
#include "io/gguf.h"

using namespace nvfp4::io;

namespace {

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void kv(const std::string& k, GgufValueType t) {
    str(k);
    put<uint32_t>(static_cast<uint32_t>(t));
  }
  void pad(size_t a) {
    while (b.size() % a) b.push_back(0);
  }
};

// Q4_1 block: d = 0.5 (f16 0x3800), m = -1 (0xBC00), byte j = j | (15-j) << 4:
//   x[j] = j·0.5 - 1, x[j+16] = (15-j)·0.5 - 1
std::vector<uint8_t> q4_1_block() {
  Bytes b;
  b.put<uint16_t>(0x3800);
  b.put<uint16_t>(0xBC00);
  for (int j = 0; j < 16; ++j) b.b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  return b.b;
}
// Q8_0 block: d = 0.25 (0x3400), q[j] = j - 16: x[j] = (j - 16)·0.25
std::vector<uint8_t> q8_0_block() {
  Bytes b;
  b.put<uint16_t>(0x3400);
  for (int j = 0; j < 32; ++j) b.b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  return b.b;
}
// Q4_0 block: d = 2 (0x4000), byte j = j | j << 4: x[j] = x[j+16] = (j - 8)·2
std::vector<uint8_t> q4_0_block() {
  Bytes b;
  b.put<uint16_t>(0x4000);
  for (int j = 0; j < 16; ++j) b.b.push_back(static_cast<uint8_t>(j | (j << 4)));
  return b.b;
}

// A complete file: alignment 64, three tensors.
std::vector<uint8_t> build_file(uint64_t align = 64) {
  Bytes f;
  f.put<uint32_t>(0x46554747);
  f.put<uint32_t>(3);
  f.put<uint64_t>(3);   // tensors
  f.put<uint64_t>(10);  // kv
  f.kv("general.architecture", GgufValueType::STRING); f.str("llama");
  f.kv("general.alignment", GgufValueType::U32); f.put<uint32_t>(static_cast<uint32_t>(align));
  f.kv("t.u8", GgufValueType::U8); f.put<uint8_t>(200);
  f.kv("t.i16", GgufValueType::I16); f.put<int16_t>(-300);
  f.kv("t.i64", GgufValueType::I64); f.put<int64_t>(-5);
  f.kv("t.f32", GgufValueType::F32); f.put<float>(1.5f);
  f.kv("t.f64", GgufValueType::F64); f.put<double>(-0.25);
  f.kv("t.bool", GgufValueType::BOOL); f.put<uint8_t>(1);
  f.kv("t.ints", GgufValueType::ARRAY); f.put<uint32_t>(5); f.put<uint64_t>(3);
  f.put<int32_t>(-1); f.put<int32_t>(0); f.put<int32_t>(7);
  f.kv("t.strs", GgufValueType::ARRAY); f.put<uint32_t>(8); f.put<uint64_t>(2); f.str("a b"); f.str("\xC4\xA0x");
  // tensors: q (Q4_1, ne [32, 2] = HF [2, 32]), e (Q8_0, ne [32]), z (Q4_0, ne [32])
  const std::vector<uint8_t> q41 = q4_1_block(), q80 = q8_0_block(), q40 = q4_0_block();
  uint64_t off = 0;
  auto rup = [&](uint64_t x) { return (x + align - 1) / align * align; };
  f.str("q"); f.put<uint32_t>(2); f.put<uint64_t>(32); f.put<uint64_t>(2); f.put<uint32_t>(3); f.put<uint64_t>(off);
  off = rup(off + 2 * q41.size());
  const uint64_t off_e = off;
  f.str("e"); f.put<uint32_t>(1); f.put<uint64_t>(32); f.put<uint32_t>(8); f.put<uint64_t>(off_e);
  off = rup(off + q80.size());
  const uint64_t off_z = off;
  f.str("z"); f.put<uint32_t>(1); f.put<uint64_t>(32); f.put<uint32_t>(2); f.put<uint64_t>(off_z);
  f.pad(align);
  const size_t data = f.b.size();
  f.b.insert(f.b.end(), q41.begin(), q41.end());
  f.b.insert(f.b.end(), q41.begin(), q41.end());
  f.b.resize(data + off_e);
  f.b.insert(f.b.end(), q80.begin(), q80.end());
  f.b.resize(data + off_z);
  f.b.insert(f.b.end(), q40.begin(), q40.end());
  return f.b;
}

}  // namespace

TEST(Gguf, ParsesEveryValueTypeAndTensorInfo) {
  const auto img = build_file();
  const GgufHeader h = parse_gguf(img.data(), img.size(), "t.gguf");
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.kv.at("general.architecture").s, "llama");
  EXPECT_EQ(h.kv.at("t.u8").u, 200u);
  EXPECT_EQ(h.kv.at("t.i16").i, -300);
  EXPECT_EQ(h.kv.at("t.i64").i, -5);
  EXPECT_EQ(h.kv.at("t.f32").f, 1.5);
  EXPECT_EQ(h.kv.at("t.f64").f, -0.25);
  EXPECT_EQ(h.kv.at("t.bool").u, 1u);
  EXPECT_EQ(h.kv.at("t.ints").ints, (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(h.kv.at("t.strs").strs, (std::vector<std::string>{"a b", "\xC4\xA0x"}));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "q");
  EXPECT_EQ(h.tensors[0].type, GgmlType::Q4_1);
  EXPECT_EQ(h.tensors[0].shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(h.tensors[0].nbytes, 40u);
  EXPECT_EQ(h.tensors[1].offset, 64u);
  EXPECT_EQ(h.tensors[1].nbytes, 34u);
}

TEST(Gguf, DequantizesBlocksAsComputedByHand) {
  const auto img = build_file();
  const GgufHeader h = parse_gguf(img.data(), img.size(), "t.gguf");
  std::vector<float> q(64), e(32), z(32);
  ggml_dequantize(GgmlType::Q4_1, h.tensors[0].data, 64, q.data());
  ggml_dequantize(GgmlType::Q8_0, h.tensors[1].data, 32, e.data());
  ggml_dequantize(GgmlType::Q4_0, h.tensors[2].data, 32, z.data());
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(q[r * 32 + j], j * 0.5f - 1.0f) << j;
      EXPECT_EQ(q[r * 32 + j + 16], (15 - j) * 0.5f - 1.0f) << j;
    }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(e[j], (j - 16) * 0.25f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(z[j], (j - 8) * 2.0f);
    EXPECT_EQ(z[j + 16], (j - 8) * 2.0f);
  }
}

TEST(Gguf, Q5AndFloatTypes) {
  // Q5_0: d = 1 (0x3C00), qh = 0xFFFF0000 (5th bit set for elements 16..31), nibbles byte j = j | j << 4:
  //   x[j] = (j | 0) - 16 = j - 16, x[j+16] = (j | 16) - 16 = j
  std::vector<uint8_t> b5 = {0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF};
  for (int j = 0; j < 16; ++j) b5.push_back(static_cast<uint8_t>(j | (j << 4)));
  std::vector<float> y(32);
  ggml_dequantize(GgmlType::Q5_0, b5.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 16));
    EXPECT_EQ(y[j + 16], static_cast<float>(j));
  }
  const uint16_t h[2] = {0x3C00, 0xC000};  // f16 1, -2
  ggml_dequantize(GgmlType::F16, reinterpret_cast<const uint8_t*>(h), 2, y.data());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  const uint16_t bf[1] = {0x3FC0};  // bf16 1.5
  ggml_dequantize(GgmlType::BF16, reinterpret_cast<const uint8_t*>(bf), 1, y.data());
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_THROW(ggml_dequantize(GgmlType::Q8_0, b5.data(), 31, y.data()), nvfp4::Error);
}

TEST(Gguf, EveryTruncationThrowsCleanly) {
  const auto img = build_file();
  // Any prefix shorter than the whole file must throw nvfp4::Error (never crash or read past the end).
  for (size_t n = 0; n < img.size(); ++n) {
    std::vector<uint8_t> cut(img.begin(), img.begin() + n);  // exact-size buffer (ASan/valgrind catch overreads)
    EXPECT_THROW(parse_gguf(cut.data(), cut.size(), "cut.gguf"), nvfp4::Error) << n;
  }
}

TEST(Gguf, RejectsMalformedHeaders) {
  auto expect_error = [](std::vector<uint8_t> img, const char* want) {
    try {
      parse_gguf(img.data(), img.size(), "bad.gguf");
      ADD_FAILURE() << "no error, expected '" << want << "'";
    } catch (const nvfp4::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
    }
  };
  auto img = build_file();
  auto bad = img;
  bad[0] = 'X';
  expect_error(bad, "not a GGUF file");
  bad = img;
  bad[4] = 1;  // version 1
  expect_error(bad, "version 1");
  // The Q8_0 tensor's type (u32 after its dims) changed to 99.
  const std::string key = std::string("\x01\x00\x00\x00\x00\x00\x00\x00", 8) + "e";
  auto pos = std::search(img.begin(), img.end(), key.begin(), key.end()) - img.begin();
  bad = img;
  bad[pos + 9 + 4 + 8] = 99;
  expect_error(bad, "ggml type 99");
  // Its offset moved past the end of the data section.
  bad = img;
  bad[pos + 9 + 4 + 8 + 4 + 1] = 0x40;  // offset += 0x4000
  expect_error(bad, "outside");
  // Misaligned offset.
  bad = img;
  bad[pos + 9 + 4 + 8 + 4] += 1;
  expect_error(bad, "alignment");
  // ne[0] not a multiple of the block size (32 -> 31).
  bad = img;
  bad[pos + 9 + 4] = 31;
  expect_error(bad, "block size");
}

TEST(Gguf, OpenAndAccessorsOnAFile) {
  const auto img = build_file(32);
  const std::string path = (std::filesystem::temp_directory_path() / ("nvfp4_gguf_test_" + std::to_string(::getpid()) + ".gguf")).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(img.data()), img.size());
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_uint("t.u8"), 200u);
  EXPECT_THROW(f->get_uint("t.i16"), nvfp4::Error);  // negative
  EXPECT_THROW(f->get_uint("missing.key"), nvfp4::Error);
  EXPECT_EQ(f->get_uint("missing.key", 9), 9u);
  EXPECT_EQ(f->get_float("t.f32", 0), 1.5);
  EXPECT_TRUE(f->get_bool("t.bool", false));
  EXPECT_THROW(f->get_string("t.u8", ""), nvfp4::Error);
  const auto q = f->dequantize(*f->find("q"));
  EXPECT_EQ(q.size(), 64u);
  EXPECT_EQ(q[33], 0.5f * 1 - 1.0f);
  EXPECT_EQ(f->find("nope"), nullptr);
  std::filesystem::remove(path);
  EXPECT_THROW(GgufFile::open(path), nvfp4::Error);
}

// Random byte mutations of a valid file: each must parse or throw nvfp4::Error (never crash, hang or read
// outside the buffer; run under ASan/valgrind to check the last part). Deterministic seed.
TEST(Gguf, RandomMutationsParseOrThrow) {
  const auto img = build_file();
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; };
  int parsed = 0, rejected = 0;
  for (int it = 0; it < 3000; ++it) {
    std::vector<uint8_t> m = img;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f) m[next() % m.size()] = static_cast<uint8_t>(next());
    try {
      const GgufHeader h = parse_gguf(m.data(), m.size(), "m.gguf");
      for (const auto& t : h.tensors) {  // every accepted tensor lies inside the buffer
        ASSERT_GE(t.data, m.data());
        ASSERT_LE(t.data + t.nbytes, m.data() + m.size());
      }
      ++parsed;
    } catch (const nvfp4::Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

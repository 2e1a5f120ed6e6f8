// safetensors reader validation (every malformed-header case is its own test), writer layout and atomicity,
// sharded models.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io_test_util.h"

namespace nvfp4::io {
namespace {

using testing::raw_file;
using testing::read_bytes;
using testing::TmpDir;
using testing::write_bytes;
using testing::write_text;

// Opens `bytes` as a file and returns the error message ("" when it opened).
std::string open_error(const TmpDir& d, const std::vector<uint8_t>& bytes, const std::string& name = "bad.safetensors") {
  const std::string p = d / name;
  write_bytes(p, bytes);
  try {
    SafetensorsFile::open(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& msg, const std::vector<std::string>& parts) {
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(SafetensorsRead, ValidMinimalFile) {
  TmpDir d;
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  write_bytes(d / "ok.safetensors", raw_file(h, 11));
  auto f = SafetensorsFile::open(d / "ok.safetensors");
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorView& b = f->get("b");
  EXPECT_EQ(b.dtype, DType::U8);
  EXPECT_EQ(b.nbytes, 3u);
  EXPECT_EQ(b.data[0], static_cast<uint8_t>(8 * 7 + 1));  // raw_file fills byte i with i*7+1
  EXPECT_EQ(f->find("c"), nullptr);
}

TEST(SafetensorsRead, ZeroSizedTensorsAndScalars) {
  TmpDir d;
  const std::string h = R"({"e":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
  write_bytes(d / "ok.safetensors", raw_file(h, 4));
  auto f = SafetensorsFile::open(d / "ok.safetensors");
  EXPECT_EQ(f->get("e").nbytes, 0u);
  EXPECT_EQ(f->get("s").numel(), 1);
}

TEST(SafetensorsRead, AllStandardDtypesParse) {
  TmpDir d;
  const char* names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "U8", "I8", "I16", "I32", "I64", "BOOL"};
  const size_t sizes[] = {8, 4, 2, 2, 1, 1, 1, 2, 4, 8, 1};
  for (int i = 0; i < 11; ++i) {
    const std::string h = std::string(R"({"t":{"dtype":")") + names[i] + R"(","shape":[3],"data_offsets":[0,)" +
                          std::to_string(3 * sizes[i]) + "]}}";
    EXPECT_EQ(open_error(d, raw_file(h, 3 * sizes[i])), "") << names[i];
  }
}

TEST(SafetensorsRead, TruncatedFile) {
  TmpDir d;
  expect_error(open_error(d, {1, 2, 3}), {"bad.safetensors", "truncated"});
  expect_error(open_error(d, {}), {"bad.safetensors", "truncated"});
}

TEST(SafetensorsRead, HeaderLengthPastEof) {
  TmpDir d;
  const std::string h = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  expect_error(open_error(d, raw_file(h, 1, 1000)), {"bad.safetensors", "header length 1000", "past the end"});
  expect_error(open_error(d, raw_file(h, 1, ~0ull - 1)), {"bad.safetensors", "past the end"});
}

TEST(SafetensorsRead, InvalidJson) {
  TmpDir d;
  expect_error(open_error(d, raw_file(R"({"a":{"dtype":"U8",)", 0)), {"bad.safetensors", "not valid JSON"});
  expect_error(open_error(d, raw_file("[1,2]", 0)), {"bad.safetensors", "not a JSON object"});
  expect_error(open_error(d, raw_file(std::string(500, '[') + std::string(500, ']'), 0)), {"nests deeper"});
}

TEST(SafetensorsRead, UnknownDtype) {
  TmpDir d;
  const std::string h = R"({"w":{"dtype":"F4_E2M1","shape":[2],"data_offsets":[0,1]}})";
  expect_error(open_error(d, raw_file(h, 1)), {"bad.safetensors", "'w'", "unknown dtype 'F4_E2M1'"});
}

TEST(SafetensorsRead, ShapeByteMismatch) {
  TmpDir d;
  const std::string h = R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})";
  expect_error(open_error(d, raw_file(h, 10)), {"bad.safetensors", "'w'", "[2, 3]", "needs 12 bytes", "span 10"});
  const std::string neg = R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})";
  expect_error(open_error(d, raw_file(neg, 1)), {"'w'", "shape entry"});
  const std::string huge = R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})";
  expect_error(open_error(d, raw_file(huge, 8)), {"'w'", "overflows"});
}

TEST(SafetensorsRead, OverlappingOffsets) {
  TmpDir d;
  const std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})";
  expect_error(open_error(d, raw_file(h, 6)), {"bad.safetensors", "'b'", "overlaps tensor 'a'"});
}

TEST(SafetensorsRead, OffsetsOutOfRange) {
  TmpDir d;
  const std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
  expect_error(open_error(d, raw_file(h, 6)), {"bad.safetensors", "'a'", "outside the data buffer of 6 bytes"});
  const std::string rev = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})";
  expect_error(open_error(d, raw_file(rev, 6)), {"'a'", "begin > end"});
}

TEST(SafetensorsRead, GapsAndTrailingBytesAreErrors) {
  TmpDir d;
  const std::string gap = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  expect_error(open_error(d, raw_file(gap, 6)), {"bad.safetensors", "belong to no tensor", "'b'"});
  const std::string h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  expect_error(open_error(d, raw_file(h, 5)), {"bad.safetensors", "cover 2"});
}

TEST(SafetensorsRead, MalformedEntries) {
  TmpDir d;
  expect_error(open_error(d, raw_file(R"({"a":3})", 0)), {"'a'", "not a JSON object"});
  expect_error(open_error(d, raw_file(R"({"a":{"shape":[],"data_offsets":[0,0]}})", 0)), {"'a'", "dtype"});
  expect_error(open_error(d, raw_file(R"({"a":{"dtype":"U8","data_offsets":[0,0]}})", 0)), {"'a'", "shape"});
  expect_error(open_error(d, raw_file(R"({"a":{"dtype":"U8","shape":[0]}})", 0)), {"'a'", "data_offsets"});
  expect_error(open_error(d, raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.5]}})", 1)),
               {"'a'", "data offset"});
  expect_error(open_error(d, raw_file(R"({"__metadata__":{"k":1}})", 0)), {"__metadata__", "'k'"});
  // Names with control characters (JSON escapes) are quoted escaped, and the message stays one line.
  expect_error(open_error(d, raw_file(R"({"a\nb\u0001":3})", 0)), {"'a\\nb\\x01'", "not a JSON object"});
}

TEST(Error, MessagesAreOneLineWithControlCharactersEscaped) {
  EXPECT_STREQ(Error("tensor 'x\ny\r\tz\x7f\x1f' is bad").what(), "tensor 'x\\ny\\r\\tz\\x7f\\x1f' is bad");
  EXPECT_STREQ(Error("caf\xc3\xa9 plain").what(), "caf\xc3\xa9 plain");  // UTF-8 bytes stay as they are
  EXPECT_STREQ(UsageError("a\nb").what(), "a\\nb");
}

TEST(SafetensorsWrite, RoundTripLayout) {
  TmpDir d;
  SafetensorsWriter w;
  const std::vector<float> f = {1.0f, -2.5f, 3.25f};
  w.add_f32("z.bf16", DType::BF16, {3}, f.data());
  w.add_f32("a.f32", DType::F32, {3, 1}, f.data());
  const std::vector<uint8_t> u = {1, 2, 3, 4, 5};
  w.add("m.u8", DType::U8, {5}, u.data(), u.size());
  w.set_metadata("extra", "yes");
  EXPECT_THROW(w.add("m.u8", DType::U8, {5}, u.data(), u.size()), Error);  // duplicate
  EXPECT_THROW(w.add("bad", DType::F32, {2}, u.data(), 5), Error);         // size mismatch
  w.write(d / "out.safetensors");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.safetensors"});  // no temp file left

  const std::vector<uint8_t> bytes = read_bytes(d / "out.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  // Keys sorted, metadata present.
  EXPECT_LT(header.find("\"a.f32\""), header.find("\"m.u8\""));
  EXPECT_LT(header.find("\"m.u8\""), header.find("\"z.bf16\""));
  EXPECT_NE(header.find(R"("format":"pt")"), std::string::npos);

  auto r = SafetensorsFile::open(d / "out.safetensors");
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->metadata().at("extra"), "yes");
  EXPECT_EQ(to_f32(r->get("z.bf16")), f);  // values exact in bf16
  EXPECT_EQ(to_f32(r->get("a.f32")), f);
  EXPECT_EQ(r->get("a.f32").shape, (std::vector<int64_t>{3, 1}));
  const TensorView& m = r->get("m.u8");
  EXPECT_EQ(std::vector<uint8_t>(m.data, m.data + m.nbytes), u);
  // Data order follows the sorted names: a.f32 first.
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.0f);
}

TEST(SafetensorsWrite, FailureLeavesNothing) {
  TmpDir d;
  SafetensorsWriter w;
  const uint8_t b = 1;
  w.add("x", DType::U8, {1}, &b, 1);
  EXPECT_THROW(w.write(d / "missing-dir/out.safetensors"), Error);
  EXPECT_TRUE(d.entries().empty());
}

TEST(SafetensorsWrite, ReplacesExistingAtomically) {
  TmpDir d;
  write_text(d / "out.safetensors", "old");
  SafetensorsWriter w;
  const uint8_t b = 7;
  w.add("x", DType::U8, {1}, &b, 1);
  w.write(d / "out.safetensors");
  EXPECT_EQ(SafetensorsFile::open(d / "out.safetensors")->get("x").data[0], 7);
  EXPECT_EQ(d.entries().size(), 1u);
}

TEST(ToF32, DecodesEveryFloatType) {
  TmpDir d;
  SafetensorsWriter w;
  const uint16_t h[2] = {0x3C00, 0xC000};  // fp16 1.0, -2.0
  const uint16_t bf[2] = {0x3F80, 0x4040};  // bf16 1.0, 3.0
  const uint8_t e[3] = {0x38, 0x7E, 0x20};  // e4m3 1.0, 448, 0.125
  const double f64[1] = {0.5};
  w.add("h", DType::F16, {2}, h, 4);
  w.add("b", DType::BF16, {2}, bf, 4);
  w.add("e", DType::F8_E4M3, {3}, e, 3);
  w.add("d", DType::F64, {1}, f64, 8);
  w.add("i", DType::I32, {1}, h, 4);
  w.write(d / "t.safetensors");
  auto f = SafetensorsFile::open(d / "t.safetensors");
  EXPECT_EQ(to_f32(f->get("h")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(to_f32(f->get("b")), (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(to_f32(f->get("e")), (std::vector<float>{1.0f, 448.0f, 0.125f}));
  EXPECT_EQ(to_f32(f->get("d")), (std::vector<float>{0.5f}));
  try {
    to_f32(f->get("i"));
    ADD_FAILURE() << "I32 converted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'i'"), std::string::npos);
  }
}

// ---- sharded models --------------------------------------------------------------------------------------

void two_shards(const TmpDir& d) {
  SafetensorsWriter a, b;
  const uint8_t x = 1, y = 2;
  a.add("t.a", DType::U8, {1}, &x, 1);
  b.add("t.b", DType::U8, {1}, &y, 1);
  a.write(d / "model-00001-of-00002.safetensors");
  b.write(d / "model-00002-of-00002.safetensors");
}

TEST(SafetensorsModel, ShardedIndex) {
  TmpDir d;
  two_shards(d);
  write_text(d / "model.safetensors.index.json",
             R"({"metadata":{"total_size":2},"weight_map":{"t.a":"model-00001-of-00002.safetensors","t.b":"model-00002-of-00002.safetensors"}})");
  auto m = SafetensorsModel::open(d.path);
  EXPECT_TRUE(m->sharded());
  EXPECT_EQ(m->names(), (std::vector<std::string>{"t.a", "t.b"}));
  EXPECT_EQ(m->get("t.b").data[0], 2);
  EXPECT_EQ(m->total_bytes(), 2u);
  EXPECT_EQ(m->files().size(), 2u);
}

TEST(SafetensorsModel, IndexNamesTensorMissingFromShard) {
  TmpDir d;
  two_shards(d);
  write_text(d / "model.safetensors.index.json",
             R"({"weight_map":{"t.a":"model-00002-of-00002.safetensors","t.b":"model-00002-of-00002.safetensors"}})");
  try {
    SafetensorsModel::open(d.path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'t.a'"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsModel, ShardTensorMissingFromIndex) {
  TmpDir d;
  two_shards(d);
  write_text(d / "model.safetensors.index.json", R"({"weight_map":{"t.a":"model-00001-of-00002.safetensors"}})");
  // Only shard 1 is opened: consistent. Now list t.b's shard for t.a's name too.
  EXPECT_NO_THROW(SafetensorsModel::open(d.path));
  write_text(d / "model.safetensors.index.json",
             R"({"weight_map":{"t.a":"model-00001-of-00002.safetensors","x":"model-00002-of-00002.safetensors"}})");
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
}

TEST(SafetensorsModel, ShardNameMustBePlain) {
  TmpDir d;
  two_shards(d);
  write_text(d / "model.safetensors.index.json", R"({"weight_map":{"t.a":"../etc/passwd"}})");
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
  write_text(d / "model.safetensors.index.json", R"({"weight_map":{"t.a":"missing.safetensors"}})");
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
  write_text(d / "model.safetensors.index.json", R"({"weight_map": 3})");
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
}

TEST(SafetensorsModel, DirectoryWithoutModelFile) {
  TmpDir d;
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
  two_shards(d);  // two files, no index: ambiguous
  EXPECT_THROW(SafetensorsModel::open(d.path), Error);
}

}  // namespace
}  // namespace nvfp4::io

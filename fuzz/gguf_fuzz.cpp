// libFuzzer target for the GGUF parser (io::parse_gguf): any byte string must either parse into tensors whose
// data lies inside the input with sizes consistent with their type and shape, or throw nvfp4::Error with a
// one-line message. Crashes, sanitizer reports, hangs and other exception types are findings.
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address -I src fuzz/gguf_fuzz.cpp src/io/gguf.cpp \
//     src/format/numerics.cpp -o gguf_fuzz
// (tests/cli/ckpt_fuzz.sh builds and runs it for a bounded time.)
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nvfp4::io::GgufHeader h = nvfp4::io::parse_gguf(data, size, "fuzz-input");
    for (const auto& t : h.tensors) {
      // What the parser accepted must be safe to use: data inside the input, bytes = blocks x block bytes.
      if (!t.data || t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
      const int64_t n = t.numel(), block = nvfp4::io::ggml_block_size(t.type);
      if (n < 0 || n % block != 0) std::abort();
      if (static_cast<uint64_t>(n / block) * static_cast<uint64_t>(nvfp4::io::ggml_block_bytes(t.type)) != t.nbytes)
        std::abort();
      if (t.nbytes > 0) {  // ASan checks both accesses are inside the buffer
        volatile uint8_t a = t.data[0];
        volatile uint8_t b = t.data[t.nbytes - 1];
        (void)a;
        (void)b;
      }
    }
  } catch (const nvfp4::Error& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) std::abort();  // one-line messages only
  }
  return 0;
}

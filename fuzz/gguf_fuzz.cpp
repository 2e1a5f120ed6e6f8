// libFuzzer target for the GGUF parser (io::parse_gguf): any byte string must either parse into tensors whose
// data lies inside the input with sizes consistent with their type and shape, or throw nvfp4::Error with a
// one-line message. Crashes, sanitizer reports, hangs and other exception types are findings.
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address -I src -I . fuzz/gguf_fuzz.cpp src/io/gguf.cpp \
//     src/format/numerics.cpp -o gguf_fuzz
// (tests/cli/ckpt_fuzz.sh builds and runs it for a bounded time.)
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_checks.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nvfp4::fuzz::parse_or_refuse_in_one_line([&] {
    const nvfp4::io::GgufHeader h = nvfp4::io::parse_gguf(data, size, "fuzz-input");
    for (const auto& t : h.tensors) {
      // What the parser accepted must be safe to use: data inside the input, bytes = blocks x block bytes.
      if (!t.data || t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
      const int64_t n = t.numel(), block = nvfp4::io::ggml_block_size(t.type);
      if (n < 0 || n % block != 0) std::abort();
      if (static_cast<uint64_t>(n / block) * static_cast<uint64_t>(nvfp4::io::ggml_block_bytes(t.type)) != t.nbytes)
        std::abort();
      nvfp4::fuzz::touch(t.data, t.nbytes);
    }
  });
  return 0;
}

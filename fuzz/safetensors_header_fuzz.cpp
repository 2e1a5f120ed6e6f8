// libFuzzer target for the safetensors header parser (io::parse_safetensors): any byte string must either
// parse into entries that tile the data buffer inside the input, or throw nvfp4::Error with a one-line
// message. Crashes, sanitizer reports, hangs and other exception types are findings.
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address -I src -I . fuzz/safetensors_header_fuzz.cpp \
//     src/io/safetensors.cpp src/io/file_util.cpp src/common/dtype.cpp src/format/numerics.cpp -o safetensors_header_fuzz
// (tests/cli/ckpt_fuzz.sh builds and runs it for a bounded time.)
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_checks.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nvfp4::fuzz::parse_or_refuse_in_one_line([&] {
    const nvfp4::io::ParsedHeader h = nvfp4::io::parse_safetensors(data, size, "fuzz-input");
    // What the parser accepted must be safe to use: every tensor inside the input, sizes consistent.
    for (const auto& e : h.tensors) {
      if (e.begin > e.end || h.data_offset + e.end > size) std::abort();
      uint64_t n = nvfp4::dtype_size(e.dtype);
      for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
      if (n != e.end - e.begin) std::abort();
      nvfp4::fuzz::touch(data + h.data_offset + e.begin, e.end - e.begin);
    }
  });
  return 0;
}

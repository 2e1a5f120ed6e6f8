// Checks shared by the libFuzzer targets of the checkpoint parsers.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace nvfp4::fuzz {

// Reads the first and last byte of [p, p + n) (AddressSanitizer checks both accesses are inside the input).
inline void touch(const uint8_t* p, uint64_t n) {
  if (n == 0) return;
  volatile uint8_t a = p[0];
  volatile uint8_t b = p[n - 1];
  (void)a;
  (void)b;
}

// Runs `parse_and_check`; nvfp4::Error is the expected way to refuse an input, but its message must be one
// non-empty line. Any other exception escapes (a finding).
template <class F>
void parse_or_refuse_in_one_line(F parse_and_check) {
  try {
    parse_and_check();
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) std::abort();
  }
}

}  // namespace nvfp4::fuzz

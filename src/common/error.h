// Error type of the library. Library code never prints or exits: it throws nvfp4::Error with a one-line
// message that names the file/tensor and says what was seen and what was expected. The CLI catches it,
// prints "error: <message>" and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace nvfp4 {

// `s` with every control character written as an escape (\n, \r, \t, else \xNN): messages quote names read
// from files, which may hold anything, and must stay one line.
inline std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7F) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(one_line(what)) {}
};

// A usage error (bad flag value, unknown backend name): the CLI exits 2 for these.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

[[noreturn]] inline void fail(const std::string& what) { throw Error(what); }

}  // namespace nvfp4

#define NVFP4_CHECK(cond, msg)                  \
  do {                                          \
    if (!(cond)) ::nvfp4::fail(msg);            \
  } while (0)

// Error type of the library. Library code never prints or exits: it throws nvfp4::Error with a one-line
// message that names the file/tensor and says what was seen and what was expected. The CLI catches it,
// prints "error: <message>" and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace nvfp4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
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

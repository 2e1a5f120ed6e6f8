// Log and progress callbacks. Library code reports through these and never writes to stdout/stderr itself.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace nvfp4 {

enum class LogLevel { Debug, Info, Warning, Error };

using LogFn = std::function<void(LogLevel, const std::string&)>;

struct ProgressEvent {
  std::string what;  // e.g. the tensor being written
  size_t done = 0;   // units finished so far
  size_t total = 0;  // units in all (0 when unknown)
};
using ProgressFn = std::function<void(const ProgressEvent&)>;

// Callbacks bundled for functions that do long work. Empty functions are allowed (nothing reported).
struct Reporter {
  LogFn log;
  ProgressFn progress;
  void info(const std::string& m) const { if (log) log(LogLevel::Info, m); }
  void warn(const std::string& m) const { if (log) log(LogLevel::Warning, m); }
  void debug(const std::string& m) const { if (log) log(LogLevel::Debug, m); }
  void step(const std::string& what, size_t done, size_t total) const {
    if (progress) progress(ProgressEvent{what, done, total});
  }
};

}  // namespace nvfp4

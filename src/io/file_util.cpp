#include "io/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace nvfp4::io {

bool write_all(int fd, const void* data, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& chunks) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) fail("cannot create a temporary file next to '" + path + "': " + std::strerror(errno));
  bool ok = true;
  for (const auto& c : chunks) {
    ok = write_all(fd, c.first, c.second);
    if (!ok) break;
  }
  const int err = errno;
  ok = ok && fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (ok) ::chmod(tmpl.c_str(), 0644);
  if (!ok || std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = errno ? errno : err;
    ::unlink(tmpl.c_str());
    fail("cannot write '" + path + "': " + std::strerror(e));
  }
}

}  // namespace nvfp4::io

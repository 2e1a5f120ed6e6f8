// Small file helpers of the io layer.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace nvfp4::io {

// Writes the byte ranges `chunks`, in order, to `path` atomically: a temporary file in the same folder, fsync,
// rename. Throws nvfp4::Error naming the path; leaves no temporary file behind on failure.
void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& chunks);

// Writes all `n` bytes to the open file descriptor `fd`, retrying short writes and EINTR. Returns false on
// an error (errno says which).
bool write_all(int fd, const void* data, size_t n);

}  // namespace nvfp4::io

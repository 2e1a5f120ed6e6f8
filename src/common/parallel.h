// A small persistent thread pool for CPU work. parallel_for splits [0, n) into contiguous chunks and runs
// them on the pool's threads plus the caller. Thread count: NVFP4_NUM_THREADS if set, else the hardware's.
#pragma once
#include <cstddef>
#include <functional>

namespace nvfp4 {

// Largest thread count accepted from NVFP4_NUM_THREADS and `--threads`.
constexpr int kMaxThreads = 4096;
// A thread count as NVFP4_NUM_THREADS spells it: a decimal integer from 1 to kMaxThreads, nothing else. The pool
// ignores any other value (it cannot report one); the command line refuses it with a usage error.
bool parse_thread_count(const char* s, int* n);

// Number of worker threads parallel_for uses (>= 1).
int num_threads();
// Override the thread count (>= 1); takes effect for later calls.
void set_num_threads(int n);

// Calls fn(begin, end) over disjoint chunks covering [0, n). Chunks have at least `grain` items.
// Blocks until all chunks are done. Exceptions thrown by fn are rethrown in the caller (the first one).
void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

}  // namespace nvfp4

#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace nvfp4 {

namespace {

// Regions are published by a generation number. A worker that finishes a region spins on the generation for
// a short while before it sleeps on a condition variable (decoding runs a region every few tens of µs: waking a
// sleeping thread costs about as much as the work). Tasks are claimed from one atomic word holding the
// generation, the region's task count and the next index, so a worker still leaving an earlier region can
// never claim a task of the next one by mistake.
class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    quit_.store(false);
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  // Runs task(i) for i in [0, count) across the pool and the caller. count < 2^16.
  void run(size_t count, const std::function<void(size_t)>& task) {
    std::lock_guard<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = nullptr;
    }
    task_ = &task;
    pending_.store(count);
    const uint32_t g = gen_.load() + 1;
    claim_.store(pack(g, count, 0));
    gen_.store(g);  // publishes task_, pending_ and claim_ to the workers that see g
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
    work(g);
    spin_while([this] { return pending_.load() != 0; });
    if (pending_.load() != 0) {
      std::unique_lock<std::mutex> lk(mu_);
      done_cv_.wait(lk, [this] { return pending_.load() == 0; });
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr std::chrono::microseconds kSpin{50};

  static uint64_t pack(uint32_t gen, size_t count, size_t next) {
    return static_cast<uint64_t>(gen) << 32 | static_cast<uint64_t>(count) << 16 | static_cast<uint64_t>(next);
  }
  // Spins (pausing) while busy() holds, for at most kSpin; every 32 turns it reads the clock (reading it costs
  // more than a pause) and yields the CPU, so that with more threads than CPUs the spinning ones give way to
  // those with work.
  template <typename F>
  static void spin_while(F busy) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int turn = 1; busy(); ++turn) {
      pause();
      if (turn % 32 != 0) continue;
      if (std::chrono::steady_clock::now() - t0 >= kSpin) return;
      std::this_thread::yield();
    }
  }
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Claims and runs tasks of generation g until none is left (or a later region has begun).
  void work(uint32_t g) {
    uint64_t s = claim_.load();
    for (;;) {
      const size_t count = static_cast<size_t>((s >> 16) & 0xFFFF), i = static_cast<size_t>(s & 0xFFFF);
      if (static_cast<uint32_t>(s >> 32) != g || i >= count) return;
      if (!claim_.compare_exchange_weak(s, s + 1)) continue;  // s reloaded
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (pending_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_all();
      }
      s = claim_.load();
    }
  }

  void loop() {
    uint32_t seen = gen_.load();
    for (;;) {
      spin_while([&] { return gen_.load() == seen && !quit_.load(); });
      uint32_t g = gen_.load();
      if (g == seen && !quit_.load()) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return quit_.load() || gen_.load() != seen; });
        sleepers_.fetch_sub(1);
        g = gen_.load();
      }
      if (quit_.load()) return;
      seen = g;
      work(g);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* task_ = nullptr;
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> gen_{0};
  std::atomic<size_t> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> quit_{false};
  std::exception_ptr error_;
};

int default_threads() {
  int n = 0;
  if (parse_thread_count(std::getenv("NVFP4_NUM_THREADS"), &n)) return n;
  unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

thread_local bool t_in_region = false;

}  // namespace

bool parse_thread_count(const char* s, int* n) {
  if (!s || !*s) return false;
  int v = 0;
  for (const char* c = s; *c; ++c) {
    if (*c < '0' || *c > '9') return false;
    v = v * 10 + (*c - '0');
    if (v > kMaxThreads) return false;
  }
  if (v < 1) return false;
  *n = v;
  return true;
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) { pool().resize(std::max(1, n)); }

void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t threads = static_cast<size_t>(num_threads());
  size_t chunks = std::min((n + grain - 1) / grain, threads * 4);
  if (chunks <= 1 || threads == 1 || t_in_region) {  // nested regions run inline
    fn(0, n);
    return;
  }
  chunks = std::min<size_t>(chunks, 0xFFFF);  // Pool::run's limit
  const size_t per = (n + chunks - 1) / chunks;
  chunks = (n + per - 1) / per;
  pool().run(chunks, [&](size_t c) {
    t_in_region = true;
    size_t b = c * per, e = std::min(n, b + per);
    try {
      fn(b, e);
    } catch (...) {
      t_in_region = false;
      throw;
    }
    t_in_region = false;
  });
}

}  // namespace nvfp4

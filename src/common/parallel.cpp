#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace nvfp4 {

namespace {

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  // Runs task(i) for i in [0, count) across the pool and the caller.
  void run(size_t count, const std::function<void(size_t)>& task) {
    std::lock_guard<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    {
      std::lock_guard<std::mutex> lk(mu_);
      task_ = &task;
      count_ = count;
      next_.store(0);
      pending_ = count;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void work() {
    for (;;) {
      size_t i = next_.fetch_add(1);
      if (i >= count_) return;
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  void loop() {
    size_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || (generation_ != seen && task_ != nullptr); });
        if (quit_) return;
        seen = generation_;
      }
      work();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  size_t pending_ = 0;
  size_t generation_ = 0;
  bool quit_ = false;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* s = std::getenv("NVFP4_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n >= 1) return n;
  }
  unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

thread_local bool t_in_region = false;

}  // namespace

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

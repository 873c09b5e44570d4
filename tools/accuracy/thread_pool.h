// A fixed set of worker threads for the accuracy sweep and the engine
// microbenchmark: Run(fn) calls fn(worker index) on every worker and waits
// for all of them. The workers run in TensorFlow's floating-point mode
// (flush-to-zero and denormals-are-zero; TF's thread pools set it) unless
// told otherwise, so the engine computes here as it does under TF.

#ifndef TF_OPS_TOOLS_ACCURACY_THREAD_POOL_H_
#define TF_OPS_TOOLS_ACCURACY_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tf_ops {
namespace accuracy {

class Pool {
 public:
  Pool(int n, bool ftz) {
    for (int t = 0; t < n; ++t) {
      workers_.emplace_back([this, t, ftz] { Loop(t, ftz); });
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  void Run(const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = size();
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void Loop(int t, bool ftz) {
#if defined(__x86_64__)
    if (ftz) _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ | DAZ
#else
    (void)ftz;
#endif
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        fn = fn_;
      }
      (*fn)(t);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace accuracy
}  // namespace tf_ops

#endif  // TF_OPS_TOOLS_ACCURACY_THREAD_POOL_H_

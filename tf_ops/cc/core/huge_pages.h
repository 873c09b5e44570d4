// Asks Linux to back a freshly allocated large output buffer with transparent
// huge pages before the kernel first writes it.
//
// Why: TensorFlow's default CPU allocator hands large buffers straight back to
// the OS when freed, so every fresh 64 MiB output is new memory that faults in
// 4 KiB at a time (~16k page faults, ~40 ms here: more than computing GELU).
// With THP in "madvise" mode (the usual default) MADV_HUGEPAGE turns that into
// 32 faults of 2 MiB. The hint changes no data and no semantics; it is skipped
// for small buffers (which come from the heap and are reused) and where the
// system does not support it.

#ifndef TF_OPS_CC_HUGE_PAGES_H_
#define TF_OPS_CC_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tf_ops {

// Below this, buffers are typically carved from the malloc heap and reused
// while warm: no faults to save.
constexpr size_t kHugePageAdviceMinBytes = size_t{8} << 20;

inline void AdviseHugePages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceMinBytes) return;
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  // Only whole huge pages inside the buffer: the hint must not touch the
  // neighbouring memory of another allocation.
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  if (last > first) {
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_HUGE_PAGES_H_

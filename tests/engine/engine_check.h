// What the CPU engines' sanitizer tests share (tests/engine/*.cc): the
// check tally, each dtype's storage as raw elements with conversions to and
// from double, and heap buffers of an exact size (so that AddressSanitizer
// reports any access past either end). TF-free.

#ifndef TF_OPS_TESTS_ENGINE_ENGINE_CHECK_H_
#define TF_OPS_TESTS_ENGINE_ENGINE_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <memory>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/narrow_float.h"

namespace tf_ops {
namespace engine_check {

inline int failures = 0;
inline int checks = 0;

// Counts a check; prints the first 30 failures.
inline void Expect(bool ok, const char* what, const char* ctx, double got,
                   double want, int64_t at) {
  ++checks;
  if (ok) return;
  if (++failures <= 30) {
    std::printf("FAIL %s %s at %lld: got %.17g, want %.17g\n", ctx, what,
                static_cast<long long>(at), got, want);
  }
}

// Storage of each dtype as raw elements, with conversions to and from double;
// eps is the test's tolerance unit for it.
struct Store {
  Dtype dtype;
  const char* name;
  size_t size;
  double eps;  // a tolerance unit: a few roundings of the dtype

  void Put(void* p, int64_t i, double v) const {
    switch (dtype) {
      case Dtype::kHalf:
        static_cast<uint16_t*>(p)[i] =
            narrow_float::FloatToHalf(static_cast<float>(v));
        break;
      case Dtype::kBFloat16:
        static_cast<uint16_t*>(p)[i] =
            narrow_float::FloatToBFloat16(static_cast<float>(v));
        break;
      case Dtype::kFloat:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case Dtype::kDouble:
        static_cast<double*>(p)[i] = v;
        break;
    }
  }
  double Get(const void* p, int64_t i) const {
    switch (dtype) {
      case Dtype::kHalf:
        return narrow_float::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
      case Dtype::kBFloat16:
        return narrow_float::BFloat16ToFloat(
            static_cast<const uint16_t*>(p)[i]);
      case Dtype::kFloat:
        return static_cast<const float*>(p)[i];
      case Dtype::kDouble:
        return static_cast<const double*>(p)[i];
    }
    return 0.0;
  }
  // The compute type's (statistics, parameters) element size and access.
  bool wide() const { return dtype == Dtype::kDouble; }
  size_t stat_size() const { return wide() ? 8 : 4; }
  void PutStat(void* p, int64_t i, double v) const {
    if (wide()) {
      static_cast<double*>(p)[i] = v;
    } else {
      static_cast<float*>(p)[i] = static_cast<float>(v);
    }
  }
  double GetStat(const void* p, int64_t i) const {
    return wide() ? static_cast<const double*>(p)[i]
                  : static_cast<const float*>(p)[i];
  }
};

// A heap buffer of exactly `bytes` (none when 0: a null pointer).
inline std::unique_ptr<char[]> Buffer(size_t bytes) {
  return bytes == 0 ? nullptr : std::unique_ptr<char[]>(new char[bytes]);
}

}  // namespace engine_check
}  // namespace tf_ops

#endif  // TF_OPS_TESTS_ENGINE_ENGINE_CHECK_H_

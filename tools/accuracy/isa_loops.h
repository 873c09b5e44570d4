// A loop out[i] = fn(in[i]) compiled once per instruction set, the way the
// engine compiles its loops (activation_cpu.cc's TF_OPS_ISA_VARIANT: GCC's
// `target` and `flatten`, so that fn is inlined and vectorised for the
// target): how the accuracy sweep and the microbenchmark run fast_math.h's
// functions on their own, outside any activation. The target strings mirror
// activation_cpu.cc's.

#ifndef TF_OPS_TOOLS_ACCURACY_ISA_LOOPS_H_
#define TF_OPS_TOOLS_ACCURACY_ISA_LOOPS_H_

#include <cstdint>

#include "tf_ops/cc/core/cpu_isa.h"

namespace tf_ops {
namespace accuracy {

template <typename Fn>
__attribute__((flatten, noinline)) void LoopBaseline(Fn fn, const float* in,
                                                     float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);
}

#if defined(__x86_64__)
template <typename Fn>
__attribute__((target("avx2,fma,f16c,bmi2"), flatten, noinline)) void
LoopAvx2(Fn fn, const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);
}

template <typename Fn>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi2,"
                      "prefer-vector-width=512"),
               flatten, noinline)) void
LoopAvx512(Fn fn, const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);
}
#endif

// out[i] = fn(in[i]) with the loop compiled for `isa`.
template <typename Fn>
void ApplyOnIsa(CpuIsa isa, Fn fn, const float* in, float* out, int64_t n) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return LoopAvx512(fn, in, out, n);
    case CpuIsa::kAvx2:
      return LoopAvx2(fn, in, out, n);
#endif
    default:
      return LoopBaseline(fn, in, out, n);
  }
}

}  // namespace accuracy
}  // namespace tf_ops

#endif  // TF_OPS_TOOLS_ACCURACY_ISA_LOOPS_H_

// The CPU engine's loops, compiled once per instruction set (cpu_isa.h).
//
// Each loop reads a storage value, computes in float or double, and stores the
// result rounded once. It is a plain loop with no calls and no branches in the
// math (activation_math.h and fast_math.h use selects), which GCC vectorises.
// bfloat16, and half on the baseline path, are converted in the same loop by
// branch-free bit arithmetic (narrow_float.h); the AVX2 and AVX-512 paths
// convert half with F16C in blocks. Each instruction-set variant is a function with
// GCC's `target` attribute and `flatten`, so that everything it calls is
// inlined and compiled for that target, while the rest of the library stays
// at the baseline and runs on any CPU TensorFlow runs on.

#include "tf_ops/cc/elementwise_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/activation_math.h"
#include "tf_ops/cc/narrow_float.h"

namespace tf_ops {
namespace {

// How each storage type is read into the compute type and written back.
struct FloatStorage {
  using Stored = float;
  static float Load(float v) { return v; }
  static float Store(float v) { return v; }
};
struct DoubleStorage {
  using Stored = double;
  static double Load(double v) { return v; }
  static double Store(double v) { return v; }
};
struct HalfStorage {
  using Stored = uint16_t;
  static float Load(uint16_t v) { return narrow_float::HalfToFloat(v); }
  static uint16_t Store(float v) { return narrow_float::FloatToHalf(v); }
};
struct BFloat16Storage {
  using Stored = uint16_t;
  static float Load(uint16_t v) { return narrow_float::BFloat16ToFloat(v); }
  static uint16_t Store(float v) { return narrow_float::FloatToBFloat16(v); }
};

// The loops. Outputs may be the same buffers as inputs (TF forwards an input
// buffer as an output when it can), but only element for element: no loop has
// a dependence between iterations, which `ivdep` tells GCC, so that it
// vectorises without run-time overlap checks (with two outputs those checks
// fail for in-place buffers and the loop would run scalar).
template <typename Op, typename S>
void ForwardLoop(Op op, const void* x_raw, void* y_raw, int64_t begin,
                 int64_t end) {
  using Stored = typename S::Stored;
  const Stored* x = static_cast<const Stored*>(x_raw);
  Stored* y = static_cast<Stored*>(y_raw);
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) {
    y[i] = S::Store(ForwardOf(op, S::Load(x[i])));
  }
}

template <typename Op, typename S>
void BackwardLoop(Op op, const void* g_raw, const void* v_raw, void* dx_raw,
                  int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  const Stored* g = static_cast<const Stored*>(g_raw);
  const Stored* v = static_cast<const Stored*>(v_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) {
    dx[i] = S::Store(GradOf(op, S::Load(g[i]), S::Load(v[i])));
  }
}

// Both outputs of the grad-grad op, or (kDvOnly) d_v alone; d_g alone is
// BackwardLoop with u for g.
template <typename Op, typename S, bool kDvOnly>
void GradGradLoop(Op op, const void* u_raw, const void* g_raw,
                  const void* v_raw, void* d_g_raw, void* d_v_raw,
                  int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  const Stored* u = static_cast<const Stored*>(u_raw);
  const Stored* g = static_cast<const Stored*>(g_raw);
  const Stored* v = static_cast<const Stored*>(v_raw);
  Stored* d_g = static_cast<Stored*>(d_g_raw);
  Stored* d_v = static_cast<Stored*>(d_v_raw);
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) {
    const auto r = GradGradOf(op, S::Load(u[i]), S::Load(g[i]), S::Load(v[i]));
    if constexpr (!kDvOnly) d_g[i] = S::Store(r.d_gradients);
    d_v[i] = S::Store(r.d_v);
  }
}

#if defined(__x86_64__)
// Half <-> float with the F16C instructions (8 at a time; every AVX2 CPU has
// them), for the AVX2 and AVX-512 variants: the branch-free bit arithmetic of
// narrow_float.h vectorises too but costs ~20 instructions per element, which
// made half slower than float for cheap ops. Same rounding (nearest even),
// NaN, infinities and subnormals.
__attribute__((target("avx2,f16c"))) inline void HalfToFloatF16c(
    const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = narrow_float::HalfToFloat(in[i]);
}
__attribute__((target("avx2,f16c"))) inline void FloatToHalfF16c(
    const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = narrow_float::FloatToHalf(in[i]);
}

// Half through float blocks that stay in L1: convert in, run the float loop,
// convert out.
constexpr int64_t kHalfBlock = 512;

template <typename Op>
void ForwardHalfF16c(Op op, const void* x_raw, void* y_raw, int64_t begin,
                     int64_t end) {
  const uint16_t* x = static_cast<const uint16_t*>(x_raw);
  uint16_t* y = static_cast<uint16_t*>(y_raw);
  alignas(64) float buf[kHalfBlock];
  for (int64_t i = begin; i < end; i += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, end - i);
    HalfToFloatF16c(x + i, buf, m);
    ForwardLoop<Op, FloatStorage>(op, buf, buf, 0, m);
    FloatToHalfF16c(buf, y + i, m);
  }
}

template <typename Op>
void BackwardHalfF16c(Op op, const void* g_raw, const void* v_raw,
                      void* dx_raw, int64_t begin, int64_t end) {
  const uint16_t* g = static_cast<const uint16_t*>(g_raw);
  const uint16_t* v = static_cast<const uint16_t*>(v_raw);
  uint16_t* dx = static_cast<uint16_t*>(dx_raw);
  alignas(64) float gbuf[kHalfBlock];
  alignas(64) float vbuf[kHalfBlock];
  for (int64_t i = begin; i < end; i += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, end - i);
    HalfToFloatF16c(g + i, gbuf, m);
    HalfToFloatF16c(v + i, vbuf, m);
    BackwardLoop<Op, FloatStorage>(op, gbuf, vbuf, gbuf, 0, m);
    FloatToHalfF16c(gbuf, dx + i, m);
  }
}

template <typename Op, bool kDvOnly>
void GradGradHalfF16c(Op op, const void* u_raw, const void* g_raw,
                      const void* v_raw, void* d_g_raw, void* d_v_raw,
                      int64_t begin, int64_t end) {
  const uint16_t* u = static_cast<const uint16_t*>(u_raw);
  const uint16_t* g = static_cast<const uint16_t*>(g_raw);
  const uint16_t* v = static_cast<const uint16_t*>(v_raw);
  uint16_t* d_g = static_cast<uint16_t*>(d_g_raw);
  uint16_t* d_v = static_cast<uint16_t*>(d_v_raw);
  alignas(64) float ubuf[kHalfBlock];
  alignas(64) float gbuf[kHalfBlock];
  alignas(64) float vbuf[kHalfBlock];
  for (int64_t i = begin; i < end; i += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, end - i);
    HalfToFloatF16c(u + i, ubuf, m);
    HalfToFloatF16c(g + i, gbuf, m);
    HalfToFloatF16c(v + i, vbuf, m);
    GradGradLoop<Op, FloatStorage, kDvOnly>(op, ubuf, gbuf, vbuf, ubuf, gbuf,
                                            0, m);
    if constexpr (!kDvOnly) FloatToHalfF16c(ubuf, d_g + i, m);
    FloatToHalfF16c(gbuf, d_v + i, m);
  }
}
#endif  // __x86_64__

// An op whose attribute switches between formulas (Gelu's `approximate`)
// defines Specialize(fn), calling fn with the chosen formula as its own type,
// so that each loop holds one formula and vectorises. Other ops run as they are.
template <typename Op, typename Fn>
auto WithFixedFormula(const Op& op, Fn&& fn, int)
    -> decltype(op.Specialize(fn), void()) {
  op.Specialize(fn);
}
template <typename Op, typename Fn>
void WithFixedFormula(const Op& op, Fn&& fn, long) {
  fn(op);
}

// Calls fn with the storage policy of dtype.
template <typename Fn>
void WithStorage(Dtype dtype, Fn&& fn) {
  switch (dtype) {
    case Dtype::kHalf:
      return fn(HalfStorage());
    case Dtype::kBFloat16:
      return fn(BFloat16Storage());
    case Dtype::kFloat:
      return fn(FloatStorage());
    case Dtype::kDouble:
      return fn(DoubleStorage());
  }
}

// kF16c: the variant may use F16C for half (AVX2 and AVX-512 variants).
template <bool kF16c, typename Op>
void Forward(const Op& op, Dtype dtype, const void* x, void* y, int64_t begin,
             int64_t end) {
  WithFixedFormula(
      op,
      [&](auto fixed) {
#if defined(__x86_64__)
        if constexpr (kF16c) {
          if (dtype == Dtype::kHalf) {
            return ForwardHalfF16c(fixed, x, y, begin, end);
          }
        }
#endif
        WithStorage(dtype, [&](auto storage) {
          ForwardLoop<decltype(fixed), decltype(storage)>(fixed, x, y, begin,
                                                          end);
        });
      },
      0);
}

template <bool kF16c, typename Op>
void Backward(const Op& op, Dtype dtype, const void* g, const void* v,
              void* dx, int64_t begin, int64_t end) {
  WithFixedFormula(
      op,
      [&](auto fixed) {
#if defined(__x86_64__)
        if constexpr (kF16c) {
          if (dtype == Dtype::kHalf) {
            return BackwardHalfF16c(fixed, g, v, dx, begin, end);
          }
        }
#endif
        WithStorage(dtype, [&](auto storage) {
          BackwardLoop<decltype(fixed), decltype(storage)>(fixed, g, v, dx,
                                                           begin, end);
        });
      },
      0);
}

template <bool kF16c, typename Op>
void GradGrad(const Op& op, Dtype dtype, const void* u, const void* g,
              const void* v, void* d_g, void* d_v, int64_t begin,
              int64_t end) {
  if (d_v == nullptr) {  // d_g = u f'(v) alone: the grad op's loop
    if (d_g != nullptr) Backward<kF16c>(op, dtype, u, v, d_g, begin, end);
    return;
  }
  WithFixedFormula(
      op,
      [&](auto fixed) {
        auto run = [&](auto dv_only) {
          constexpr bool kDvOnly = decltype(dv_only)::value;
#if defined(__x86_64__)
          if constexpr (kF16c) {
            if (dtype == Dtype::kHalf) {
              return GradGradHalfF16c<decltype(fixed), kDvOnly>(
                  fixed, u, g, v, d_g, d_v, begin, end);
            }
          }
#endif
          WithStorage(dtype, [&](auto storage) {
            GradGradLoop<decltype(fixed), decltype(storage), kDvOnly>(
                fixed, u, g, v, d_g, d_v, begin, end);
          });
        };
        if (d_g == nullptr) {
          run(std::true_type());
        } else {
          run(std::false_type());
        }
      },
      0);
}

// One copy of Forward/Backward/GradGrad per instruction set. `flatten` inlines all
// they call, so the loops are compiled for the variant's target.
#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                              \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void Forward##Suffix(             \
      const Op& op, Dtype dtype, const void* x, void* y, int64_t begin,       \
      int64_t end) {                                                          \
    Forward<F16C>(op, dtype, x, y, begin, end);                               \
  }                                                                           \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void Backward##Suffix(            \
      const Op& op, Dtype dtype, const void* g, const void* v, void* dx,      \
      int64_t begin, int64_t end) {                                           \
    Backward<F16C>(op, dtype, g, v, dx, begin, end);                          \
  }                                                                           \
  template <typename Op>                                                      \
  TARGET __attribute__((flatten, noinline)) void GradGrad##Suffix(            \
      const Op& op, Dtype dtype, const void* u, const void* g, const void* v, \
      void* d_g, void* d_v, int64_t begin, int64_t end) {                     \
    GradGrad<F16C>(op, dtype, u, g, v, d_g, d_v, begin, end);                 \
  }

TF_OPS_ISA_VARIANT(Baseline, , false)
#if defined(__x86_64__)
TF_OPS_ISA_VARIANT(Avx2, __attribute__((target("avx2,fma,f16c,bmi2"))), true)
TF_OPS_ISA_VARIANT(Avx512,
                   __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,"
                                         "avx2,fma,f16c,bmi2,"
                                         "prefer-vector-width=512"))),
                   true)
#else
#define ForwardAvx2 ForwardBaseline
#define BackwardAvx2 BackwardBaseline
#define ForwardAvx512 ForwardBaseline
#define BackwardAvx512 BackwardBaseline
#define GradGradAvx2 GradGradBaseline
#define GradGradAvx512 GradGradBaseline
#endif
#undef TF_OPS_ISA_VARIANT

}  // namespace

template <typename Op>
void CpuForward(const Op& op, Dtype dtype, const void* x, void* y,
                int64_t begin, int64_t end) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return ForwardAvx512(op, dtype, x, y, begin, end);
    case CpuIsa::kAvx2:
      return ForwardAvx2(op, dtype, x, y, begin, end);
    case CpuIsa::kBaseline:
      return ForwardBaseline(op, dtype, x, y, begin, end);
  }
}

template <typename Op>
void CpuBackward(const Op& op, Dtype dtype, const void* g, const void* v,
                 void* dx, int64_t begin, int64_t end) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return BackwardAvx512(op, dtype, g, v, dx, begin, end);
    case CpuIsa::kAvx2:
      return BackwardAvx2(op, dtype, g, v, dx, begin, end);
    case CpuIsa::kBaseline:
      return BackwardBaseline(op, dtype, g, v, dx, begin, end);
  }
}

template <typename Op>
void CpuGradGrad(const Op& op, Dtype dtype, const void* u, const void* g,
                 const void* v, void* d_g, void* d_v, int64_t begin,
                 int64_t end) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return GradGradAvx512(op, dtype, u, g, v, d_g, d_v, begin, end);
    case CpuIsa::kAvx2:
      return GradGradAvx2(op, dtype, u, g, v, d_g, d_v, begin, end);
    case CpuIsa::kBaseline:
      return GradGradBaseline(op, dtype, u, g, v, d_g, d_v, begin, end);
  }
}

#define TF_OPS_INSTANTIATE_CPU(Name)                                          \
  template void CpuForward<Name>(const Name&, Dtype, const void*, void*,      \
                                 int64_t, int64_t);                           \
  template void CpuBackward<Name>(const Name&, Dtype, const void*,            \
                                  const void*, void*, int64_t, int64_t);      \
  template void CpuGradGrad<Name>(const Name&, Dtype, const void*,            \
                                  const void*, const void*, void*, void*,     \
                                  int64_t, int64_t);
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_INSTANTIATE_CPU)
#undef TF_OPS_INSTANTIATE_CPU

}  // namespace tf_ops

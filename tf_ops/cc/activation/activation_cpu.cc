// The CPU engine's loops, compiled once per instruction set (cpu_isa.h).
//
// Each loop reads a storage value, computes in float or double, and stores the
// result rounded once. It is a plain loop with no calls and no branches in the
// math (activation_math.h and fast_math.h use selects), which GCC vectorises.
// Half goes through float blocks that stay in L1: a block is converted to
// float (F16C on the AVX2 and AVX-512 paths, narrow_float.h's branch-free bit
// arithmetic on the baseline path), the float loop runs over it, and the
// results are converted back. bfloat16 is converted inside the loop (a shift
// in, ~10 instructions per 8 values out): blocks made half faster but
// bfloat16 no faster overall (slower in the grad ops), so only half uses them
// (docs/benchmarks.md, "Measurements behind code choices").
// Each instruction-set variant is a function with
// GCC's `target` attribute and `flatten`, so that everything it calls is
// inlined and compiled for that target, while the rest of the library stays
// at the baseline and runs on any CPU TensorFlow runs on.

#include "tf_ops/cc/activation/activation_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/core/float_blocks.h"
#include "tf_ops/cc/core/narrow_float.h"

namespace tf_ops {
namespace {

using cpu_storage::WithFixedFormula;

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

// Block conversions between a 16-bit storage type and float (BitBlocks,
// HalfF16cBlocks): core/float_blocks.h. The bit arithmetic vectorises too
// but costs ~20 instructions per half element, which made half slower than
// float for cheap ops; hence F16C where the variant has it.

// 16-bit values through float blocks of this many elements (2 KiB each: up
// to three of them stay in L1).
constexpr int64_t kBlock = 512;
using FloatS = cpu_storage::Float;

template <typename Op, typename B>
void ForwardBlocks(Op op, const void* x_raw, void* y_raw, int64_t begin,
                   int64_t end) {
  const uint16_t* x = static_cast<const uint16_t*>(x_raw);
  uint16_t* y = static_cast<uint16_t*>(y_raw);
  alignas(64) float buf[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t m = std::min(kBlock, end - i);
    B::ToFloat(x + i, buf, m);
    ForwardLoop<Op, FloatS>(op, buf, buf, 0, m);
    B::FromFloat(buf, y + i, m);
  }
}

template <typename Op, typename B>
void BackwardBlocks(Op op, const void* g_raw, const void* v_raw, void* dx_raw,
                    int64_t begin, int64_t end) {
  const uint16_t* g = static_cast<const uint16_t*>(g_raw);
  const uint16_t* v = static_cast<const uint16_t*>(v_raw);
  uint16_t* dx = static_cast<uint16_t*>(dx_raw);
  alignas(64) float gbuf[kBlock];
  alignas(64) float vbuf[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t m = std::min(kBlock, end - i);
    B::ToFloat(g + i, gbuf, m);
    B::ToFloat(v + i, vbuf, m);
    BackwardLoop<Op, FloatS>(op, gbuf, vbuf, gbuf, 0, m);
    B::FromFloat(gbuf, dx + i, m);
  }
}

template <typename Op, typename B, bool kDvOnly>
void GradGradBlocks(Op op, const void* u_raw, const void* g_raw,
                    const void* v_raw, void* d_g_raw, void* d_v_raw,
                    int64_t begin, int64_t end) {
  const uint16_t* u = static_cast<const uint16_t*>(u_raw);
  const uint16_t* g = static_cast<const uint16_t*>(g_raw);
  const uint16_t* v = static_cast<const uint16_t*>(v_raw);
  uint16_t* d_g = static_cast<uint16_t*>(d_g_raw);
  uint16_t* d_v = static_cast<uint16_t*>(d_v_raw);
  alignas(64) float ubuf[kBlock];
  alignas(64) float gbuf[kBlock];
  alignas(64) float vbuf[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t m = std::min(kBlock, end - i);
    B::ToFloat(u + i, ubuf, m);
    B::ToFloat(g + i, gbuf, m);
    B::ToFloat(v + i, vbuf, m);
    GradGradLoop<Op, FloatS, kDvOnly>(op, ubuf, gbuf, vbuf, ubuf, gbuf, 0, m);
    if constexpr (!kDvOnly) B::FromFloat(ubuf, d_g + i, m);
    B::FromFloat(gbuf, d_v + i, m);
  }
}

// Calls fn with the storage policy of a float or double dtype, or with the
// block conversions of a 16-bit one: fn(storage, std::false_type) or
// fn(blocks, std::true_type). kF16c: the variant may use F16C (AVX2 and
// AVX-512 variants).
template <bool kF16c, typename Fn>
void WithStorageOrBlocks(Dtype dtype, Fn&& fn) {
  switch (dtype) {
    case Dtype::kHalf:
#if defined(__x86_64__)
      if constexpr (kF16c) return fn(HalfF16cBlocks(), std::true_type());
#endif
      return fn(BitBlocks<cpu_storage::Half>(), std::true_type());
    case Dtype::kBFloat16:
      return fn(cpu_storage::BFloat16(), std::false_type());
    case Dtype::kFloat:
      return fn(cpu_storage::Float(), std::false_type());
    case Dtype::kDouble:
      return fn(cpu_storage::Double(), std::false_type());
  }
}

template <bool kF16c, typename Op>
void Forward(const Op& op, Dtype dtype, const void* x, void* y, int64_t begin,
             int64_t end) {
  WithFixedFormula(
      op,
      [&](auto fixed) {
        WithStorageOrBlocks<kF16c>(dtype, [&](auto s, auto blocked) {
          using F = decltype(fixed);
          using S = decltype(s);
          if constexpr (decltype(blocked)::value) {
            ForwardBlocks<F, S>(fixed, x, y, begin, end);
          } else {
            ForwardLoop<F, S>(fixed, x, y, begin, end);
          }
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
        WithStorageOrBlocks<kF16c>(dtype, [&](auto s, auto blocked) {
          using F = decltype(fixed);
          using S = decltype(s);
          if constexpr (decltype(blocked)::value) {
            BackwardBlocks<F, S>(fixed, g, v, dx, begin, end);
          } else {
            BackwardLoop<F, S>(fixed, g, v, dx, begin, end);
          }
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
          WithStorageOrBlocks<kF16c>(dtype, [&](auto s, auto blocked) {
            using F = decltype(fixed);
            using S = decltype(s);
            if constexpr (decltype(blocked)::value) {
              GradGradBlocks<F, S, kDvOnly>(fixed, u, g, v, d_g, d_v, begin,
                                            end);
            } else {
              GradGradLoop<F, S, kDvOnly>(fixed, u, g, v, d_g, d_v, begin,
                                          end);
            }
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
  TF_OPS_ISA_ENTRY(TARGET) void Forward##Suffix(             \
      const Op& op, Dtype dtype, const void* x, void* y, int64_t begin,       \
      int64_t end) {                                                          \
    Forward<F16C>(op, dtype, x, y, begin, end);                               \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void Backward##Suffix(            \
      const Op& op, Dtype dtype, const void* g, const void* v, void* dx,      \
      int64_t begin, int64_t end) {                                           \
    Backward<F16C>(op, dtype, g, v, dx, begin, end);                          \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void GradGrad##Suffix(            \
      const Op& op, Dtype dtype, const void* u, const void* g, const void* v, \
      void* d_g, void* d_v, int64_t begin, int64_t end) {                     \
    GradGrad<F16C>(op, dtype, u, g, v, d_g, d_v, begin, end);                 \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

template <typename Op>
void CpuForward(const Op& op, Dtype dtype, const void* x, void* y,
                int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Forward, op, dtype, x, y, begin, end)
}

template <typename Op>
void CpuBackward(const Op& op, Dtype dtype, const void* g, const void* v,
                 void* dx, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Backward, op, dtype, g, v, dx, begin, end)
}

template <typename Op>
void CpuGradGrad(const Op& op, Dtype dtype, const void* u, const void* g,
                 const void* v, void* d_g, void* d_v, int64_t begin,
                 int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GradGrad, op, dtype, u, g, v, d_g, d_v, begin, end)
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

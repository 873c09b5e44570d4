// The rotary embedding's CUDA kernels (rotary_gpu.h), from rotary_math.h.
//
// Thread per pair (j, j + D/2) of one position, grid-stride: where the
// feature axis is last (inner = 1) consecutive threads take consecutive j
// of a row, so a warp reads two contiguous runs; otherwise consecutive
// threads take consecutive elements after the feature axis. Each thread
// reads its two elements before writing them and no two threads share one:
// in place is safe, and the result does not depend on the launch shape.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/rotary/rotary_layout.h"
#include "tf_ops/cc/rotary/rotary_math.h"
#include "tf_ops/cu/core/launch_common.cuh"
#include "tf_ops/cu/rotary/rotary_gpu.h"

namespace tf_ops {
namespace rotary {
namespace {

using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;

__global__ void InverseFrequencyKernel(RopeParams params, int64_t features,
                                       double* inverse) {
  for (int64_t j = GlobalThread(); j < features / 2; j += GlobalThreads()) {
    inverse[j] = InverseFrequency(params, features, j);
  }
}

template <typename T, bool kInnerOne>
__global__ void RotaryKernel(RotaryLayout l,
                             const ComputeType<T>* positions,
                             const double* inverse, ComputeType<T> magnitude,
                             bool transpose, const T* x, T* y) {
  using C = ComputeType<T>;
  const int64_t half = l.half();
  const int64_t inner = kInnerOne ? 1 : l.inner;
  const int64_t pairs = l.outer * half * inner;
  for (int64_t e = GlobalThread(); e < pairs; e += GlobalThreads()) {
    const int64_t i = kInnerOne ? 0 : e % inner;
    const int64_t t = kInnerOne ? e : e / inner;
    const int64_t j = t % half, o = t / half;
    const C position = PositionAt(l, positions, l.PositionIndex(o * inner + i));
    const Rotation<C> r = RotationOf(
        Angle(position, static_cast<C>(inverse[j])), magnitude, transpose);
    const int64_t first = (o * l.features + j) * inner + i;
    const int64_t second = first + half * inner;
    const RotatedPair<C> p = Rotate(r, static_cast<C>(x[first]),
                                    static_cast<C>(x[second]));
    y[first] = static_cast<T>(p.first);
    y[second] = static_cast<T>(p.second);
  }
}

}  // namespace

int64_t RotaryGpuScratchBytes(const RotaryLayout& layout) {
  return layout.half() > 0 ? layout.half() * 8 : 8;
}

const char* LaunchRotary(Dtype dtype, const RotaryLayout& layout,
                         const RopeParams& params, bool transpose,
                         const void* positions, const void* x, void* y,
                         void* scratch, void* stream_raw) {
  const int64_t pairs = layout.points() * layout.half();
  if (pairs == 0) return nullptr;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_raw);
  double* inverse = static_cast<double*>(scratch);
  TF_OPS_LAUNCH(gpu::BlocksFor(layout.half()), kThreadsPerBlock, 0, stream,
                InverseFrequencyKernel)(params, layout.features, inverse);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const auto run = [&](auto kernel) {
      TF_OPS_LAUNCH(gpu::BlocksFor(pairs), kThreadsPerBlock, 0, stream, kernel)(
          layout, static_cast<const C*>(positions), inverse,
          static_cast<C>(Magnitude(params)), transpose,
          static_cast<const T*>(x), static_cast<T*>(y));
    };
    if (layout.inner == 1) {
      run(RotaryKernel<T, true>);
    } else {
      run(RotaryKernel<T, false>);
    }
    return LastError();
  });
}

}  // namespace rotary
}  // namespace tf_ops

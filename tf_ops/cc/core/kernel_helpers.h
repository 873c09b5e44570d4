// What the families' OpKernels share between checking their inputs and
// calling their engines: the device tags and dtype names, the CPU pool's
// schedule, the CUDA stream, and the few steps every kernel repeats (an
// input-shape check, an output that may take over an input's buffer, scratch
// memory for partial sums, a launcher's error as a status). TF-dependent;
// the engines never include it.

#ifndef TF_OPS_CC_CORE_KERNEL_HELPERS_H_
#define TF_OPS_CC_CORE_KERNEL_HELPERS_H_

#include <cstdint>
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/threadpool.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/huge_pages.h"
#include "tf_ops/cc/core/parallel_for.h"

#if TF_OPS_WITH_CUDA
#include "tensorflow/core/framework/device_base.h"
#include "xla/stream_executor/stream.h"
#endif

namespace tf_ops {

// Device tags for the kernel templates.
struct CpuDevice {};
struct GpuDevice {};

// The engines' name for each TensorFlow dtype (same bit layouts).
template <typename T>
constexpr Dtype DtypeOf();
template <>
constexpr Dtype DtypeOf<Eigen::half>() { return Dtype::kHalf; }
template <>
constexpr Dtype DtypeOf<Eigen::bfloat16>() { return Dtype::kBFloat16; }
template <>
constexpr Dtype DtypeOf<float>() { return Dtype::kFloat; }
template <>
constexpr Dtype DtypeOf<double>() { return Dtype::kDouble; }

// TensorFlow 2.20 added SchedulingParams::Adaptive and deprecated the
// constructor that 2.19 only has. Detected rather than version-tested: the
// 2.20+ headers define no TF_MINOR_VERSION (the build system must).
template <typename Params, typename = void>
struct HasAdaptiveSchedule : std::false_type {};
template <typename Params>
struct HasAdaptiveSchedule<
    Params, std::void_t<decltype(Params::Adaptive(int64_t{1}))>>
    : std::true_type {};

template <typename Params>
Params AdaptiveSchedule(int64_t cost_per_unit) {
  if constexpr (HasAdaptiveSchedule<Params>::value) {
    return Params::Adaptive(cost_per_unit);
  } else {
    return Params(tsl::thread::ThreadPool::SchedulingStrategy::kAdaptive,
                  cost_per_unit, std::nullopt);
  }
}

// fn(begin, end) over [0, total) on TensorFlow's intra-op pool, in shards
// sized by `cost_per_unit` (rough cycles per unit): small totals stay on the
// calling thread.
inline void CpuParallelFor(tensorflow::OpKernelContext* ctx, int64_t total,
                           int64_t cost_per_unit,
                           const std::function<void(int64_t, int64_t)>& fn) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
      total,
      AdaptiveSchedule<tsl::thread::ThreadPool::SchedulingParams>(
          cost_per_unit),
      fn);
}

// TensorFlow's intra-op pool as the engines' ParallelFor (parallel_for.h), for
// the engines that split their own work: nothing runs for an empty range, and
// a cost below one cycle counts as one.
inline ParallelFor CpuParallelForOf(tensorflow::OpKernelContext* ctx) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t total, int64_t cost_per_unit,
                const std::function<void(int64_t, int64_t)>& fn) {
    if (total <= 0) return;
    pool->ParallelFor(
        total,
        AdaptiveSchedule<tsl::thread::ThreadPool::SchedulingParams>(
            std::max<int64_t>(1, cost_per_unit)),
        fn);
  };
}

// Huge pages (huge_pages.h) for an output of `bytes` at `out` unless it is
// one of `inputs` forwarded (TensorFlow gave the kernel an input's buffer,
// already faulted in): only a fresh buffer gains from the hint.
inline void AdviseFreshOutput(void* out, size_t bytes,
                              std::initializer_list<const void*> inputs) {
  for (const void* in : inputs) {
    if (in == out) return;
  }
  AdviseHugePages(out, bytes);
}

#if TF_OPS_WITH_CUDA
// The raw cudaStream_t behind the op's stream executor stream.
inline void* GpuStream(tensorflow::OpKernelContext* ctx) {
  return ctx->op_device_context()->stream()->platform_specific_handle().stream;
}
#endif  // TF_OPS_WITH_CUDA

// A CUDA launcher's answer (null: launched) as the op's status.
inline absl::Status LaunchStatus(const std::string& op,
                                 const char* cuda_error) {
  if (cuda_error == nullptr) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, ": CUDA kernel launch failed: ", cuda_error));
}

// Two inputs that must have one shape (a gradient and what it is the
// gradient of, a residual and x); the message names both and their shapes.
// The shape functions say the same at graph build where shapes are known.
inline absl::Status RequireSameShape(const std::string& op, const char* a_name,
                                     const tensorflow::TensorShape& a,
                                     const char* b_name,
                                     const tensorflow::TensorShape& b) {
  if (a == b) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", a_name, " and ", b_name, " must have the same shape, got ",
      a_name, " ", a.DebugString(), " and ", b_name, " ", b.DebugString()));
}

// Output `index` of `shape`, in the buffer of one of `inputs` where
// TensorFlow allows it (the input has that shape and dtype and nothing else
// holds it), else a fresh buffer, which on the CPU is hinted to huge pages
// when large (huge_pages.h: a fresh 32 MiB output otherwise faults in 8192
// times). The engine must then write each element only after its last read
// of the inputs it may share.
template <typename Device>
absl::Status ReuseOrAllocateOutput(tensorflow::OpKernelContext* ctx,
                                   absl::Span<const int> inputs, int index,
                                   const tensorflow::TensorShape& shape,
                                   tensorflow::Tensor** out) {
  TF_RETURN_IF_ERROR(
      ctx->forward_input_or_allocate_output(inputs, index, shape, out));
  if constexpr (std::is_same_v<Device, CpuDevice>) {
    const void* data = (*out)->tensor_data().data();
    for (int i : inputs) {
      if (ctx->input(i).tensor_data().data() == data) return absl::OkStatus();
    }
    AdviseHugePages(const_cast<void*>(data), (*out)->TotalBytes());
  }
  return absl::OkStatus();
}

// Scratch memory of at least `bytes`, 8-byte aligned, for an engine's
// partial sums; `holder` keeps it alive (on a GPU, TensorFlow's allocator
// orders its release after the op's stream has used it).
inline absl::StatusOr<void*> AllocateScratch(tensorflow::OpKernelContext* ctx,
                                             int64_t bytes,
                                             tensorflow::Tensor* holder) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_DOUBLE,
      tensorflow::TensorShape({(bytes + 7) / 8}), holder));
  return const_cast<char*>(holder->tensor_data().data());
}

}  // namespace tf_ops

// The one kernel-registration idiom of every family: REGISTER(DEV, TAG, T,
// ...) once for each of the four dtypes, on the device this translation unit
// is compiled for. Each *_kernels.cc is compiled twice:
//   TF_OPS_WITH_CUDA=0: DEV = DEVICE_CPU, TAG = CpuDevice, into _tf_ops.so;
//   TF_OPS_WITH_CUDA=1: DEV = DEVICE_GPU, TAG = GpuDevice, into
//                       _tf_ops_gpu.so, which the loader loads only where
//                       the driver can run it.
// A family writes one macro REGISTER(DEV, TAG, T, ...) with its ops'
// REGISTER_KERNEL_BUILDERs for one dtype, and ends its file with
//   TF_OPS_REGISTER_KERNELS(REGISTER)
// or, per entry of a list (each activation), TF_OPS_REGISTER_KERNELS(REGISTER,
// Act): the arguments after REGISTER reach it after T.
#if TF_OPS_WITH_CUDA
#define TF_OPS_KERNEL_DEVICE ::tensorflow::DEVICE_GPU
#define TF_OPS_KERNEL_TAG ::tf_ops::GpuDevice
#else
#define TF_OPS_KERNEL_DEVICE ::tensorflow::DEVICE_CPU
#define TF_OPS_KERNEL_TAG ::tf_ops::CpuDevice
#endif
#define TF_OPS_REGISTER_KERNELS(REGISTER, ...)                              \
  REGISTER(TF_OPS_KERNEL_DEVICE, TF_OPS_KERNEL_TAG, Eigen::half, __VA_ARGS__) \
  REGISTER(TF_OPS_KERNEL_DEVICE, TF_OPS_KERNEL_TAG, Eigen::bfloat16,          \
           __VA_ARGS__)                                                       \
  REGISTER(TF_OPS_KERNEL_DEVICE, TF_OPS_KERNEL_TAG, float, __VA_ARGS__)       \
  REGISTER(TF_OPS_KERNEL_DEVICE, TF_OPS_KERNEL_TAG, double, __VA_ARGS__)

#endif  // TF_OPS_CC_CORE_KERNEL_HELPERS_H_

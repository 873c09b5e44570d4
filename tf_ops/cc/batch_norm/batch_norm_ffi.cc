// The XLA FFI handlers of the batch-norm family's training ops: what the
// custom calls that batch_norm_xla.cc emits under jit_compile run. Compiled
// once per library, like the kernels: into _tf_ops.so (TF_OPS_WITH_CUDA=0) as
// the "Host" handlers over the CPU engine (batch_norm_cpu.h), and into
// _tf_ops_gpu.so (TF_OPS_WITH_CUDA=1) as the "CUDA" handlers over the CUDA
// engine. Each is registered in XLA's FFI registry when its library is
// loaded (core/xla_ffi.h; core/xla_custom_call.h says how the lowering finds
// it).
//
// The calls (targets kBatchNormTrainingTarget, kBatchNormTrainingGradTarget),
// the ops' inputs and outputs plus a scratch result:
//   training: (x, scale, offset) -> (y, batch_mean, batch_variance, scratch)
//   grad:     (y_backprop, x, scale, offset, batch_mean, batch_variance,
//              mean_backprop, variance_backprop)
//             -> (x_backprop, scale_backprop, offset_backprop, scratch)
// with the ops' attributes (epsilon, axis, activation, alpha, beta,
// approximate), read and checked by the same ReadBatchNormAttrs as the
// kernels'. scratch is a u8 result of the engine's partial sums plus
// kScratchAlign bytes on the Host; the CUDA handler takes its scratch from
// the FFI's allocator and its scratch result is empty. The lowering checked
// the shapes; the handlers check them again with the same rules
// (batch_norm_checks.h), as they rebuild the layout from the buffers'
// dimensions. The lowering emits no call for an empty x.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/batch_norm/batch_norm_attrs.h"
#include "tf_ops/cc/batch_norm/batch_norm_checks.h"
#include "tf_ops/cc/batch_norm/batch_norm_ffi.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/xla_ffi.h"
#include "xla/ffi/api/ffi.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/batch_norm/batch_norm_gpu.h"
#else
#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"
#endif

namespace tf_ops {
namespace batch_norm {
namespace {

namespace ffi = xla::ffi;

using Phase = BatchNormPhase;

// The attributes, x's layout (every input's shape checked) and x's Dtype.
template <Phase kPhase>
absl::Status Prepare(const ffi::Dictionary& dict,
                     const std::vector<ffi::AnyBuffer>& inputs,
                     BatchNormAttrs* attrs, BatchNormLayout* layout,
                     Dtype* dtype) {
  const std::string op = BatchNormOpName(kPhase);
  const FfiAttrReader reader(dict);
  TF_RETURN_IF_ERROR(ReadBatchNormAttrs(&reader, op, attrs));
  int axis = 0;
  TF_RETURN_IF_ERROR(BatchNormLayoutOf(
      kPhase, attrs->axis,
      [&](int i) {
        tensorflow::TensorShape shape;
        for (int64_t d : FfiDims(inputs[i])) shape.AddDim(d);
        return shape;
      },
      layout, &axis));
  const ffi::AnyBuffer& x = inputs[BatchNormInputsOf(kPhase).x];
  if (!FfiDtype(x.element_type(), dtype)) {
    return absl::InvalidArgumentError(op + ": unsupported dtype");
  }
  if (layout->count() * layout->channels == 0) {
    return absl::InvalidArgumentError(op + ": empty x reached the handler");
  }
  return absl::OkStatus();
}

// The bindings' common part: the buffers and all attributes, in the order of
// the handlers' parameters; each platform appends its context.
auto TrainingBinding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // scale
      .Arg<ffi::AnyBuffer>()  // offset
      .Ret<ffi::AnyBuffer>()  // y
      .Ret<ffi::AnyBuffer>()  // batch_mean
      .Ret<ffi::AnyBuffer>()  // batch_variance
      .Ret<ffi::AnyBuffer>()  // scratch (Host), empty (CUDA)
      .Attrs<ffi::Dictionary>();
}

auto GradBinding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::AnyBuffer>()  // y_backprop
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // scale
      .Arg<ffi::AnyBuffer>()  // offset
      .Arg<ffi::AnyBuffer>()  // batch_mean
      .Arg<ffi::AnyBuffer>()  // batch_variance
      .Arg<ffi::AnyBuffer>()  // mean_backprop
      .Arg<ffi::AnyBuffer>()  // variance_backprop
      .Ret<ffi::AnyBuffer>()  // x_backprop
      .Ret<ffi::AnyBuffer>()  // scale_backprop
      .Ret<ffi::AnyBuffer>()  // offset_backprop
      .Ret<ffi::AnyBuffer>()  // scratch (Host), empty (CUDA)
      .Attrs<ffi::Dictionary>();
}

#if TF_OPS_WITH_CUDA

// The engine's scratch from the FFI's allocator.
ffi::Error Scratch(Phase phase, const BatchNormLayout& layout,
                   ffi::ScratchAllocator& allocator, double** out) {
  void* p = nullptr;
  ffi::Error error =
      FfiAllocate(allocator, BatchNormGpuScratchDoubles(layout) * 8,
                  BatchNormOpName(phase), &p);
  *out = static_cast<double*>(p);
  return error;
}

ffi::Error TrainingCuda(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                        ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> mean,
                        ffi::Result<ffi::AnyBuffer> variance,
                        ffi::Result<ffi::AnyBuffer> /*scratch*/,
                        ffi::Dictionary dict, void* stream,
                        ffi::ScratchAllocator allocator) {
  BatchNormAttrs attrs;
  BatchNormLayout layout;
  Dtype dtype = Dtype::kFloat;  // set by Prepare
  ffi::Error error = FfiErrorOf(Prepare<Phase::kTraining>(
      dict, {x, scale, offset}, &attrs, &layout, &dtype));
  if (error.failure()) return error;
  double* scratch = nullptr;
  error = Scratch(Phase::kTraining, layout, allocator, &scratch);
  if (error.failure()) return error;
  return FfiLaunchError(LaunchBatchNormTraining(
      attrs.activation, dtype, x.untyped_data(), scale.untyped_data(),
      offset.untyped_data(), attrs.epsilon, y->untyped_data(),
      mean->untyped_data(), variance->untyped_data(), layout, scratch,
      stream));
}

ffi::Error GradCuda(ffi::AnyBuffer dy, ffi::AnyBuffer x, ffi::AnyBuffer scale,
                    ffi::AnyBuffer offset, ffi::AnyBuffer mean,
                    ffi::AnyBuffer variance, ffi::AnyBuffer d_mean,
                    ffi::AnyBuffer d_variance, ffi::Result<ffi::AnyBuffer> dx,
                    ffi::Result<ffi::AnyBuffer> dscale,
                    ffi::Result<ffi::AnyBuffer> doffset,
                    ffi::Result<ffi::AnyBuffer> /*scratch*/,
                    ffi::Dictionary dict, void* stream,
                    ffi::ScratchAllocator allocator) {
  BatchNormAttrs attrs;
  BatchNormLayout layout;
  Dtype dtype = Dtype::kFloat;  // set by Prepare
  ffi::Error error = FfiErrorOf(Prepare<Phase::kTrainingGrad>(
      dict, {dy, x, scale, offset, mean, variance, d_mean, d_variance},
      &attrs, &layout, &dtype));
  if (error.failure()) return error;
  double* scratch = nullptr;
  error = Scratch(Phase::kTrainingGrad, layout, allocator, &scratch);
  if (error.failure()) return error;
  return FfiLaunchError(LaunchBatchNormTrainingGrad(
      attrs.activation, dtype, dy.untyped_data(), x.untyped_data(),
      scale.untyped_data(), offset.untyped_data(), mean.untyped_data(),
      variance.untyped_data(), d_mean.untyped_data(),
      d_variance.untyped_data(), attrs.epsilon, dx->untyped_data(),
      dscale->untyped_data(), doffset->untyped_data(), layout, scratch,
      stream));
}

XLA_FFI_DEFINE_HANDLER(kTraining, TrainingCuda,
                       TrainingBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
XLA_FFI_DEFINE_HANDLER(kTrainingGrad, GradCuda,
                       GradBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
constexpr char kPlatform[] = "CUDA";

#else  // !TF_OPS_WITH_CUDA

// The engine's scratch in the scratch result.
ffi::Error Scratch(Phase phase, const BatchNormLayout& layout,
                   ffi::Result<ffi::AnyBuffer>& result, double** out) {
  *out = static_cast<double*>(FfiAlignedScratch(
      result, BatchNormScratchDoubles(layout) * 8, kScratchAlign));
  if (*out != nullptr) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(BatchNormOpName(phase)) +
                                     ": the scratch result is too small");
}

ffi::Error TrainingHost(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                        ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> mean,
                        ffi::Result<ffi::AnyBuffer> variance,
                        ffi::Result<ffi::AnyBuffer> scratch,
                        ffi::Dictionary dict, ffi::ThreadPool pool) {
  BatchNormAttrs attrs;
  BatchNormLayout layout;
  Dtype dtype = Dtype::kFloat;  // set by Prepare
  ffi::Error error = FfiErrorOf(Prepare<Phase::kTraining>(
      dict, {x, scale, offset}, &attrs, &layout, &dtype));
  if (error.failure()) return error;
  double* sp = nullptr;
  error = Scratch(Phase::kTraining, layout, scratch, &sp);
  if (error.failure()) return error;
  CpuBatchNormTraining(attrs.activation, dtype, x.untyped_data(),
                       scale.untyped_data(), offset.untyped_data(),
                       attrs.epsilon, y->untyped_data(), mean->untyped_data(),
                       variance->untyped_data(), layout, sp,
                       XlaFfiParallelForOf(pool));
  return ffi::Error::Success();
}

ffi::Error GradHost(ffi::AnyBuffer dy, ffi::AnyBuffer x, ffi::AnyBuffer scale,
                    ffi::AnyBuffer offset, ffi::AnyBuffer mean,
                    ffi::AnyBuffer variance, ffi::AnyBuffer d_mean,
                    ffi::AnyBuffer d_variance, ffi::Result<ffi::AnyBuffer> dx,
                    ffi::Result<ffi::AnyBuffer> dscale,
                    ffi::Result<ffi::AnyBuffer> doffset,
                    ffi::Result<ffi::AnyBuffer> scratch, ffi::Dictionary dict,
                    ffi::ThreadPool pool) {
  BatchNormAttrs attrs;
  BatchNormLayout layout;
  Dtype dtype = Dtype::kFloat;  // set by Prepare
  ffi::Error error = FfiErrorOf(Prepare<Phase::kTrainingGrad>(
      dict, {dy, x, scale, offset, mean, variance, d_mean, d_variance},
      &attrs, &layout, &dtype));
  if (error.failure()) return error;
  double* sp = nullptr;
  error = Scratch(Phase::kTrainingGrad, layout, scratch, &sp);
  if (error.failure()) return error;
  CpuBatchNormTrainingGrad(
      attrs.activation, dtype, dy.untyped_data(), x.untyped_data(),
      scale.untyped_data(), offset.untyped_data(), mean.untyped_data(),
      variance.untyped_data(), d_mean.untyped_data(),
      d_variance.untyped_data(), attrs.epsilon, dx->untyped_data(),
      dscale->untyped_data(), doffset->untyped_data(), layout, sp,
      XlaFfiParallelForOf(pool));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kTraining, TrainingHost,
                       TrainingBinding().Ctx<ffi::ThreadPool>());
XLA_FFI_DEFINE_HANDLER(kTrainingGrad, GradHost,
                       GradBinding().Ctx<ffi::ThreadPool>());
constexpr char kPlatform[] = "Host";

#endif  // TF_OPS_WITH_CUDA

TF_OPS_REGISTER_XLA_FFI_HANDLER(kBatchNormTrainingTarget, kPlatform,
                                kTraining);
TF_OPS_REGISTER_XLA_FFI_HANDLER(kBatchNormTrainingGradTarget, kPlatform,
                                kTrainingGrad);

}  // namespace
}  // namespace batch_norm
}  // namespace tf_ops

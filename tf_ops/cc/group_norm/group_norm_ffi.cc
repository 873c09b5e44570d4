// The XLA FFI handlers of the group-norm family: what the custom calls that
// group_norm_xla.cc emits under jit_compile run. Compiled once per library,
// like the kernels: into _tf_ops.so (TF_OPS_WITH_CUDA=0) as the "Host"
// handlers over the CPU engine (group_norm_cpu.h), and into _tf_ops_gpu.so
// (TF_OPS_WITH_CUDA=1) as the "CUDA" handlers over the CUDA engine. Each is
// registered in XLA's FFI registry when its library is loaded
// (core/xla_ffi.h; core/xla_custom_call.h says how the lowering finds it).
//
// The calls (targets kGroupNormForwardTarget, kGroupNormBackwardTarget):
//   forward:  (x, scale, offset) -> (y, mean, rstd, scratch)
//   backward: (dy, x, scale, offset, mean, rstd)
//             -> (dx, dscale, doffset, scratch)
// with the ops' attributes (groups, epsilon, axis, activation, alpha, beta,
// approximate), read and checked by the same ReadGroupNormAttrs as the
// kernels'. scratch is a u8 result holding the engine's partial sums plus
// kScratchAlign bytes on the Host (XLA:CPU gives a custom call no
// allocator); the CUDA handler takes its scratch from the FFI's allocator and
// its scratch result is empty. The lowering checked the shapes; the handlers
// check them again with the same rules (group_norm_checks.h), as they
// rebuild the layout from the buffers' dimensions. The lowering emits no call
// for an empty x.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/xla_ffi.h"
#include "tf_ops/cc/group_norm/group_norm_attrs.h"
#include "tf_ops/cc/group_norm/group_norm_checks.h"
#include "tf_ops/cc/group_norm/group_norm_ffi.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"
#include "xla/ffi/api/ffi.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/group_norm/group_norm_gpu.h"
#else
#include "tf_ops/cc/group_norm/group_norm_cpu.h"
#endif

namespace tf_ops {
namespace group_norm {
namespace {

namespace ffi = xla::ffi;

constexpr char kForwardOp[] = "TfOps>GroupNorm";
constexpr char kGradOp[] = "TfOps>GroupNormGrad";

// The attributes, x's layout and Dtype, and the per-channel inputs' checks.
absl::Status Prepare(const std::string& op, const ffi::Dictionary& dict,
                     const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
                     const ffi::AnyBuffer& offset, GroupNormAttrs* attrs,
                     GroupNormShape* shape, Dtype* dtype) {
  const FfiAttrReader reader(dict);
  TF_RETURN_IF_ERROR(ReadGroupNormAttrs(&reader, op, attrs));
  const std::vector<int64_t> dims = FfiDims(x);
  TF_RETURN_IF_ERROR(LayoutOf(op, dims, attrs->axis, attrs->groups, shape));
  TF_RETURN_IF_ERROR(
      CheckChannelVector(op, "scale", dims, shape->c, FfiDims(scale)));
  TF_RETURN_IF_ERROR(
      CheckChannelVector(op, "offset", dims, shape->c, FfiDims(offset)));
  if (!FfiDtype(x.element_type(), dtype)) {
    return absl::InvalidArgumentError(op + ": unsupported dtype");
  }
  if (shape->elements() == 0) {
    return absl::InvalidArgumentError(op + ": empty x reached the handler");
  }
  return absl::OkStatus();
}

absl::Status CheckStats(const std::string& op, const ffi::AnyBuffer& x,
                        const GroupNormShape& shape,
                        const ffi::AnyBuffer& mean,
                        const ffi::AnyBuffer& rstd) {
  TF_RETURN_IF_ERROR(CheckStat(op, "mean", FfiDims(x), shape, FfiDims(mean)));
  return CheckStat(op, "rstd", FfiDims(x), shape, FfiDims(rstd));
}

// The bindings' common part: the buffers and all attributes, in the order of
// the handlers' parameters; each platform appends its context.
auto ForwardBinding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // scale
      .Arg<ffi::AnyBuffer>()  // offset
      .Ret<ffi::AnyBuffer>()  // y
      .Ret<ffi::AnyBuffer>()  // mean
      .Ret<ffi::AnyBuffer>()  // rstd
      .Ret<ffi::AnyBuffer>()  // scratch
      .Attrs<ffi::Dictionary>();
}

auto BackwardBinding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::AnyBuffer>()  // dy
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // scale
      .Arg<ffi::AnyBuffer>()  // offset
      .Arg<ffi::AnyBuffer>()  // mean
      .Arg<ffi::AnyBuffer>()  // rstd
      .Ret<ffi::AnyBuffer>()  // dx
      .Ret<ffi::AnyBuffer>()  // dscale
      .Ret<ffi::AnyBuffer>()  // doffset
      .Ret<ffi::AnyBuffer>()  // scratch
      .Attrs<ffi::Dictionary>();
}

#if TF_OPS_WITH_CUDA

ffi::Error ForwardCuda(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                       ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd,
                       ffi::Result<ffi::AnyBuffer> /*scratch*/,
                       ffi::Dictionary dict, void* stream,
                       ffi::ScratchAllocator allocator) {
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  ffi::Error error = FfiErrorOf(
      Prepare(kForwardOp, dict, x, scale, offset, &attrs, &shape, &dtype));
  if (error.failure()) return error;
  void* scratch = nullptr;
  error = FfiAllocate(allocator, GroupNormGpuScratchBytes(shape),
                      kForwardOp, &scratch);
  if (error.failure()) return error;
  return FfiLaunchError(LaunchGroupNormForward(
      attrs.activation, dtype, shape, attrs.epsilon, x.untyped_data(),
      scale.untyped_data(), offset.untyped_data(), y->untyped_data(),
      mean->untyped_data(), rstd->untyped_data(), scratch, stream));
}

ffi::Error BackwardCuda(ffi::AnyBuffer dy, ffi::AnyBuffer x,
                        ffi::AnyBuffer scale, ffi::AnyBuffer offset,
                        ffi::AnyBuffer mean, ffi::AnyBuffer rstd,
                        ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dscale,
                        ffi::Result<ffi::AnyBuffer> doffset,
                        ffi::Result<ffi::AnyBuffer> /*scratch*/,
                        ffi::Dictionary dict, void* stream,
                        ffi::ScratchAllocator allocator) {
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  absl::Status status =
      Prepare(kGradOp, dict, x, scale, offset, &attrs, &shape, &dtype);
  if (status.ok()) status = CheckStats(kGradOp, x, shape, mean, rstd);
  ffi::Error error = FfiErrorOf(status);
  if (error.failure()) return error;
  void* scratch = nullptr;
  error = FfiAllocate(allocator, GroupNormGpuScratchBytes(shape), kGradOp,
                      &scratch);
  if (error.failure()) return error;
  return FfiLaunchError(LaunchGroupNormGrad(
      attrs.activation, dtype, shape, dy.untyped_data(), x.untyped_data(),
      scale.untyped_data(), offset.untyped_data(), mean.untyped_data(),
      rstd.untyped_data(), dx->untyped_data(), dscale->untyped_data(),
      doffset->untyped_data(), scratch, stream));
}

XLA_FFI_DEFINE_HANDLER(kForward, ForwardCuda,
                       ForwardBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
XLA_FFI_DEFINE_HANDLER(kBackward, BackwardCuda,
                       BackwardBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
constexpr char kPlatform[] = "CUDA";

#else  // !TF_OPS_WITH_CUDA

int ActivationCycles(const ActivationChoice& act) {
  int cycles = 1;
  VisitActivation(act, [&](const auto& op) {
    cycles = std::decay_t<decltype(op)>::kCyclesPerElement;
  });
  return cycles;
}

// The scratch result aligned for the engine's doubles, or null when it holds
// fewer than `bytes`.
double* AlignedScratch(ffi::Result<ffi::AnyBuffer>& scratch, int64_t bytes) {
  return static_cast<double*>(FfiAlignedScratch(scratch, bytes, kScratchAlign));
}

ffi::Error ForwardHost(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                       ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd,
                       ffi::Result<ffi::AnyBuffer> scratch,
                       ffi::Dictionary dict, ffi::ThreadPool pool) {
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  const ffi::Error error = FfiErrorOf(
      Prepare(kForwardOp, dict, x, scale, offset, &attrs, &shape, &dtype));
  if (error.failure()) return error;
  const GroupNormTiling t = MakeGroupNormTiling(shape);
  GroupNormBuffers io;
  io.partials = AlignedScratch(scratch, t.partials() * 8);
  if (io.partials == nullptr) {
    return ffi::Error::InvalidArgument(
        "TfOps>GroupNorm: the scratch result is too small");
  }
  io.x = x.untyped_data();
  io.gamma = scale.untyped_data();
  io.beta = offset.untyped_data();
  io.y = y->untyped_data();
  io.mean = mean->untyped_data();
  io.rstd = rstd->untyped_data();
  const ActivationChoice& act = attrs.activation;
  const int64_t cost = t.cycles_per_unit(ActivationCycles(act));
  XlaFfiParallelFor(pool, t.units(), cost / 4 + 1,
                    [&](int64_t begin, int64_t end) {
                      CpuGroupNormSums(dtype, t, io, begin, end);
                    });
  CpuGroupNormStats(dtype, t, attrs.epsilon, io);
  XlaFfiParallelFor(pool, t.units(), cost, [&](int64_t begin, int64_t end) {
    CpuGroupNormApply(act, dtype, t, io, begin, end);
  });
  return ffi::Error::Success();
}

ffi::Error BackwardHost(ffi::AnyBuffer dy, ffi::AnyBuffer x,
                        ffi::AnyBuffer scale, ffi::AnyBuffer offset,
                        ffi::AnyBuffer mean, ffi::AnyBuffer rstd,
                        ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dscale,
                        ffi::Result<ffi::AnyBuffer> doffset,
                        ffi::Result<ffi::AnyBuffer> scratch,
                        ffi::Dictionary dict, ffi::ThreadPool pool) {
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  absl::Status status =
      Prepare(kGradOp, dict, x, scale, offset, &attrs, &shape, &dtype);
  if (status.ok()) status = CheckStats(kGradOp, x, shape, mean, rstd);
  const ffi::Error error = FfiErrorOf(status);
  if (error.failure()) return error;
  const GroupNormTiling t = MakeGroupNormTiling(shape);
  GroupNormBuffers io;
  io.partials = AlignedScratch(
      scratch, (t.partials() + 2 * shape.n * shape.groups) * 8);
  if (io.partials == nullptr) {
    return ffi::Error::InvalidArgument(
        "TfOps>GroupNormGrad: the scratch result is too small");
  }
  io.coefs = io.partials + t.partials();
  io.dy = dy.untyped_data();
  io.x = x.untyped_data();
  io.gamma = scale.untyped_data();
  io.beta = offset.untyped_data();
  io.mean = mean.untyped_data();
  io.rstd = rstd.untyped_data();
  io.dx = dx->untyped_data();
  io.dgamma = dscale->untyped_data();
  io.dbeta = doffset->untyped_data();
  const ActivationChoice& act = attrs.activation;
  const int64_t cost = t.cycles_per_unit(ActivationCycles(act));
  XlaFfiParallelFor(pool, t.units(), cost, [&](int64_t begin, int64_t end) {
    CpuGroupNormGradSums(act, dtype, t, io, begin, end);
  });
  CpuGroupNormGradReduce(dtype, t, io);
  XlaFfiParallelFor(pool, t.units(), cost, [&](int64_t begin, int64_t end) {
    CpuGroupNormGradApply(act, dtype, t, io, begin, end);
  });
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kForward, ForwardHost,
                       ForwardBinding().Ctx<ffi::ThreadPool>());
XLA_FFI_DEFINE_HANDLER(kBackward, BackwardHost,
                       BackwardBinding().Ctx<ffi::ThreadPool>());
constexpr char kPlatform[] = "Host";

#endif  // TF_OPS_WITH_CUDA

TF_OPS_REGISTER_XLA_FFI_HANDLER(kGroupNormForwardTarget, kPlatform, kForward);
TF_OPS_REGISTER_XLA_FFI_HANDLER(kGroupNormBackwardTarget, kPlatform,
                                kBackward);

}  // namespace
}  // namespace group_norm
}  // namespace tf_ops

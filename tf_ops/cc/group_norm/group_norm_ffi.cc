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
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// The call's attributes behind the GetAttr that ReadGroupNormAttrs (and each
// activation's ReadAttrs) asks.
struct FfiAttrs {
  int64_t groups;
  float epsilon;
  int64_t axis;
  std::string_view activation;
  float alpha;
  float beta;
  bool approximate;

  absl::Status GetAttr(std::string_view name, std::string* v) const {
    if (name != "activation") return Unknown(name);
    *v = std::string(activation);
    return absl::OkStatus();
  }
  absl::Status GetAttr(std::string_view name, float* v) const {
    if (name == "epsilon") {
      *v = epsilon;
    } else if (name == "alpha") {
      *v = alpha;
    } else if (name == "beta") {
      *v = beta;
    } else {
      return Unknown(name);
    }
    return absl::OkStatus();
  }
  absl::Status GetAttr(std::string_view name, bool* v) const {
    if (name != "approximate") return Unknown(name);
    *v = approximate;
    return absl::OkStatus();
  }
  absl::Status GetAttr(std::string_view name, int* v) const {
    if (name != "axis") return Unknown(name);
    *v = static_cast<int>(axis);
    return absl::OkStatus();
  }
  absl::Status GetAttr(std::string_view name, int64_t* v) const {
    if (name != "groups") return Unknown(name);
    *v = groups;
    return absl::OkStatus();
  }
  static absl::Status Unknown(std::string_view name) {
    return absl::InvalidArgumentError(
        std::string("group norm custom call: no attribute ") +
        std::string(name));
  }
};

std::vector<int64_t> DimsOf(const ffi::AnyBuffer& b) {
  const auto d = b.dimensions();
  return std::vector<int64_t>(d.begin(), d.end());
}

ffi::Error ErrorOf(const absl::Status& status) {
  return status.ok() ? ffi::Error::Success()
                     : ffi::Error::InvalidArgument(
                           std::string(status.message()));
}

// The attributes, x's layout and Dtype, and the per-channel inputs' checks.
absl::Status Prepare(const std::string& op, const FfiAttrs& raw,
                     const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
                     const ffi::AnyBuffer& offset, GroupNormAttrs* attrs,
                     GroupNormShape* shape, Dtype* dtype) {
  TF_RETURN_IF_ERROR(ReadGroupNormAttrs(&raw, op, attrs));
  const std::vector<int64_t> dims = DimsOf(x);
  TF_RETURN_IF_ERROR(LayoutOf(op, dims, attrs->axis, attrs->groups, shape));
  TF_RETURN_IF_ERROR(
      CheckChannelVector(op, "scale", dims, shape->c, DimsOf(scale)));
  TF_RETURN_IF_ERROR(
      CheckChannelVector(op, "offset", dims, shape->c, DimsOf(offset)));
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
  TF_RETURN_IF_ERROR(CheckStat(op, "mean", DimsOf(x), shape, DimsOf(mean)));
  return CheckStat(op, "rstd", DimsOf(x), shape, DimsOf(rstd));
}

// The bindings' common part: the buffers and attributes, in the order of the
// handlers' parameters; each platform appends its context.
template <typename B>
auto WithAttrs(B binding) {
  return std::move(binding).template Attr<int64_t>("groups")
      .template Attr<float>("epsilon")
      .template Attr<int64_t>("axis")
      .template Attr<std::string_view>("activation")
      .template Attr<float>("alpha")
      .template Attr<float>("beta")
      .template Attr<bool>("approximate");
}

auto ForwardBinding() {
  return WithAttrs(ffi::Ffi::Bind()
                       .Arg<ffi::AnyBuffer>()    // x
                       .Arg<ffi::AnyBuffer>()    // scale
                       .Arg<ffi::AnyBuffer>()    // offset
                       .Ret<ffi::AnyBuffer>()    // y
                       .Ret<ffi::AnyBuffer>()    // mean
                       .Ret<ffi::AnyBuffer>()    // rstd
                       .Ret<ffi::AnyBuffer>());  // scratch
}

auto BackwardBinding() {
  return WithAttrs(ffi::Ffi::Bind()
                       .Arg<ffi::AnyBuffer>()    // dy
                       .Arg<ffi::AnyBuffer>()    // x
                       .Arg<ffi::AnyBuffer>()    // scale
                       .Arg<ffi::AnyBuffer>()    // offset
                       .Arg<ffi::AnyBuffer>()    // mean
                       .Arg<ffi::AnyBuffer>()    // rstd
                       .Ret<ffi::AnyBuffer>()    // dx
                       .Ret<ffi::AnyBuffer>()    // dscale
                       .Ret<ffi::AnyBuffer>()    // doffset
                       .Ret<ffi::AnyBuffer>());  // scratch
}

#if TF_OPS_WITH_CUDA

ffi::Error LaunchError(const char* error) {
  return error == nullptr ? ffi::Error::Success()
                          : ffi::Error::Internal(error);
}

// The engine's scratch from the FFI's allocator (null when it needs none).
ffi::Error AllocateScratch(const GroupNormShape& shape,
                           ffi::ScratchAllocator& allocator, void** out) {
  const int64_t bytes = GroupNormGpuScratchBytes(shape);
  *out = nullptr;
  if (bytes == 0) return ffi::Error::Success();
  std::optional<void*> allocated = allocator.Allocate(bytes, 256);
  if (!allocated.has_value()) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                      "TfOps>GroupNorm: cannot allocate the scratch");
  }
  *out = *allocated;
  return ffi::Error::Success();
}

ffi::Error ForwardCuda(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                       ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd,
                       ffi::Result<ffi::AnyBuffer> /*scratch*/, int64_t groups,
                       float epsilon, int64_t axis, std::string_view activation,
                       float alpha, float beta, bool approximate, void* stream,
                       ffi::ScratchAllocator allocator) {
  const FfiAttrs raw{groups, epsilon, axis, activation,
                     alpha,  beta,    approximate};
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  ffi::Error error = ErrorOf(
      Prepare(kForwardOp, raw, x, scale, offset, &attrs, &shape, &dtype));
  if (error.failure()) return error;
  void* scratch = nullptr;
  error = AllocateScratch(shape, allocator, &scratch);
  if (error.failure()) return error;
  return LaunchError(LaunchGroupNormForward(
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
                        int64_t groups, float epsilon, int64_t axis,
                        std::string_view activation, float alpha, float beta,
                        bool approximate, void* stream,
                        ffi::ScratchAllocator allocator) {
  const FfiAttrs raw{groups, epsilon, axis, activation,
                     alpha,  beta,    approximate};
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  absl::Status status =
      Prepare(kGradOp, raw, x, scale, offset, &attrs, &shape, &dtype);
  if (status.ok()) status = CheckStats(kGradOp, x, shape, mean, rstd);
  ffi::Error error = ErrorOf(status);
  if (error.failure()) return error;
  void* scratch = nullptr;
  error = AllocateScratch(shape, allocator, &scratch);
  if (error.failure()) return error;
  return LaunchError(LaunchGroupNormGrad(
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
  if (static_cast<int64_t>(scratch->size_bytes()) < bytes + kScratchAlign) {
    return nullptr;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(scratch->untyped_data());
  return reinterpret_cast<double*>((base + kScratchAlign - 1) &
                                   ~uintptr_t{kScratchAlign - 1});
}

ffi::Error ForwardHost(ffi::AnyBuffer x, ffi::AnyBuffer scale,
                       ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd,
                       ffi::Result<ffi::AnyBuffer> scratch, int64_t groups,
                       float epsilon, int64_t axis, std::string_view activation,
                       float alpha, float beta, bool approximate,
                       ffi::ThreadPool pool) {
  const FfiAttrs raw{groups, epsilon, axis, activation,
                     alpha,  beta,    approximate};
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  const ffi::Error error = ErrorOf(
      Prepare(kForwardOp, raw, x, scale, offset, &attrs, &shape, &dtype));
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
                        ffi::Result<ffi::AnyBuffer> scratch, int64_t groups,
                        float epsilon, int64_t axis,
                        std::string_view activation, float alpha, float beta,
                        bool approximate, ffi::ThreadPool pool) {
  const FfiAttrs raw{groups, epsilon, axis, activation,
                     alpha,  beta,    approximate};
  GroupNormAttrs attrs;
  GroupNormShape shape;
  Dtype dtype;
  absl::Status status =
      Prepare(kGradOp, raw, x, scale, offset, &attrs, &shape, &dtype);
  if (status.ok()) status = CheckStats(kGradOp, x, shape, mean, rstd);
  const ffi::Error error = ErrorOf(status);
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

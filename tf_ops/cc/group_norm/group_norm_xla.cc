// XLA lowerings of TfOps>GroupNorm and TfOps>GroupNormGrad on XLA_CPU_JIT and
// XLA_GPU_JIT, for tf.function(jit_compile=True) and Keras jit_compile.
//
// Where XLA's FFI registry holds a handler for the platform compiled for
// ("Host": group_norm_ffi.cc in _tf_ops.so, over the CPU engine; "CUDA": the
// same file in _tf_ops_gpu.so, over the CUDA engine, when the loader loaded
// it), each op is one typed-FFI custom call into that engine
// (core/xla_custom_call.h): the same two passes over x (and dy) as the
// kernels, the same bits as the non-jit op, and its statistics and dgamma,
// dbeta summed in double in a fixed order. XLA's own reductions of a
// grouped tensor are several passes over it, with the activation's
// derivative kept in memory between them.
//
// Elsewhere (a device without a handler, TF_OPS_XLA_CUSTOM_CALLS=0) it is the
// composite below: group_norm_math.h's formulas over x seen as [n, b, groups,
// c / groups, i], reduced in the compute type (F32 for half, bfloat16 and
// float, F64 for double), the activation from its functor with T = XlaValue.
// The grad op reads x and dy through Isolated (xla_isolated.h), once for the
// sums and once for dx, as batch_norm_xla.cc does.
//
// Attributes are read by ReadGroupNormAttrs and inputs checked by the same
// functions as the shape functions and kernels (group_norm_checks.h), with
// every dimension known here. Registered with REGISTER_KERNEL_BUILDER for the
// reason activation_xla.cc gives.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_custom_call.h"
#include "tf_ops/cc/core/xla_isolated.h"
#include "tf_ops/cc/core/xla_value.h"
#include "tf_ops/cc/group_norm/group_norm_attrs.h"
#include "tf_ops/cc/group_norm/group_norm_checks.h"
#include "tf_ops/cc/group_norm/group_norm_cpu.h"
#include "tf_ops/cc/group_norm/group_norm_ffi.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace group_norm {
namespace {

using xla::XlaOp;

absl::StatusOr<std::vector<int64_t>> InputDims(
    tensorflow::XlaOpKernelContext* ctx, int i) {
  absl::StatusOr<xla::Shape> shape = ctx->InputXlaShape(i);
  TF_RETURN_IF_ERROR(shape.status());
  return std::vector<int64_t>(shape->dimensions().begin(),
                              shape->dimensions().end());
}

xla::Shape ShapeOf(xla::PrimitiveType type, std::vector<int64_t> dims) {
  return xla::ShapeUtil::MakeShape(type, dims);
}

// x's type and layout, and the composite's moves between x seen as [n, b, G,
// P, i] (P = c / G channels per group) and the per-group ([n, G]) and
// per-channel ([n, G, P], [G, P]) values.
struct Grouped {
  xla::XlaBuilder* b;
  xla::PrimitiveType type;     // x's
  xla::PrimitiveType compute;  // F32 or F64
  std::vector<int64_t> dims;   // x's
  GroupNormShape s;

  std::vector<int64_t> Dims5() const {
    return {s.n, s.b, s.groups, s.per_group(), s.i};
  }
  XlaOp Reshape5(XlaOp v) const { return xla::Reshape(v, Dims5()); }
  XlaOp Sum(XlaOp v, std::vector<int64_t> axes) const {
    return xla::Reduce(v, xla::Zero(b, compute),
                       xla::CreateScalarAddComputation(compute, b), axes);
  }
  // [n, G] along x5's axes 0 and 2.
  XlaOp PerGroup(XlaOp v) const {
    return xla::BroadcastInDim(v, Dims5(), {0, 2});
  }
  // [n, G, P] along x5's axes 0, 2 and 3.
  XlaOp PerChannel(XlaOp v) const {
    return xla::BroadcastInDim(v, Dims5(), {0, 2, 3});
  }
  // A [c] input as [n, G, P].
  XlaOp ChannelInput(XlaOp v) const {
    return xla::BroadcastInDim(xla::Reshape(v, {s.groups, s.per_group()}),
                               {s.n, s.groups, s.per_group()}, {1, 2});
  }
  XlaOp Scalar(double v) const {
    return xla::ConstantR0WithType(b, compute, v);
  }
  XlaOp GroupSize() const {
    return Scalar(static_cast<double>(s.group_size()));
  }
};

// The checks every reader of the ops makes; fills g.
absl::Status CheckInputs(tensorflow::XlaOpKernelContext* ctx,
                         const std::string& op, const GroupNormAttrs& attrs,
                         bool grad, Grouped* g) {
  const int x_at = grad ? 1 : 0;
  TF_ASSIGN_OR_RETURN(g->dims, InputDims(ctx, x_at));
  TF_RETURN_IF_ERROR(LayoutOf(op, g->dims, attrs.axis, attrs.groups, &g->s));
  const char* names[] = {"scale", "offset"};
  for (int k = 0; k < 2; ++k) {
    TF_ASSIGN_OR_RETURN(std::vector<int64_t> d, InputDims(ctx, x_at + 1 + k));
    TF_RETURN_IF_ERROR(CheckChannelVector(op, names[k], g->dims, g->s.c, d));
  }
  g->b = ctx->builder();
  g->type = ctx->input_xla_type(x_at);
  g->compute = XlaComputeType(g->type);
  if (ctx->input_xla_type(x_at + 1) != g->compute) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": scale, offset and the statistics must be float64 for float64 "
        "x and float32 otherwise, got x ",
        xla::PrimitiveType_Name(g->type), " and scale ",
        xla::PrimitiveType_Name(ctx->input_xla_type(x_at + 1))));
  }
  if (!grad) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> dy, InputDims(ctx, 0));
  if (dy != g->dims) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dy and x must have the same shape, got dy ",
                     ShapeString(dy), " and x ", ShapeString(g->dims)));
  }
  const char* stats[] = {"mean", "rstd"};
  for (int k = 0; k < 2; ++k) {
    TF_ASSIGN_OR_RETURN(std::vector<int64_t> d, InputDims(ctx, 4 + k));
    TF_RETURN_IF_ERROR(CheckStat(op, stats[k], g->dims, g->s, d));
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------- composite ------
// The statistics of x5 (compute type): mean and rstd, [n, G].
void Statistics(const Grouped& g, XlaOp x5, double epsilon, XlaOp* mean,
                XlaOp* rstd) {
  // The shift: each (sample, group)'s first element, as the engines.
  const XlaOp k = xla::Reshape(
      xla::Slice(x5, {0, 0, 0, 0, 0}, {g.s.n, 1, g.s.groups, 1, 1},
                 {1, 1, 1, 1, 1}),
      {g.s.n, g.s.groups});
  const XlaOp d = x5 - g.PerGroup(k);
  const XlaOp m = g.GroupSize();
  const XlaOp d1 = g.Sum(d, {1, 3, 4}) / m;
  const XlaOp variance =
      xla::Max(g.Sum(d * d, {1, 3, 4}) / m - d1 * d1, g.Scalar(0.0));
  *mean = k + d1;
  *rstd = g.Scalar(1.0) / xla::Sqrt(variance + g.Scalar(epsilon));
}

// z = x * a + b per channel: a = gamma * rstd, b = beta - mean * a ([n, G,
// P]).
struct Affine {
  XlaOp a, b;
};
Affine AffineOf(const Grouped& g, XlaOp gamma, XlaOp beta, XlaOp mean,
                XlaOp rstd) {
  const std::vector<int64_t> per_channel = {g.s.n, g.s.groups, g.s.per_group()};
  const XlaOp a = g.ChannelInput(gamma) *
                  xla::BroadcastInDim(rstd, per_channel, {0, 1});
  const XlaOp b = g.ChannelInput(beta) -
                  xla::BroadcastInDim(mean, per_channel, {0, 1}) * a;
  return {a, b};
}

template <typename Op>
void ForwardComposite(tensorflow::XlaOpKernelContext* ctx, const Grouped& g,
                      const GroupNormAttrs& attrs, const Op& op) {
  const XlaOp x5 = g.Reshape5(Widen(ctx->Input(0), g.type).op());
  XlaOp mean, rstd;
  Statistics(g, x5, attrs.epsilon, &mean, &rstd);
  const Affine af = AffineOf(g, ctx->Input(1), ctx->Input(2), mean, rstd);
  const XlaValue z(x5 * g.PerChannel(af.a) + g.PerChannel(af.b));
  const XlaValue y = op.Forward(z);
  ctx->SetOutput(0, xla::Reshape(Narrow(y, z, g.type), g.dims));
  ctx->SetOutput(1, mean);
  ctx->SetOutput(2, rstd);
}

template <typename Op>
void GradComposite(tensorflow::XlaOpKernelContext* ctx, const Grouped& g,
                   const Op& op) {
  const XlaOp mean = ctx->Input(4), rstd = ctx->Input(5);
  const Affine af = AffineOf(g, ctx->Input(2), ctx->Input(3), mean, rstd);
  const XlaOp a = g.PerChannel(af.a), b = g.PerChannel(af.b);
  // dy and x, widened, isolated for one use (the sums: kGrad; dx:
  // kGradGradFirst), and dz = dy * f'(x * a + b) from them.
  const auto inputs = [&](Use use, XlaOp* x5) {
    const XlaOp dy5 = g.Reshape5(
        Widen(Isolated(ctx, ctx->Input(0), use), g.type).op());
    *x5 = g.Reshape5(Widen(Isolated(ctx, ctx->Input(1), use), g.type).op());
    const XlaValue z(*x5 * a + b);
    return (XlaValue(dy5) * DerivativeAtFeatures(op, z)).Op(dy5);
  };
  XlaOp x5;
  const XlaOp dz = inputs(Use::kGrad, &x5);
  const XlaOp xhat = (x5 - g.PerGroup(mean)) * g.PerGroup(rstd);
  const XlaOp p = g.Sum(dz, {1, 4});         // [n, G, P]: sum of dz
  const XlaOp q = g.Sum(dz * xhat, {1, 4});  // and of dz * xhat
  const XlaOp gamma = g.ChannelInput(ctx->Input(2));
  const XlaOp m = g.GroupSize();
  const XlaOp sum_a = g.Sum(gamma * p, {2});  // [n, G]
  const XlaOp sum_b = g.Sum(gamma * q, {2});
  const XlaOp r2b = rstd * rstd * sum_b / m;
  const XlaOp k2 = -r2b;
  const XlaOp k3 = -rstd * sum_a / m + mean * r2b;
  XlaOp x5_dx;
  const XlaOp dz_dx = inputs(Use::kGradGradFirst, &x5_dx);
  const XlaOp dx = dz_dx * a + x5_dx * g.PerGroup(k2) + g.PerGroup(k3);
  const XlaOp narrowed =
      g.compute == g.type ? dx : xla::ConvertElementType(dx, g.type);
  ctx->SetOutput(0, xla::Reshape(narrowed, g.dims));
  ctx->SetOutput(1, xla::Reshape(g.Sum(q, {0}), {g.s.c}));
  ctx->SetOutput(2, xla::Reshape(g.Sum(p, {0}), {g.s.c}));
}

// ------------------------------------------------------------- kernels ------
template <bool kGrad>
class GroupNormXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit GroupNormXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadGroupNormAttrs(ctx, Name(), &attrs_));
    // The attributes as given, for the custom call's handler, which reads
    // them with the same ReadGroupNormAttrs.
    OP_REQUIRES_OK(ctx, ffi_attrs_.AddOpAttrs(
                            ctx, {"groups", "epsilon", "axis", "activation",
                                  "alpha", "beta", "approximate"}));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    Grouped g;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, Name(), attrs_, kGrad, &g));
    if (g.s.elements() == 0) {
      Empty(ctx, g);
      return;
    }
    const char* target =
        kGrad ? kGroupNormBackwardTarget : kGroupNormForwardTarget;
    if (XlaFfiHandlerRegistered(ctx, target)) {
      CustomCall(ctx, g, target);
      return;
    }
    VisitActivation(attrs_.activation, [&](const auto& op) {
      if constexpr (kGrad) {
        GradComposite(ctx, g, op);
      } else {
        ForwardComposite(ctx, g, attrs_, op);
      }
    });
  }

 private:
  static std::string Name() {
    return kGrad ? "TfOps>GroupNormGrad" : "TfOps>GroupNorm";
  }

  // As the kernels: statistics over no elements are NaN; gradients of no
  // elements are zeros.
  void Empty(tensorflow::XlaOpKernelContext* ctx, const Grouped& g) const {
    const XlaOp x = ctx->Input(kGrad ? 1 : 0);
    ctx->SetOutput(0, x);
    if (kGrad) {
      const XlaOp zeros = xla::Broadcast(g.Scalar(0.0), {g.s.c});
      ctx->SetOutput(1, zeros);
      ctx->SetOutput(2, zeros);
      return;
    }
    const XlaOp nan = xla::Broadcast(
        g.Scalar(std::numeric_limits<double>::quiet_NaN()),
        {g.s.n, g.s.groups});
    ctx->SetOutput(1, nan);
    ctx->SetOutput(2, nan);
  }

  // The op's outputs from one custom call on its inputs (group_norm_ffi.cc),
  // the Host handler's scratch the engine's double partial sums (and, for the
  // gradient, the per-group statistics).
  void CustomCall(tensorflow::XlaOpKernelContext* ctx, const Grouped& g,
                  const char* target) const {
    const GroupNormTiling t = MakeGroupNormTiling(g.s);
    const int64_t doubles =
        t.partials() + (kGrad ? 2 * g.s.n * g.s.groups : 0);
    const std::vector<int64_t> stats =
        kGrad ? std::vector<int64_t>{g.s.c}
              : std::vector<int64_t>{g.s.n, g.s.groups};
    XlaFfiCallOp(ctx, target,
                 {ShapeOf(g.type, g.dims), ShapeOf(g.compute, stats),
                  ShapeOf(g.compute, stats)},
                 doubles * 8 + kScratchAlign, ffi_attrs_);
  }

  GroupNormAttrs attrs_;
  XlaFfiAttrs ffi_attrs_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_GROUP_NORM_XLA(DEV)                                 \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>GroupNorm").Device(DEV).TypeConstraint("T", kXlaDtypes),  \
      GroupNormXlaOp<false>);                                               \
  REGISTER_KERNEL_BUILDER(Name("TfOps>GroupNormGrad")                       \
                              .Device(DEV)                                  \
                              .TypeConstraint("T", kXlaDtypes),             \
                          GroupNormXlaOp<true>);

TF_OPS_REGISTER_GROUP_NORM_XLA(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_GROUP_NORM_XLA(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace group_norm
}  // namespace tf_ops

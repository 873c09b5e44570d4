// XLA lowerings of the batch-norm ops (batch_norm_checks.h) on the
// XLA_CPU_JIT and XLA_GPU_JIT devices, for every activation the ops take.
//
// The training ops (TfOps>BatchNormTraining and its grad), where XLA's FFI
// registry holds a handler for the platform compiled for ("Host":
// batch_norm_ffi.cc in _tf_ops.so, over the CPU engine; "CUDA": the same file
// in _tf_ops_gpu.so, over the CUDA engine, when the loader loaded it), are
// one typed-FFI custom call each into that engine (core/xla_custom_call.h):
// the kernels' two passes over x (and y_backprop), the same bits as the
// non-jit ops, the statistics and parameter gradients summed in double in a
// fixed order; XLA's loops over the composite below ran a train step slower
// than the kernels (docs/benchmarks.md, "Batch norm under XLA"). The
// inference ops (one element-wise pass given the statistics, which XLA fuses
// with its neighbours), and every op on a device without a handler or with
// TF_OPS_XLA_CUSTOM_CALLS=0, are the composite: batch_norm_math.h's formulas
// with T = XlaValue (xla_value.h) over whole tensors, as the CPU and CUDA
// engines run them element by element, the same attribute reading
// (ReadBatchNormAttrs) and shape checks (BatchNormLayoutOf).
//
//   - Per-channel values ([C]: statistics, scale, shift, the dx
//     coefficients) are XLA values of shape [C], broadcast along the channel
//     axis where they meet x.
//   - Sums over every axis but the channel axis are XLA reduces in the
//     compute type: F32 for half, bfloat16 and float x, F64 for double (the
//     CPU engine sums float x in double; F32 here as XLA's own batch norm and
//     Keras's composite under XLA do). The statistics are the engines'
//     shifted sums about each channel's first element.
//   - The grad ops read x and y_backprop through Isolated (xla_isolated.h),
//     once for the sums and once for dx, so that XLA recomputes dz = dy f'(z)
//     in each loop rather than keeping it in a temporary of x's size (as the
//     engines recompute it).
//
// Registered with REGISTER_KERNEL_BUILDER for the reason activation_xla.cc
// gives.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_custom_call.h"
#include "tf_ops/cc/core/xla_input_shape.h"
#include "tf_ops/cc/core/xla_isolated.h"
#include "tf_ops/cc/core/xla_value.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {

// batch_norm_math.h's square root for XlaValue (found by argument-dependent
// lookup when its templates are instantiated here).
inline XlaValue Sqrt(const XlaValue& v) { return XlaValue(xla::Sqrt(v.op())); }

}  // namespace tf_ops

#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_attrs.h"
#include "tf_ops/cc/batch_norm/batch_norm_checks.h"
#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"
#include "tf_ops/cc/batch_norm/batch_norm_ffi.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"

namespace tf_ops {
namespace {

using tensorflow::TensorShape;
using xla::XlaOp;

// x's shape and channel axis, and the per-channel <-> whole-tensor moves.
struct Channels {
  xla::XlaBuilder* b;
  xla::PrimitiveType type;     // x's
  xla::PrimitiveType compute;  // F32 or F64
  std::vector<int64_t> dims;
  int axis;
  BatchNormLayout layout;

  // A [C] value broadcast along the channel axis of x.
  XlaValue Broadcast(const XlaValue& v) const {
    return XlaValue(xla::BroadcastInDim(v.op(), dims, {axis}));
  }
  // The sum of a value of x's shape over every axis but the channel axis.
  XlaValue Sum(const XlaValue& v) const {
    std::vector<int64_t> reduced;
    for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
      if (d != axis) reduced.push_back(d);
    }
    return XlaValue(xla::Reduce(v.op(), xla::Zero(b, compute),
                                xla::CreateScalarAddComputation(compute, b),
                                reduced));
  }
  // The first element of each channel of x ([C], widened): the engines'
  // pivot of the shifted sums; zeros for an empty batch.
  XlaValue Pivot(XlaOp x) const {
    if (layout.count() == 0) {
      return XlaValue(xla::Broadcast(xla::Zero(b, compute), {layout.channels}));
    }
    std::vector<int64_t> start(dims.size(), 0), limit(dims.size(), 1),
        strides(dims.size(), 1);
    limit[axis] = dims[axis];
    const XlaOp first =
        xla::Reshape(xla::Slice(x, start, limit, strides), {layout.channels});
    return Widen(first, type);
  }
  XlaValue Count() const {
    return XlaValue(static_cast<double>(layout.count()));
  }
};

template <BatchNormPhase kPhase>
class BatchNormXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit BatchNormXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx,
                   ReadBatchNormAttrs(ctx, BatchNormOpName(kPhase), &attrs_));
    // The attributes as given, for the custom call's handler, which reads
    // them with the same ReadBatchNormAttrs.
    OP_REQUIRES_OK(ctx, ffi_attrs_.AddOpAttrs(ctx, {"epsilon", "axis",
                                                    "activation", "alpha",
                                                    "beta", "approximate"}));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    Channels ch;
    OP_REQUIRES_OK(ctx, ChannelsOf(ctx, &ch));
    const char* target = CustomCallTarget();
    if (target != nullptr && ch.layout.count() * ch.layout.channels > 0 &&
        XlaFfiHandlerRegistered(ctx, target)) {
      CustomCall(ctx, ch, target);
      return;
    }
    VisitActivation(attrs_.activation, [&](const auto& op) {
      if constexpr (kPhase == BatchNormPhase::kTraining) {
        Training(ctx, ch, op);
      } else if constexpr (kPhase == BatchNormPhase::kTrainingGrad) {
        TrainingGrad(ctx, ch, op);
      } else if constexpr (kPhase == BatchNormPhase::kInference) {
        Inference(ctx, ch, op);
      } else if constexpr (kPhase == BatchNormPhase::kInferenceGrad) {
        InferenceGrad(ctx, ch, op);
      } else {
        TrainingInputGrad(ctx, ch, op);
      }
    });
  }

 private:
  absl::Status ChannelsOf(tensorflow::XlaOpKernelContext* ctx,
                          Channels* ch) const {
    std::vector<TensorShape> shapes;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      absl::StatusOr<TensorShape> shape = XlaInputShape(ctx, i);
      TF_RETURN_IF_ERROR(shape.status());
      shapes.push_back(*std::move(shape));
    }
    TF_RETURN_IF_ERROR(BatchNormLayoutOf(
        kPhase, attrs_.axis, [&](int i) { return shapes[i]; }, &ch->layout,
        &ch->axis));
    const TensorShape& x = shapes[BatchNormInputsOf(kPhase).x];
    ch->b = ctx->builder();
    ch->type = ctx->input_xla_type(BatchNormInputsOf(kPhase).x);
    ch->compute = XlaComputeType(ch->type);
    const auto sizes = x.dim_sizes();
    ch->dims.assign(sizes.begin(), sizes.end());
    return absl::OkStatus();
  }

  // The custom call of this op, or null (the composite only).
  static const char* CustomCallTarget() {
    if (kPhase == BatchNormPhase::kTraining) {
      return batch_norm::kBatchNormTrainingTarget;
    }
    if (kPhase == BatchNormPhase::kTrainingGrad) {
      return batch_norm::kBatchNormTrainingGradTarget;
    }
    return nullptr;
  }

  // The op's outputs from one custom call on its inputs (batch_norm_ffi.cc),
  // the Host handler's scratch the engine's double partial sums.
  void CustomCall(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                  const char* target) const {
    const xla::Shape per_channel =
        xla::ShapeUtil::MakeShape(ch.compute, {ch.layout.channels});
    XlaFfiCallOp(ctx, target,
                 {xla::ShapeUtil::MakeShape(ch.type, ch.dims), per_channel,
                  per_channel},
                 BatchNormScratchDoubles(ch.layout) * 8 +
                     batch_norm::kScratchAlign,
                 ffi_attrs_);
  }

  XlaValue Epsilon() const {
    return XlaValue(static_cast<double>(attrs_.epsilon));
  }

  // x, scale, offset -> y, batch_mean, batch_variance.
  template <typename Op>
  void Training(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                const Op& op) const {
    const XlaValue x = Widen(ctx->Input(0), ch.type);
    const XlaValue pivot = ch.Pivot(ctx->Input(0));
    const XlaValue d = x - ch.Broadcast(pivot);
    const ChannelMoments<XlaValue> m = MomentsFromSums(
        pivot, ch.Sum(d), ch.Sum(d * d), ch.Count());
    const ChannelAffine<XlaValue> a =
        AffineOf(m.mean, m.variance, XlaValue(ctx->Input(1)),
                 XlaValue(ctx->Input(2)), Epsilon());
    const XlaValue y = NormalizeForward(op, x, ch.Broadcast(a.scale),
                                        ch.Broadcast(a.shift));
    ctx->SetOutput(0, Narrow(y, x, ch.type));
    ctx->SetOutput(1, m.mean.Op(pivot.op()));
    ctx->SetOutput(2, m.variance.Op(pivot.op()));
  }

  // x, scale, offset, mean, variance -> y.
  template <typename Op>
  void Inference(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                 const Op& op) const {
    const XlaValue x = Widen(ctx->Input(0), ch.type);
    const ChannelAffine<XlaValue> a = Affine(ctx, 1);
    const XlaValue y = NormalizeForward(op, x, ch.Broadcast(a.scale),
                                        ch.Broadcast(a.shift));
    ctx->SetOutput(0, Narrow(y, x, ch.type));
  }

  // The affine of the per-channel inputs scale, offset, mean, variance from
  // input `first` on.
  ChannelAffine<XlaValue> Affine(tensorflow::XlaOpKernelContext* ctx,
                                 int first) const {
    return AffineOf(XlaValue(ctx->Input(first + 2)),
                    XlaValue(ctx->Input(first + 3)),
                    XlaValue(ctx->Input(first)),
                    XlaValue(ctx->Input(first + 1)), Epsilon());
  }

  // The grad ops' y_backprop and x, widened, isolated for one use (the sums:
  // kGrad; dx: kGradGradFirst).
  static std::pair<XlaValue, XlaValue> GradInputs(
      tensorflow::XlaOpKernelContext* ctx, const Channels& ch, Use use) {
    return {Widen(Isolated(ctx, ctx->Input(0), use), ch.type),
            Widen(Isolated(ctx, ctx->Input(1), use), ch.type)};
  }

  // The grad ops' pass 1: the affine of their statistics and the parameter
  // gradients dbeta = sum(dz) and dgamma = rstd * sum(dz * (x - mean)), set
  // as outputs 1 and 2.
  struct ParamGrads {
    ChannelAffine<XlaValue> affine;
    XlaValue dgamma;
    XlaValue dbeta;
  };
  template <typename Op>
  ParamGrads GradSums(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                      const Op& op) const {
    const ChannelAffine<XlaValue> a = Affine(ctx, 2);
    const auto [dy, x] = GradInputs(ctx, ch, Use::kGrad);
    const XlaValue dz = NormalizeDz(op, dy, x, ch.Broadcast(a.scale),
                                    ch.Broadcast(a.shift));
    const XlaValue mean = ch.Broadcast(XlaValue(ctx->Input(4)));
    const ParamGrads g{a, a.rstd * ch.Sum(dz * (x - mean)), ch.Sum(dz)};
    ctx->SetOutput(1, g.dgamma.op());
    ctx->SetOutput(2, g.dbeta.op());
    return g;
  }

  // y_backprop, x, scale, offset, batch_mean, batch_variance, mean_backprop,
  // variance_backprop -> x_backprop, scale_backprop, offset_backprop.
  template <typename Op>
  void TrainingGrad(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                    const Op& op) const {
    const ParamGrads g = GradSums(ctx, ch, op);
    ctx->SetOutput(0, TrainingDxOp(ctx, ch, op, g.affine, g.dgamma, g.dbeta,
                                   ch.Count()));
  }

  // ... scale_backprop, offset_backprop, count -> x_backprop: the training
  // grad's dx from the parameter gradients of a batch of `count` elements.
  template <typename Op>
  void TrainingInputGrad(tensorflow::XlaOpKernelContext* ctx,
                         const Channels& ch, const Op& op) const {
    ctx->SetOutput(0, TrainingDxOp(ctx, ch, op, Affine(ctx, 2),
                                   XlaValue(ctx->Input(8)),
                                   XlaValue(ctx->Input(9)),
                                   XlaValue(ctx->Input(10))));
  }

  // dx = scale * dz + c1 * (x - mean) + c0 from x and y_backprop isolated
  // for this use (dz recomputed in its loop), rounded to x's type.
  template <typename Op>
  XlaOp TrainingDxOp(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                     const Op& op, const ChannelAffine<XlaValue>& a,
                     const XlaValue& dgamma, const XlaValue& dbeta,
                     const XlaValue& count) const {
    const TrainingDxCoefficients<XlaValue> c =
        TrainingDxOf(a.scale, a.rstd, dbeta, dgamma, XlaValue(ctx->Input(6)),
                     XlaValue(ctx->Input(7)), count);
    const auto [dy, x] = GradInputs(ctx, ch, Use::kGradGradFirst);
    const XlaValue dx = TrainingDx(
        op, dy, x, ch.Broadcast(XlaValue(ctx->Input(4))),
        ChannelAffine<XlaValue>{ch.Broadcast(a.scale), ch.Broadcast(a.shift),
                                XlaValue(0.0)},
        TrainingDxCoefficients<XlaValue>{ch.Broadcast(c.c1),
                                         ch.Broadcast(c.c0)});
    return Narrow(dx, x, ch.type);
  }

  // y_backprop, x, scale, offset, mean, variance -> x_backprop,
  // scale_backprop, offset_backprop.
  template <typename Op>
  void InferenceGrad(tensorflow::XlaOpKernelContext* ctx, const Channels& ch,
                     const Op& op) const {
    const ParamGrads g = GradSums(ctx, ch, op);
    const auto [dy, x] = GradInputs(ctx, ch, Use::kGradGradFirst);
    const XlaValue scale = ch.Broadcast(g.affine.scale);
    const XlaValue dx =
        scale * NormalizeDz(op, dy, x, scale, ch.Broadcast(g.affine.shift));
    ctx->SetOutput(0, Narrow(dx, x, ch.type));
  }

  BatchNormAttrs attrs_;
  XlaFfiAttrs ffi_attrs_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, PHASE)                         \
  REGISTER_KERNEL_BUILDER(Name(BatchNormOpName(BatchNormPhase::PHASE))     \
                              .Device(DEV)                                 \
                              .TypeConstraint("T", kXlaDtypes),            \
                          BatchNormXlaOp<BatchNormPhase::PHASE>);
#define TF_OPS_REGISTER_BATCH_NORM_XLA_DEVICE(DEV)              \
  TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, kTraining)                \
  TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, kTrainingGrad)            \
  TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, kInference)               \
  TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, kInferenceGrad)           \
  TF_OPS_REGISTER_BATCH_NORM_XLA(DEV, kTrainingInputGrad)
TF_OPS_REGISTER_BATCH_NORM_XLA_DEVICE(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_BATCH_NORM_XLA_DEVICE(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace tf_ops

// XLA lowerings of the softmax family (softmax_ops.cc) on XLA_CPU_JIT and
// XLA_GPU_JIT: reductions over the last axis in the compute type (F32 for
// half, bfloat16 and float, F64 for double) and the element-wise formulas of
// softmax_math.h instantiated with T = XlaValue, the per-row values broadcast
// back over the row. Shapes are checked as the kernels do
// (softmax_checks.h). The cross-entropy's labels are values here, not known
// when compiling: a label outside [0, classes) that is not ignore_index gives
// NaN (loss and row) instead of the kernels' error.
// Registered with REGISTER_KERNEL_BUILDER for the reason activation_xla.cc
// gives.

#include <cmath>
#include <limits>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_input_shape.h"
#include "tf_ops/cc/core/xla_value.h"
#include "tf_ops/cc/softmax/softmax_math.h"
#include "tf_ops/cc/softmax/softmax_checks.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace {

using tensorflow::TensorShape;
using xla::XlaOp;

std::vector<int64_t> Dims(const TensorShape& s) {
  const auto d = s.dim_sizes();
  return std::vector<int64_t>(d.begin(), d.end());
}

// Reduces x over its last axis with max or sum, then broadcasts back.
XlaOp RowReduce(XlaOp x, const TensorShape& shape, bool max) {
  xla::XlaBuilder* b = x.builder();
  const xla::PrimitiveType type = b->GetShape(x)->element_type();
  const int last = shape.dims() - 1;
  const XlaOp r =
      max ? xla::Reduce(x, xla::MinValue(b, type),
                        xla::CreateScalarMaxComputation(type, b), {last})
          : xla::Reduce(x, xla::Zero(b, type),
                        xla::CreateScalarAddComputation(type, b), {last});
  std::vector<int64_t> keep;
  for (int i = 0; i < last; ++i) keep.push_back(i);
  return xla::BroadcastInDim(r, Dims(shape), keep);
}

XlaOp NegInfLike(XlaOp x) {
  return xla::FullLike(x, -std::numeric_limits<double>::infinity());
}

template <bool kLog>
class SoftmaxXlaOp : public tensorflow::XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;
  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = kLog ? "TfOps>LogSoftmax" : "TfOps>Softmax";
    absl::StatusOr<TensorShape> shape = XlaInputShape(ctx, 0);
    OP_REQUIRES_OK(ctx, shape.status());
    OP_REQUIRES_OK(ctx, CheckLogits(op, *shape));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaOp x = Widen(ctx->Input(0), type).op();
    const XlaOp m = RowReduce(x, *shape, true);
    const XlaOp e = xla::Exp(x - m);
    const XlaOp s = RowReduce(e, *shape, false);
    const XlaOp y = kLog ? x - m - xla::Log(s) : e / s;
    ctx->SetOutput(0, Narrow(XlaValue(y), XlaValue(y), type));
  }
};

template <bool kLog, bool kScaled>
class SoftmaxGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit SoftmaxGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    if (kScaled) OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
  }
  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = kLog      ? "TfOps>LogSoftmaxGrad"
                           : kScaled ? "TfOps>ScaledMaskedSoftmaxGrad"
                                     : "TfOps>SoftmaxGrad";
    absl::StatusOr<TensorShape> gs = XlaInputShape(ctx, 0);
    absl::StatusOr<TensorShape> ys = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, gs.status());
    OP_REQUIRES_OK(ctx, ys.status());
    OP_REQUIRES_OK(ctx, CheckLogits(op, *ys));
    OP_REQUIRES_OK(ctx, CheckSameShape(op, *gs, *ys));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue g = Widen(ctx->Input(0), type);
    const XlaValue y = Widen(ctx->Input(1), type);
    XlaValue dx(0.0);
    if (kLog) {
      const XlaValue sum_g(RowReduce(g.op(), *ys, false));
      dx = softmax::LogSoftmaxGrad(g, y, sum_g);
    } else {
      const XlaValue dot(RowReduce(g.op() * y.op(), *ys, false));
      dx = softmax::SoftmaxGrad(g, y, dot, XlaValue(scale_));
    }
    ctx->SetOutput(0, Narrow(dx, g, type));
  }

 private:
  float scale_ = 1.0f;
};

class ScaledMaskedSoftmaxXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit ScaledMaskedSoftmaxXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("causal", &causal_));
  }
  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = "TfOps>ScaledMaskedSoftmax";
    absl::StatusOr<TensorShape> xs = XlaInputShape(ctx, 0);
    absl::StatusOr<TensorShape> ms = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, xs.status());
    OP_REQUIRES_OK(ctx, ms.status());
    MaskLayout layout;
    OP_REQUIRES_OK(ctx, MaskLayoutOf(op, *xs, *ms, causal_, &layout));
    xla::XlaBuilder* b = ctx->builder();
    const int rank = xs->dims();
    const std::vector<int64_t> dims = Dims(*xs);
    // The mask without its size-1 axes' broadcast: aligned from the last.
    std::vector<int64_t> mapping;
    for (int i = 0; i < ms->dims(); ++i) {
      mapping.push_back(rank - ms->dims() + i);
    }
    XlaOp mask = ctx->Input(1);
    std::vector<int64_t> squeezed_dims, squeezed_map;
    for (int i = 0; i < ms->dims(); ++i) {
      if (ms->dim_size(i) == xs->dim_size(mapping[i])) {
        squeezed_dims.push_back(ms->dim_size(i));
        squeezed_map.push_back(mapping[i]);
      }
    }
    XlaOp kept = xla::BroadcastInDim(xla::Reshape(mask, squeezed_dims), dims,
                                     squeezed_map);
    if (causal_) {
      const xla::Shape iota = xla::ShapeUtil::MakeShape(xla::S64, dims);
      kept = xla::And(kept, xla::Le(xla::Iota(b, iota, rank - 1),
                                    xla::Iota(b, iota, rank - 2)));
    }
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaOp x = Widen(ctx->Input(0), type).op();
    const XlaOp v = xla::Select(kept, x * xla::ScalarLike(x, scale_),
                                NegInfLike(x));
    const XlaOp m = RowReduce(v, *xs, true);
    const XlaOp any_masked = RowReduce(
        xla::Select(kept, xla::ZerosLike(x), xla::FullLike(x, 1.0)), *xs, true);
    const XlaOp zeros = xla::And(xla::Eq(m, NegInfLike(x)),
                                 xla::Gt(any_masked, xla::ZerosLike(x)));
    const XlaOp e = xla::Select(kept, xla::Exp(v - m), xla::ZerosLike(x));
    const XlaOp s = RowReduce(e, *xs, false);
    const XlaOp y =
        xla::Select(xla::And(kept, xla::Not(zeros)), e / s, xla::ZerosLike(x));
    ctx->SetOutput(0, Narrow(XlaValue(y), XlaValue(y), type));
  }

 private:
  float scale_ = 1.0f;
  bool causal_ = false;
};

class SparseSoftmaxCrossEntropyXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit SparseSoftmaxCrossEntropyXlaOp(
      tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("label_smoothing", &p_.label_smoothing));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ignore_index", &p_.ignore_index));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("z_loss", &p_.z_loss));
  }
  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = "TfOps>SparseSoftmaxCrossEntropy";
    absl::StatusOr<TensorShape> xs = XlaInputShape(ctx, 0);
    absl::StatusOr<TensorShape> ls = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, xs.status());
    OP_REQUIRES_OK(ctx, ls.status());
    OP_REQUIRES_OK(ctx, CheckCrossEntropy(op, *xs, *ls));
    xla::XlaBuilder* b = ctx->builder();
    const std::vector<int64_t> dims = Dims(*xs);
    const int64_t classes = dims[1];
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaOp x = Widen(ctx->Input(0), type).op();
    const XlaOp labels = xla::ConvertElementType(ctx->Input(1), xla::S64);
    const XlaOp label_row = xla::BroadcastInDim(labels, dims, {0});
    const XlaOp is_label = xla::Eq(
        xla::Iota(b, xla::ShapeUtil::MakeShape(xla::S64, dims), 1), label_row);
    const XlaOp ignored = xla::Eq(
        label_row, xla::ConstantR0<int64_t>(b, p_.ignore_index));
    const XlaOp bad = xla::And(
        xla::Not(ignored),
        xla::Or(xla::Lt(label_row, xla::ConstantR0<int64_t>(b, 0)),
                xla::Ge(label_row, xla::ConstantR0<int64_t>(b, classes))));
    const XlaOp m = RowReduce(x, *xs, true);
    const XlaOp e = xla::Exp(x - m);
    const XlaOp s = RowReduce(e, *xs, false);
    const XlaValue lse(m + xla::Log(s));
    const XlaValue p(e / s);
    const XlaValue x_label(
        RowReduce(xla::Select(is_label, x, xla::ZerosLike(x)), *xs, false));
    const XlaValue x_sum(RowReduce(x, *xs, false));
    const XlaValue eps(static_cast<double>(p_.label_smoothing));
    const XlaValue z(static_cast<double>(p_.z_loss));
    const XlaValue c(static_cast<double>(classes));
    const XlaOp loss_full =
        softmax::CrossEntropyLoss(lse, x_label, x_sum, eps, c, z).Op(x);
    const XlaOp dx_full = softmax::CrossEntropyGrad(
                              p, XlaMask(is_label, x), lse, eps, c, z)
                              .Op(x);
    const XlaOp nan = xla::FullLike(x, std::nan(""));
    const auto fix = [&](XlaOp v) {
      return xla::Select(ignored, xla::ZerosLike(x),
                         xla::Select(bad, nan, v));
    };
    const XlaOp dx = fix(dx_full);
    // The loss: column 0 of the (row-constant) broadcast loss.
    const XlaOp loss = xla::Reshape(
        xla::SliceInDim(fix(loss_full), 0, 1, 1, 1), {dims[0]});
    ctx->SetOutput(0, Narrow(XlaValue(loss), XlaValue(loss), type));
    ctx->SetOutput(1, Narrow(XlaValue(dx), XlaValue(dx), type));
  }

 private:
  softmax::CrossEntropyParams p_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_SOFTMAX_XLA(DEV)                                     \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>Softmax").Device(DEV).TypeConstraint("T", kXlaDtypes),     \
      SoftmaxXlaOp<false>);                                                  \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>LogSoftmax").Device(DEV).TypeConstraint("T", kXlaDtypes),  \
      SoftmaxXlaOp<true>);                                                   \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>SoftmaxGrad").Device(DEV).TypeConstraint("T", kXlaDtypes), \
      SoftmaxGradXlaOp<false, false>);                                       \
  REGISTER_KERNEL_BUILDER(Name("TfOps>LogSoftmaxGrad")                       \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          SoftmaxGradXlaOp<true, false>);                    \
  REGISTER_KERNEL_BUILDER(Name("TfOps>ScaledMaskedSoftmaxGrad")              \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          SoftmaxGradXlaOp<false, true>);                    \
  REGISTER_KERNEL_BUILDER(Name("TfOps>ScaledMaskedSoftmax")                  \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          ScaledMaskedSoftmaxXlaOp);                         \
  REGISTER_KERNEL_BUILDER(Name("TfOps>SparseSoftmaxCrossEntropy")            \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          SparseSoftmaxCrossEntropyXlaOp);

TF_OPS_REGISTER_SOFTMAX_XLA(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_SOFTMAX_XLA(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace tf_ops

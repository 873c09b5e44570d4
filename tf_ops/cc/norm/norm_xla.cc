// XLA lowerings of the normalisation ops (norm_checks.h) on the
// XLA_CPU_JIT and XLA_GPU_JIT devices: norm_math.h's formulas with T =
// XlaValue over whole tensors, the row sums XLA reduces over the last axis
// in F32 (F64 for double), and the same shape checks as the kernels. dgamma
// and dbeta are reduces over the leading axes (XLA's reduce order is fixed
// for a given shape and device). Registered with REGISTER_KERNEL_BUILDER for
// the reason activation_xla.cc gives.

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_input_shape.h"
#include "tf_ops/cc/core/xla_value.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/lib/math.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {

// norm_math.h's square root for XlaValue (found by argument-dependent
// lookup when its templates are instantiated here).
inline XlaValue NormSqrt(const XlaValue& v) { return XlaValue(xla::Sqrt(v.op())); }

}  // namespace tf_ops

#include "tf_ops/cc/norm/norm_math.h"
#include "tf_ops/cc/norm/norm_checks.h"

namespace tf_ops {
namespace norm {
namespace {

using tensorflow::TensorShape;
using xla::XlaOp;

// Tensor-wide helpers over a [..., cols] value.
struct Rows {
  xla::XlaBuilder* b;
  xla::PrimitiveType compute;
  std::vector<int64_t> dims;  // the full shape
  int last;

  XlaOp SumLast(XlaOp v) const {
    return xla::Reduce(v, xla::Zero(b, compute),
                       xla::CreateScalarAddComputation(compute, b), {last});
  }
  XlaOp SumLeading(XlaOp v) const {
    std::vector<int64_t> leading(last);
    std::iota(leading.begin(), leading.end(), 0);
    return xla::Reduce(v, xla::Zero(b, compute),
                       xla::CreateScalarAddComputation(compute, b), leading);
  }
  // A per-row value [...] broadcast along the last axis.
  XlaValue PerRow(XlaOp v) const {
    std::vector<int64_t> map(last);
    std::iota(map.begin(), map.end(), 0);
    return XlaValue(xla::BroadcastInDim(v, dims, map));
  }
  // A per-column value [cols] broadcast over the rows.
  XlaValue PerCol(XlaOp v) const {
    return XlaValue(xla::BroadcastInDim(v, dims, {last}));
  }
};

absl::StatusOr<Rows> RowsOf(tensorflow::XlaOpKernelContext* ctx,
                            const TensorShape& x, xla::PrimitiveType type) {
  Rows r;
  r.b = ctx->builder();
  r.compute = XlaComputeType(type);
  const auto sizes = x.dim_sizes();
  r.dims.assign(sizes.begin(), sizes.end());
  r.last = x.dims() - 1;
  return r;
}

template <bool kCentered, bool kResidual>
class NormXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit NormXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, CheckEpsilon(kind_.Name(false), epsilon_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = kind_.Name(false);
    absl::StatusOr<TensorShape> x_shape = XlaInputShape(ctx, kind_.x());
    OP_REQUIRES_OK(ctx, x_shape.status());
    int64_t rows = 0, cols = 0;
    OP_REQUIRES_OK(ctx, CheckRows(op, *x_shape, &rows, &cols));
    if (kResidual) {
      absl::StatusOr<TensorShape> r =
          XlaInputShape(ctx, kind_.residual_input());
      OP_REQUIRES_OK(ctx, r.status());
      OP_REQUIRES_OK(ctx, RequireSameShape(op, "x", *x_shape, "residual", *r));
    }
    absl::StatusOr<TensorShape> g_shape = XlaInputShape(ctx, kind_.gamma());
    OP_REQUIRES_OK(ctx, g_shape.status());
    OP_REQUIRES_OK(ctx, CheckParam(op, "gamma", *x_shape, *g_shape));
    if (kCentered) {
      absl::StatusOr<TensorShape> b = XlaInputShape(ctx, kind_.beta());
      OP_REQUIRES_OK(ctx, b.status());
      OP_REQUIRES_OK(ctx, CheckParam(op, "beta", *x_shape, *b));
    }
    const xla::PrimitiveType type = ctx->input_xla_type(kind_.x());
    absl::StatusOr<Rows> rs = RowsOf(ctx, *x_shape, type);
    OP_REQUIRES_OK(ctx, rs.status());
    XlaValue x = Widen(ctx->Input(kind_.x()), type);
    if (kResidual) {
      // h = x + r rounded to T: the row normalised is the h returned.
      const XlaValue r = Widen(ctx->Input(kind_.residual_input()), type);
      const XlaOp h = Narrow(x + r, x, type);
      ctx->SetOutput(kind_.h_out(), h);
      x = Widen(h, type);
    }
    const XlaValue n(static_cast<double>(cols));
    XlaValue mean_row(0.0);
    XlaValue mean = XlaValue(0.0);
    if (kCentered) {
      mean_row = RowMean(true, XlaValue(rs->SumLast(x.op())), n);
      mean = rs->PerRow(mean_row.op());
    }
    const XlaValue dev = Deviation(x, mean);
    const XlaValue rstd_row = RowRstd(XlaValue(rs->SumLast((dev * dev).op())),
                                      n, XlaValue(static_cast<double>(epsilon_)));
    const XlaValue rstd = rs->PerRow(rstd_row.op());
    const XlaValue gamma = rs->PerCol(ctx->Input(kind_.gamma()));
    const XlaValue beta =
        kCentered ? rs->PerCol(ctx->Input(kind_.beta()))
                  : XlaValue(0.0);
    const XlaValue y = NormOutput(Normalized(x, mean, rstd), gamma, beta);
    ctx->SetOutput(kind_.y_out(), Narrow(y, x, type));
    if (kCentered) ctx->SetOutput(kind_.mean_out(), mean_row.op());
    ctx->SetOutput(kind_.rstd_out(), rstd_row.op());
  }

 private:
  static constexpr NormKind kind_{kCentered, kResidual};
  float epsilon_ = 0.0f;
};

template <bool kCentered, bool kResidual>
class NormGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit NormGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    float epsilon = 0.0f;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon));
    OP_REQUIRES_OK(ctx, CheckEpsilon(kind_.Name(true), epsilon));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = kind_.Name(true);
    const char* x_name = kResidual ? "h" : "x";
    absl::StatusOr<TensorShape> x_shape = XlaInputShape(ctx, kind_.g_x());
    OP_REQUIRES_OK(ctx, x_shape.status());
    int64_t rows = 0, cols = 0;
    OP_REQUIRES_OK(ctx, CheckRows(op, *x_shape, &rows, &cols));
    {
      absl::StatusOr<TensorShape> s = XlaInputShape(ctx, kind_.g_dy());
      OP_REQUIRES_OK(ctx, s.status());
      OP_REQUIRES_OK(ctx, RequireSameShape(op, x_name, *x_shape, "dy", *s));
    }
    if (kResidual) {
      absl::StatusOr<TensorShape> s = XlaInputShape(ctx, kind_.g_dh());
      OP_REQUIRES_OK(ctx, s.status());
      OP_REQUIRES_OK(ctx, RequireSameShape(op, x_name, *x_shape, "dh", *s));
    }
    absl::StatusOr<TensorShape> g_shape = XlaInputShape(ctx, kind_.g_gamma());
    OP_REQUIRES_OK(ctx, g_shape.status());
    OP_REQUIRES_OK(ctx, CheckParam(op, "gamma", *x_shape, *g_shape));
    if (kCentered) {
      absl::StatusOr<TensorShape> s = XlaInputShape(ctx, kind_.g_mean());
      OP_REQUIRES_OK(ctx, s.status());
      OP_REQUIRES_OK(ctx, CheckStat(op, "mean", *x_shape, *s));
    }
    absl::StatusOr<TensorShape> s = XlaInputShape(ctx, kind_.g_rstd());
    OP_REQUIRES_OK(ctx, s.status());
    OP_REQUIRES_OK(ctx, CheckStat(op, "rstd", *x_shape, *s));

    const xla::PrimitiveType type = ctx->input_xla_type(kind_.g_x());
    absl::StatusOr<Rows> rs = RowsOf(ctx, *x_shape, type);
    OP_REQUIRES_OK(ctx, rs.status());
    const XlaValue x = Widen(ctx->Input(kind_.g_x()), type);
    const XlaValue g = Widen(ctx->Input(kind_.g_dy()), type);
    const XlaValue gamma = rs->PerCol(ctx->Input(kind_.g_gamma()));
    const XlaValue mean =
        kCentered ? rs->PerRow(ctx->Input(kind_.g_mean())) : XlaValue(0.0);
    const XlaValue rstd = rs->PerRow(ctx->Input(kind_.g_rstd()));
    const XlaValue n(static_cast<double>(cols));
    const XlaValue xhat = Normalized(x, mean, rstd);
    const XlaValue gg = g * gamma;
    const XlaValue sum_gg =
        kCentered ? XlaValue(rs->SumLast(gg.op())) : XlaValue(0.0);
    const XlaValue sum_gg_xhat(rs->SumLast((gg * xhat).op()));
    GradRowConstants<XlaValue> c =
        GradConstants(kCentered, sum_gg, sum_gg_xhat, n);
    c.c_mean = kCentered ? rs->PerRow(c.c_mean.op()) : XlaValue(0.0);
    c.c_proj = rs->PerRow(c.c_proj.op());
    XlaValue dx = NormInputGrad(gg, xhat, rstd, c);
    if (kResidual) dx = dx + Widen(ctx->Input(kind_.g_dh()), type);
    ctx->SetOutput(0, Narrow(dx, x, type));
    ctx->SetOutput(1, rs->SumLeading((g * xhat).op()));
    if (kCentered) ctx->SetOutput(2, rs->SumLeading(g.op()));
  }

 private:
  static constexpr NormKind kind_{kCentered, kResidual};
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_NORM_XLA(DEV, NAME, C, R)                         \
  REGISTER_KERNEL_BUILDER(                                                \
      Name("TfOps>" NAME).Device(DEV).TypeConstraint("T", kXlaDtypes),    \
      NormXlaOp<C, R>);                                                   \
  REGISTER_KERNEL_BUILDER(Name("TfOps>" NAME "Grad")                      \
                              .Device(DEV)                                \
                              .TypeConstraint("T", kXlaDtypes),           \
                          NormGradXlaOp<C, R>);

#define TF_OPS_REGISTER_NORM_XLA_DEVICE(DEV)                 \
  TF_OPS_REGISTER_NORM_XLA(DEV, "LayerNorm", true, false)    \
  TF_OPS_REGISTER_NORM_XLA(DEV, "AddLayerNorm", true, true)  \
  TF_OPS_REGISTER_NORM_XLA(DEV, "RmsNorm", false, false)     \
  TF_OPS_REGISTER_NORM_XLA(DEV, "AddRmsNorm", false, true)
TF_OPS_REGISTER_NORM_XLA_DEVICE(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_NORM_XLA_DEVICE(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace norm
}  // namespace tf_ops

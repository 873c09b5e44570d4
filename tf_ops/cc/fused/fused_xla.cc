// XLA lowerings of the fused ops (fused_op_defs.h) for every activation in
// activation_list.h, on the XLA_CPU_JIT and XLA_GPU_JIT devices: the
// functors of activation_math.h through fused_math.h with T = XlaValue, as
// activation_xla.cc does for the plain ops, and the same shape checks as the
// kernels (fused_checks.h). The bias gradients (Bias and BiasGated
// ops) are an XLA reduce, in a fixed order, in F32 for half, bfloat16 and
// float, F64 for double: float sums in F32 here, as XLA's own BiasAddGrad
// does (the kernels sum it in double; an F64 reduce made the jit step 0.6x
// the XLA composite's speed). The grad ops read their features through
// Isolated (xla_isolated.h), as the plain grad ops do. Registered with
// REGISTER_KERNEL_BUILDER for the reason activation_xla.cc gives.

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
#include "tf_ops/cc/activation/activation_attrs.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/fused/fused_math.h"
#include "tf_ops/cc/fused/fused_checks.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_input_shape.h"
#include "tf_ops/cc/core/xla_isolated.h"
#include "tf_ops/cc/core/xla_value.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace {

using xla::XlaOp;

// Reads the activation's attributes and data_format.
template <typename Act>
class BiasXlaBase : public tensorflow::XlaOpKernel {
 public:
  explicit BiasXlaBase(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
    std::string data_format;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    nchw_ = data_format == "NCHW";
  }

 protected:
  // The bias broadcast to the features' shape, widened; checks the shapes.
  absl::StatusOr<XlaValue> BroadcastBias(tensorflow::XlaOpKernelContext* ctx,
                                         const std::string& op, int x_index,
                                         int bias_index, int* channel_axis) {
    TF_ASSIGN_OR_RETURN(const TensorShape x, XlaInputShape(ctx, x_index));
    TF_ASSIGN_OR_RETURN(const TensorShape bias, XlaInputShape(ctx, bias_index));
    BiasLayout layout;
    TF_RETURN_IF_ERROR(BiasLayoutOf(op, nchw_, x, bias, &layout));
    *channel_axis = nchw_ ? 1 : x.dims() - 1;
    const xla::PrimitiveType type = ctx->input_xla_type(x_index);
    const auto sizes = x.dim_sizes();  // one copy: begin and end of the same
    const XlaOp b = xla::BroadcastInDim(
        ctx->Input(bias_index), std::vector<int64_t>(sizes.begin(), sizes.end()),
        {*channel_axis});
    return Widen(b, type);
  }

  Act act_;
  bool nchw_ = false;
};

template <typename Act>
class BiasXlaOp : public BiasXlaBase<Act> {
 public:
  using BiasXlaBase<Act>::BiasXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    int axis = 0;
    absl::StatusOr<XlaValue> b = this->BroadcastBias(
        ctx, absl::StrCat("TfOps>Bias", Act::kName), 0, 1, &axis);
    OP_REQUIRES_OK(ctx, b.status());
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue x = Widen(ctx->Input(0), type);
    ctx->SetOutput(0, Narrow(BiasForwardOf(this->act_, x, *b), x, type));
  }
};

template <typename Act>
class BiasGradXlaOp : public BiasXlaBase<Act> {
 public:
  using BiasXlaBase<Act>::BiasXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = absl::StrCat("TfOps>Bias", Act::kName, "Grad");
    absl::StatusOr<TensorShape> g_shape = XlaInputShape(ctx, 0);
    absl::StatusOr<TensorShape> x_shape = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, g_shape.status());
    OP_REQUIRES_OK(ctx, x_shape.status());
    OP_REQUIRES_OK(ctx, RequireSameShape(op, "gradients", *g_shape,
                                         "features", *x_shape));
    int axis = 0;
    absl::StatusOr<XlaValue> b = this->BroadcastBias(ctx, op, 1, 2, &axis);
    OP_REQUIRES_OK(ctx, b.status());
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue g = Widen(ctx->Input(0), type);
    const XlaValue x = Widen(Isolated(ctx, ctx->Input(1), Use::kGrad), type);
    const XlaOp dx = BiasGradOf(this->act_, g, x, *b).Op(x.op());
    ctx->SetOutput(0, Narrow(XlaValue(dx), x, type));
    // The bias gradient: dx before rounding, summed in the accumulation type.
    const xla::PrimitiveType acc = XlaComputeType(type);
    std::vector<int64_t> dims;
    for (int d = 0; d < x_shape->dims(); ++d) {
      if (d != axis) dims.push_back(d);
    }
    xla::XlaBuilder* builder = ctx->builder();
    const XlaOp sum =
        xla::Reduce(xla::ConvertElementType(dx, acc), xla::Zero(builder, acc),
                    xla::CreateScalarAddComputation(acc, builder), dims);
    ctx->SetOutput(1, xla::ConvertElementType(sum, type));
  }
};

// Add{Act}: f(x + a), a of x's shape.
template <typename Act>
class AddXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit AddXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    absl::StatusOr<TensorShape> x_shape = XlaInputShape(ctx, 0);
    absl::StatusOr<TensorShape> a_shape = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, x_shape.status());
    OP_REQUIRES_OK(ctx, a_shape.status());
    BiasLayout layout;
    OP_REQUIRES_OK(ctx, AddLayoutOf(absl::StrCat("TfOps>Add", Act::kName),
                                    *x_shape, *a_shape, &layout));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue x = Widen(ctx->Input(0), type);
    const XlaValue a = Widen(ctx->Input(1), type);
    ctx->SetOutput(0, Narrow(BiasForwardOf(act_, x, a), x, type));
  }

 private:
  Act act_;
};

// Gated{Act} (kBias false) and BiasGated{Act} (true: the bias, the input
// after the features, is added before the split).
template <typename Act, bool kBias>
class GatedXlaBase : public tensorflow::XlaOpKernel {
 public:
  explicit GatedXlaBase(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

 protected:
  static std::string OpName(const char* suffix = "") {
    return absl::StrCat("TfOps>", kBias ? "BiasGated" : "Gated", Act::kName,
                        suffix);
  }

  // The two halves of input x_index (plus the bias), widened; checks the
  // shapes.
  absl::Status Halves(tensorflow::XlaOpKernelContext* ctx,
                      const std::string& op, int x_index, bool isolate,
                      TensorShape* out, XlaValue* a, XlaValue* b) {
    TF_ASSIGN_OR_RETURN(const TensorShape x, XlaInputShape(ctx, x_index));
    int64_t half = 0;
    TF_RETURN_IF_ERROR(GatedHalf(op, x, &half));
    *out = x;
    out->set_dim(x.dims() - 1, half);
    const int last = x.dims() - 1;
    const xla::PrimitiveType type = ctx->input_xla_type(x_index);
    // The grad op's features go through Isolated (xla_isolated.h).
    const XlaOp features = isolate
                               ? Isolated(ctx, ctx->Input(x_index), Use::kGrad)
                               : ctx->Input(x_index);
    XlaOp a_op = xla::SliceInDim(features, 0, half, 1, last);
    XlaOp b_op = xla::SliceInDim(features, half, 2 * half, 1, last);
    *a = Widen(a_op, type);
    *b = Widen(b_op, type);
    if (kBias) {
      TF_ASSIGN_OR_RETURN(const TensorShape bias,
                          XlaInputShape(ctx, x_index + 1));
      TF_RETURN_IF_ERROR(CheckGatedBias(op, x, bias));
      const XlaOp bias_op = ctx->Input(x_index + 1);
      const auto sizes = out->dim_sizes();
      const std::vector<int64_t> dims(sizes.begin(), sizes.end());
      *a = *a + Widen(xla::BroadcastInDim(
                          xla::SliceInDim(bias_op, 0, half, 1, 0), dims,
                          {last}),
                      type);
      *b = *b + Widen(xla::BroadcastInDim(
                          xla::SliceInDim(bias_op, half, 2 * half, 1, 0),
                          dims, {last}),
                      type);
    }
    return absl::OkStatus();
  }

  Act act_;
};

template <typename Act, bool kBias>
class GatedXlaOp : public GatedXlaBase<Act, kBias> {
 public:
  using GatedXlaBase<Act, kBias>::GatedXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    TensorShape out;
    XlaValue a(0.0), b(0.0);  // set by Halves
    OP_REQUIRES_OK(ctx, this->Halves(ctx, this->OpName(), 0,
                                     /*isolate=*/false, &out, &a, &b));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    ctx->SetOutput(0, Narrow(GatedForwardOf(this->act_, a, b), a, type));
  }
};

template <typename Act, bool kBias>
class GatedGradXlaOp : public GatedXlaBase<Act, kBias> {
 public:
  using GatedXlaBase<Act, kBias>::GatedXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = this->OpName("Grad");
    TensorShape out;
    XlaValue a(0.0), b(0.0);  // set by Halves
    OP_REQUIRES_OK(ctx, this->Halves(ctx, op, 1, /*isolate=*/true, &out, &a,
                                     &b));
    absl::StatusOr<TensorShape> g_shape = XlaInputShape(ctx, 0);
    OP_REQUIRES_OK(ctx, g_shape.status());
    OP_REQUIRES(ctx, *g_shape == out,
                absl::InvalidArgumentError(absl::StrCat(
                    op, ": gradients must have the shape of the activations "
                    "(the features' with the last axis halved), got "
                    "gradients ", g_shape->DebugString(), " and features ",
                    XlaInputShape(ctx, 1)->DebugString())));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue g = Widen(ctx->Input(0), type);
    const GatedGradValues<XlaValue> d = GatedGradOf(this->act_, g, a, b);
    const int last = out.dims() - 1;
    ctx->SetOutput(0, xla::ConcatInDim(ctx->builder(),
                                       {Narrow(d.d_a, a, type),
                                        Narrow(d.d_b, a, type)},
                                       last));
    if (!kBias) return;
    // The bias gradient: each half's dx before rounding, summed over every
    // axis but the last in the accumulation type, as the Bias ops'.
    const xla::PrimitiveType acc = XlaComputeType(type);
    std::vector<int64_t> dims(last);
    for (int i = 0; i < last; ++i) dims[i] = i;
    xla::XlaBuilder* builder = ctx->builder();
    auto sum = [&](const XlaValue& v) {
      return xla::Reduce(xla::ConvertElementType(v.Op(a.op()), acc),
                         xla::Zero(builder, acc),
                         xla::CreateScalarAddComputation(acc, builder), dims);
    };
    ctx->SetOutput(1, xla::ConvertElementType(
                          xla::ConcatInDim(builder, {sum(d.d_a), sum(d.d_b)},
                                           0),
                          type));
  }
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_FUSED_XLA_KERNELS(DEV, Act)                          \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>Bias" #Act).Device(DEV).TypeConstraint("T", kXlaDtypes),   \
      BiasXlaOp<Act>);                                                       \
  REGISTER_KERNEL_BUILDER(Name("TfOps>Bias" #Act "Grad")                     \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          BiasGradXlaOp<Act>);                               \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>Add" #Act).Device(DEV).TypeConstraint("T", kXlaDtypes),    \
      AddXlaOp<Act>);                                                        \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>Gated" #Act).Device(DEV).TypeConstraint("T", kXlaDtypes),  \
      GatedXlaOp<Act, false>);                                               \
  REGISTER_KERNEL_BUILDER(Name("TfOps>Gated" #Act "Grad")                    \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          GatedGradXlaOp<Act, false>);                       \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BiasGated" #Act)                       \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          GatedXlaOp<Act, true>);                            \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BiasGated" #Act "Grad")                \
                              .Device(DEV)                                   \
                              .TypeConstraint("T", kXlaDtypes),              \
                          GatedGradXlaOp<Act, true>);

#define TF_OPS_REGISTER_FUSED_XLA(Act)                                   \
  TF_OPS_REGISTER_FUSED_XLA_KERNELS(tensorflow::DEVICE_CPU_XLA_JIT, Act) \
  TF_OPS_REGISTER_FUSED_XLA_KERNELS(tensorflow::DEVICE_GPU_XLA_JIT, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_FUSED_XLA)

}  // namespace tf_ops

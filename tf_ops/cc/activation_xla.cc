// XLA lowerings: every op in activation_list.h, forward and grad op, for
// tf.function(jit_compile=True) and Keras jit_compile,
// on the XLA_CPU_JIT and XLA_GPU_JIT devices.
//
// Each activation gets one pair of overloads, XlaForward and XlaBackward, that
// build the same math as its functor in activation_math.h from XLA builder ops
// (same formulas, branches and limits); the two kernel templates below read
// the attributes with the same ReadAttrs as the CPU/GPU kernels and do the
// dtype handling, so adding an activation means adding its two overloads.
//
// This is a translation unit of its own because the tf2xla/XLA headers are
// heavy (most of this file's compile time); CMake leaves it out with
// -DTF_OPS_XLA=OFF, and the Python wrappers then fall back to TF composites
// inside XLA (tf_ops/python/composites.py).
//
// Kernels are registered with REGISTER_KERNEL_BUILDER on the JIT devices, not
// with REGISTER_XLA_OP: XlaOpRegistry turns its entries into kernels only once
// per process, at the first XLA compilation, so a library loaded after any
// jit compile would not be seen.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tf_ops/cc/activation_attrs.h"
#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/activation_math.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/lib/math.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace {

using xla::XlaOp;

// ------------------------------------------------------------- helpers ----

// A scalar of x's element type; binary ops broadcast it.
XlaOp Const(XlaOp like, double value) { return xla::ScalarLike(like, value); }

// x * w, except that an infinite x times a zero w gives a signed zero where
// IEEE gives NaN; NaN still propagates (activation_math.h's SafeMul).
XlaOp SafeMul(XlaOp x, XlaOp w) {
  return xla::Select(xla::And(xla::IsInf(x), xla::Eq(w, Const(w, 0))),
                     xla::Sign(x) * w, x * w);
}

// s = 1 / (1 + e^-z) and sm = 1 - s, both accurate in the tails, from one
// exponential (activation_math.h's Logistic).
struct LogisticParts {
  XlaOp s, sm;
};
LogisticParts SplitLogistic(XlaOp z) {
  const XlaOp e = xla::Exp(-z);
  const XlaOp s = Const(z, 1) / (Const(z, 1) + e);
  return {s, xla::Select(xla::Gt(s, Const(s, 0.5)), e * s, Const(s, 1) - s)};
}

// ----------------------------------------------------------- lowerings ----
// x, g, v are in the compute type: F32 for half, bfloat16 and float, F64 for
// double. Float attributes are float32 (as TF stores them) widened exactly.

XlaOp XlaForward(const LeakyRelu& op, XlaOp x) {
  return xla::Select(xla::Gt(x, Const(x, 0)), x,
                     SafeMul(x, Const(x, op.alpha)));
}
XlaOp XlaBackward(const LeakyRelu& op, XlaOp g, XlaOp x) {
  return xla::Select(xla::Gt(x, Const(x, 0)), g, Const(g, op.alpha) * g);
}

XlaOp XlaForward(const Elu& op, XlaOp x) {
  return xla::Select(xla::Gt(x, Const(x, 0)), x,
                     Const(x, op.alpha) * xla::Expm1(x));
}
// y + alpha. XLA's simplifier folds y + 0 into y, which keeps a -0 where
// IEEE (and the CPU kernel) gives +0; with alpha = 0 every negative input has
// y = -0, so that case is spelled out.
XlaOp PlusAlpha(XlaOp y, float alpha) {
  if (alpha != 0.0f) return y + Const(y, alpha);
  return xla::Select(xla::Eq(y, Const(y, 0)), xla::ZerosLike(y), y);
}
// From the outputs y, as the CPU kernel: g where y > 0, else g (y + alpha).
XlaOp XlaBackward(const Elu& op, XlaOp g, XlaOp y) {
  return xla::Select(xla::Gt(y, Const(y, 0)), g, g * PlusAlpha(y, op.alpha));
}

using GeluExact = GeluFormula<false>;
using GeluTanh = GeluFormula<true>;

// Phi(x) = erfc(-x / sqrt(2)) / 2, accurate for negative x.
XlaOp Phi(XlaOp x) {
  return Const(x, 0.5) * xla::Erfc(-Const(x, GeluExact::kInvSqrt2) * x);
}
// 2u = 2 sqrt(2/pi) (x + 0.044715 x^3); 0.5 (1 + tanh u) = sigmoid(2u).
XlaOp TwoU(XlaOp x) {
  return Const(x, 2 * GeluTanh::kSqrt2OverPi) *
         (x + Const(x, GeluTanh::kTanhCoeff) * x * x * x);
}

XlaOp XlaForward(const Gelu& op, XlaOp x) {
  if (op.approximate) return SafeMul(x, SplitLogistic(TwoU(x)).s);
  return SafeMul(x, Phi(x));
}
XlaOp XlaBackward(const Gelu& op, XlaOp g, XlaOp x) {
  if (op.approximate) {
    // f' = s + x s (1 - s) (2u)'.
    const LogisticParts l = SplitLogistic(TwoU(x));
    const XlaOp two_u_prime =
        Const(x, 2 * GeluTanh::kSqrt2OverPi) *
        (Const(x, 1) + Const(x, 3 * GeluTanh::kTanhCoeff) * x * x);
    return g * (l.s + SafeMul(x * two_u_prime, l.s * l.sm));
  }
  // f' = Phi(x) + x phi(x).
  const XlaOp phi =
      Const(x, GeluExact::kInvSqrt2Pi) * xla::Exp(Const(x, -0.5) * x * x);
  return g * (Phi(x) + SafeMul(x, phi));
}

XlaOp XlaForward(const Swish& op, XlaOp x) {
  return SafeMul(x, SplitLogistic(SafeMul(x, Const(x, op.beta))).s);
}
XlaOp XlaBackward(const Swish& op, XlaOp g, XlaOp x) {
  // f' = s (1 + z (1 - s)), z = beta x.
  const XlaOp z = SafeMul(x, Const(x, op.beta));
  const LogisticParts l = SplitLogistic(z);
  return g * (l.s + SafeMul(z, l.s * l.sm));
}

// tanh(softplus(x)) = n (n + 2) / (n (n + 2) + 2), n = e^x, below the cut-off;
// beyond it the CPU kernel returns x (forward) and g (backward).
XlaOp XlaForward(const Mish&, XlaOp x) {
  const XlaOp n = xla::Exp(x);
  const XlaOp num = n * (n + Const(x, 2));
  return xla::Select(xla::Gt(x, Const(x, Mish::kCutoff)), x,
                     SafeMul(x, num / (num + Const(x, 2))));
}
XlaOp XlaBackward(const Mish&, XlaOp g, XlaOp x) {
  // f' = t + x (1 - t^2) sigmoid(x), with 1 - t^2 = 4 (num + 1) / d^2.
  const XlaOp n = xla::Exp(x);
  const XlaOp num = n * (n + Const(x, 2));
  const XlaOp d = num + Const(x, 2);
  const XlaOp one_minus_t2 = Const(x, 4) * (num + Const(x, 1)) / (d * d);
  const XlaOp sigmoid = n / (Const(x, 1) + n);
  return xla::Select(xla::Gt(x, Const(x, Mish::kCutoff)), g,
                     g * (num / d + SafeMul(x, one_minus_t2 * sigmoid)));
}

// relu6(x + 3) / 6 as selects, so that NaN stays with x (as the CPU kernel).
XlaOp XlaForward(const HardSwish&, XlaOp x) {
  XlaOp r = x + Const(x, 3);
  r = xla::Select(xla::Gt(r, Const(r, 0)), r, xla::ZerosLike(r));
  r = xla::Select(xla::Lt(r, Const(r, 6)), r, Const(r, 6) + xla::ZerosLike(r));
  return SafeMul(x, r * Const(r, 1.0 / 6.0));
}
XlaOp XlaBackward(const HardSwish&, XlaOp g, XlaOp x) {
  const XlaOp inside = (Const(x, 2) * x + Const(x, 3)) * Const(x, 1.0 / 6.0);
  const XlaOp slope = xla::Select(
      xla::Le(x, Const(x, -3)), xla::ZerosLike(x),
      xla::Select(xla::Ge(x, Const(x, 3)), xla::ZerosLike(x) + Const(x, 1),
                  inside));
  return g * slope;
}

// ------------------------------------------------------------- kernels ----

// Half and bfloat16 are computed in float and rounded once, double in double.
xla::PrimitiveType ComputeType(xla::PrimitiveType type) {
  return type == xla::F64 ? xla::F64 : xla::F32;
}
XlaOp Widen(XlaOp x, xla::PrimitiveType type) {
  const xla::PrimitiveType compute = ComputeType(type);
  return compute == type ? x : xla::ConvertElementType(x, compute);
}
XlaOp Narrow(XlaOp y, xla::PrimitiveType type) {
  return ComputeType(type) == type ? y : xla::ConvertElementType(y, type);
}

template <typename Op>
class ActivationXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit ActivationXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    ctx->SetOutput(0, Narrow(XlaForward(op_, Widen(ctx->Input(0), type)), type));
  }

 private:
  Op op_;
};

template <typename Op>
class ActivationGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit ActivationGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    // Shapes are static here, so this fails at compile time, with the CPU
    // kernel's message.
    absl::StatusOr<xla::Shape> g_shape = ctx->InputXlaShape(0);
    OP_REQUIRES_OK(ctx, g_shape.status());
    absl::StatusOr<xla::Shape> v_shape = ctx->InputXlaShape(1);
    OP_REQUIRES_OK(ctx, v_shape.status());
    OP_REQUIRES(ctx, g_shape->dimensions() == v_shape->dimensions(),
                absl::InvalidArgumentError(absl::StrCat(
                    "TfOps>", Op::kName, "Grad: gradients and ",
                    Op::kGradTakesOutputs ? "outputs" : "features",
                    " must have the same shape, got ",
                    tensorflow::TensorShape(g_shape->dimensions()).DebugString(),
                    " and ",
                    tensorflow::TensorShape(v_shape->dimensions()).DebugString())));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    ctx->SetOutput(0, Narrow(XlaBackward(op_, Widen(ctx->Input(0), type),
                                         Widen(ctx->Input(1), type)),
                             type));
  }

 private:
  Op op_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_XLA_KERNELS(DEV, Act)                             \
  REGISTER_KERNEL_BUILDER(                                                \
      Name("TfOps>" #Act).Device(DEV).TypeConstraint("T", kXlaDtypes),    \
      ActivationXlaOp<Act>);                                              \
  REGISTER_KERNEL_BUILDER(Name("TfOps>" #Act "Grad")                      \
                              .Device(DEV)                                \
                              .TypeConstraint("T", kXlaDtypes),           \
                          ActivationGradXlaOp<Act>);

#define TF_OPS_REGISTER_XLA(Act)                                        \
  TF_OPS_REGISTER_XLA_KERNELS(tensorflow::DEVICE_CPU_XLA_JIT, Act)      \
  TF_OPS_REGISTER_XLA_KERNELS(tensorflow::DEVICE_GPU_XLA_JIT, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_XLA)

}  // namespace tf_ops

// XLA lowerings: every op of every activation in activation_list.h (forward,
// grad and grad-grad op), for tf.function(jit_compile=True) and Keras
// jit_compile, on the XLA_CPU_JIT and XLA_GPU_JIT devices.
//
// Nothing here is per activation: the kernels below instantiate the
// activation's functor (activation_math.h) with T = XlaValue (xla_value.h),
// so the XLA graph is built by the very code the CPU and CUDA kernels run,
// and read the attributes with the same ReadAttrs. They add what XLA needs
// around it: dtypes (half and bfloat16 computed in F32 and rounded once,
// double in F64), shape checks, and the isolation of each op's math
// (Isolated, xla_isolated.h).
//
// This is a translation unit of its own because the tf2xla/XLA headers are
// heavy (most of this file's compile time); CMake leaves it out with
// -DTF_OPS_XLA=OFF, and the Python wrappers then fall back to TF composites
// inside XLA (tf_ops/python/activation/composites.py).
//
// Kernels are registered with REGISTER_KERNEL_BUILDER on the JIT devices, not
// with REGISTER_XLA_OP: XlaOpRegistry turns its entries into kernels only once
// per process, at the first XLA compilation, so a library loaded after any
// jit compile would not be seen.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tf_ops/cc/activation/activation_attrs.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_isolated.h"
#include "tf_ops/cc/core/xla_value.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace {

using xla::XlaOp;

// "a", "a and b", "a, b and c".
std::string JoinAnd(std::vector<std::string> items) {
  const std::string last = items.back();
  items.pop_back();
  return items.empty() ? last
                       : absl::StrCat(absl::StrJoin(items, ", "), " and ", last);
}

// Fails the compilation, with the CPU kernel's message, unless all inputs
// have one shape (shapes are static here, and dynamic ones in TF graphs are
// only known now).
template <typename Op>
absl::Status CheckSameShapes(tensorflow::XlaOpKernelContext* ctx,
                             const char* suffix,
                             const std::vector<const char*>& names) {
  std::vector<std::string> shapes;
  bool same = true;
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    absl::StatusOr<xla::Shape> shape = ctx->InputXlaShape(i);
    TF_RETURN_IF_ERROR(shape.status());
    shapes.push_back(
        tensorflow::TensorShape(shape->dimensions()).DebugString());
    same = same && shapes.back() == shapes.front();
  }
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "TfOps>", Op::kName, suffix, ": ",
      JoinAnd(std::vector<std::string>(names.begin(), names.end())),
      " must have the same shape, got ", JoinAnd(shapes)));
}

// The name of the grad op's input v.
template <typename Op>
const char* VName() {
  return Op::kGradTakesOutputs ? "outputs" : "features";
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
    const XlaValue x = Widen(ctx->Input(0), type);
    ctx->SetOutput(0, Narrow(ForwardOf(op_, x), x, type));
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
    OP_REQUIRES_OK(ctx, CheckSameShapes<Op>(ctx, "Grad",
                                            {"gradients", VName<Op>()}));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue g = Widen(ctx->Input(0), type);
    const XlaValue v = Widen(Isolated(ctx, ctx->Input(1), Use::kGrad), type);
    ctx->SetOutput(0, Narrow(GradOf(op_, g, v), v, type));
  }

 private:
  Op op_;
};

template <typename Op>
class ActivationGradGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit ActivationGradGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx,
                   CheckSameShapes<Op>(ctx, "GradGrad",
                                       {"upstream", "gradients", VName<Op>()}));
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const XlaValue u = Widen(ctx->Input(0), type);
    const XlaValue g = Widen(ctx->Input(1), type);
    // Each output from its own isolated v; XLA removes an output nothing uses,
    // with all that only it needed (the unused half of each GradGradOf).
    const XlaValue v1 =
        Widen(Isolated(ctx, ctx->Input(2), Use::kGradGradFirst), type);
    const XlaValue v2 =
        Widen(Isolated(ctx, ctx->Input(2), Use::kGradGradSecond), type);
    ctx->SetOutput(0, Narrow(GradGradOf(op_, u, g, v1).d_gradients, v1, type));
    ctx->SetOutput(1, Narrow(GradGradOf(op_, u, g, v2).d_v, v2, type));
  }

 private:
  Op op_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_XLA_KERNELS(DEV, Act)                              \
  REGISTER_KERNEL_BUILDER(                                                 \
      Name("TfOps>" #Act).Device(DEV).TypeConstraint("T", kXlaDtypes),     \
      ActivationXlaOp<Act>);                                               \
  REGISTER_KERNEL_BUILDER(Name("TfOps>" #Act "Grad")                       \
                              .Device(DEV)                                 \
                              .TypeConstraint("T", kXlaDtypes),            \
                          ActivationGradXlaOp<Act>);                       \
  REGISTER_KERNEL_BUILDER(Name("TfOps>" #Act "GradGrad")                   \
                              .Device(DEV)                                 \
                              .TypeConstraint("T", kXlaDtypes),            \
                          ActivationGradGradXlaOp<Act>);

#define TF_OPS_REGISTER_XLA(Act)                                   \
  TF_OPS_REGISTER_XLA_KERNELS(tensorflow::DEVICE_CPU_XLA_JIT, Act) \
  TF_OPS_REGISTER_XLA_KERNELS(tensorflow::DEVICE_GPU_XLA_JIT, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_XLA)

}  // namespace tf_ops

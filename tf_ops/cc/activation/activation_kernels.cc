// Kernel registrations: every activation in activation_list.h, forward, grad
// and grad-grad op, for half, bfloat16, float and double, on one device
// (core/kernel_helpers.h's TF_OPS_REGISTER_KERNELS: this file is compiled once
// for the CPU and once for the GPU). Nothing here is per-op or per-device: the
// list drives it.

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_kernels.h"

namespace tf_ops {

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_ACTIVATION(DEV, TAG, T, Act)                 \
  REGISTER_KERNEL_BUILDER(                                          \
      Name("TfOps>" #Act).Device(DEV).TypeConstraint<T>("T"),        \
      ActivationOp<TAG, T, Act>);                                   \
  REGISTER_KERNEL_BUILDER(                                          \
      Name("TfOps>" #Act "Grad").Device(DEV).TypeConstraint<T>("T"), \
      ActivationGradOp<TAG, T, Act>);                               \
  REGISTER_KERNEL_BUILDER(Name("TfOps>" #Act "GradGrad")            \
                              .Device(DEV)                          \
                              .TypeConstraint<T>("T"),              \
                          ActivationGradGradOp<TAG, T, Act>);
#define TF_OPS_REGISTER_ACTIVATION_KERNELS(Act) \
  TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_ACTIVATION, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_ACTIVATION_KERNELS)

}  // namespace tf_ops

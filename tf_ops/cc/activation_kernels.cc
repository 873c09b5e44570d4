// Kernel registrations: every activation in activation_list.h, forward, grad
// and grad-grad op, for half, bfloat16, float and double, on CPU and (when built with
// CUDA) GPU. Nothing here is per-op: the list drives it.

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/elementwise_kernel.h"

namespace tf_ops {

using tensorflow::DEVICE_CPU;
using tensorflow::DEVICE_GPU;
using tensorflow::register_kernel::Name;

// DEV is TF's device name (DEVICE_CPU, DEVICE_GPU), TAG our executor's tag.
#define TF_OPS_REGISTER_KERNELS(DEV, TAG, Act, T)                    \
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

#define TF_OPS_REGISTER_ALL_DTYPES(DEV, TAG, Act)           \
  TF_OPS_REGISTER_KERNELS(DEV, TAG, Act, Eigen::half)       \
  TF_OPS_REGISTER_KERNELS(DEV, TAG, Act, Eigen::bfloat16)   \
  TF_OPS_REGISTER_KERNELS(DEV, TAG, Act, float)             \
  TF_OPS_REGISTER_KERNELS(DEV, TAG, Act, double)

#define TF_OPS_REGISTER_CPU(Act) \
  TF_OPS_REGISTER_ALL_DTYPES(DEVICE_CPU, CpuDevice, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_CPU)

#if TF_OPS_WITH_CUDA
#define TF_OPS_REGISTER_GPU(Act) \
  TF_OPS_REGISTER_ALL_DTYPES(DEVICE_GPU, GpuDevice, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_GPU)
#endif

}  // namespace tf_ops

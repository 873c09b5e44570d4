// Kernel registrations: every activation in activation_list.h, forward, grad
// and grad-grad op, for half, bfloat16, float and double, on one device. Nothing
// here is per-op or per-device: the list drives it, and this file is compiled
// twice:
//   TF_OPS_WITH_CUDA=0: CPU kernels, into _tf_ops.so (with the ops);
//   TF_OPS_WITH_CUDA=1: GPU kernels, into _tf_ops_gpu.so, which the loader
//                       loads only where the driver can run them.

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/elementwise_kernel.h"

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

#if TF_OPS_WITH_CUDA
#define TF_OPS_REGISTER_DEVICE(Act) \
  TF_OPS_REGISTER_ALL_DTYPES(DEVICE_GPU, GpuDevice, Act)
#else
#define TF_OPS_REGISTER_DEVICE(Act) \
  TF_OPS_REGISTER_ALL_DTYPES(DEVICE_CPU, CpuDevice, Act)
#endif
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_DEVICE)

}  // namespace tf_ops

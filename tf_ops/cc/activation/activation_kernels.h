// One OpKernel template for every activation's forward op, one for every grad
// op and one for every grad-grad op (the grad op's gradient), templated on
// device, dtype and the functor from activation_math.h.
// They validate, allocate (reusing an input buffer when TensorFlow allows) and
// hand the flat buffers to the device's executor:
//   CPU: the loops of activation_cpu.h, sharded over TF's intra-op pool;
//   GPU: the launchers of cu/activation/activation_gpu.h, on the op's CUDA
//        stream.

#ifndef TF_OPS_CC_ACTIVATION_KERNELS_H_
#define TF_OPS_CC_ACTIVATION_KERNELS_H_

#include <cstdint>
#include <optional>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"
#include "tf_ops/cc/activation/activation_attrs.h"
#include "tf_ops/cc/activation/activation_cpu.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/huge_pages.h"
#include "tf_ops/cc/core/kernel_helpers.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/activation/activation_gpu.h"
#endif

namespace tf_ops {

template <typename Device>
struct Executor;

template <>
struct Executor<CpuDevice> {
  // Op::kCyclesPerElement: rough cycles per element for the pool's cost
  // model, so small tensors run on the calling thread, large ones on all
  // cores.
  template <typename Op, typename T>
  static absl::Status Forward(tensorflow::OpKernelContext* ctx, const Op& op,
                              const T* x, T* y, int64_t n) {
    AdviseFreshOutput(y, n * sizeof(T), {x});
    CpuParallelFor(ctx, n, Op::kCyclesPerElement,
                   [&](int64_t begin, int64_t end) {
                     CpuForward(op, DtypeOf<T>(), x, y, begin, end);
                   });
    return absl::OkStatus();
  }

  template <typename Op, typename T>
  static absl::Status Backward(tensorflow::OpKernelContext* ctx, const Op& op,
                               const T* g, const T* v, T* dx, int64_t n) {
    AdviseFreshOutput(dx, n * sizeof(T), {g, v});
    CpuParallelFor(ctx, n, Op::kCyclesPerElement,
                   [&](int64_t begin, int64_t end) {
                     CpuBackward(op, DtypeOf<T>(), g, v, dx, begin, end);
                   });
    return absl::OkStatus();
  }

  // d_g or d_v may be null (output not required).
  template <typename Op, typename T>
  static absl::Status GradGrad(tensorflow::OpKernelContext* ctx, const Op& op,
                               const T* u, const T* g, const T* v, T* d_g,
                               T* d_v, int64_t n) {
    for (T* out : {d_g, d_v}) {
      if (out != nullptr) AdviseFreshOutput(out, n * sizeof(T), {u, g, v});
    }
    // Both derivatives in one pass: about twice the forward's work.
    CpuParallelFor(ctx, n, 2 * Op::kCyclesPerElement,
                   [&](int64_t begin, int64_t end) {
                     CpuGradGrad(op, DtypeOf<T>(), u, g, v, d_g, d_v, begin,
                                 end);
                   });
    return absl::OkStatus();
  }
};

#if TF_OPS_WITH_CUDA
template <>
struct Executor<GpuDevice> {
  template <typename Op, typename T>
  static absl::Status Forward(tensorflow::OpKernelContext* ctx, const Op& op,
                              const T* x, T* y, int64_t n) {
    return Check<Op>(LaunchForward(op, DtypeOf<T>(), x, y, n, GpuStream(ctx)));
  }

  template <typename Op, typename T>
  static absl::Status Backward(tensorflow::OpKernelContext* ctx, const Op& op,
                               const T* g, const T* v, T* dx, int64_t n) {
    return Check<Op>(
        LaunchBackward(op, DtypeOf<T>(), g, v, dx, n, GpuStream(ctx)));
  }

  template <typename Op, typename T>
  static absl::Status GradGrad(tensorflow::OpKernelContext* ctx, const Op& op,
                               const T* u, const T* g, const T* v, T* d_g,
                               T* d_v, int64_t n) {
    return Check<Op>(LaunchGradGrad(op, DtypeOf<T>(), u, g, v, d_g, d_v, n,
                                    GpuStream(ctx)));
  }

 private:
  template <typename Op>
  static absl::Status Check(const char* cuda_error) {
    if (cuda_error == nullptr) return absl::OkStatus();
    return LaunchStatus(absl::StrCat("TfOps>", Op::kName), cuda_error);
  }
};
#endif  // TF_OPS_WITH_CUDA

// activations = f(features), any shape.
template <typename Device, typename T, typename Op>
class ActivationOp : public tensorflow::OpKernel {
 public:
  explicit ActivationOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, Executor<Device>::Forward(ctx, op_, x.flat<T>().data(),
                                                  y->flat<T>().data(), n));
  }

 private:
  Op op_;
};

// backprops = gradients * f'(v), where v is the features or the outputs.
// The two inputs must have the same shape: checked here at run time, since a
// graph with unknown dimensions (or an eager call) passes the shape function.
template <typename Device, typename T, typename Op>
class ActivationGradOp : public tensorflow::OpKernel {
 public:
  explicit ActivationGradOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& g = ctx->input(0);
    const tensorflow::Tensor& v = ctx->input(1);
    OP_REQUIRES(
        ctx, g.shape() == v.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "TfOps>", Op::kName, "Grad: gradients and ",
            Op::kGradTakesOutputs ? "outputs" : "features",
            " must have the same shape, got ", g.shape().DebugString(),
            " and ", v.shape().DebugString())));
    tensorflow::Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0,
                                                              g.shape(), &dx));
    const int64_t n = g.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, Executor<Device>::Backward(
                            ctx, op_, g.flat<T>().data(), v.flat<T>().data(),
                            dx->flat<T>().data(), n));
  }

 private:
  Op op_;
};

// The grad op's gradient: from upstream gradients u (one per output of the
// grad op), d_gradients = u * f'(v) and d_features (d_outputs for Elu) =
// u * gradients * f''(v), in one pass. The three inputs must have one shape.
// An output nothing consumes (TF tells the kernel) is neither allocated nor
// computed: the second derivative d2y/dx2 of a tape needs only d_v.
template <typename Device, typename T, typename Op>
class ActivationGradGradOp : public tensorflow::OpKernel {
 public:
  explicit ActivationGradGradOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &op_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& u = ctx->input(0);
    const tensorflow::Tensor& g = ctx->input(1);
    const tensorflow::Tensor& v = ctx->input(2);
    OP_REQUIRES(
        ctx, u.shape() == g.shape() && u.shape() == v.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "TfOps>", Op::kName, "GradGrad: upstream, gradients and ",
            Op::kGradTakesOutputs ? "outputs" : "features",
            " must have the same shape, got ", u.shape().DebugString(), ", ",
            g.shape().DebugString(), " and ", v.shape().DebugString())));
    // Each output may take over the buffer of an input it is computed from
    // (element for element, so the engines allow it).
    tensorflow::Tensor* d_g = nullptr;
    tensorflow::Tensor* d_v = nullptr;
    if (ctx->output_required(0)) {
      OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 2}, 0,
                                                                u.shape(), &d_g));
    }
    if (ctx->output_required(1)) {
      OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({1, 2}, 1,
                                                                u.shape(), &d_v));
    }
    const int64_t n = u.NumElements();
    if (n == 0 || (d_g == nullptr && d_v == nullptr)) return;
    OP_REQUIRES_OK(
        ctx, Executor<Device>::GradGrad(
                 ctx, op_, u.flat<T>().data(), g.flat<T>().data(),
                 v.flat<T>().data(),
                 d_g == nullptr ? nullptr : d_g->flat<T>().data(),
                 d_v == nullptr ? nullptr : d_v->flat<T>().data(), n));
  }

 private:
  Op op_;
};

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_KERNELS_H_

// Kernels of the softmax family (softmax_ops.cc), for half, bfloat16, float
// and double. They check shapes at run time (softmax_checks.h), allocate
// (reusing an input buffer when TensorFlow allows) and hand rows to the
// device's engine: on the CPU softmax_cpu.h over TF's thread pool, whole rows
// per shard; on the GPU cu/softmax/softmax_gpu.h, where the cross-entropy's
// labels are in host memory, checked on the host before the launch (the error
// names the label and its row) and copied to the device. Compiled once per
// device (core/kernel_helpers.h's TF_OPS_REGISTER_KERNELS).

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/softmax/softmax_cpu.h"
#include "tf_ops/cc/softmax/softmax_math.h"
#include "tf_ops/cc/softmax/softmax_checks.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/softmax/softmax_gpu.h"
#include "xla/stream_executor/device_memory.h"
#endif

namespace tf_ops {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// Rows of `cols` elements and the work of one row, for the CPU's pool.
struct Rows {
  int64_t rows, cols;
};
Rows RowsOf(const TensorShape& x) {
  const int64_t cols = x.dim_size(x.dims() - 1);
  return {cols == 0 ? 0 : x.num_elements() / cols, cols};
}

template <typename Device>
struct SoftmaxExecutor;

#if TF_OPS_WITH_CUDA
template <>
struct SoftmaxExecutor<GpuDevice> {
  static absl::Status Softmax(OpKernelContext* ctx, const std::string& op,
                              Dtype dtype, const void* x, void* y, Rows r,
                              bool log) {
    return LaunchStatus(
        op, LaunchSoftmax(dtype, x, y, r.rows, r.cols, log, GpuStream(ctx)));
  }
  static absl::Status Grad(OpKernelContext* ctx, const std::string& op,
                           Dtype dtype, const void* g, const void* y, void* dx,
                           Rows r, bool log, float scale) {
    return LaunchStatus(op, LaunchSoftmaxGrad(dtype, g, y, dx, r.rows, r.cols,
                                              log, scale, GpuStream(ctx)));
  }
  static absl::Status Masked(OpKernelContext* ctx, const std::string& op,
                             Dtype dtype, const void* x, const MaskLayout& m,
                             float scale, void* y, Rows r) {
    return LaunchStatus(op, LaunchMaskedSoftmax(dtype, x, m, scale, y, r.rows,
                                                r.cols, GpuStream(ctx)));
  }
  // labels: host memory (HostMemory in the registration).
  static absl::Status CrossEntropy(OpKernelContext* ctx, const std::string& op,
                                   Dtype dtype, const void* x,
                                   const Tensor& labels, bool labels64,
                                   void* loss, void* dx, Rows r,
                                   const softmax::CrossEntropyParams& p) {
    Tensor device_labels;
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(labels.dtype(), labels.shape(), &device_labels));
    const uint64_t bytes = labels.TotalBytes();
    stream_executor::DeviceMemoryBase dst(
        const_cast<char*>(device_labels.tensor_data().data()), bytes);
    TF_RETURN_IF_ERROR(ctx->op_device_context()->stream()->Memcpy(
        &dst, labels.tensor_data().data(), bytes));
    return LaunchStatus(
        op, LaunchSparseCrossEntropy(dtype, x, device_labels.tensor_data().data(),
                                     labels64, loss, dx, r.rows, r.cols, p,
                                     GpuStream(ctx)));
  }
};
#else
template <>
struct SoftmaxExecutor<CpuDevice> {
  // A fresh output gets huge pages before it is first written
  // (core/huge_pages.h): a 128 MiB output faults in 2 MiB at a time instead
  // of 4 KiB.
  static void Advise(Dtype dtype, void* out, Rows r, const void* in0,
                     const void* in1 = nullptr) {
    AdviseFreshOutput(out, static_cast<size_t>(r.rows * r.cols) *
                               DtypeSize(dtype), {in0, in1});
  }
  // Whole rows per shard, `cycles` per element.
  static void ForRows(OpKernelContext* ctx, Rows r, int64_t cycles,
                      const std::function<void(int64_t, int64_t)>& fn) {
    CpuParallelFor(ctx, r.rows, cycles * r.cols + 20, fn);
  }
  static absl::Status Softmax(OpKernelContext* ctx, const std::string&,
                              Dtype dtype, const void* x, void* y, Rows r,
                              bool log) {
    Advise(dtype, y, r, x);
    ForRows(ctx, r, 12, [&](int64_t b, int64_t e) {
      CpuSoftmax(dtype, x, y, r.cols, log, b, e);
    });
    return absl::OkStatus();
  }
  static absl::Status Grad(OpKernelContext* ctx, const std::string&,
                           Dtype dtype, const void* g, const void* y, void* dx,
                           Rows r, bool log, float scale) {
    Advise(dtype, dx, r, g, y);
    ForRows(ctx, r, 6, [&](int64_t b, int64_t e) {
      CpuSoftmaxGrad(dtype, g, y, dx, r.cols, log, scale, b, e);
    });
    return absl::OkStatus();
  }
  static absl::Status Masked(OpKernelContext* ctx, const std::string&,
                             Dtype dtype, const void* x, const MaskLayout& m,
                             float scale, void* y, Rows r) {
    Advise(dtype, y, r, x);
    ForRows(ctx, r, 14, [&](int64_t b, int64_t e) {
      CpuMaskedSoftmax(dtype, x, m, scale, y, r.cols, b, e);
    });
    return absl::OkStatus();
  }
  static absl::Status CrossEntropy(OpKernelContext* ctx, const std::string&,
                                   Dtype dtype, const void* x,
                                   const Tensor& labels, bool labels64,
                                   void* loss, void* dx, Rows r,
                                   const softmax::CrossEntropyParams& p) {
    const void* l = labels.tensor_data().data();
    Advise(dtype, dx, r, x);
    ForRows(ctx, r, 14, [&](int64_t b, int64_t e) {
      CpuSparseCrossEntropy(dtype, x, l, labels64, loss, dx, r.cols, p, b, e);
    });
    return absl::OkStatus();
  }
};
#endif

absl::Status ReadScale(OpKernelConstruction* ctx, const std::string& op,
                       float* scale) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("scale", scale));
  if (std::isfinite(*scale)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": attribute 'scale' must be finite, got ", *scale));
}

// softmax / log_softmax: one forward op each.
template <typename Device, typename T, bool kLog>
class SoftmaxOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const std::string op = kLog ? "TfOps>LogSoftmax" : "TfOps>Softmax";
    const Tensor& x = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckLogits(op, x.shape()));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    const Rows r = RowsOf(x.shape());
    if (r.rows == 0) return;
    OP_REQUIRES_OK(ctx, SoftmaxExecutor<Device>::Softmax(
                            ctx, op, DtypeOf<T>(), x.tensor_data().data(),
                            const_cast<char*>(y->tensor_data().data()), r,
                            kLog));
  }
};

// The three grad ops: softmax (scale 1), log_softmax, scaled masked.
template <typename Device, typename T, bool kLog, bool kScaled>
class SoftmaxGradOp : public OpKernel {
 public:
  explicit SoftmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    if (kScaled) OP_REQUIRES_OK(ctx, ReadScale(ctx, Name(), &scale_));
  }
  static std::string Name() {
    return kLog      ? "TfOps>LogSoftmaxGrad"
           : kScaled ? "TfOps>ScaledMaskedSoftmaxGrad"
                     : "TfOps>SoftmaxGrad";
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckLogits(Name(), y.shape()));
    OP_REQUIRES_OK(ctx, CheckSameShape(Name(), g.shape(), y.shape()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0,
                                                              g.shape(), &dx));
    const Rows r = RowsOf(y.shape());
    if (r.rows == 0) return;
    OP_REQUIRES_OK(ctx, SoftmaxExecutor<Device>::Grad(
                            ctx, Name(), DtypeOf<T>(), g.tensor_data().data(),
                            y.tensor_data().data(),
                            const_cast<char*>(dx->tensor_data().data()), r,
                            kLog, scale_));
  }

 private:
  float scale_ = 1.0f;
};

template <typename Device, typename T>
class ScaledMaskedSoftmaxOp : public OpKernel {
 public:
  explicit ScaledMaskedSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadScale(ctx, kName, &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("causal", &causal_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& mask = ctx->input(1);
    MaskLayout layout;
    OP_REQUIRES_OK(ctx, MaskLayoutOf(kName, x.shape(), mask.shape(), causal_,
                                     &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    const Rows r = RowsOf(x.shape());
    if (r.rows == 0) return;
    // A mask of one element that holds masks nothing: no mask at all.
    const bool all_kept = mask.NumElements() == 1 &&
                          mask.dtype() == tensorflow::DT_BOOL &&
                          MaskIsTrue(ctx, mask);
    layout.mask = all_kept ? nullptr : mask.flat<bool>().data();
    OP_REQUIRES_OK(ctx, SoftmaxExecutor<Device>::Masked(
                            ctx, kName, DtypeOf<T>(), x.tensor_data().data(),
                            layout, scale_, const_cast<char*>(y->tensor_data().data()),
                            r));
  }

 private:
  static constexpr char kName[] = "TfOps>ScaledMaskedSoftmax";
  // Only the CPU may read the mask's element here.
  static bool MaskIsTrue(OpKernelContext*, const Tensor& mask) {
#if TF_OPS_WITH_CUDA
    return false;
#else
    return mask.flat<bool>()(0);
#endif
  }
  float scale_ = 1.0f;
  bool causal_ = false;
};

template <typename Device, typename T>
class SparseSoftmaxCrossEntropyOp : public OpKernel {
 public:
  explicit SparseSoftmaxCrossEntropyOp(OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("label_smoothing", &p_.label_smoothing));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ignore_index", &p_.ignore_index));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("z_loss", &p_.z_loss));
    OP_REQUIRES(ctx, p_.label_smoothing >= 0.0f && p_.label_smoothing <= 1.0f,
                absl::InvalidArgumentError(absl::StrCat(
                    kName, ": attribute 'label_smoothing' must be in [0, 1], "
                    "got ", p_.label_smoothing)));
    OP_REQUIRES(ctx, p_.z_loss >= 0.0f && std::isfinite(p_.z_loss),
                absl::InvalidArgumentError(absl::StrCat(
                    kName, ": attribute 'z_loss' must be finite and >= 0, "
                    "got ", p_.z_loss)));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckCrossEntropy(kName, x.shape(), labels.shape()));
    const Rows r = RowsOf(x.shape());
    const bool labels64 = labels.dtype() == tensorflow::DT_INT64;
    // Labels are in host memory on every device.
    const int64_t bad = FirstBadLabel(labels.tensor_data().data(), labels64,
                                      r.rows, r.cols, p_.ignore_index);
    if (bad >= 0) {
      const int64_t label = labels64 ? labels.flat<int64_t>()(bad)
                                     : labels.flat<int32_t>()(bad);
      ctx->CtxFailure(
          BadLabelError(kName, label, bad, r.cols, p_.ignore_index));
      return;
    }
    Tensor* loss = nullptr;
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({r.rows}), &loss));
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({0}, 1, x.shape(), &dx));
    if (r.rows == 0) return;
    OP_REQUIRES_OK(ctx, SoftmaxExecutor<Device>::CrossEntropy(
                            ctx, kName, DtypeOf<T>(), x.tensor_data().data(),
                            labels, labels64,
                            const_cast<char*>(loss->tensor_data().data()),
                            const_cast<char*>(dx->tensor_data().data()), r, p_));
  }

 private:
  static constexpr char kName[] = "TfOps>SparseSoftmaxCrossEntropy";
  softmax::CrossEntropyParams p_;
};

#define TF_OPS_REGISTER_SOFTMAX(DEV, TAG, T, ...)                             \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Softmax").Device(DEV).TypeConstraint<T>("T"),               \
      SoftmaxOp<TAG, T, false>);                                              \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>LogSoftmax").Device(DEV).TypeConstraint<T>("T"),            \
      SoftmaxOp<TAG, T, true>);                                               \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>SoftmaxGrad").Device(DEV).TypeConstraint<T>("T"),           \
      SoftmaxGradOp<TAG, T, false, false>);                                   \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>LogSoftmaxGrad").Device(DEV).TypeConstraint<T>("T"),        \
      SoftmaxGradOp<TAG, T, true, false>);                                    \
  REGISTER_KERNEL_BUILDER(Name("TfOps>ScaledMaskedSoftmaxGrad")               \
                              .Device(DEV)                                    \
                              .TypeConstraint<T>("T"),                        \
                          SoftmaxGradOp<TAG, T, false, true>);                \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>ScaledMaskedSoftmax").Device(DEV).TypeConstraint<T>("T"),   \
      ScaledMaskedSoftmaxOp<TAG, T>);                                         \
  REGISTER_KERNEL_BUILDER(Name("TfOps>SparseSoftmaxCrossEntropy")             \
                              .Device(DEV)                                    \
                              .HostMemory("labels")                           \
                              .TypeConstraint<T>("T"),                        \
                          SparseSoftmaxCrossEntropyOp<TAG, T>);

TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_SOFTMAX)

}  // namespace
}  // namespace tf_ops

// Kernels of the batch-norm ops (batch_norm_ops.cc) for half, bfloat16, float
// and double x. They check shapes (the shape functions cannot when dimensions
// are unknown, nor in eager calls), allocate (reusing an input buffer when
// TensorFlow allows) and hand the buffers to the device's engine: on the CPU
// batch_norm_cpu.h over TensorFlow's intra-op thread pool, on the GPU
// cu/batch_norm/batch_norm_gpu.h's launchers on the op's CUDA stream
// (compiled once per device: core/kernel_helpers.h's TF_OPS_REGISTER_KERNELS).

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ops/cc/batch_norm/batch_norm_attrs.h"
#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"
#include "tf_ops/cc/batch_norm/batch_norm_checks.h"
#include "tf_ops/cc/core/kernel_helpers.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/batch_norm/batch_norm_gpu.h"
#endif

namespace tf_ops {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

using Phase = BatchNormPhase;

// x's layout around the channel axis, every input's shape checked.
absl::Status LayoutOf(OpKernelContext* ctx, Phase phase, int axis_attr,
                      BatchNormLayout* layout) {
  int axis = 0;
  return BatchNormLayoutOf(
      phase, axis_attr, [ctx](int i) { return ctx->input(i).shape(); },
      layout, &axis);
}

template <typename T>
const void* Data(const Tensor& t) {
  return t.tensor_data().data();
}
void* MutableData(Tensor* t) {
  return const_cast<char*>(t->tensor_data().data());
}

#if TF_OPS_WITH_CUDA
int64_t ScratchDoubles(BatchNormLayout l) {
  return BatchNormGpuScratchDoubles(l);
}
#else
int64_t ScratchDoubles(BatchNormLayout l) { return BatchNormScratchDoubles(l); }
#endif

// The element count input of the input-grad op (host memory on the GPU).
template <typename U>
double CountOf(const Tensor& t) {
  return static_cast<double>(t.scalar<U>()());
}

template <typename T, Phase kPhase>
class BatchNormOp : public OpKernel {
 public:
  // Per-channel tensors: float, double for double x.
  using U = ComputeType<T>;

  explicit BatchNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx,
                   ReadBatchNormAttrs(ctx, BatchNormOpName(kPhase), &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    BatchNormLayout layout;
    OP_REQUIRES_OK(ctx, LayoutOf(ctx, kPhase, attrs_.axis, &layout));
    const int x_index = BatchNormInputsOf(kPhase).x;
    const Tensor& x = ctx->input(x_index);
    auto in = [&](int k) { return Data<T>(ctx->input(k)); };
    Tensor scratch;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(
                            tensorflow::DT_DOUBLE,
                            TensorShape({ScratchDoubles(layout)}),
                            &scratch));
    double* sp = scratch.flat<double>().data();
    const Dtype dtype = DtypeOf<T>();
    const float eps = attrs_.epsilon;
    const ActivationChoice& act = attrs_.activation;
    // y or x_backprop, in place of an input where TensorFlow allows; left
    // out when nothing consumes it (the engines then skip its pass: the
    // statistics alone, the grad's sums alone).
    void* out0 = nullptr;
    if (ctx->output_required(0)) {
      Tensor* t = nullptr;
      if (IsGradPhase(kPhase)) {
        OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output(
                                {0, 1}, 0, x.shape(), &t));
      } else {
        OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output(
                                {0}, 0, x.shape(), &t));
      }
      out0 = MutableData(t);
#if !TF_OPS_WITH_CUDA
      AdviseFreshOutput(out0, x.NumElements() * sizeof(T), {in(0), in(1)});
#endif
    }
    void* out1 = nullptr;
    void* out2 = nullptr;
    if (BatchNormOutputs(kPhase) == 3) {
      const TensorShape vec({layout.channels});
      Tensor *t1 = nullptr, *t2 = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, vec, &t1));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, vec, &t2));
      out1 = MutableData(t1);
      out2 = MutableData(t2);
    }
#if TF_OPS_WITH_CUDA
    const char* error = nullptr;
    void* stream = GpuStream(ctx);
#define TF_OPS_BN_RUN(cpu_fn, gpu_fn, ...) \
  error = gpu_fn(__VA_ARGS__, sp, stream)
#else
    const ParallelFor parallel = CpuParallelForOf(ctx);
#define TF_OPS_BN_RUN(cpu_fn, gpu_fn, ...) cpu_fn(__VA_ARGS__, sp, parallel)
#endif
    switch (kPhase) {
      case Phase::kTraining:
        TF_OPS_BN_RUN(CpuBatchNormTraining, LaunchBatchNormTraining, act,
                      dtype, in(0), in(1), in(2), eps, out0, out1, out2,
                      layout);
        break;
      case Phase::kTrainingGrad:
        TF_OPS_BN_RUN(CpuBatchNormTrainingGrad, LaunchBatchNormTrainingGrad,
                      act, dtype, in(0), in(1), in(2), in(3), in(4), in(5),
                      in(6), in(7), eps, out0, out1, out2, layout);
        break;
      case Phase::kTrainingInputGrad:
        if (out0 == nullptr) break;
        TF_OPS_BN_RUN(CpuBatchNormTrainingInputGrad,
                      LaunchBatchNormTrainingInputGrad, act, dtype, in(0),
                      in(1), in(2), in(3), in(4), in(5), in(6), in(7), in(8),
                      in(9), CountOf<U>(ctx->input(10)), eps, out0, layout);
        break;
      case Phase::kInference:
        if (out0 == nullptr) break;
        TF_OPS_BN_RUN(CpuBatchNormInference, LaunchBatchNormInference, act,
                      dtype, in(0), in(1), in(2), in(3), in(4), eps, out0,
                      layout);
        break;
      case Phase::kInferenceGrad:
        TF_OPS_BN_RUN(CpuBatchNormInferenceGrad, LaunchBatchNormInferenceGrad,
                      act, dtype, in(0), in(1), in(2), in(3), in(4), in(5),
                      eps, out0, out1, out2, layout);
        break;
    }
#undef TF_OPS_BN_RUN
#if TF_OPS_WITH_CUDA
    OP_REQUIRES_OK(ctx, LaunchStatus(BatchNormOpName(kPhase), error));
#endif
  }

 private:
  BatchNormAttrs attrs_;
};

}  // namespace

using tensorflow::register_kernel::Name;

// The per-channel tensors' dtype U is T's compute type (float, double for
// double x).
#define TF_OPS_REGISTER_BATCH_NORM(DEV, TAG, T, ...)                         \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BatchNormTraining")                   \
                              .Device(DEV)                                  \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<ComputeType<T>>("U"),         \
                          BatchNormOp<T, Phase::kTraining>);                \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BatchNormTrainingGrad")               \
                              .Device(DEV)                                  \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<ComputeType<T>>("U"),         \
                          BatchNormOp<T, Phase::kTrainingGrad>);            \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BatchNormInference")                  \
                              .Device(DEV)                                  \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<ComputeType<T>>("U"),         \
                          BatchNormOp<T, Phase::kInference>);               \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BatchNormInferenceGrad")              \
                              .Device(DEV)                                  \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<ComputeType<T>>("U"),         \
                          BatchNormOp<T, Phase::kInferenceGrad>);           \
  REGISTER_KERNEL_BUILDER(Name("TfOps>BatchNormTrainingInputGrad")          \
                              .Device(DEV)                                  \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<ComputeType<T>>("U")          \
                              .HostMemory("count"),                         \
                          BatchNormOp<T, Phase::kTrainingInputGrad>);

TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_BATCH_NORM)

}  // namespace tf_ops

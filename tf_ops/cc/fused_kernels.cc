// CPU kernels of the fused ops (fused_op_defs.h): bias + activation and gated
// activations, forward and grad, for every activation in activation_list.h
// and half, bfloat16, float and double. They check shapes (the shape
// functions cannot when dimensions are unknown, nor in eager calls), allocate
// (reusing an input buffer when TensorFlow allows) and run fused_cpu.h's
// loops over TensorFlow's intra-op thread pool.
//
// The bias gradient is deterministic: the grad kernel runs fixed tiles
// (MakeBiasGradTiling, from the shape alone) in any order and thread, each
// writing its own partial sums, then adds them per channel in a fixed order.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"
#include "tf_ops/cc/activation_attrs.h"
#include "tf_ops/cc/activation_list.h"
#include "tf_ops/cc/elementwise_kernel.h"
#include "tf_ops/cc/fused_cpu.h"
#include "tf_ops/cc/fused_shape_checks.h"

namespace tf_ops {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using Params = tsl::thread::ThreadPool::SchedulingParams;

void ParallelFor(OpKernelContext* ctx, int64_t total, int64_t cost_per_unit,
                 const std::function<void(int64_t, int64_t)>& fn) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
      total, Params::Adaptive(cost_per_unit), fn);
}

template <typename Act>
std::string Name(const char* family, const char* suffix = "") {
  return absl::StrCat("TfOps>", family, Act::kName, suffix);
}

template <typename T, typename Act>
class BiasActivationOp : public OpKernel {
 public:
  explicit BiasActivationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
    std::string data_format;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    nchw_ = data_format == "NCHW";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    BiasLayout layout;
    OP_REQUIRES_OK(ctx, BiasLayoutOf(Name<Act>("Bias"), nchw_, x.shape(),
                                     bias.shape(), &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    const void* xp = x.flat<T>().data();
    const void* bp = bias.flat<T>().data();
    void* yp = y->flat<T>().data();
    ParallelFor(ctx, n, Act::kCyclesPerElement + 1,
                [&](int64_t begin, int64_t end) {
                  CpuBiasForward(act_, DtypeOf<T>(), xp, bp, yp, layout, begin,
                                 end);
                });
  }

 private:
  Act act_;
  bool nchw_ = false;
};

template <typename T, typename Act>
class BiasActivationGradOp : public OpKernel {
 public:
  explicit BiasActivationGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
    std::string data_format;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    nchw_ = data_format == "NCHW";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    const std::string op = Name<Act>("Bias", "Grad");
    OP_REQUIRES(ctx, g.shape() == x.shape(),
                absl::InvalidArgumentError(absl::StrCat(
                    op, ": gradients and features must have the same shape, "
                    "got ", g.shape().DebugString(), " and ",
                    x.shape().DebugString())));
    BiasLayout layout;
    OP_REQUIRES_OK(ctx,
                   BiasLayoutOf(op, nchw_, x.shape(), bias.shape(), &layout));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0,
                                                              x.shape(), &dx));
    Tensor* db = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &db));
    const BiasGradTiling tiling =
        MakeBiasGradTiling(layout, x.NumElements());
    // Partial sums in float or double (fused_cpu.h); double-sized slots
    // hold either.
    Tensor partials;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_DOUBLE,
                                           TensorShape({tiling.partials()}),
                                           &partials));
    const void* gp = g.flat<T>().data();
    const void* xp = x.flat<T>().data();
    const void* bp = bias.flat<T>().data();
    void* dxp = dx->flat<T>().data();
    void* pp = partials.flat<double>().data();
    const int64_t tile_cost =
        tiling.row_block * tiling.col_block * (Act::kCyclesPerElement + 2);
    ParallelFor(ctx, tiling.tiles(), tile_cost,
                [&](int64_t begin, int64_t end) {
                  CpuBiasGradTiles(act_, DtypeOf<T>(), gp, xp, bp, dxp, pp,
                                   tiling, begin, end);
                });
    void* dbp = db->flat<T>().data();
    const int64_t per_channel =
        tiling.partials() / std::max<int64_t>(1, layout.channels) + 1;
    ParallelFor(ctx, layout.channels, per_channel,
                [&](int64_t begin, int64_t end) {
                  CpuBiasGradReduce(DtypeOf<T>(), pp, tiling, dbp, begin, end);
                });
  }

 private:
  Act act_;
  bool nchw_ = false;
};

template <typename T, typename Act>
class GatedActivationOp : public OpKernel {
 public:
  explicit GatedActivationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t half = 0;
    OP_REQUIRES_OK(ctx, GatedHalf(Name<Act>("Gated"), x.shape(), &half));
    TensorShape out_shape = x.shape();
    out_shape.set_dim(out_shape.dims() - 1, half);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &y));
    const int64_t n = out_shape.num_elements();
    if (n == 0) return;
    const void* xp = x.flat<T>().data();
    void* yp = y->flat<T>().data();
    ParallelFor(ctx, n, 2 * Act::kCyclesPerElement + 2,
                [&](int64_t begin, int64_t end) {
                  CpuGatedForward(act_, DtypeOf<T>(), xp, yp, half, begin, end);
                });
  }

 private:
  Act act_;
};

template <typename T, typename Act>
class GatedActivationGradOp : public OpKernel {
 public:
  explicit GatedActivationGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const std::string op = Name<Act>("Gated", "Grad");
    int64_t half = 0;
    OP_REQUIRES_OK(ctx, GatedHalf(op, x.shape(), &half));
    TensorShape out_shape = x.shape();
    out_shape.set_dim(out_shape.dims() - 1, half);
    OP_REQUIRES(ctx, g.shape() == out_shape,
                absl::InvalidArgumentError(absl::StrCat(
                    op, ": gradients must have the shape of the activations "
                    "(the features' with the last axis halved), got "
                    "gradients ", g.shape().DebugString(), " and features ",
                    x.shape().DebugString())));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({1}, 0, x.shape(), &dx));
    const int64_t n = out_shape.num_elements();
    if (n == 0) return;
    const void* gp = g.flat<T>().data();
    const void* xp = x.flat<T>().data();
    void* dxp = dx->flat<T>().data();
    ParallelFor(ctx, n, 3 * Act::kCyclesPerElement + 4,
                [&](int64_t begin, int64_t end) {
                  CpuGatedGrad(act_, DtypeOf<T>(), gp, xp, dxp, half, begin,
                               end);
                });
  }

 private:
  Act act_;
};

}  // namespace

using tensorflow::DEVICE_CPU;
using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_FUSED_KERNELS(Act, T)                                 \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Bias" #Act).Device(DEVICE_CPU).TypeConstraint<T>("T"),      \
      BiasActivationOp<T, Act>);                                              \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Bias" #Act "Grad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      BiasActivationGradOp<T, Act>);                                          \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Gated" #Act).Device(DEVICE_CPU).TypeConstraint<T>("T"),     \
      GatedActivationOp<T, Act>);                                             \
  REGISTER_KERNEL_BUILDER(Name("TfOps>Gated" #Act "Grad")                     \
                              .Device(DEVICE_CPU)                             \
                              .TypeConstraint<T>("T"),                        \
                          GatedActivationGradOp<T, Act>);

#define TF_OPS_REGISTER_FUSED_ALL_DTYPES(Act)            \
  TF_OPS_REGISTER_FUSED_KERNELS(Act, Eigen::half)        \
  TF_OPS_REGISTER_FUSED_KERNELS(Act, Eigen::bfloat16)    \
  TF_OPS_REGISTER_FUSED_KERNELS(Act, float)              \
  TF_OPS_REGISTER_FUSED_KERNELS(Act, double)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_FUSED_ALL_DTYPES)

}  // namespace tf_ops

// Kernels of TfOps>GroupNorm and TfOps>GroupNormGrad for half, bfloat16,
// float and double: they check shapes and attributes (the shape functions
// cannot when dimensions are unknown, nor in eager calls), allocate and run
// the device's engine. Compiled twice, as the other families' kernels: CPU
// kernels (group_norm_cpu.h's steps over TensorFlow's intra-op pool) into
// _tf_ops.so, GPU kernels (cu/group_norm/group_norm_gpu.h) into
// _tf_ops_gpu.so.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/group_norm/group_norm_attrs.h"
#include "tf_ops/cc/group_norm/group_norm_checks.h"
#include "tf_ops/cc/group_norm/group_norm_cpu.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/group_norm/group_norm_gpu.h"
#endif

namespace tf_ops {
namespace group_norm {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

std::vector<int64_t> DimsOf(const TensorShape& s) {
  std::vector<int64_t> dims;
  for (int k = 0; k < s.dims(); ++k) dims.push_back(s.dim_size(k));
  return dims;
}

#if !TF_OPS_WITH_CUDA
int ActivationCycles(const ActivationChoice& act) {
  int cycles = 1;
  VisitActivation(act, [&](const auto& op) {
    cycles = std::decay_t<decltype(op)>::kCyclesPerElement;
  });
  return cycles;
}
#endif

template <typename Device, typename T, bool kGrad>
class GroupNormOp : public OpKernel {
 public:
  using U = ComputeType<T>;

  explicit GroupNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadGroupNormAttrs(ctx, Name(), &attrs_));
    tensorflow::DataType u;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("U", &u));
    OP_REQUIRES(ctx, u == tensorflow::DataTypeToEnum<U>::value,
                absl::InvalidArgumentError(absl::StrCat(
                    Name(), ": U must be ",
                    tensorflow::DataTypeString(
                        tensorflow::DataTypeToEnum<U>::value),
                    " for this T, got ", tensorflow::DataTypeString(u))));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string op = Name();
    const int x_at = kGrad ? 1 : 0;
    const Tensor& x = ctx->input(x_at);
    const std::vector<int64_t> dims = DimsOf(x.shape());
    GroupNormShape shape;
    OP_REQUIRES_OK(ctx, LayoutOf(op, dims, attrs_.axis, attrs_.groups, &shape));
    const Tensor& scale = ctx->input(x_at + 1);
    const Tensor& offset = ctx->input(x_at + 2);
    OP_REQUIRES_OK(ctx, CheckChannelVector(op, "scale", dims, shape.c,
                                           DimsOf(scale.shape())));
    OP_REQUIRES_OK(ctx, CheckChannelVector(op, "offset", dims, shape.c,
                                           DimsOf(offset.shape())));
    GroupNormBuffers io;
    io.x = x.flat<T>().data();
    io.gamma = scale.flat<U>().data();
    io.beta = offset.flat<U>().data();
#if !TF_OPS_WITH_CUDA
    const GroupNormTiling tiling = MakeGroupNormTiling(shape);
    const int64_t cost =
        tiling.cycles_per_unit(ActivationCycles(attrs_.activation));
    Tensor partials_holder;
#endif
    const Dtype dtype = DtypeOf<T>();
    const ActivationChoice& act = attrs_.activation;
    Tensor* out = nullptr;
    if (!kGrad) {
      OP_REQUIRES_OK(ctx, ReuseOrAllocateOutput<Device>(ctx, {0}, 0,
                                                           x.shape(), &out));
      io.y = out->flat<T>().data();
      const TensorShape stats({shape.n, shape.groups});
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, stats, &out));
      io.mean = out->flat<U>().data();
      U* mean = out->flat<U>().data();
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, stats, &out));
      io.rstd = out->flat<U>().data();
#if TF_OPS_WITH_CUDA
      (void)mean;
      Tensor holder;
      absl::StatusOr<void*> scratch =
          AllocateScratch(ctx, GroupNormGpuScratchBytes(shape), &holder);
      OP_REQUIRES_OK(ctx, scratch.status());
      OP_REQUIRES_OK(ctx, LaunchStatus(op, LaunchGroupNormForward(
                                               act, dtype, shape, attrs_.epsilon,
                                               io.x, io.gamma, io.beta, io.y,
                                               io.mean, io.rstd, *scratch,
                                               GpuStream(ctx))));
      return;
#else
      if (shape.elements() == 0) {
        // Statistics over no elements, as Keras's moments: NaN.
        for (int64_t k = 0; k < shape.n * shape.groups; ++k) {
          mean[k] = std::numeric_limits<U>::quiet_NaN();
          out->flat<U>().data()[k] = std::numeric_limits<U>::quiet_NaN();
        }
        return;
      }
      absl::StatusOr<void*> partials =
          AllocateScratch(ctx, tiling.partials() * 8, &partials_holder);
      OP_REQUIRES_OK(ctx, partials.status());
      io.partials = static_cast<double*>(*partials);
      CpuParallelFor(ctx, tiling.units(), cost / 4 + 1,
                     [&](int64_t begin, int64_t end) {
                       CpuGroupNormSums(dtype, tiling, io, begin, end);
                     });
      CpuGroupNormStats(dtype, tiling, attrs_.epsilon, io);
      CpuParallelFor(ctx, tiling.units(), cost,
                     [&](int64_t begin, int64_t end) {
                       CpuGroupNormApply(act, dtype, tiling, io, begin, end);
                     });
      return;
#endif  // TF_OPS_WITH_CUDA
    }
    const Tensor& dy = ctx->input(0);
    OP_REQUIRES_OK(ctx, RequireSameShape(op, "dy", dy.shape(), "x", x.shape()));
    const Tensor& mean = ctx->input(4);
    const Tensor& rstd = ctx->input(5);
    OP_REQUIRES_OK(ctx, CheckStat(op, "mean", dims, shape, DimsOf(mean.shape())));
    OP_REQUIRES_OK(ctx, CheckStat(op, "rstd", dims, shape, DimsOf(rstd.shape())));
    io.dy = dy.flat<T>().data();
    io.mean = const_cast<U*>(mean.flat<U>().data());
    io.rstd = const_cast<U*>(rstd.flat<U>().data());
    OP_REQUIRES_OK(ctx, ReuseOrAllocateOutput<Device>(ctx, {0, 1}, 0,
                                                         x.shape(), &out));
    io.dx = out->flat<T>().data();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, scale.shape(), &out));
    io.dgamma = out->flat<U>().data();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, offset.shape(), &out));
    io.dbeta = out->flat<U>().data();
#if TF_OPS_WITH_CUDA
    Tensor holder;
    absl::StatusOr<void*> scratch =
        AllocateScratch(ctx, GroupNormGpuScratchBytes(shape), &holder);
    OP_REQUIRES_OK(ctx, scratch.status());
    OP_REQUIRES_OK(ctx, LaunchStatus(op, LaunchGroupNormGrad(
                                             act, dtype, shape, io.dy, io.x,
                                             io.gamma, io.beta, io.mean,
                                             io.rstd, io.dx, io.dgamma,
                                             io.dbeta, *scratch,
                                             GpuStream(ctx))));
#else
    if (shape.elements() == 0) {
      for (int64_t k = 0; k < shape.c; ++k) {
        static_cast<U*>(io.dgamma)[k] = U(0);
        static_cast<U*>(io.dbeta)[k] = U(0);
      }
      return;
    }
    absl::StatusOr<void*> partials = AllocateScratch(
        ctx, (tiling.partials() + 2 * shape.n * shape.groups) * 8,
        &partials_holder);
    OP_REQUIRES_OK(ctx, partials.status());
    io.partials = static_cast<double*>(*partials);
    io.coefs = io.partials + tiling.partials();
    CpuParallelFor(ctx, tiling.units(), cost,
                   [&](int64_t begin, int64_t end) {
                     CpuGroupNormGradSums(act, dtype, tiling, io, begin, end);
                   });
    CpuGroupNormGradReduce(dtype, tiling, io);
    CpuParallelFor(ctx, tiling.units(), cost,
                   [&](int64_t begin, int64_t end) {
                     CpuGroupNormGradApply(act, dtype, tiling, io, begin, end);
                   });
#endif  // TF_OPS_WITH_CUDA
  }

 private:
  static std::string Name() {
    return kGrad ? "TfOps>GroupNormGrad" : "TfOps>GroupNorm";
  }
  GroupNormAttrs attrs_;
};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_GROUP_NORM(DEV, TAG, T, ...)                        \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>GroupNorm").Device(DEV).TypeConstraint<T>("T"),            \
      GroupNormOp<TAG, T, false>);                                           \
  REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfOps>GroupNormGrad").Device(DEV).TypeConstraint<T>("T"),        \
      GroupNormOp<TAG, T, true>);
TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_GROUP_NORM)
#undef TF_OPS_REGISTER_GROUP_NORM

}  // namespace group_norm
}  // namespace tf_ops

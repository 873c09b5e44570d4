// Kernels of the normalisation ops (norm_checks.h): layer norm and RMS
// norm, with and without the residual add, forward and grad, for half,
// bfloat16, float and double. They check shapes and attributes (the shape
// functions cannot when dimensions are unknown, nor in eager calls),
// allocate and hand the buffers to the device's engine. Compiled twice, as
// fused_kernels.cc: CPU kernels (norm_cpu.h over TensorFlow's intra-op pool)
// into _tf_ops.so, GPU kernels (cu/norm/norm_gpu.h) into _tf_ops_gpu.so.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/norm/norm_cpu.h"
#include "tf_ops/cc/norm/norm_checks.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/norm/norm_gpu.h"
#endif

namespace tf_ops {
namespace norm {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// The statistics' and parameters' element type (U): float, or double for
// double.
template <typename T>
using Stat = ComputeType<T>;

// The checked buffers of one call; null where the op has none.
struct ForwardArgs {
  const void* x = nullptr;
  const void* residual = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* h = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
};
struct GradArgs {
  const void* dy = nullptr;
  const void* dh = nullptr;
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* mean = nullptr;
  const void* rstd = nullptr;
  void* dx = nullptr;
  void* dgamma = nullptr;
  void* dbeta = nullptr;
};

template <typename Device>
struct NormExecutor;

#if TF_OPS_WITH_CUDA
template <>
struct NormExecutor<GpuDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const std::string& op,
                              Dtype dtype, const NormShape& shape,
                              double epsilon, const ForwardArgs& a) {
    return LaunchStatus(op, LaunchNormForward(dtype, shape, epsilon, a.x,
                                              a.residual, a.gamma, a.beta, a.h,
                                              a.y, a.mean, a.rstd,
                                              GpuStream(ctx)));
  }
  static absl::Status Grad(OpKernelContext* ctx, const std::string& op,
                           Dtype dtype, const NormShape& shape,
                           const GradArgs& a) {
    Tensor holder;
    absl::StatusOr<void*> scratch =
        AllocateScratch(ctx, NormGradGpuScratchBytes(shape), &holder);
    TF_RETURN_IF_ERROR(scratch.status());
    return LaunchStatus(op, LaunchNormGrad(dtype, shape, a.dy, a.x, a.gamma,
                                           a.mean, a.rstd, a.dh, a.dx, a.dgamma,
                                           a.dbeta, *scratch, GpuStream(ctx)));
  }
};
#else
template <>
struct NormExecutor<CpuDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const std::string&,
                              Dtype dtype, const NormShape& shape,
                              double epsilon, const ForwardArgs& a) {
    CpuParallelFor(ctx, shape.rows, NormForwardCyclesPerRow(dtype, shape),
                   [&](int64_t begin, int64_t end) {
                     CpuNormForward(dtype, shape, epsilon, a.x, a.residual,
                                    a.gamma, a.beta, a.h, a.y, a.mean, a.rstd,
                                    begin, end);
                   });
    return absl::OkStatus();
  }

  static absl::Status Grad(OpKernelContext* ctx, const std::string&,
                           Dtype dtype, const NormShape& shape,
                           const GradArgs& a) {
    const NormGradTiling tiling = MakeNormGradTiling(shape);
    Tensor holder;
    absl::StatusOr<void*> partials =
        AllocateScratch(ctx, tiling.partials() * 8, &holder);
    TF_RETURN_IF_ERROR(partials.status());
    void* pp = *partials;
    CpuParallelFor(ctx, tiling.tiles(), NormGradCyclesPerTile(dtype, tiling),
                   [&](int64_t begin, int64_t end) {
                     CpuNormGradTiles(dtype, tiling, a.dy, a.x, a.gamma,
                                      a.mean, a.rstd, a.dh, a.dx, pp, begin,
                                      end);
                   });
    CpuParallelFor(ctx, shape.cols, 2 * tiling.row_tiles + 4,
                   [&](int64_t begin, int64_t end) {
                     CpuNormGradReduce(dtype, tiling, pp, a.dgamma, a.dbeta,
                                       begin, end);
                   });
    return absl::OkStatus();
  }
};
#endif  // TF_OPS_WITH_CUDA

// The inputs an output may take the buffer of (norm_cpu.h: the CPU engine
// writes each element after its last read of them); none on the GPU, whose
// backward reads dy and x after writing dx (norm_gpu.h).
template <typename Device>
std::vector<int> Reusable(std::initializer_list<int> inputs) {
  if constexpr (std::is_same_v<Device, CpuDevice>) return inputs;
  return {};
}

// Statistics of another dtype than Stat<T> cannot reach a kernel (the shape
// function checks U), except from a hand-built NodeDef: checked again.
template <typename T>
absl::Status CheckU(const std::string& op, OpKernelConstruction* ctx) {
  tensorflow::DataType u;
  TF_RETURN_IF_ERROR(ctx->GetAttr("U", &u));
  if (u == tensorflow::DataTypeToEnum<Stat<T>>::value) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": the statistics' dtype U must be ",
                   tensorflow::DataTypeString(
                       tensorflow::DataTypeToEnum<Stat<T>>::value),
                   ", got ", tensorflow::DataTypeString(u)));
}

template <typename Device, typename T, bool kCentered, bool kResidual>
class NormOp : public OpKernel {
 public:
  explicit NormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, CheckEpsilon(kind_.Name(false), epsilon_));
    OP_REQUIRES_OK(ctx, CheckU<T>(kind_.Name(false), ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string op = kind_.Name(false);
    const Tensor& x = ctx->input(kind_.x());
    NormShape shape;
    shape.centered = kCentered;
    OP_REQUIRES_OK(ctx, CheckRows(op, x.shape(), &shape.rows, &shape.cols));
    ForwardArgs a;
    if (kResidual) {
      const Tensor& r = ctx->input(kind_.residual_input());
      OP_REQUIRES_OK(ctx, RequireSameShape(op, "x", x.shape(), "residual",
                                           r.shape()));
      a.residual = r.flat<T>().data();
    }
    const Tensor& gamma = ctx->input(kind_.gamma());
    OP_REQUIRES_OK(ctx, CheckParam(op, "gamma", x.shape(), gamma.shape()));
    a.x = x.flat<T>().data();
    a.gamma = gamma.flat<Stat<T>>().data();
    if (kCentered) {
      const Tensor& beta = ctx->input(kind_.beta());
      OP_REQUIRES_OK(ctx, CheckParam(op, "beta", x.shape(), beta.shape()));
      a.beta = beta.flat<Stat<T>>().data();
    }
    TensorShape rows = x.shape();
    rows.RemoveLastDims(1);
    // h and y may take over x's and the residual's buffers (x's alone for y
    // without a residual): TensorFlow forwards an input only when nothing
    // else holds it, and a grad op that needs x holds it.
    const std::vector<int> inputs =
        kResidual ? Reusable<Device>({kind_.x(), kind_.residual_input()})
                  : Reusable<Device>({kind_.x()});
    Tensor* out = nullptr;
    if (kResidual) {
      OP_REQUIRES_OK(ctx, ReuseOrAllocateOutput<Device>(
                              ctx, inputs, kind_.h_out(), x.shape(), &out));
      a.h = out->flat<T>().data();
    }
    OP_REQUIRES_OK(ctx, ReuseOrAllocateOutput<Device>(
                            ctx, inputs, kind_.y_out(), x.shape(), &out));
    a.y = out->flat<T>().data();
    if (kCentered) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(kind_.mean_out(), rows, &out));
      a.mean = out->flat<Stat<T>>().data();
    }
    OP_REQUIRES_OK(ctx, ctx->allocate_output(kind_.rstd_out(), rows, &out));
    a.rstd = out->flat<Stat<T>>().data();
    if (shape.rows == 0) return;
    OP_REQUIRES_OK(ctx, NormExecutor<Device>::Forward(
                            ctx, op, DtypeOf<T>(), shape, epsilon_, a));
  }

 private:
  static constexpr NormKind kind_{kCentered, kResidual};
  float epsilon_ = 0.0f;
};

template <typename Device, typename T, bool kCentered, bool kResidual>
class NormGradOp : public OpKernel {
 public:
  explicit NormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    float epsilon = 0.0f;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon));
    OP_REQUIRES_OK(ctx, CheckEpsilon(kind_.Name(true), epsilon));
    OP_REQUIRES_OK(ctx, CheckU<T>(kind_.Name(true), ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string op = kind_.Name(true);
    const char* x_name = kResidual ? "h" : "x";
    const Tensor& x = ctx->input(kind_.g_x());
    NormShape shape;
    shape.centered = kCentered;
    OP_REQUIRES_OK(ctx, CheckRows(op, x.shape(), &shape.rows, &shape.cols));
    const Tensor& dy = ctx->input(kind_.g_dy());
    OP_REQUIRES_OK(ctx,
                   RequireSameShape(op, x_name, x.shape(), "dy", dy.shape()));
    GradArgs a;
    if (kResidual) {
      const Tensor& dh = ctx->input(kind_.g_dh());
      OP_REQUIRES_OK(ctx,
                     RequireSameShape(op, x_name, x.shape(), "dh", dh.shape()));
      a.dh = dh.flat<T>().data();
    }
    const Tensor& gamma = ctx->input(kind_.g_gamma());
    OP_REQUIRES_OK(ctx, CheckParam(op, "gamma", x.shape(), gamma.shape()));
    if (kCentered) {
      const Tensor& mean = ctx->input(kind_.g_mean());
      OP_REQUIRES_OK(ctx, CheckStat(op, "mean", x.shape(), mean.shape()));
      a.mean = mean.flat<Stat<T>>().data();
    }
    const Tensor& rstd = ctx->input(kind_.g_rstd());
    OP_REQUIRES_OK(ctx, CheckStat(op, "rstd", x.shape(), rstd.shape()));
    a.rstd = rstd.flat<Stat<T>>().data();
    a.dy = dy.flat<T>().data();
    a.x = x.flat<T>().data();
    a.gamma = gamma.flat<Stat<T>>().data();
    Tensor* out = nullptr;
    const std::vector<int> inputs =
        kResidual ? Reusable<Device>({kind_.g_dy(), kind_.g_dh(), kind_.g_x()})
                  : Reusable<Device>({kind_.g_dy(), kind_.g_x()});
    OP_REQUIRES_OK(
        ctx, ReuseOrAllocateOutput<Device>(ctx, inputs, 0, x.shape(), &out));
    a.dx = out->flat<T>().data();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &out));
    a.dgamma = out->flat<Stat<T>>().data();
    if (kCentered) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &out));
      a.dbeta = out->flat<Stat<T>>().data();
    }
    // Also for no rows: dgamma and dbeta are then zeros.
    OP_REQUIRES_OK(
        ctx, NormExecutor<Device>::Grad(ctx, op, DtypeOf<T>(), shape, a));
  }

 private:
  static constexpr NormKind kind_{kCentered, kResidual};
};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_NORM_KIND(DEV, TAG, T, NAME, C, R)                  \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>" NAME).Device(DEV).TypeConstraint<T>("T"),               \
      NormOp<TAG, T, C, R>);                                                \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>" NAME "Grad").Device(DEV).TypeConstraint<T>("T"),        \
      NormGradOp<TAG, T, C, R>);

TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_NORM_KIND, "LayerNorm", true, false)
TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_NORM_KIND, "AddLayerNorm", true, true)
TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_NORM_KIND, "RmsNorm", false, false)
TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_NORM_KIND, "AddRmsNorm", false, true)

}  // namespace norm
}  // namespace tf_ops

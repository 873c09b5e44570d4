// Kernels of the fused ops (fused_op_defs.h): bias + activation, add +
// activation (forward), and gated activations (without and with a bias),
// forward and grad, for every activation in activation_list.h
// and half, bfloat16, float and double. They check shapes (the shape
// functions cannot when dimensions are unknown, nor in eager calls), allocate
// (reusing an input buffer when TensorFlow allows) and hand the buffers to
// the device's FusedExecutor. Compiled twice, as activation_kernels.cc:
//   TF_OPS_WITH_CUDA=0: CPU kernels (fused_cpu.h's loops over TensorFlow's
//                       intra-op thread pool), into _tf_ops.so;
//   TF_OPS_WITH_CUDA=1: GPU kernels (cu/fused/fused_gpu.h's launchers on the op's
//                       CUDA stream), into _tf_ops_gpu.so.
//
// The bias gradient is deterministic on both: fixed tiles from the shape
// alone, each writing its own partial sums into a scratch tensor, then added
// per channel in a fixed order (fused_cpu.h's tiling, fused_gpu.cu's plan).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ops/cc/activation/activation_attrs.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/fused/fused_cpu.h"
#include "tf_ops/cc/fused/fused_checks.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/fused/fused_gpu.h"
#endif

namespace tf_ops {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// What each device does with the checked, allocated buffers; `op` names the
// op in errors.
template <typename Device>
struct FusedExecutor;

#if TF_OPS_WITH_CUDA
template <>
struct FusedExecutor<GpuDevice> {
  template <typename Act, typename T>
  static absl::Status BiasForward(OpKernelContext* ctx, const std::string& op,
                                  const Act& act, const T* x, const T* bias,
                                  T* y, BiasLayout layout, int64_t n) {
    return LaunchStatus(op, LaunchBiasForward(act, DtypeOf<T>(), x, bias, y,
                                              layout, n, GpuStream(ctx)));
  }

  // The partial sums live in a scratch tensor of BiasGradGpuScratchBytes.
  template <typename Act, typename T>
  static absl::Status BiasGrad(OpKernelContext* ctx, const std::string& op,
                               const Act& act, const T* g, const T* x,
                               const T* bias, T* dx, T* db, BiasLayout layout,
                               int64_t n) {
    Tensor holder;
    absl::StatusOr<void*> scratch = AllocateScratch(
        ctx, BiasGradGpuScratchBytes(DtypeOf<T>(), layout, n), &holder);
    TF_RETURN_IF_ERROR(scratch.status());
    return LaunchStatus(op, LaunchBiasGrad(act, DtypeOf<T>(), g, x, bias, dx,
                                           db, *scratch, layout, n,
                                           GpuStream(ctx)));
  }

  template <typename Act, typename T>
  static absl::Status GatedForward(OpKernelContext* ctx, const std::string& op,
                                   const Act& act, const T* x, const T* bias,
                                   T* y, int64_t half, int64_t n_out) {
    return LaunchStatus(op, LaunchGatedForward(act, DtypeOf<T>(), x, bias, y,
                                               half, n_out, GpuStream(ctx)));
  }

  template <typename Act, typename T>
  static absl::Status BiasGatedGrad(OpKernelContext* ctx,
                                    const std::string& op, const Act& act,
                                    const T* g, const T* x, const T* bias,
                                    T* dx, T* db, int64_t half,
                                    int64_t n_out) {
    Tensor holder;
    absl::StatusOr<void*> scratch = AllocateScratch(
        ctx, BiasGatedGradGpuScratchBytes(DtypeOf<T>(), half, n_out), &holder);
    TF_RETURN_IF_ERROR(scratch.status());
    return LaunchStatus(op, LaunchBiasGatedGrad(act, DtypeOf<T>(), g, x, bias,
                                                dx, db, *scratch, half, n_out,
                                                GpuStream(ctx)));
  }

  template <typename Act, typename T>
  static absl::Status GatedGrad(OpKernelContext* ctx, const std::string& op,
                                const Act& act, const T* g, const T* x, T* dx,
                                int64_t half, int64_t n_out) {
    return LaunchStatus(op, LaunchGatedGrad(act, DtypeOf<T>(), g, x, dx, half,
                                            n_out, GpuStream(ctx)));
  }
};
#else
template <>
struct FusedExecutor<CpuDevice> {
  template <typename Act, typename T>
  static absl::Status BiasForward(OpKernelContext* ctx, const std::string&,
                                  const Act& act, const T* x, const T* bias,
                                  T* y, BiasLayout layout, int64_t n) {
    CpuParallelFor(ctx, n, Act::kCyclesPerElement + 1,
                [&](int64_t begin, int64_t end) {
                  CpuBiasForward(act, DtypeOf<T>(), x, bias, y, layout, begin,
                                 end);
                });
    return absl::OkStatus();
  }

  // The bias gradients: TiledBiasGrad over the op's tiling.
  template <typename Act, typename T>
  static absl::Status BiasGrad(OpKernelContext* ctx, const std::string&,
                               const Act& act, const T* g, const T* x,
                               const T* bias, T* dx, T* db, BiasLayout layout,
                               int64_t n) {
    return TiledBiasGrad<T>(
        ctx, MakeBiasGradTiling(layout, n), Act::kCyclesPerElement + 2, db,
        [&](void* partials, const BiasGradTiling& tiling, int64_t begin,
            int64_t end) {
          CpuBiasGradTiles(act, DtypeOf<T>(), g, x, bias, dx, partials, tiling,
                           begin, end);
        });
  }

  template <typename Act, typename T>
  static absl::Status BiasGatedGrad(OpKernelContext* ctx, const std::string&,
                                    const Act& act, const T* g, const T* x,
                                    const T* bias, T* dx, T* db, int64_t half,
                                    int64_t n_out) {
    const int64_t rows = half == 0 ? 0 : n_out / half;
    return TiledBiasGrad<T>(
        ctx, MakeGatedBiasGradTiling(half, rows),
        3 * Act::kCyclesPerElement + 6, db,
        [&](void* partials, const BiasGradTiling& tiling, int64_t begin,
            int64_t end) {
          CpuBiasGatedGradTiles(act, DtypeOf<T>(), g, x, bias, dx, partials,
                                tiling, begin, end);
        });
  }

  template <typename Act, typename T>
  static absl::Status GatedForward(OpKernelContext* ctx, const std::string&,
                                   const Act& act, const T* x, const T* bias,
                                   T* y, int64_t half, int64_t n_out) {
    CpuParallelFor(ctx, n_out, 2 * Act::kCyclesPerElement + 2,
                [&](int64_t begin, int64_t end) {
                  CpuGatedForward(act, DtypeOf<T>(), x, bias, y, half, begin,
                                  end);
                });
    return absl::OkStatus();
  }

  template <typename Act, typename T>
  static absl::Status GatedGrad(OpKernelContext* ctx, const std::string&,
                                const Act& act, const T* g, const T* x, T* dx,
                                int64_t half, int64_t n_out) {
    CpuParallelFor(ctx, n_out, 3 * Act::kCyclesPerElement + 4,
                [&](int64_t begin, int64_t end) {
                  CpuGatedGrad(act, DtypeOf<T>(), g, x, dx, half, begin, end);
                });
    return absl::OkStatus();
  }

 private:
  // A bias gradient: `tiles(partials, tiling, begin, end)` over the tiles in
  // parallel, each into its own partial sums (a scratch tensor), then the
  // per-channel sums in parallel over channels. `cost` is cycles per element.
  template <typename T, typename Tiles>
  static absl::Status TiledBiasGrad(OpKernelContext* ctx,
                                    const BiasGradTiling& tiling, int64_t cost,
                                    T* db, const Tiles& tiles) {
    // Partial sums in float or double (fused_cpu.h); double-sized slots
    // hold either.
    Tensor holder;
    absl::StatusOr<void*> partials =
        AllocateScratch(ctx, tiling.partials() * sizeof(double), &holder);
    TF_RETURN_IF_ERROR(partials.status());
    void* pp = *partials;
    CpuParallelFor(ctx, tiling.tiles(),
                   tiling.row_block * tiling.col_block * cost,
                   [&](int64_t begin, int64_t end) {
                     tiles(pp, tiling, begin, end);
                   });
    const int64_t channels = tiling.layout.channels;
    const int64_t per_channel =
        tiling.partials() / std::max<int64_t>(1, channels) + 1;
    CpuParallelFor(ctx, channels, per_channel, [&](int64_t begin, int64_t end) {
      CpuBiasGradReduce(DtypeOf<T>(), pp, tiling, db, begin, end);
    });
    return absl::OkStatus();
  }
};
#endif  // TF_OPS_WITH_CUDA

template <typename Act>
std::string Name(const char* family, const char* suffix = "") {
  return absl::StrCat("TfOps>", family, Act::kName, suffix);
}

template <typename Device, typename T, typename Act>
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
    const std::string op = Name<Act>("Bias");
    BiasLayout layout;
    OP_REQUIRES_OK(ctx,
                   BiasLayoutOf(op, nchw_, x.shape(), bias.shape(), &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ReuseOrAllocateOutput<Device>(ctx, {0}, 0, x.shape(), &y));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedExecutor<Device>::BiasForward(
                            ctx, op, act_, x.flat<T>().data(),
                            bias.flat<T>().data(), y->flat<T>().data(), layout,
                            n));
  }

 private:
  Act act_;
  bool nchw_ = false;
};

template <typename Device, typename T, typename Act>
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
    OP_REQUIRES_OK(ctx, RequireSameShape(op, "gradients", g.shape(),
                                         "features", x.shape()));
    BiasLayout layout;
    OP_REQUIRES_OK(ctx,
                   BiasLayoutOf(op, nchw_, x.shape(), bias.shape(), &layout));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ReuseOrAllocateOutput<Device>(ctx, {0, 1}, 0,
                                                      x.shape(), &dx));
    Tensor* db = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &db));
    // Also for an empty x: db is then zeros.
    OP_REQUIRES_OK(ctx, FusedExecutor<Device>::BiasGrad(
                            ctx, op, act_, g.flat<T>().data(),
                            x.flat<T>().data(), bias.flat<T>().data(),
                            dx->flat<T>().data(), db->flat<T>().data(), layout,
                            x.NumElements()));
  }

 private:
  Act act_;
  bool nchw_ = false;
};

// Add{Act}: the bias op's engine with the residual as a bias of the features'
// own shape (AddLayoutOf).
template <typename Device, typename T, typename Act>
class AddActivationOp : public OpKernel {
 public:
  explicit AddActivationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(1);
    const std::string op = Name<Act>("Add");
    BiasLayout layout;
    OP_REQUIRES_OK(ctx, AddLayoutOf(op, x.shape(), residual.shape(), &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx,
                   ReuseOrAllocateOutput<Device>(ctx, {0, 1}, 0, x.shape(), &y));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedExecutor<Device>::BiasForward(
                            ctx, op, act_, x.flat<T>().data(),
                            residual.flat<T>().data(), y->flat<T>().data(),
                            layout, n));
  }

 private:
  Act act_;
};

// Gated{Act} (kBias false) and BiasGated{Act} (kBias true: input 1 is the
// bias, added to the features before the split).
template <typename Device, typename T, typename Act, bool kBias>
class GatedActivationOp : public OpKernel {
 public:
  explicit GatedActivationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const std::string op = Name<Act>(kBias ? "BiasGated" : "Gated");
    int64_t half = 0;
    OP_REQUIRES_OK(ctx, GatedHalf(op, x.shape(), &half));
    const T* bias = nullptr;
    if (kBias) {
      const Tensor& b = ctx->input(1);
      OP_REQUIRES_OK(ctx, CheckGatedBias(op, x.shape(), b.shape()));
      bias = b.flat<T>().data();
    }
    TensorShape out_shape = x.shape();
    out_shape.set_dim(out_shape.dims() - 1, half);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &y));
    const int64_t n = out_shape.num_elements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedExecutor<Device>::GatedForward(
                            ctx, op, act_, x.flat<T>().data(), bias,
                            y->flat<T>().data(), half, n));
  }

 private:
  Act act_;
};

template <typename Device, typename T, typename Act, bool kBias>
class GatedActivationGradOp : public OpKernel {
 public:
  explicit GatedActivationGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &act_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const std::string op = Name<Act>(kBias ? "BiasGated" : "Gated", "Grad");
    int64_t half = 0;
    OP_REQUIRES_OK(ctx, GatedHalf(op, x.shape(), &half));
    if (kBias) {
      OP_REQUIRES_OK(ctx, CheckGatedBias(op, x.shape(), ctx->input(2).shape()));
    }
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
                   ReuseOrAllocateOutput<Device>(ctx, {1}, 0, x.shape(), &dx));
    const int64_t n = out_shape.num_elements();
    if constexpr (kBias) {
      const Tensor& bias = ctx->input(2);
      Tensor* db = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &db));
      // Also for an empty x: db is then zeros.
      OP_REQUIRES_OK(ctx, FusedExecutor<Device>::BiasGatedGrad(
                              ctx, op, act_, g.flat<T>().data(),
                              x.flat<T>().data(), bias.flat<T>().data(),
                              dx->flat<T>().data(), db->flat<T>().data(), half,
                              n));
      return;
    }
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedExecutor<Device>::GatedGrad(
                            ctx, op, act_, g.flat<T>().data(),
                            x.flat<T>().data(), dx->flat<T>().data(), half,
                            n));
  }

 private:
  Act act_;
};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_FUSED(DEV, TAG, T, Act)                               \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Bias" #Act).Device(DEV).TypeConstraint<T>("T"),             \
      BiasActivationOp<TAG, T, Act>);                                         \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Bias" #Act "Grad").Device(DEV).TypeConstraint<T>("T"),      \
      BiasActivationGradOp<TAG, T, Act>);                                     \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Add" #Act).Device(DEV).TypeConstraint<T>("T"),              \
      AddActivationOp<TAG, T, Act>);                                          \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Gated" #Act).Device(DEV).TypeConstraint<T>("T"),            \
      GatedActivationOp<TAG, T, Act, false>);                                 \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>Gated" #Act "Grad").Device(DEV).TypeConstraint<T>("T"),     \
      GatedActivationGradOp<TAG, T, Act, false>);                             \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>BiasGated" #Act).Device(DEV).TypeConstraint<T>("T"),        \
      GatedActivationOp<TAG, T, Act, true>);                                  \
  REGISTER_KERNEL_BUILDER(                                                    \
      Name("TfOps>BiasGated" #Act "Grad").Device(DEV).TypeConstraint<T>("T"), \
      GatedActivationGradOp<TAG, T, Act, true>);
#define TF_OPS_REGISTER_FUSED_KERNELS(Act) \
  TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_FUSED, Act)
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_FUSED_KERNELS)

}  // namespace tf_ops

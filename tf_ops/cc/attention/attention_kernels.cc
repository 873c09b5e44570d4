// Kernels of the attention ops (attention_ops.cc), for half, bfloat16, float
// and double: they check the inputs (attention_checks.h, the rules the shape
// functions and the XLA lowerings check too), allocate the outputs and hand
// the buffers to the device's engine. Compiled twice, as the other
// families' kernels: CPU kernels (attention_cpu.h over TensorFlow's intra-op
// pool) into _tf_ops.so, GPU kernels (cu/attention/attention_gpu.h) into
// _tf_ops_gpu.so.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/attention/attention_checks.h"
#include "tf_ops/cc/attention/attention_cpu.h"
#include "tf_ops/cc/core/kernel_helpers.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/attention/attention_gpu.h"
#endif

namespace tf_ops {
namespace attention {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

Dims DimsOf(const TensorShape& s) {
  Dims d;
  for (int i = 0; i < s.dims(); ++i) d.push_back(s.dim_size(i));
  return d;
}

// The op's attributes, read and checked once per kernel.
struct Attrs {
  float scale, softcap;
  bool causal;
  int64_t window;
};

absl::Status ReadAttrs(OpKernelConstruction* ctx, const std::string& op,
                       Attrs* a) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("scale", &a->scale));
  TF_RETURN_IF_ERROR(ctx->GetAttr("softcap", &a->softcap));
  TF_RETURN_IF_ERROR(ctx->GetAttr("causal", &a->causal));
  TF_RETURN_IF_ERROR(ctx->GetAttr("window", &a->window));
  return CheckAttrs(op, a->scale, a->softcap, a->window);
}

// The params of one call from inputs 0-4 (query, key, value, mask, bias). The
// inputs are in the device's memory: a GPU kernel's scalar mask is the
// engine's to read (SetMaskAndBias).
absl::Status ParamsOf(OpKernelContext* ctx, const std::string& op,
                      const Attrs& a, AttentionParams* p) {
  const Tensor& mask = ctx->input(3);
  const Tensor& bias = ctx->input(4);
  TF_RETURN_IF_ERROR(CheckAttention(
      op, DimsOf(ctx->input(0).shape()), DimsOf(ctx->input(1).shape()),
      DimsOf(ctx->input(2).shape()), DimsOf(mask.shape()),
      DimsOf(bias.shape()), p));
  p->scale = a.scale;
  p->softcap = a.softcap;
  p->causal = a.causal;
  p->window = a.window;
  SetMaskAndBias(mask.dims(), mask.tensor_data().data(), bias.dims(),
                 bias.tensor_data().data(), p);
  return absl::OkStatus();
}

// The params of a gradient op, whose inputs 5-7 (output, lse, doutput) must
// have the forward's shapes.
absl::Status GradParamsOf(OpKernelContext* ctx, const std::string& op,
                          const Attrs& a, AttentionParams* p) {
  TF_RETURN_IF_ERROR(ParamsOf(ctx, op, a, p));
  const TensorShape out_shape({p->batch, p->q_len, p->heads, p->value_dim});
  TF_RETURN_IF_ERROR(RequireSameShape(op, "output", ctx->input(5).shape(),
                                      "the attention's output", out_shape));
  TF_RETURN_IF_ERROR(RequireSameShape(op, "doutput", ctx->input(7).shape(),
                                      "output", out_shape));
  return RequireSameShape(op, "lse", ctx->input(6).shape(),
                          "[batch, heads, T]",
                          TensorShape({p->batch, p->heads, p->q_len}));
}

template <typename Device>
struct Executor;

#if TF_OPS_WITH_CUDA
template <>
struct Executor<GpuDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const std::string& op,
                              Dtype dtype, const AttentionParams& p,
                              const void* q, const void* k, const void* v,
                              void* out, void* lse) {
    return LaunchStatus(op, LaunchAttentionForward(dtype, p, q, k, v, out, lse,
                                                   GpuStream(ctx)));
  }
  // dbias: where not null, the bias's gradient too (bias_elements of it).
  static absl::Status Backward(OpKernelContext* ctx, const std::string& op,
                               Dtype dtype, const AttentionParams& p,
                               const void* q, const void* k, const void* v,
                               const void* out, const void* dout,
                               const void* lse, void* dq, void* dk, void* dv,
                               void* dbias, int64_t bias_elements) {
    Tensor holder;
    const absl::StatusOr<void*> scratch = AllocateScratch(
        ctx, AttentionGpuBackwardScratchBytes(dtype, p), &holder);
    if (!scratch.ok()) return scratch.status();
    TF_RETURN_IF_ERROR(LaunchStatus(
        op, LaunchAttentionBackward(dtype, p, q, k, v, out, dout, lse, dq, dk,
                                    dv, *scratch, GpuStream(ctx))));
    if (dbias == nullptr) return absl::OkStatus();
    return LaunchStatus(
        op, LaunchAttentionBiasGrad(dtype, p, q, k, v, out, dout, lse, dbias,
                                    bias_elements, GpuStream(ctx)));
  }
};
#else
template <>
struct Executor<CpuDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const std::string&,
                              Dtype dtype, const AttentionParams& p,
                              const void* q, const void* k, const void* v,
                              void* out, void* lse) {
    CpuAttentionForward(dtype, p, q, k, v, out, lse, CpuParallelForOf(ctx));
    return absl::OkStatus();
  }
  static absl::Status Backward(OpKernelContext* ctx, const std::string&,
                               Dtype dtype, const AttentionParams& p,
                               const void* q, const void* k, const void* v,
                               const void* out, const void* dout,
                               const void* lse, void* dq, void* dk, void* dv,
                               void* dbias, int64_t bias_elements) {
    Tensor holder;
    const absl::StatusOr<void*> scratch = AllocateScratch(
        ctx, CpuAttentionBackwardScratchBytes(dtype, p, bias_elements),
        &holder);
    if (!scratch.ok()) return scratch.status();
    CpuAttentionBackward(dtype, p, q, k, v, out, dout, lse, dq, dk, dv, dbias,
                         bias_elements, *scratch, CpuParallelForOf(ctx));
    return absl::OkStatus();
  }
};
#endif  // TF_OPS_WITH_CUDA

template <typename Device, typename T>
class AttentionOp : public OpKernel {
 public:
  explicit AttentionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, kOp, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    AttentionParams p;
    OP_REQUIRES_OK(ctx, ParamsOf(ctx, kOp, attrs_, &p));
    Tensor* out = nullptr;
    Tensor* lse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({p.batch, p.q_len, p.heads,
                                            p.value_dim}),
                            &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            1, TensorShape({p.batch, p.heads, p.q_len}),
                            &lse));
    if (out->NumElements() == 0) return;
    OP_REQUIRES_OK(
        ctx, Executor<Device>::Forward(
                 ctx, kOp, DtypeOf<T>(), p, ctx->input(0).tensor_data().data(),
                 ctx->input(1).tensor_data().data(),
                 ctx->input(2).tensor_data().data(),
                 const_cast<char*>(out->tensor_data().data()),
                 const_cast<char*>(lse->tensor_data().data())));
  }

 private:
  static constexpr const char* kOp = "TfOps>Attention";
  Attrs attrs_;
};

// TfOps>AttentionGrad (dq, dk, dv) and, kWithBias, TfOps>AttentionBiasGrad
// (the same and dbias, in the bias's shape).
template <typename Device, typename T, bool kWithBias>
class AttentionGradOp : public OpKernel {
 public:
  explicit AttentionGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, kOp, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    AttentionParams p;
    OP_REQUIRES_OK(ctx, GradParamsOf(ctx, kOp, attrs_, &p));
    Tensor* grads[4] = {};
    for (int i = 0; i < (kWithBias ? 4 : 3); ++i) {
      const int like = i < 3 ? i : 4;  // query, key, value; bias
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, ctx->input(like).shape(),
                                               &grads[i]));
    }
    const int64_t bias_elements = kWithBias ? grads[3]->NumElements() : 0;
    if (p.batch == 0 && bias_elements == 0) return;  // every gradient empty
    auto data = [&](int i) { return ctx->input(i).tensor_data().data(); };
    auto out = [&](int i) {
      return const_cast<char*>(grads[i]->tensor_data().data());
    };
    OP_REQUIRES_OK(ctx, Executor<Device>::Backward(
                            ctx, kOp, DtypeOf<T>(), p, data(0), data(1),
                            data(2), data(5), data(7), data(6), out(0), out(1),
                            out(2), bias_elements > 0 ? out(3) : nullptr,
                            bias_elements));
  }

 private:
  static constexpr const char* kOp =
      kWithBias ? "TfOps>AttentionBiasGrad" : "TfOps>AttentionGrad";
  Attrs attrs_;
};

}  // namespace

// The lse input/output is float, double for double (attribute L).
#define TF_OPS_REGISTER_ATTENTION(DEV, TAG, T, ...)                 \
  REGISTER_KERNEL_BUILDER(Name("TfOps>Attention")                   \
                              .Device(DEV)                          \
                              .TypeConstraint<T>("T")               \
                              .TypeConstraint<ComputeType<T>>("L"), \
                          AttentionOp<TAG, T>);                     \
  REGISTER_KERNEL_BUILDER(Name("TfOps>AttentionGrad")               \
                              .Device(DEV)                          \
                              .TypeConstraint<T>("T")               \
                              .TypeConstraint<ComputeType<T>>("L"), \
                          AttentionGradOp<TAG, T, false>);          \
  REGISTER_KERNEL_BUILDER(Name("TfOps>AttentionBiasGrad")           \
                              .Device(DEV)                          \
                              .TypeConstraint<T>("T")               \
                              .TypeConstraint<ComputeType<T>>("L"), \
                          AttentionGradOp<TAG, T, true>);

using tensorflow::register_kernel::Name;
TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_ATTENTION)
#undef TF_OPS_REGISTER_ATTENTION

}  // namespace attention
}  // namespace tf_ops

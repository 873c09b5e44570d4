// Kernels of the rotary embedding ops (rotary_checks.h), for half,
// bfloat16, float and double: they check the attributes (at construction)
// and the shapes (the shape functions cannot when dimensions are unknown,
// nor in eager calls), allocate (the output may take x's buffer) and hand the
// buffers to the device's engine. Compiled twice, as norm_kernels.cc: CPU
// kernels (rotary_cpu.h over TensorFlow's intra-op pool) into _tf_ops.so,
// GPU kernels (cu/rotary/rotary_gpu.h) into _tf_ops_gpu.so.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/threadpool.h"
#include "tf_ops/cc/core/kernel_helpers.h"
#include "tf_ops/cc/rotary/rotary_cpu.h"
#include "tf_ops/cc/rotary/rotary_checks.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/rotary/rotary_gpu.h"
#endif

namespace tf_ops {
namespace rotary {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// One call's checked inputs.
struct Call {
  Dtype dtype;
  RotaryLayout layout;
  const RopeParams* params;
  bool transpose;
  const void* positions;
  const void* x;
  void* y;
};

template <typename Device>
struct RotaryExecutor;

#if TF_OPS_WITH_CUDA
template <>
struct RotaryExecutor<GpuDevice> {
  static absl::Status Run(OpKernelContext* ctx, const std::string& op,
                          const Call& c) {
    Tensor scratch;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(
        tensorflow::DT_INT8, TensorShape({RotaryGpuScratchBytes(c.layout)}),
        &scratch));
    const char* error = LaunchRotary(
        c.dtype, c.layout, *c.params, c.transpose, c.positions, c.x, c.y,
        scratch.flat<int8_t>().data(), GpuStream(ctx));
    return LaunchStatus(op, error);
  }
};
#else
template <>
struct RotaryExecutor<CpuDevice> {
  static absl::Status Run(OpKernelContext* ctx, const std::string&,
                          const Call& c) {
    const int64_t half = c.layout.half();
    std::vector<double> inverse(half);
    for (int64_t j = 0; j < half; ++j) {
      inverse[j] = InverseFrequency(*c.params, c.layout.features, j);
    }
    RotaryArgs args;
    args.dtype = c.dtype;
    args.layout = c.layout;
    args.positions = c.positions;
    args.inverse_frequencies = inverse.data();
    args.magnitude = Magnitude(*c.params);
    args.transpose = c.transpose;
    // ~3 cycles per element (the sines and cosines are shared by a unit's
    // rows), ~20 where each pair has its own angle.
    const int64_t per_element = c.layout.inner == 1 ? 3 : 20;
    CpuParallelFor(ctx, CpuRotaryUnits(c.layout),
                   per_element * CpuRotaryUnitElements(c.layout) + 100,
                   [&](int64_t begin, int64_t end) {
                     CpuRotary(args, c.x, c.y, begin, end);
                   });
    return absl::OkStatus();
  }
};
#endif  // TF_OPS_WITH_CUDA

template <typename Device, typename T, bool kGrad>
class RotaryOp : public OpKernel {
 public:
  explicit RotaryOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRotaryAttrs(ctx, OpName(kGrad), &attrs_));
    tensorflow::DataType u;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("U", &u));
    OP_REQUIRES_OK(ctx, CheckPositionsType(OpName(kGrad),
                                           tensorflow::DataTypeToEnum<T>::value,
                                           u));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string op = OpName(kGrad);
    const Tensor& x = ctx->input(0);
    const Tensor& positions = ctx->input(1);
    Call c;
    int sequence_axis, feature_axis;
    OP_REQUIRES_OK(ctx, CheckShapes(op, InputName(kGrad), x.shape(),
                                    positions.shape(), attrs_, &c.layout,
                                    &sequence_axis, &feature_axis));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0,
                                                             x.shape(), &y));
    if (x.NumElements() == 0) return;
    c.dtype = DtypeOf<T>();
    c.params = &attrs_.params;
    c.transpose = kGrad;
    c.positions = positions.flat<ComputeType<T>>().data();
    c.x = x.flat<T>().data();
    c.y = y->flat<T>().data();
    OP_REQUIRES_OK(ctx, RotaryExecutor<Device>::Run(ctx, op, c));
  }

 private:
  RotaryAttrs attrs_;
};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_ROTARY(DEV, TAG, T, ...)                            \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>RotaryEmbedding").Device(DEV).TypeConstraint<T>("T"),     \
      RotaryOp<TAG, T, false>);                                             \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>RotaryEmbeddingGrad").Device(DEV).TypeConstraint<T>("T"), \
      RotaryOp<TAG, T, true>);

TF_OPS_REGISTER_KERNELS(TF_OPS_REGISTER_ROTARY)

}  // namespace rotary
}  // namespace tf_ops

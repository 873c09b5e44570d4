// XLA lowerings of the rotary embedding ops (rotary_op_layout.h) on the
// XLA_CPU_JIT and XLA_GPU_JIT devices: rotary_math.h's rotation with T =
// XlaValue. The inverse frequencies are InverseFrequency's values, computed
// while compiling (the feature size is static) and embedded as a constant;
// the angles, sines and cosines are computed for the positions only ([S] or
// [B', S'] by D/2) and broadcast into x's halves, which XLA fuses into one
// loop with the rotation. Same checks as the kernels. Registered with
// REGISTER_KERNEL_BUILDER for the reason activation_xla.cc gives.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_input_shape.h"
#include "tf_ops/cc/core/xla_value.h"
#include "tf_ops/cc/rotary/rotary_math.h"
#include "tf_ops/cc/rotary/rotary_op_layout.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace rotary {
namespace {

using tensorflow::TensorShape;
using xla::XlaOp;

// The D/2 inverse frequencies as a constant of the compute type.
XlaOp InverseFrequencies(xla::XlaBuilder* b, xla::PrimitiveType compute,
                         const RopeParams& params, int64_t features) {
  std::vector<double> w(features / 2);
  for (int64_t j = 0; j < features / 2; ++j) {
    w[j] = InverseFrequency(params, features, j);
  }
  if (compute == xla::F64) return xla::ConstantR1<double>(b, w);
  return xla::ConstantR1<float>(b, std::vector<float>(w.begin(), w.end()));
}

template <bool kGrad>
class RotaryXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit RotaryXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRotaryAttrs(ctx, OpName(kGrad), &attrs_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = OpName(kGrad);
    absl::StatusOr<TensorShape> x_shape = XlaInputShape(ctx, 0);
    OP_REQUIRES_OK(ctx, x_shape.status());
    absl::StatusOr<TensorShape> p_shape = XlaInputShape(ctx, 1);
    OP_REQUIRES_OK(ctx, p_shape.status());
    RotaryLayout layout;
    int seq_axis, feature_axis;
    OP_REQUIRES_OK(ctx, CheckShapes(op, InputName(kGrad), *x_shape, *p_shape,
                                    attrs_, &layout, &seq_axis, &feature_axis));
    if (x_shape->num_elements() == 0) {
      ctx->SetOutput(0, ctx->Input(0));
      return;
    }
    xla::XlaBuilder* b = ctx->builder();
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const xla::PrimitiveType compute = XlaComputeType(type);
    const int64_t features = x_shape->dim_size(feature_axis);
    const int64_t half = features / 2;
    const int64_t seq_len = x_shape->dim_size(seq_axis);

    // The positions as [S] or [B', S'] (a start: start + iota, one rounding
    // as in the kernels), their x axes, and their angles [..., D/2].
    XlaOp positions = ctx->Input(1);
    std::vector<int64_t> dims;   // the positions' dims, then D/2
    std::vector<int64_t> axes;   // the x axis of each
    if (p_shape->dims() == 0) {
      positions = xla::Add(xla::Broadcast(positions, {seq_len}),
                           xla::Iota(b, compute, seq_len));
      dims = {seq_len};
      axes = {seq_axis};
    } else {
      const auto p = p_shape->dim_sizes();
      dims.assign(p.begin(), p.end());
      int batch_axis = 0;
      while (batch_axis == seq_axis || batch_axis == feature_axis) ++batch_axis;
      axes = dims.size() == 2 ? std::vector<int64_t>{batch_axis, seq_axis}
                              : std::vector<int64_t>{seq_axis};
    }
    const int table_rank = static_cast<int>(dims.size());
    std::vector<int64_t> position_dims(table_rank);
    std::iota(position_dims.begin(), position_dims.end(), 0);
    dims.push_back(half);
    axes.push_back(feature_axis);
    const XlaValue angle(xla::Mul(
        xla::BroadcastInDim(positions, dims, position_dims),
        xla::BroadcastInDim(
            InverseFrequencies(b, compute, attrs_.params, features), dims,
            {table_rank})));
    Rotation<XlaValue> r =
        RotationOf(angle, XlaValue(Magnitude(attrs_.params)), kGrad);

    // Into the shape of x's halves: broadcast dims (those of size 1) are
    // dropped, the rest transposed into x's axis order.
    const auto x_dims = x_shape->dim_sizes();
    std::vector<int64_t> half_dims(x_dims.begin(), x_dims.end());
    half_dims[feature_axis] = half;
    std::vector<int64_t> kept_dims, kept_axes;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != 1 || i + 1 == dims.size()) {
        kept_dims.push_back(dims[i]);
        kept_axes.push_back(axes[i]);
      }
    }
    std::vector<int64_t> order(kept_axes.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
      return kept_axes[a] < kept_axes[c];
    });
    std::vector<int64_t> sorted_axes;
    for (int64_t i : order) sorted_axes.push_back(kept_axes[i]);
    auto spread = [&](const XlaValue& v) {
      const XlaOp kept = xla::Reshape(v.op(), kept_dims);
      return XlaValue(xla::BroadcastInDim(xla::Transpose(kept, order),
                                          half_dims, sorted_axes));
    };
    r = Rotation<XlaValue>{spread(r.cos), spread(r.sin)};

    const XlaOp x = ctx->Input(0);
    const XlaValue first =
        Widen(xla::SliceInDim(x, 0, half, 1, feature_axis), type);
    const XlaValue second =
        Widen(xla::SliceInDim(x, half, features, 1, feature_axis), type);
    const RotatedPair<XlaValue> y = Rotate(r, first, second);
    ctx->SetOutput(0, xla::ConcatInDim(b, {Narrow(y.first, first, type),
                                           Narrow(y.second, first, type)},
                                       feature_axis));
  }

 private:
  RotaryAttrs attrs_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_ROTARY_XLA(DEV)                                       \
  REGISTER_KERNEL_BUILDER(Name("TfOps>RotaryEmbedding")                       \
                              .Device(DEV)                                    \
                              .TypeConstraint("T", kXlaDtypes),               \
                          RotaryXlaOp<false>);                                \
  REGISTER_KERNEL_BUILDER(Name("TfOps>RotaryEmbeddingGrad")                   \
                              .Device(DEV)                                    \
                              .TypeConstraint("T", kXlaDtypes),               \
                          RotaryXlaOp<true>);
TF_OPS_REGISTER_ROTARY_XLA(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_ROTARY_XLA(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace rotary
}  // namespace tf_ops

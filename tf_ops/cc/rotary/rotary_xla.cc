// XLA lowerings of the rotary embedding ops (rotary_checks.h) on the
// XLA_CPU_JIT and XLA_GPU_JIT devices: rotary_math.h's rotation with T =
// XlaValue, and the same checks as the kernels. The rotations (m cos, m sin)
// are made for the positions only ([S] or [B', S'] by D/2) and broadcast
// into x's halves, which XLA fuses with the rotation into one loop:
//   - positions known when compiling (a Python start index, constant
//     positions: a training step) are turned into rotations now, on the
//     host, by the kernels' math (the frequencies of InverseFrequency, the
//     angle rounded to the compute type, the CPU engine's sine and cosine),
//     and embedded as constants, as XLA folds keras-hub's cos/sin table;
//   - otherwise (cached decoding's start index, positions from data) they
//     are computed in the graph from the frequencies, a constant; an
//     optimization barrier keeps XLA:GPU from recomputing them per element
//     of x (XLA:CPU removes barriers before fusion and does recompute them).
// Registered with REGISTER_KERNEL_BUILDER for the reason activation_xla.cc
// gives.

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
#include "tf_ops/cc/rotary/rotary_checks.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/literal.h"
#include "xla/shape.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace rotary {
namespace {

using tensorflow::TensorShape;
using xla::XlaOp;

std::vector<double> InverseFrequencies(const RopeParams& params,
                                       int64_t features) {
  std::vector<double> w(features / 2);
  for (int64_t j = 0; j < features / 2; ++j) {
    w[j] = InverseFrequency(params, features, j);
  }
  return w;
}

// At most this many rotations are computed while compiling: two constants
// of this many compute-type values each (4 MiB each in float32: e.g. 8192
// positions of 128 pairs), beyond which the program would carry more
// constant data than a step moves.
constexpr int64_t kMaxFoldedRotations = int64_t{1} << 20;

// The rotations [..., D/2] of positions known when compiling (a start: the
// sequence's positions start + s), computed now on the host with the
// kernels' math, the CPU engine's sine and cosine included: the loop over x
// then reads two constants, as when XLA folds keras-hub's cos/sin table.
template <typename C>
Rotation<XlaValue> FoldedRotations(xla::XlaBuilder* b,
                                   const xla::Literal& literal,
                                   bool start_only, int64_t seq_len,
                                   const std::vector<double>& w,
                                   double magnitude, bool transpose,
                                   const std::vector<int64_t>& dims) {
  std::vector<C> positions;
  if (start_only) {
    const C start = literal.Get<C>({});
    for (int64_t s = 0; s < seq_len; ++s) {
      positions.push_back(start + static_cast<C>(s));
    }
  } else {
    const auto data = literal.data<C>();
    positions.assign(data.begin(), data.end());
  }
  const int64_t half = static_cast<int64_t>(w.size());
  std::vector<C> cos(positions.size() * half), sin(cos.size());
  for (size_t k = 0; k < positions.size(); ++k) {
    for (int64_t j = 0; j < half; ++j) {
      const Rotation<C> r =
          RotationOf(Angle(positions[k], static_cast<C>(w[j])),
                     static_cast<C>(magnitude), transpose);
      cos[k * half + j] = r.cos;
      sin[k * half + j] = r.sin;
    }
  }
  return {XlaValue(xla::Reshape(xla::ConstantR1<C>(b, cos), dims)),
          XlaValue(xla::Reshape(xla::ConstantR1<C>(b, sin), dims))};
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

    // The rotations of the positions only ([S] or [B', S'], by D/2), and the
    // x axis of each of their dims.
    std::vector<int64_t> dims;  // the positions' dims ([S] for a start), D/2
    std::vector<int64_t> axes;
    const bool start_only = p_shape->dims() == 0;
    if (start_only) {
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
    dims.push_back(half);
    axes.push_back(feature_axis);
    const std::vector<double> w = InverseFrequencies(attrs_.params, features);
    const double magnitude = Magnitude(attrs_.params);
    int64_t rotations = 1;
    for (int64_t d : dims) rotations *= d;
    xla::Literal literal;
    Rotation<XlaValue> r{XlaValue(0.0), XlaValue(0.0)};
    if (rotations <= kMaxFoldedRotations &&
        ctx->ConstantInput(1, &literal).ok()) {
      r = compute == xla::F64
              ? FoldedRotations<double>(b, literal, start_only, seq_len, w,
                                        magnitude, kGrad, dims)
              : FoldedRotations<float>(b, literal, start_only, seq_len, w,
                                       magnitude, kGrad, dims);
    } else {
      // Computed here (a start: start + iota, one rounding as in the
      // kernels). The barrier keeps XLA:GPU from fusing the sines and
      // cosines into the loop over x, which would compute them again for
      // every element; XLA:CPU removes barriers before fusing, and there
      // they are computed per element of x.
      XlaOp positions = ctx->Input(1);
      if (start_only) {
        positions = xla::Add(xla::Broadcast(positions, {seq_len}),
                             xla::Iota(b, compute, seq_len));
      }
      std::vector<int64_t> position_dims(table_rank);
      std::iota(position_dims.begin(), position_dims.end(), 0);
      const XlaOp inverse =
          compute == xla::F64
              ? xla::ConstantR1<double>(b, w)
              : xla::ConstantR1<float>(
                    b, std::vector<float>(w.begin(), w.end()));
      const XlaValue angle(
          xla::Mul(xla::BroadcastInDim(positions, dims, position_dims),
                   xla::BroadcastInDim(inverse, dims, {table_rank})));
      r = RotationOf(angle, XlaValue(magnitude), kGrad);
      const XlaOp both =
          xla::OptimizationBarrier(xla::Tuple(b, {r.cos.op(), r.sin.op()}));
      r = {XlaValue(xla::GetTupleElement(both, 0)),
           XlaValue(xla::GetTupleElement(both, 1))};
    }

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

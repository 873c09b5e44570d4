// Registrations of the rotary embedding ops (rotary_checks.h lists them),
// with shape functions that run the kernels' checks on what is known at
// graph build: the attributes, x's rank and axes, the feature axis' size,
// positions' shape against x's sequence and batch axes, and U against T.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/rotary/rotary_checks.h"

namespace tf_ops {
namespace rotary {
namespace {

using tensorflow::DataType;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

int64_t DimOrUnknown(InferenceContext* c, ShapeHandle s, int axis) {
  const auto d = c->Dim(s, axis);
  return c->ValueKnown(d) ? c->Value(d) : -1;
}

template <bool kGrad>
absl::Status RotaryShape(InferenceContext* c) {
  const std::string op = OpName(kGrad);
  const char* x_name = InputName(kGrad);
  RotaryAttrs a;
  TF_RETURN_IF_ERROR(ReadRotaryAttrs(c, op, &a));
  DataType t, u;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &t));
  TF_RETURN_IF_ERROR(c->GetAttr("U", &u));
  TF_RETURN_IF_ERROR(CheckPositionsType(op, t, u));
  const ShapeHandle x = c->input(0);
  const int rank = c->RankKnown(x) ? c->Rank(x) : -1;
  int sequence_axis, feature_axis;
  TF_RETURN_IF_ERROR(CheckAxes(op, x_name, rank, a, &sequence_axis,
                               &feature_axis));
  int64_t seq_len = -1, batch = -1;
  if (rank >= 0) {
    TF_RETURN_IF_ERROR(
        CheckFeatures(op, DimOrUnknown(c, x, feature_axis)));
    seq_len = DimOrUnknown(c, x, sequence_axis);
    batch = -2;  // no batch axis, unless one is found
    for (int axis = 0; axis < rank; ++axis) {
      if (axis != sequence_axis && axis != feature_axis) {
        batch = DimOrUnknown(c, x, axis);
        break;
      }
    }
  }
  const ShapeHandle p = c->input(1);
  std::vector<int64_t> p_dims;
  if (c->RankKnown(p)) {
    for (int i = 0; i < c->Rank(p); ++i) {
      p_dims.push_back(DimOrUnknown(c, p, i));
    }
  }
  TF_RETURN_IF_ERROR(
      CheckPositions(op, x_name, p_dims, c->RankKnown(p), seq_len, batch));
  c->set_output(0, x);
  return absl::OkStatus();
}

#define TF_OPS_ROTARY_ATTRS                                             \
  Attr("T: {half, bfloat16, float, double}")                            \
      .Attr("U: {float, double} = DT_FLOAT")                            \
      .Attr("max_wavelength: float = 10000.0")                          \
      .Attr("scaling_factor: float = 1.0")                              \
      .Attr("rope_type: {'linear', 'dynamic', 'yarn', 'llama3'} = 'linear'") \
      .Attr("denominator_dim: int = 0")                                 \
      .Attr("beta_fast: float = 32.0")                                  \
      .Attr("beta_slow: float = 1.0")                                   \
      .Attr("original_max_position_embeddings: int = 4096")             \
      .Attr("truncate: bool = true")                                    \
      .Attr("frequency_adjustment_factor: float = 8.0")                 \
      .Attr("low_freq_factor: float = 1.0")                             \
      .Attr("high_freq_factor: float = 4.0")                            \
      .Attr("pretraining_sequence_length: int = 8192")                  \
      .Attr("sequence_axis: int = 1")                                   \
      .Attr("feature_axis: int = -1")

REGISTER_OP("TfOps>RotaryEmbedding")
    .Input("x: T")
    .Input("positions: U")
    .Output("y: T")
    .TF_OPS_ROTARY_ATTRS
    .SetShapeFn(RotaryShape<false>)
    .Doc("Rotary position embedding (keras-hub's RotaryEmbedding): each pair "
         "(j, j + D/2) of x's feature axis turned by the angle position * "
         "inverse_frequency[j]; positions is the start index (a scalar) or "
         "each sequence index's position ([S] or [B, S]).");

REGISTER_OP("TfOps>RotaryEmbeddingGrad")
    .Input("dy: T")
    .Input("positions: U")
    .Output("dx: T")
    .TF_OPS_ROTARY_ATTRS
    .SetShapeFn(RotaryShape<true>)
    .Doc("The gradient of RotaryEmbedding: dy turned back by the same angles "
         "(the transpose of the rotation).");

#undef TF_OPS_ROTARY_ATTRS

}  // namespace
}  // namespace rotary
}  // namespace tf_ops

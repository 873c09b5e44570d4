// Registrations of the attention ops, with shape functions that run the
// family's checks (attention_checks.h) on what is known at graph build.
//
// mask and bias are always inputs: a scalar true mask and a scalar bias are
// "none" (a constant added to every logit does not change a softmax), so one
// op covers every combination without optional inputs.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ops/cc/attention/attention_checks.h"

namespace tf_ops {
namespace attention {
namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// An input's dimensions, -1 where unknown; false when its rank is unknown.
bool KnownDims(InferenceContext* c, int input, Dims* dims) {
  const ShapeHandle s = c->input(input);
  if (!c->RankKnown(s)) return false;
  dims->clear();
  for (int i = 0; i < c->Rank(s); ++i) {
    const DimensionHandle d = c->Dim(s, i);
    dims->push_back(c->ValueKnown(d) ? c->Value(d) : -1);
  }
  return true;
}

absl::Status CheckInputs(InferenceContext* c, const std::string& op) {
  float scale, softcap;
  int64_t window;
  TF_RETURN_IF_ERROR(c->GetAttr("scale", &scale));
  TF_RETURN_IF_ERROR(c->GetAttr("softcap", &softcap));
  TF_RETURN_IF_ERROR(c->GetAttr("window", &window));
  TF_RETURN_IF_ERROR(CheckAttrs(op, scale, softcap, window));
  Dims q, k, v, mask, bias;
  const bool known = KnownDims(c, 0, &q) && KnownDims(c, 1, &k) &&
                     KnownDims(c, 2, &v);
  if (!known) return absl::OkStatus();
  if (!KnownDims(c, 3, &mask)) mask.clear();
  if (!KnownDims(c, 4, &bias)) bias.clear();
  return CheckAttention(op, q, k, v, mask, bias, nullptr);
}

// output [B, T, N, Dv], lse [B, N, T].
absl::Status ForwardShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckInputs(c, "TfOps>Attention"));
  ShapeHandle q, v;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &q));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &v));
  c->set_output(0, c->MakeShape({c->Dim(q, 0), c->Dim(q, 1), c->Dim(q, 2),
                                 c->Dim(v, 3)}));
  c->set_output(1, c->MakeShape({c->Dim(q, 0), c->Dim(q, 2), c->Dim(q, 1)}));
  return absl::OkStatus();
}

// dq, dk, dv: the shapes of query, key, value.
absl::Status GradShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckInputs(c, "TfOps>AttentionGrad"));
  for (int i = 0; i < 3; ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// dq, dk, dv and dbias: the shapes of query, key, value and bias (a scalar
// for the scalar "none" bias).
absl::Status BiasGradShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckInputs(c, "TfOps>AttentionBiasGrad"));
  for (int i = 0; i < 3; ++i) c->set_output(i, c->input(i));
  c->set_output(3, c->input(4));
  return absl::OkStatus();
}

// The gradient ops' inputs: the forward's, its outputs and the upstream.
#define TF_OPS_ATTENTION_GRAD_INPUTS \
  Input("query: T")                  \
      .Input("key: T")               \
      .Input("value: T")             \
      .Input("mask: bool")           \
      .Input("bias: T")              \
      .Input("output: T")            \
      .Input("lse: L")               \
      .Input("doutput: T")

#define TF_OPS_ATTENTION_ATTRS                               \
  Attr("T: {half, bfloat16, float, double}")                 \
      .Attr("L: {float, double} = DT_FLOAT")                 \
      .Attr("scale: float = 1.0")                                \
      .Attr("softcap: float = 0.0")                          \
      .Attr("causal: bool = false")                          \
      .Attr("window: int = -1")

REGISTER_OP("TfOps>Attention")
    .Input("query: T")
    .Input("key: T")
    .Input("value: T")
    .Input("mask: bool")
    .Input("bias: T")
    .Output("output: T")
    .Output("lse: L")
    .TF_OPS_ATTENTION_ATTRS
    .SetShapeFn(ForwardShape)
    .Doc("Flash attention in Keras's layout: output = softmax over the kept "
         "keys of (scale q.k + bias, soft-capped) times value, with grouped "
         "key/value heads, a broadcast boolean mask, causal (Keras's "
         "alignment) and a sliding window; lse [batch, heads, T] is the "
         "log-sum-exp the backward recomputes the weights from (-inf for a "
         "row that keeps no key). L is float, or double for double.");

REGISTER_OP("TfOps>AttentionGrad")
    .TF_OPS_ATTENTION_GRAD_INPUTS
    .Output("dquery: T")
    .Output("dkey: T")
    .Output("dvalue: T")
    .TF_OPS_ATTENTION_ATTRS
    .SetShapeFn(GradShape)
    .Doc("The gradients of Attention with respect to query, key and value, "
         "in one pass over the tiles (the weights recomputed from lse).");

REGISTER_OP("TfOps>AttentionBiasGrad")
    .TF_OPS_ATTENTION_GRAD_INPUTS
    .Output("dquery: T")
    .Output("dkey: T")
    .Output("dvalue: T")
    .Output("dbias: T")
    .TF_OPS_ATTENTION_ATTRS
    .SetShapeFn(BiasGradShape)
    .Doc("AttentionGrad and the gradient with respect to the bias: the "
         "logits' gradient summed over the axes the bias is broadcast along, "
         "in a fixed order, in the same pass over the tiles where the bias "
         "has batch and head indices enough of its own (nothing of size "
         "[batch, heads, T, S] beyond the bias's own shape).");

#undef TF_OPS_ATTENTION_ATTRS
#undef TF_OPS_ATTENTION_GRAD_INPUTS

}  // namespace
}  // namespace attention
}  // namespace tf_ops

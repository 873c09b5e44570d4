// The softmax family's ops (softmax_math.h states what they compute; the
// kernels are softmax_kernels.cc, the lowerings softmax_xla.cc). Shapes are
// checked here when known and again at run time (softmax_checks.h).

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_ops {
namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kTypes[] = "T: {half, bfloat16, float, double}";

absl::Status LogitsShape(InferenceContext* c, const std::string& op,
                         int min_rank, ShapeHandle* x) {
  if (!c->WithRankAtLeast(c->input(0), min_rank, x).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": logits must have rank >= ", min_rank,
                     ", got shape ", c->DebugString(c->input(0))));
  }
  return absl::OkStatus();
}

absl::Status ReadScale(InferenceContext* c, const std::string& op) {
  float scale = 1.0f;
  TF_RETURN_IF_ERROR(c->GetAttr("scale", &scale));
  if (std::isfinite(scale)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": attribute 'scale' must be finite, got ", scale));
}

absl::Status ForwardShape(InferenceContext* c, const std::string& op) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(LogitsShape(c, op, 1, &x));
  c->set_output(0, x);
  return absl::OkStatus();
}

absl::Status GradShape(InferenceContext* c, const std::string& op) {
  ShapeHandle merged;
  if (!c->Merge(c->input(0), c->input(1), &merged).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": gradients and softmax must have the same shape, got ",
        c->DebugString(c->input(0)), " and ", c->DebugString(c->input(1))));
  }
  c->set_output(0, merged);
  return absl::OkStatus();
}

absl::Status MaskedShape(InferenceContext* c) {
  const std::string op = "TfOps>ScaledMaskedSoftmax";
  TF_RETURN_IF_ERROR(ReadScale(c, op));
  bool causal = false;
  TF_RETURN_IF_ERROR(c->GetAttr("causal", &causal));
  ShapeHandle x;
  TF_RETURN_IF_ERROR(LogitsShape(c, op, causal ? 2 : 1, &x));
  const ShapeHandle mask = c->input(1);
  if (c->RankKnown(x) && c->RankKnown(mask)) {
    const int rank = c->Rank(x), mrank = c->Rank(mask);
    bool ok = mrank <= rank;
    for (int i = 1; ok && i <= mrank; ++i) {
      const DimensionHandle m = c->Dim(mask, mrank - i);
      const DimensionHandle d = c->Dim(x, rank - i);
      ok = !c->ValueKnown(m) || !c->ValueKnown(d) || c->Value(m) == 1 ||
           c->Value(m) == c->Value(d);
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": mask must broadcast to the logits (rank <= theirs, each "
          "dimension 1 or theirs), got mask ", c->DebugString(mask),
          " and logits ", c->DebugString(x)));
    }
  }
  c->set_output(0, x);
  return absl::OkStatus();
}

absl::Status CrossEntropyShape(InferenceContext* c) {
  const std::string op = "TfOps>SparseSoftmaxCrossEntropy";
  float smoothing = 0.0f, z_loss = 0.0f;
  TF_RETURN_IF_ERROR(c->GetAttr("label_smoothing", &smoothing));
  TF_RETURN_IF_ERROR(c->GetAttr("z_loss", &z_loss));
  if (!(smoothing >= 0.0f && smoothing <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'label_smoothing' must be in [0, 1], got ",
        smoothing));
  }
  if (!(z_loss >= 0.0f && std::isfinite(z_loss))) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'z_loss' must be finite and >= 0, got ", z_loss));
  }
  ShapeHandle x, labels;
  if (!c->WithRank(c->input(0), 2, &x).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": logits must be [rows, classes], got shape ",
        c->DebugString(c->input(0))));
  }
  if (!c->WithRank(c->input(1), 1, &labels).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": labels must be [rows], got shape ",
                     c->DebugString(c->input(1))));
  }
  DimensionHandle rows;
  if (!c->Merge(c->Dim(x, 0), c->Dim(labels, 0), &rows).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": labels must have one element per row of the logits, got "
        "labels ", c->DebugString(labels), " and logits ", c->DebugString(x)));
  }
  c->set_output(0, c->Vector(rows));
  c->set_output(1, c->Matrix(rows, c->Dim(x, 1)));
  return absl::OkStatus();
}

REGISTER_OP("TfOps>Softmax")
    .Input("logits: T")
    .Output("softmax: T")
    .Attr(kTypes)
    .SetShapeFn([](InferenceContext* c) {
      return ForwardShape(c, "TfOps>Softmax");
    })
    .Doc("softmax = exp(logits - max) / sum(exp(logits - max)) over the last "
         "axis, in float32 for half and bfloat16.");

REGISTER_OP("TfOps>SoftmaxGrad")
    .Input("gradients: T")
    .Input("softmax: T")
    .Output("backprops: T")
    .Attr(kTypes)
    .SetShapeFn([](InferenceContext* c) {
      return GradShape(c, "TfOps>SoftmaxGrad");
    })
    .Doc("backprops = softmax * (gradients - sum(gradients * softmax)) over "
         "the last axis.");

REGISTER_OP("TfOps>LogSoftmax")
    .Input("logits: T")
    .Output("logsoftmax: T")
    .Attr(kTypes)
    .SetShapeFn([](InferenceContext* c) {
      return ForwardShape(c, "TfOps>LogSoftmax");
    })
    .Doc("logsoftmax = logits - logsumexp(logits) over the last axis.");

REGISTER_OP("TfOps>LogSoftmaxGrad")
    .Input("gradients: T")
    .Input("logsoftmax: T")
    .Output("backprops: T")
    .Attr(kTypes)
    .SetShapeFn([](InferenceContext* c) {
      return GradShape(c, "TfOps>LogSoftmaxGrad");
    })
    .Doc("backprops = gradients - exp(logsoftmax) * sum(gradients) over the "
         "last axis.");

REGISTER_OP("TfOps>ScaledMaskedSoftmax")
    .Input("logits: T")
    .Input("mask: bool")
    .Output("softmax: T")
    .Attr(kTypes)
    .Attr("scale: float = 1.0")
    .Attr("causal: bool = false")
    .SetShapeFn(MaskedShape)
    .Doc("softmax = softmax(scale * logits) over the last axis, where the "
         "mask (broadcast to the logits) holds and, if causal, key <= query; "
         "0 elsewhere; a row with nothing kept is 0 (keras.layers.Softmax with "
         "a mask).");

REGISTER_OP("TfOps>ScaledMaskedSoftmaxGrad")
    .Input("gradients: T")
    .Input("softmax: T")
    .Output("backprops: T")
    .Attr(kTypes)
    .Attr("scale: float = 1.0")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ReadScale(c, "TfOps>ScaledMaskedSoftmaxGrad"));
      return GradShape(c, "TfOps>ScaledMaskedSoftmaxGrad");
    })
    .Doc("backprops = scale * softmax * (gradients - sum(gradients * "
         "softmax)) over the last axis.");

REGISTER_OP("TfOps>SparseSoftmaxCrossEntropy")
    .Input("logits: T")
    .Input("labels: Tlabels")
    .Output("loss: T")
    .Output("backprop: T")
    .Attr(kTypes)
    .Attr("Tlabels: {int32, int64} = DT_INT64")
    .Attr("label_smoothing: float = 0.0")
    .Attr("ignore_index: int = -100")
    .Attr("z_loss: float = 0.0")
    .SetShapeFn(CrossEntropyShape)
    .Doc("Per row: loss = lse - (1 - eps) logits[label] - eps/C sum(logits) + "
         "z_loss lse^2 (lse = logsumexp(logits), eps = label_smoothing), and "
         "backprop = dloss/dlogits; rows labelled ignore_index give 0 and 0; "
         "any other label outside [0, C) is an InvalidArgumentError.");

}  // namespace
}  // namespace tf_ops

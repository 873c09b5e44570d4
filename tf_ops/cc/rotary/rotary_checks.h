// The rotary embedding ops' attributes and shape checks, stated once for the
// registrations' shape functions (rotary_ops.cc: on what is known at graph
// build), the kernels (rotary_kernels.cc) and the XLA lowering
// (rotary_xla.cc):
//
//   TfOps>RotaryEmbedding      x: T, positions: U  -> y: T
//   TfOps>RotaryEmbeddingGrad  dy: T, positions: U -> dx: T
//
// x has rank >= 2 with a sequence and a feature axis (attributes
// sequence_axis, feature_axis: distinct, in [-rank, rank)); the feature axis
// has an even size. positions (U: float, or double for T = double) is a
// scalar, the start index (position of sequence index s: positions + s), or
// [S] or [B, S]: the position of each sequence index, for every batch or per
// batch (B: the first axis that is neither the sequence nor the feature
// axis); S may be 1 and B may be 1 (broadcast). The attributes of the
// frequencies are rotary_math.h's RopeParams.

#ifndef TF_OPS_CC_ROTARY_ROTARY_CHECKS_H_
#define TF_OPS_CC_ROTARY_ROTARY_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/cc/rotary/rotary_layout.h"
#include "tf_ops/cc/rotary/rotary_math.h"

namespace tf_ops {
namespace rotary {

inline std::string OpName(bool grad) {
  return grad ? "TfOps>RotaryEmbeddingGrad" : "TfOps>RotaryEmbedding";
}
// The name of the rotated input in messages: x, or the grad op's dy.
inline const char* InputName(bool grad) { return grad ? "dy" : "x"; }

struct RotaryAttrs {
  RopeParams params;
  int sequence_axis = 1;
  int feature_axis = -1;
};

inline absl::Status RequirePositive(const std::string& op, const char* name,
                                    double v) {
  if (std::isfinite(v) && v > 0.0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": attribute '", name, "' must be finite and > 0, got ", v));
}

// Reads and checks every attribute; Ctx is an InferenceContext (graph build)
// or an OpKernelConstruction (kernels, lowerings).
template <typename Ctx>
absl::Status ReadRotaryAttrs(Ctx* ctx, const std::string& op,
                             RotaryAttrs* a) {
  RopeParams& p = a->params;
  float max_wavelength, scaling_factor, beta_fast, beta_slow, adjust, low, high;
  int64_t denominator_dim, original, pretraining;
  std::string rope_type;
  TF_RETURN_IF_ERROR(ctx->GetAttr("max_wavelength", &max_wavelength));
  TF_RETURN_IF_ERROR(ctx->GetAttr("scaling_factor", &scaling_factor));
  TF_RETURN_IF_ERROR(ctx->GetAttr("rope_type", &rope_type));
  TF_RETURN_IF_ERROR(ctx->GetAttr("denominator_dim", &denominator_dim));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_fast", &beta_fast));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_slow", &beta_slow));
  TF_RETURN_IF_ERROR(
      ctx->GetAttr("original_max_position_embeddings", &original));
  TF_RETURN_IF_ERROR(ctx->GetAttr("truncate", &p.truncate));
  TF_RETURN_IF_ERROR(ctx->GetAttr("frequency_adjustment_factor", &adjust));
  TF_RETURN_IF_ERROR(ctx->GetAttr("low_freq_factor", &low));
  TF_RETURN_IF_ERROR(ctx->GetAttr("high_freq_factor", &high));
  TF_RETURN_IF_ERROR(ctx->GetAttr("pretraining_sequence_length", &pretraining));
  TF_RETURN_IF_ERROR(ctx->GetAttr("sequence_axis", &a->sequence_axis));
  TF_RETURN_IF_ERROR(ctx->GetAttr("feature_axis", &a->feature_axis));
  p.max_wavelength = max_wavelength;
  p.scaling_factor = scaling_factor;
  p.denominator_dim = denominator_dim;
  p.beta_fast = beta_fast;
  p.beta_slow = beta_slow;
  p.original_max_position_embeddings = static_cast<double>(original);
  p.frequency_adjustment_factor = adjust;
  p.low_freq_factor = low;
  p.high_freq_factor = high;
  p.pretraining_sequence_length = static_cast<double>(pretraining);
  if (rope_type == "linear") {
    p.type = RopeType::kLinear;
  } else if (rope_type == "dynamic") {
    p.type = RopeType::kDynamic;
  } else if (rope_type == "yarn") {
    p.type = RopeType::kYarn;
  } else if (rope_type == "llama3") {
    p.type = RopeType::kLlama3;
  } else {  // the OpDef's allowed values stop this first
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'rope_type' must be 'linear', 'dynamic', 'yarn' or "
        "'llama3', got '", rope_type, "'"));
  }
  TF_RETURN_IF_ERROR(RequirePositive(op, "max_wavelength", p.max_wavelength));
  TF_RETURN_IF_ERROR(RequirePositive(op, "scaling_factor", p.scaling_factor));
  if (p.denominator_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'denominator_dim' must be >= 0 (0: the feature "
        "size), got ", p.denominator_dim));
  }
  if (p.type == RopeType::kYarn) {
    TF_RETURN_IF_ERROR(RequirePositive(op, "beta_fast", p.beta_fast));
    TF_RETURN_IF_ERROR(RequirePositive(op, "beta_slow", p.beta_slow));
    TF_RETURN_IF_ERROR(RequirePositive(op, "original_max_position_embeddings",
                                       p.original_max_position_embeddings));
  }
  if (p.type == RopeType::kLlama3) {
    TF_RETURN_IF_ERROR(RequirePositive(op, "frequency_adjustment_factor",
                                       p.frequency_adjustment_factor));
    TF_RETURN_IF_ERROR(RequirePositive(op, "low_freq_factor",
                                       p.low_freq_factor));
    TF_RETURN_IF_ERROR(RequirePositive(op, "high_freq_factor",
                                       p.high_freq_factor));
    TF_RETURN_IF_ERROR(RequirePositive(op, "pretraining_sequence_length",
                                       p.pretraining_sequence_length));
    if (!(p.high_freq_factor > p.low_freq_factor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": attribute 'high_freq_factor' must be greater than "
          "'low_freq_factor', got ", p.high_freq_factor, " and ",
          p.low_freq_factor));
    }
  }
  return absl::OkStatus();
}

// positions' dtype U is the compute type: double for T = double, else float.
inline absl::Status CheckPositionsType(const std::string& op,
                                       tensorflow::DataType t,
                                       tensorflow::DataType u) {
  const tensorflow::DataType want =
      t == tensorflow::DT_DOUBLE ? tensorflow::DT_DOUBLE : tensorflow::DT_FLOAT;
  if (u == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": positions' dtype U must be ", tensorflow::DataTypeString(want),
      " for T = ", tensorflow::DataTypeString(t), ", got ",
      tensorflow::DataTypeString(u)));
}

// -1 stands for an unknown dimension or rank in the checks below.
inline std::string DimsString(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(d < 0 ? "?" : absl::StrCat(d));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// The axes of x (rank >= 2 when known), made non-negative; unknown rank:
// left as given.
inline absl::Status CheckAxes(const std::string& op, const char* x_name,
                              int rank, const RotaryAttrs& a,
                              int* sequence_axis, int* feature_axis) {
  *sequence_axis = a.sequence_axis;
  *feature_axis = a.feature_axis;
  if (rank < 0) return absl::OkStatus();
  if (rank < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", x_name, " must have rank >= 2 (a sequence and a feature "
        "axis), got rank ", rank));
  }
  auto normalise = [&](const char* name, int value, int* out) {
    if (value < -rank || value >= rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": attribute '", name, "' = ", value,
          " is out of range for ", x_name, " of rank ", rank));
    }
    *out = value < 0 ? value + rank : value;
    return absl::OkStatus();
  };
  TF_RETURN_IF_ERROR(
      normalise("sequence_axis", a.sequence_axis, sequence_axis));
  TF_RETURN_IF_ERROR(normalise("feature_axis", a.feature_axis, feature_axis));
  if (*sequence_axis == *feature_axis) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sequence_axis and feature_axis must be different axes, got ",
        a.sequence_axis, " and ", a.feature_axis, " for ", x_name,
        " of rank ", rank));
  }
  return absl::OkStatus();
}

// The feature axis' size (unknown: -1) is even.
inline absl::Status CheckFeatures(const std::string& op, int64_t features) {
  if (features < 0 || features % 2 == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": the feature axis must have an even size (its two halves are "
      "rotated as pairs), got ", features));
}

// positions (dims; rank -1 unknown) against x's sequence length S and batch
// size B (-1 unknown; B < -1: x has no batch axis).
inline absl::Status CheckPositions(const std::string& op, const char* x_name,
                                   const std::vector<int64_t>& positions,
                                   bool positions_rank_known, int64_t seq_len,
                                   int64_t batch) {
  if (!positions_rank_known) return absl::OkStatus();
  const int rank = static_cast<int>(positions.size());
  bool ok = rank <= 2 && !(rank == 2 && batch < -1);
  auto fits = [](int64_t dim, int64_t want) {
    return dim < 0 || want < 0 || dim == 1 || dim == want;
  };
  if (ok && rank >= 1) ok = fits(positions[rank - 1], seq_len);
  if (ok && rank == 2) ok = fits(positions[0], batch);
  if (ok) return absl::OkStatus();
  const std::string b =
      batch < -1 ? absl::StrCat(x_name, " has no batch axis")
                 : absl::StrCat("B = ", batch < 0 ? "?" : absl::StrCat(batch),
                                ", ", x_name, "'s first other axis");
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": positions must be a scalar (the start index), [S] or [B, S] "
      "with S = ", seq_len < 0 ? "?" : absl::StrCat(seq_len),
      " (", x_name, "'s sequence axis) and ", b,
      "; each may also be 1; got positions of shape ", DimsString(positions)));
}

// Every check on full shapes (kernels, lowerings), then the layout.
inline absl::Status CheckShapes(const std::string& op, const char* x_name,
                                const tensorflow::TensorShape& x,
                                const tensorflow::TensorShape& positions,
                                const RotaryAttrs& a, RotaryLayout* layout,
                                int* sequence_axis, int* feature_axis) {
  TF_RETURN_IF_ERROR(
      CheckAxes(op, x_name, x.dims(), a, sequence_axis, feature_axis));
  TF_RETURN_IF_ERROR(CheckFeatures(op, x.dim_size(*feature_axis)));
  int64_t batch = -2;
  for (int axis = 0; axis < x.dims(); ++axis) {
    if (axis != *sequence_axis && axis != *feature_axis) {
      batch = x.dim_size(axis);
      break;
    }
  }
  const auto p_dims = positions.dim_sizes();
  const std::vector<int64_t> p(p_dims.begin(), p_dims.end());
  TF_RETURN_IF_ERROR(
      CheckPositions(op, x_name, p, true, x.dim_size(*sequence_axis), batch));
  const auto x_dims = x.dim_sizes();
  const std::vector<int64_t> dims(x_dims.begin(), x_dims.end());
  *layout = MakeRotaryLayout(dims.data(), x.dims(), *sequence_axis,
                             *feature_axis, positions.dims(), p.data());
  return absl::OkStatus();
}

}  // namespace rotary
}  // namespace tf_ops

#endif  // TF_OPS_CC_ROTARY_ROTARY_CHECKS_H_

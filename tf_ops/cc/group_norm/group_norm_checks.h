// The group-norm ops' layout and the checks on it, written once for the
// shape functions (dimensions may be unknown: -1) and the kernels.
//
// x of rank >= 2 is seen as [n, b, c, i]: n its batch axis 0, c the channel
// axis `axis` (in [1, rank), negative from the end), b the product of the
// axes between, i of those after (channels last: i = 1; channels first: b =
// 1). Channel ch belongs to group ch / (c / groups); each (sample, group)
// normalises its b * (c / groups) * i elements. TF-free.

#ifndef TF_OPS_CC_GROUP_NORM_GROUP_NORM_CHECKS_H_
#define TF_OPS_CC_GROUP_NORM_GROUP_NORM_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tf_ops/cc/group_norm/group_norm_math.h"

namespace tf_ops {
namespace group_norm {


inline std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k) {
    absl::StrAppend(&s, k ? "," : "", dims[k] < 0 ? "?" : absl::StrCat(dims[k]));
  }
  return s + "]";
}

// The channel axis in [1, rank), or an error naming x's shape.
inline absl::Status ChannelAxis(const std::string& op,
                                const std::vector<int64_t>& dims, int axis,
                                int* out) {
  const int rank = static_cast<int>(dims.size());
  if (rank < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": x must have rank >= 2 (a batch axis and a channel axis), got x ",
        ShapeString(dims)));
  }
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 1 || a >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'axis' must name a channel axis in [1, ", rank,
        ") or [", -rank + 1, ", -1] (axis 0 is the batch), got axis = ", axis,
        " for x ", ShapeString(dims)));
  }
  *out = a;
  return absl::OkStatus();
}

inline absl::Status CheckEpsilon(const std::string& op, float epsilon) {
  if (std::isfinite(epsilon) && epsilon > 0.0f) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": attribute 'epsilon' must be finite and > 0, got ", epsilon));
}

// The layout of x (dims: -1 where unknown; then the products are -1 too),
// checking the axis and that the channels split into `groups`.
inline absl::Status LayoutOf(const std::string& op,
                             const std::vector<int64_t>& dims, int axis,
                             int64_t groups, GroupNormShape* out) {
  int a = 0;
  const absl::Status axis_ok = ChannelAxis(op, dims, axis, &a);
  if (!axis_ok.ok()) return axis_ok;
  if (groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": attribute 'groups' must be >= 1, got ", groups));
  }
  GroupNormShape s;
  s.groups = groups;
  s.n = dims[0];
  s.c = dims[a];
  const auto product = [&](int begin, int end) {
    int64_t p = 1;
    for (int k = begin; k < end; ++k) {
      if (dims[k] < 0) return int64_t{-1};
      p *= dims[k];
    }
    return p;
  };
  s.b = product(1, a);
  s.i = product(a + 1, static_cast<int>(dims.size()));
  if (s.c >= 0 && (s.c < groups || s.c % groups != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the channels (axis ", axis, " of x, ", s.c,
        ") must be a positive multiple of groups = ", groups, ", got x ",
        ShapeString(dims)));
  }
  *out = s;
  return absl::OkStatus();
}

// A per-channel input (scale, offset) or output gradient: 1-D, c elements.
inline absl::Status CheckChannelVector(const std::string& op, const char* name,
                                       const std::vector<int64_t>& x_dims,
                                       int64_t channels,
                                       const std::vector<int64_t>& dims) {
  const bool ok = dims.size() == 1 &&
                  (channels < 0 || dims[0] < 0 || dims[0] == channels);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must be 1-D with one element per channel (", channels,
      "), got x ", ShapeString(x_dims), " and ", name, " ",
      ShapeString(dims)));
}

// A statistic (mean, rstd): [n, groups].
inline absl::Status CheckStat(const std::string& op, const char* name,
                              const std::vector<int64_t>& x_dims,
                              const GroupNormShape& s,
                              const std::vector<int64_t>& dims) {
  const auto agree = [](int64_t a, int64_t b) {
    return a < 0 || b < 0 || a == b;
  };
  if (dims.size() == 2 && agree(dims[0], s.n) && agree(dims[1], s.groups)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " must have shape [x's batch, groups] = [",
      s.n < 0 ? std::string("?") : absl::StrCat(s.n), ",", s.groups,
      "], got x ", ShapeString(x_dims), " and ", name, " ",
      ShapeString(dims)));
}

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_GROUP_NORM_GROUP_NORM_CHECKS_H_

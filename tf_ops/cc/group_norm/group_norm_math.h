// The group-norm math, stated once for the CPU and CUDA engines (plain C++17
// that nvcc compiles too). A group's statistics come from sums of its
// elements shifted by one of them (K, the group's first element), which
// keeps sum(d^2) / m - (sum(d) / m)^2 free of cancellation when |mean| is
// large against the spread; sums are double.
//
// Forward, per channel ch of group g: z = x * a + b, a = gamma * rstd,
// b = beta - mean * a, y = f(z). Backward, with dz = dy * f'(z), xhat =
// (x - mean) * rstd and the group's sums A = sum(gamma * dz), B = sum(gamma *
// dz * xhat) over its m elements:
//   dx = rstd * (gamma * dz - A / m - xhat * B / m)
//      = dz * a + x * k2 + k3, k2 = -rstd^2 * B / m,
//        k3 = -rstd * A / m + mean * rstd^2 * B / m;
//   dgamma = sum over samples and positions of dz * xhat, dbeta of dz.

#ifndef TF_OPS_CC_GROUP_NORM_GROUP_NORM_MATH_H_
#define TF_OPS_CC_GROUP_NORM_GROUP_NORM_MATH_H_

#include <cmath>
#include <cstdint>

#include "tf_ops/cc/core/math_primitives.h"  // TF_OPS_HOST_DEVICE

namespace tf_ops {
namespace group_norm {

// x seen as [n, b, c, i] (group_norm_checks.h).
struct GroupNormShape {
  int64_t n = 0;
  int64_t b = 1;
  int64_t c = 0;
  int64_t i = 1;
  int64_t groups = 1;

  TF_OPS_HOST_DEVICE int64_t per_group() const { return c / groups; }
  // Elements each (sample, group) statistic is over.
  TF_OPS_HOST_DEVICE int64_t group_size() const { return b * per_group() * i; }
  TF_OPS_HOST_DEVICE int64_t elements() const { return n * b * c * i; }
};


struct GroupStats {
  double mean;
  double rstd;
};

// From the shifted sums s1 = sum(x - k), s2 = sum((x - k)^2) of m elements.
TF_OPS_HOST_DEVICE GroupStats StatsOf(double k, double s1, double s2, double m,
                          double epsilon) {
  const double d = s1 / m;
  double variance = s2 / m - d * d;
  if (variance < 0.0) variance = 0.0;  // rounding, never below
  return {k + d, 1.0 / ::sqrt(variance + epsilon)};
}

// The dx coefficients of a group from A and B (above).
struct GradCoefficients {
  double k2;
  double k3;
};
TF_OPS_HOST_DEVICE GradCoefficients GradCoefficientsOf(double mean, double rstd, double a,
                                           double b, double m) {
  const double r2b = rstd * rstd * b / m;
  return {-r2b, -rstd * a / m + mean * r2b};
}

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_GROUP_NORM_GROUP_NORM_MATH_H_

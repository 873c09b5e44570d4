// The math of fused batch normalization + activation, stated once.
//
// A tensor is viewed as [outer, channels, inner] around its channel axis (the
// last axis: inner = 1; axis 1 of NCHW: inner = H * W; any axis alike). The
// statistics are over the n = outer * inner elements of each channel:
//   mean = E[x],  variance = E[(x - mean)^2]       (biased, as Keras 3's
//                                                   tf.nn.moments)
// computed in one pass as shifted sums about a per-channel pivot k (the
// channel's first element), which keeps E[(x-k)^2] - E[x-k]^2 from cancelling:
//   s1 = sum(x - k), s2 = sum((x - k)^2),  mean = k + s1 / n,
//   variance = max(s2 / n - (s1 / n)^2, 0).
// Normalisation is Keras's tf.nn.batch_normalization form, per channel
//   scale = gamma * rsqrt(variance + epsilon),  shift = beta - mean * scale,
//   z = x * scale + shift,  y = f(z)
// with f an activation of activation_math.h or Identity
// (activation_choice.h). The same form serves
// training (batch statistics) and inference (moving statistics).
//
// Backward, with dz = dy * f'(z) recomputed from x (no stored z or y), r =
// rsqrt(variance + epsilon), xc = x - mean:
//   dbeta = sum(dz),  dgamma = r * sum(dz * xc)                  (pass 1)
//   training:  dx = scale * dz + c1 * xc + c0                    (pass 2)
//     c1 = (2 * dvariance - scale * r * dgamma) / n
//     c0 = (dmean - scale * dbeta) / n
//     (dmean, dvariance: the gradients of the forward's mean and variance
//     outputs, zero when only y is used). With the statistics of a batch
//     split over replicas (synchronized batch norm), dgamma, dbeta, dmean
//     and dvariance are the sums over the replicas and n the global count:
//     pass 1 on each replica, one all-reduce, pass 2 on each.
//   inference: dx = scale * dz (one pass with the sums; the statistics are
//     inputs: dmean = -scale * dbeta, dvariance = -gamma * r^2 * dgamma / 2,
//     composed by the Python gradient from dgamma and dbeta).
//
// Sums accumulate in Acc: float for half and bfloat16, double for float and
// double, over fixed tiles then in a fixed order (the engines): the results
// are bit-identical whatever the thread count.
//
// Plain C++17 that nvcc also compiles; T is float or double on the CPU and in
// CUDA code, or XlaValue in the XLA lowering.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_MATH_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_MATH_H_

#include <cstdint>

#include "tf_ops/cc/activation/activation_derivative.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {

// sqrt for the value types of the engines (CUDA's in device code); the XLA
// lowering gives XlaValue its own.
TF_OPS_HOST_DEVICE float Sqrt(float x) { return ::sqrtf(x); }
TF_OPS_HOST_DEVICE double Sqrt(double x) { return ::sqrt(x); }

// The tensor around its channel axis.
struct BatchNormLayout {
  int64_t outer;
  int64_t channels;
  int64_t inner;
  TF_OPS_HOST_DEVICE int64_t count() const { return outer * inner; }  // per channel
};

// mean and variance of a channel from its shifted sums (count n >= 0; n = 0
// gives NaN, as the mean of an empty batch in Keras).
template <typename A>
struct ChannelMoments {
  A mean;
  A variance;
};
template <typename A>
TF_OPS_HOST_DEVICE ChannelMoments<A> MomentsFromSums(A pivot, A s1, A s2,
                                                     A n) {
  const A m1 = s1 / n;
  const A var = s2 / n - m1 * m1;
  return {pivot + m1, Select(var < A(0), A(0), var)};  // NaN stays NaN
}

// 1 / sqrt(variance + epsilon).
template <typename T>
TF_OPS_HOST_DEVICE T Rstd(T variance, T epsilon) {
  return T(1) / Sqrt(variance + epsilon);
}

// Per channel: z = x * scale + shift.
template <typename T>
struct ChannelAffine {
  T scale;
  T shift;
  T rstd;
};
template <typename T>
TF_OPS_HOST_DEVICE ChannelAffine<T> AffineOf(T mean, T variance, T gamma,
                                             T beta, T epsilon) {
  const T r = Rstd(variance, epsilon);
  const T scale = gamma * r;
  return {scale, beta - mean * scale, r};
}

// y = f(x * scale + shift).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T NormalizeForward(const Op& op, T x, T scale, T shift) {
  return op.Forward(x * scale + shift);
}

// dz = dy * f'(x * scale + shift).
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T NormalizeDz(const Op& op, T dy, T x, T scale, T shift) {
  return dy * DerivativeAtFeatures(op, x * scale + shift);
}

// The training backward's pass-2 coefficients of a channel from its
// parameter gradients (dbeta = sum(dz), dgamma = rstd * sum(dz * xc): of one
// device's batch, or summed over replicas), the gradients of the mean and
// variance outputs, and the count n of elements the statistics are over.
template <typename T>
struct TrainingDxCoefficients {
  T c1;  // of x - mean
  T c0;  // constant
};
template <typename T>
TF_OPS_HOST_DEVICE TrainingDxCoefficients<T> TrainingDxOf(
    T scale, T rstd, T dbeta, T dgamma, T d_mean, T d_variance, T n) {
  const T inv_n = T(1) / n;
  return {(T(2) * d_variance - scale * rstd * dgamma) * inv_n,
          (d_mean - scale * dbeta) * inv_n};
}

// dx of the training backward, pass 2, from dz.
template <typename T>
TF_OPS_HOST_DEVICE T TrainingDxOfDz(T dz, T x, T mean, T scale,
                                    const TrainingDxCoefficients<T>& c) {
  return scale * dz + c.c1 * (x - mean) + c.c0;
}

// dx of the training backward, pass 2.
template <typename Op, typename T>
TF_OPS_HOST_DEVICE T TrainingDx(const Op& op, T dy, T x, T mean,
                                const ChannelAffine<T>& a,
                                const TrainingDxCoefficients<T>& c) {
  return TrainingDxOfDz(NormalizeDz(op, dy, x, a.scale, a.shift), x, mean,
                        a.scale, c);
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_MATH_H_

// What the rotary position embedding computes, stated once: the CPU engine
// (rotary_cpu.cc), the CUDA engine (cu/rotary/rotary_gpu.cu) and the XLA
// lowering (rotary_xla.cc) all call these.
//
// keras-hub's RotaryEmbedding, the "rotate half" convention: the D features
// of one position form D/2 pairs (j, j + D/2), and pair j at position p turns
// by the angle theta = p * w_j, w_j its inverse frequency:
//   y_j       = m (x_j cos theta - x_{j+D/2} sin theta)
//   y_{j+D/2} = m (x_{j+D/2} cos theta + x_j sin theta)
// (out = x cos + [-x2, x1] sin, the frequencies repeated over both halves).
// m is 1, except for YaRN: its attention temperature 0.1 ln(s) + 1. The
// forward is linear in x; its gradient is the transpose, the rotation by
// -theta (dx = m R(-theta) dy), linear in dy, whose gradient is the forward
// again: every order is one of the two.
//
// The inverse frequencies, keras-hub 0.32's formulas (RotaryEmbedding and
// LlamaRotaryEmbedding), with b = max_wavelength, s = scaling_factor, D the
// feature size and d = denominator_dim (0: D):
//   linear   w_j = b^(-2j / d) / s
//   dynamic  w_j = b^(-2j / d) / s^(D / max(1, D - 2))
//   yarn     YaRN's blend of b^(-2j / D) and b^(-2j / D) / s by a ramp over
//            the pairs between its correction dimensions (beta_fast,
//            beta_slow, original_max_position_embeddings, truncate); m as
//            above
//   llama3   b^(-2j / D), divided by frequency_adjustment_factor f where the
//            wavelength 2 pi / w exceeds L / low_freq_factor (L =
//            pretraining_sequence_length), interpolated smoothly between L /
//            high_freq_factor and L / low_freq_factor (Llama 3.1)
// computed in double once per call (D/2 values), then rounded to the compute
// type. The angle is the product p * w_j in the compute type, rounded once
// as keras-hub's float32 einsum rounds it (float for half, bfloat16 and
// float; double for double), and its sine and cosine are computed from it:
// no table of x's size is ever made.
//
// Plain C++17 that nvcc also compiles; T is float, double or XlaValue.

#ifndef TF_OPS_CC_ROTARY_ROTARY_MATH_H_
#define TF_OPS_CC_ROTARY_ROTARY_MATH_H_

#include <math.h>

#include <cstdint>

#include "tf_ops/cc/core/math_primitives.h"

namespace tf_ops {
namespace rotary {

enum class RopeType : int { kLinear = 0, kDynamic = 1, kYarn = 2, kLlama3 = 3 };

// The op's attributes that decide the frequencies (checked by
// rotary_checks.h: positive, finite, ...).
struct RopeParams {
  double max_wavelength = 10000.0;
  double scaling_factor = 1.0;
  RopeType type = RopeType::kLinear;
  int64_t denominator_dim = 0;  // 0: the feature size
  // YaRN.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double original_max_position_embeddings = 4096.0;
  bool truncate = true;
  // Llama 3.1.
  double frequency_adjustment_factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double pretraining_sequence_length = 8192.0;
};

constexpr double kTwoPi = 6.283185307179586;

TF_OPS_HOST_DEVICE double Clip(double v, double lo, double hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// YaRN's correction dimension: the pair index (as a real number) whose
// wavelength turns `rotations` times over the original context.
TF_OPS_HOST_DEVICE double YarnCorrectionDim(const RopeParams& p,
                                            double rotations, double dim) {
  const double turns = rotations * kTwoPi;
  return dim * ::log(p.original_max_position_embeddings / turns) /
         (2.0 * ::log(p.max_wavelength));
}

// w_j for pair j of a feature axis of `features` (even) elements.
TF_OPS_HOST_DEVICE double InverseFrequency(const RopeParams& p,
                                           int64_t features, int64_t j) {
  const double dim = static_cast<double>(features);
  const double two_j = 2.0 * static_cast<double>(j);
  switch (p.type) {
    case RopeType::kLinear:
    case RopeType::kDynamic: {
      const double d = p.denominator_dim > 0
                           ? static_cast<double>(p.denominator_dim)
                           : dim;
      const double base = ::pow(p.max_wavelength, -two_j / d);
      if (p.type == RopeType::kLinear) return base / p.scaling_factor;
      const double exponent = dim / (dim - 2.0 > 1.0 ? dim - 2.0 : 1.0);
      return base / ::pow(p.scaling_factor, exponent);
    }
    case RopeType::kYarn: {
      const double extrapolation = 1.0 / ::pow(p.max_wavelength, two_j / dim);
      const double interpolation = extrapolation / p.scaling_factor;
      double low = YarnCorrectionDim(p, p.beta_fast, dim);
      double high = YarnCorrectionDim(p, p.beta_slow, dim);
      if (p.truncate) {
        low = ::floor(low);
        high = ::ceil(high);
      }
      low = low > 0.0 ? low : 0.0;
      high = high < dim - 1.0 ? high : dim - 1.0;
      const double span = high - low > 0.001 ? high - low : 0.001;
      const double ramp = Clip((static_cast<double>(j) - low) / span, 0.0, 1.0);
      // keras-hub's blend: interpolation * ramp + extrapolation * (1 - ramp).
      return interpolation * ramp + extrapolation * (1.0 - ramp);
    }
    case RopeType::kLlama3: {
      const double w = 1.0 / ::pow(p.max_wavelength, two_j / dim);
      const double f = p.frequency_adjustment_factor;
      const double length = p.pretraining_sequence_length;
      const double wavelength = kTwoPi / w;
      const double low_wavelength = length / p.low_freq_factor;
      const double high_wavelength = length / p.high_freq_factor;
      if (wavelength > low_wavelength) return w / f;
      if (wavelength < high_wavelength) return w;
      const double smooth = (length / wavelength - p.low_freq_factor) /
                            (p.high_freq_factor - p.low_freq_factor);
      return (1.0 - smooth) * (w / f) + smooth * w;
    }
  }
  return 0.0;
}

// m: YaRN's temperature 0.1 ln(s) + 1; 1 otherwise.
TF_OPS_HOST_DEVICE double Magnitude(const RopeParams& p) {
  return p.type == RopeType::kYarn ? 0.1 * ::log(p.scaling_factor) + 1.0 : 1.0;
}

// ---------------------------------------------------- per element -------

// The angle of a pair at `position` with inverse frequency w, rounded once
// to T.
template <typename T>
TF_OPS_HOST_DEVICE T Angle(T position, T inverse_frequency) {
  return position * inverse_frequency;
}

// m cos(theta) and m sin(theta); the transpose (the backward) turns by
// -theta.
template <typename T>
struct Rotation {
  T cos;
  T sin;
};
template <typename T>
TF_OPS_HOST_DEVICE Rotation<T> RotationOf(T angle, T magnitude,
                                          bool transpose) {
  const SinCosPair<T> sc = SinCos(angle);
  const T s = magnitude * sc.sin;
  return {magnitude * sc.cos, transpose ? -s : s};
}

// The pair (x_j, x_{j+D/2}) turned.
template <typename T>
struct RotatedPair {
  T first;
  T second;
};
template <typename T>
TF_OPS_HOST_DEVICE RotatedPair<T> Rotate(const Rotation<T>& r, T first,
                                         T second) {
  return {first * r.cos - second * r.sin, second * r.cos + first * r.sin};
}

}  // namespace rotary
}  // namespace tf_ops

#endif  // TF_OPS_CC_ROTARY_ROTARY_MATH_H_

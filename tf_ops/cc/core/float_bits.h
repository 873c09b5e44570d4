// A float's IEEE bits and back (and a double's bits), without undefined behaviour (memcpy, which
// compilers turn into a register move). Shared by fast_math.h and
// narrow_float.h, which build floats from their exponent and mantissa bits.

#ifndef TF_OPS_CC_FLOAT_BITS_H_
#define TF_OPS_CC_FLOAT_BITS_H_

#include <cstdint>
#include <cstring>

namespace tf_ops {

inline float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline uint64_t DoubleBits(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_FLOAT_BITS_H_

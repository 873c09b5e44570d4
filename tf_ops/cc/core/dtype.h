// The storage types the engines take, named without TensorFlow, Eigen or CUDA
// types so that both engines and their TF-free test programs share them.
//
// Half and bfloat16 buffers hold IEEE binary16 and bfloat16 bits: the layout of
// Eigen::half, __half and Eigen::bfloat16, __nv_bfloat16 alike. The kernels pass
// buffers as void pointers plus a Dtype, and the engines pick the loop.

#ifndef TF_OPS_CC_DTYPE_H_
#define TF_OPS_CC_DTYPE_H_

#include <type_traits>

namespace tf_ops {

enum class Dtype { kHalf, kBFloat16, kFloat, kDouble };

// Precision the math runs in for a storage type: double stays double; half,
// bfloat16 and float compute in float and are rounded once when stored.
template <typename T>
using ComputeType =
    std::conditional_t<std::is_same<T, double>::value, double, float>;

// Bytes of one element of a storage type.
constexpr int DtypeSize(Dtype dtype) {
  return dtype == Dtype::kDouble ? 8 : dtype == Dtype::kFloat ? 4 : 2;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_DTYPE_H_

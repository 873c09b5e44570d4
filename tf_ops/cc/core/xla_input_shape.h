// The static shape of an XLA lowering's input as a TensorShape: what the
// lowerings (fused_xla.cc, norm_xla.cc, softmax_xla.cc, batch_norm_xla.cc,
// rotary_xla.cc) hand to the shape checks they share with their kernels.

#ifndef TF_OPS_CC_CORE_XLA_INPUT_SHAPE_H_
#define TF_OPS_CC_CORE_XLA_INPUT_SHAPE_H_

#include "absl/status/statusor.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "xla/shape.h"

namespace tf_ops {

inline absl::StatusOr<tensorflow::TensorShape> XlaInputShape(
    tensorflow::XlaOpKernelContext* ctx, int i) {
  absl::StatusOr<xla::Shape> shape = ctx->InputXlaShape(i);
  TF_RETURN_IF_ERROR(shape.status());
  return tensorflow::TensorShape(shape->dimensions());
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_XLA_INPUT_SHAPE_H_

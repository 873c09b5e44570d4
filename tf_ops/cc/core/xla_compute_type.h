// How the XLA lowerings (activation_xla.cc, fused_xla.cc) compute: half and
// bfloat16 in F32 and rounded once, double in F64, as the kernels do.

#ifndef TF_OPS_CC_XLA_COMPUTE_TYPE_H_
#define TF_OPS_CC_XLA_COMPUTE_TYPE_H_

#include "tf_ops/cc/core/xla_value.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {

inline xla::PrimitiveType XlaComputeType(xla::PrimitiveType type) {
  return type == xla::F64 ? xla::F64 : xla::F32;
}
inline XlaValue Widen(xla::XlaOp x, xla::PrimitiveType type) {
  const xla::PrimitiveType compute = XlaComputeType(type);
  return XlaValue(compute == type ? x : xla::ConvertElementType(x, compute));
}
// `like` gives a result that folded to a constant its shape and type.
inline xla::XlaOp Narrow(const XlaValue& y, const XlaValue& like,
                         xla::PrimitiveType type) {
  const xla::XlaOp op = y.Op(like.op());
  return XlaComputeType(type) == type ? op : xla::ConvertElementType(op, type);
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_XLA_COMPUTE_TYPE_H_

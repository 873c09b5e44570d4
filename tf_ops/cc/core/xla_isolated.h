// Isolated: an op's input cut off from the same value elsewhere in the XLA
// graph, so that XLA neither shares nor materialises one op's math across ops,
// on the devices where that is what it costs nothing to prevent (IsolatesOn).
// Used by every lowering of a grad or grad-grad op (activation_xla.cc,
// fused_xla.cc, batch_norm_xla.cc).

#ifndef TF_OPS_CC_XLA_ISOLATED_H_
#define TF_OPS_CC_XLA_ISOLATED_H_

#include "tensorflow/compiler/tf2xla/xla_compiler.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_ops {

// Which computation an input feeds (see Isolated).
enum class Use { kGrad, kGradGradFirst, kGradGradSecond };

// Whether the lowerings compiled for `device` (the XLA compiler's device
// type, XLA_CPU_JIT or XLA_GPU_JIT) isolate their inputs behind an
// optimization barrier. Decided per device,
// because the two compilers expand the barrier at different times:
// - XLA:CPU expands it before fusion, so the barrier only stops CSE and
//   algebraic simplification from merging the forward's and the backward's
//   copies of the same math; fusion then still fuses the producer of v into
//   each consumer, and nothing is written to memory that would not be. That
//   isolation is what keeps Swish forward+backward at the kernels' speed
//   under jit (without it: 0.7x of TF's composite, see Isolated).
// - XLA:GPU expands it only after fusion (OptimizationBarrierExpander runs in
//   the post-scheduling pipeline), and no fusion pass fuses across it: the
//   producer of v can no longer be fused into the grad computation, so v is
//   written once more and read back, per op. XLA:GPU's own fusion does not
//   need the isolation: it duplicates cheap element-wise producers (exp,
//   divide, rsqrt are cheap there) into each consumer instead of sharing them
//   through memory, and a shared expensive value (tanh, erf) it keeps once,
//   which the barrier's extra copy of v would not save. So the lowerings emit
//   no barrier on the GPU.
// Any other device keeps the CPU's behaviour.
inline bool IsolatesOn(const tensorflow::DeviceType& device) {
  return device.type_string() != "XLA_GPU_JIT";
}

// The input v of a grad or grad-grad op, isolated from the same v elsewhere.
// The forward, grad and grad-grad ops of an activation compute the same
// functions of x (Swish's exponential, ...). Left alone, XLA merges those
// across the ops (CSE) and, as it does not duplicate expensive ops into
// several fusions, keeps the shared values in temporary arrays: an extra trip
// through memory and, on the CPU, fresh pages to fault in for each, which made
// Swish forward+backward under jit 0.7x of TF's composite. Isolated, each op
// computes from its inputs in one fusion and writes its output once, as the
// kernels do; the grad-grad op isolates v per output, since XLA's CPU fusion
// does not compute two outputs in one loop either.
// How: v passes through an optimization barrier with the scalars 1, -0 and
// true, which XLA then cannot see, and each use applies its own exact and
// cheap identity (v * 1, v + -0, true ? v : 1), so no two uses are the same
// expression. A barrier alone does not do: XLA merges identical barriers.
// Where the device being compiled for does not isolate (IsolatesOn), v
// itself.
inline xla::XlaOp Isolated(tensorflow::XlaOpKernelContext* ctx, xla::XlaOp v,
                           Use use) {
  if (!IsolatesOn(ctx->compiler()->options().device_type)) return v;
  xla::XlaBuilder* b = v.builder();
  const xla::XlaOp t = xla::OptimizationBarrier(
      xla::Tuple(b, {v, xla::ScalarLike(v, 1.0), xla::ScalarLike(v, -0.0),
                     xla::ConstantR0<bool>(b, true)}));
  const xla::XlaOp x = xla::GetTupleElement(t, 0);
  const xla::XlaOp one = xla::GetTupleElement(t, 1);
  switch (use) {
    case Use::kGrad:
      return x * one;
    case Use::kGradGradFirst:
      return x + xla::GetTupleElement(t, 2);
    case Use::kGradGradSecond:
      return xla::Select(xla::GetTupleElement(t, 3), x, xla::FullLike(x, 1.0));
  }
  return x;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_XLA_ISOLATED_H_

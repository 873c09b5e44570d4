// The lowering side of an XLA custom call into one of our engines: a family's
// XlaOpKernel (e.g. attention_xla.cc) asks whether a handler is registered for
// the platform it compiles for and, if so, emits a typed-FFI custom call
// (API_VERSION_TYPED_FFI) with scalar attributes; otherwise it builds its
// composite. The handler side is xla_ffi.h.
//
// How a handler is found, and why it works whatever the load order:
// - A handler is registered into XLA's one FFI registry, a process-wide map
//   in TensorFlow's libraries (behind its FFI API, xla_ffi.h), by
//   a static initialiser of the library that holds it: _tf_ops.so registers
//   the "Host" handlers when tf.load_op_library loads it, _tf_ops_gpu.so the
//   "CUDA" ones when the loader loads it (xla_ffi.h).
// - XLA:CPU and XLA:GPU (in libtensorflow_cc.so.2, which imports the
//   registry's functions rather than holding its own) look a custom call's
//   target up in that registry when they compile the HLO module, after the
//   lowering below has run. The lowering can only run once _tf_ops.so is
//   loaded (its kernels are registered by the same load), so the Host handler
//   is always there by then; whether the CUDA one is depends on whether the
//   loader loaded _tf_ops_gpu.so, which XlaFfiHandlerRegistered asks the
//   registry itself. Nothing is cached per process, unlike REGISTER_XLA_OP.
// - XLA_FFI_Api has no lookup, so XlaFfiHandlerRegistered calls
//   xla::ffi::FindHandler (exported by libtensorflow_framework.so.2 or, in
//   tensorflow-cpu 2.20, libtensorflow_cc.so.2), declared
//   in xla/ffi/ffi_api.h, which the wheel ships but cannot be compiled (it
//   includes MLIR headers the wheel lacks): xla_custom_call.cc repeats its
//   declaration, and tests/attention/test_attention_xla.py checks the wheel's header
//   still says the same.

#ifndef TF_OPS_CC_CORE_XLA_CUSTOM_CALL_H_
#define TF_OPS_CC_CORE_XLA_CUSTOM_CALL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"

namespace tf_ops {

// A custom call's attributes, as XLA's FFI decodes them from the call's
// backend_config: an MLIR dictionary. Floats are written as their bit
// pattern, so the handler sees exactly the float the op was given.
class XlaFfiAttrs {
 public:
  XlaFfiAttrs& Add(const std::string& name, float value);
  XlaFfiAttrs& Add(const std::string& name, int64_t value);
  XlaFfiAttrs& Add(const std::string& name, bool value);
  // A string attribute (std::string_view in the handler) holding a name:
  // letters, digits and '_' only, so that it needs no escaping.
  XlaFfiAttrs& AddName(const std::string& name, const std::string& value);
  // The op's own attributes `names` (float, int, bool or string), as the
  // graph gives them, so that the handler reads and checks them with the
  // kernel's reader (xla_ffi.h's FfiAttrReader). An error names an attribute
  // the op lacks or of another type.
  absl::Status AddOpAttrs(const tensorflow::OpKernelConstruction* ctx,
                          std::initializer_list<const char*> names);
  // {a = 0x3F800000 : f32, b = -1 : i64, c = true, d = "Swish"}
  std::string Dictionary() const;

 private:
  std::vector<std::string> entries_;
};

// The FFI platform of the device a lowering compiles for: "Host" for
// XLA_CPU_JIT, "CUDA" for XLA_GPU_JIT, "" for any other (no handler).
std::string XlaFfiPlatform(const tensorflow::XlaOpKernelContext* ctx);

// Whether XLA's FFI registry holds a handler named `target` for the platform
// of the device being compiled for (XlaFfiPlatform). The environment variable
// TF_OPS_XLA_CUSTOM_CALLS=0, read at each lowering, makes it false everywhere:
// the composites then run where a handler exists too (the tests compare
// the two paths that way; a device without handlers has only the composite).
bool XlaFfiHandlerRegistered(const tensorflow::XlaOpKernelContext* ctx,
                             const std::string& target);

// No scratch result (XlaFfiCallOp's host_scratch_bytes).
inline constexpr int64_t kNoScratch = -1;

// A lowering's one custom call: the typed-FFI call `target` on every input of
// the op, with results of the given shapes (element type and dimensions;
// every operand and result is given the row-major layout, which the engines
// assume) and `attrs`, and the op's outputs 0, 1, ... set from those results
// in order. Unless host_scratch_bytes is kNoScratch, one more result: a u8
// scratch of host_scratch_bytes when compiling for the Host (XLA:CPU gives a
// custom call no allocator: the engine's bytes plus the slack its handler
// aligns them with, xla_ffi.h's FfiAlignedScratch), empty on other platforms
// (the CUDA handlers take theirs from the FFI's allocator).
void XlaFfiCallOp(tensorflow::XlaOpKernelContext* ctx,
                  const std::string& target, std::vector<xla::Shape> results,
                  int64_t host_scratch_bytes, const XlaFfiAttrs& attrs);

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_XLA_CUSTOM_CALL_H_

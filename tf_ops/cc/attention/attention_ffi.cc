// The XLA FFI handlers of the attention family: what the custom calls that
// attention_xla.cc emits under jit_compile run. Compiled once per library,
// like the kernels: into _tf_ops.so (TF_OPS_WITH_CUDA=0) as the "Host"
// handlers over the CPU engine (attention_cpu.h), and into _tf_ops_gpu.so
// (TF_OPS_WITH_CUDA=1) as the "CUDA" handlers over the CUDA engine. Each is
// registered in XLA's FFI registry when its library is loaded
// (core/xla_ffi.h; core/xla_custom_call.h says how the lowering finds it).
//
// The calls (targets kAttentionForwardTarget, kAttentionBackwardTarget,
// kAttentionBiasGradTarget):
//   forward:   (query, key, value, mask, bias) -> (output, lse)
//   backward:  (query, key, value, mask, bias, output, lse, doutput)
//              -> (dquery, dkey, dvalue, scratch)
//   bias grad: (query, key, value, mask, bias, output, lse, doutput)
//              -> (dquery, dkey, dvalue, dbias, scratch)
// with the attributes scale, softcap (f32), causal (bool), window (i64).
// scratch is a u8 result of the CPU engine's scratch bytes + 64 bytes on
// the Host (XLA:CPU gives a custom call no allocator; as a result, XLA's
// buffer assignment reuses it like any temporary); the CUDA handler takes
// its scratch from the FFI's allocator and its scratch result is empty.
// The shapes were checked when lowering; the handlers check them again with
// the same rules (attention_checks.h), as they rebuild the AttentionParams
// from the buffers' dimensions.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "tf_ops/cc/attention/attention_checks.h"
#include "tf_ops/cc/attention/attention_ffi.h"
#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/xla_ffi.h"
#include "xla/ffi/api/ffi.h"

#if TF_OPS_WITH_CUDA
#include "tf_ops/cu/attention/attention_gpu.h"
#else
#include "tf_ops/cc/attention/attention_cpu.h"
#endif

namespace tf_ops {
namespace attention {
namespace {

namespace ffi = xla::ffi;

// The AttentionParams of a call (sizes, strides, attributes and the mask's
// and bias's data), and the inputs' Dtype.
ffi::Error MakeParams(const std::string& op, const ffi::AnyBuffer& q,
                      const ffi::AnyBuffer& k, const ffi::AnyBuffer& v,
                      const ffi::AnyBuffer& mask, const ffi::AnyBuffer& bias,
                      float scale, float softcap, bool causal, int64_t window,
                      AttentionParams* p, Dtype* dtype) {
  absl::Status status = CheckAttrs(op, scale, softcap, window);
  if (status.ok()) {
    status = CheckAttention(op, FfiDims(q), FfiDims(k), FfiDims(v),
                            FfiDims(mask), FfiDims(bias), p);
  }
  if (!status.ok()) return ffi::Error::InvalidArgument(
      std::string(status.message()));
  if (!FfiDtype(q.element_type(), dtype)) {
    return ffi::Error::InvalidArgument(op + ": unsupported dtype");
  }
  p->scale = scale;
  p->softcap = softcap;
  p->causal = causal;
  p->window = window;
  SetMaskAndBias(static_cast<int>(mask.dimensions().size()),
                 mask.untyped_data(),
                 static_cast<int>(bias.dimensions().size()),
                 bias.untyped_data(), p);
  return ffi::Error::Success();
}

// The bindings, in the order of the handlers' parameters; each platform
// appends its context. Every call takes the forward's five inputs; the
// gradient calls also output, lse and doutput.
// (A Binding cannot be moved or copied: each step consumes a temporary.)
template <typename Binding>
auto ForwardInputs(Binding&& b) {
  return std::forward<Binding>(b)
      .template Arg<ffi::AnyBuffer>()   // query
      .template Arg<ffi::AnyBuffer>()   // key
      .template Arg<ffi::AnyBuffer>()   // value
      .template Arg<ffi::AnyBuffer>()   // mask
      .template Arg<ffi::AnyBuffer>();  // bias
}

template <typename Binding>
auto GradInputs(Binding&& b) {
  return ForwardInputs(std::forward<Binding>(b))
      .template Arg<ffi::AnyBuffer>()   // output
      .template Arg<ffi::AnyBuffer>()   // lse
      .template Arg<ffi::AnyBuffer>();  // doutput
}

template <typename Binding>
auto WithAttrs(Binding&& b) {
  return std::forward<Binding>(b)
      .template Attr<float>("scale")
      .template Attr<float>("softcap")
      .template Attr<bool>("causal")
      .template Attr<int64_t>("window");
}

auto ForwardBinding() {
  return WithAttrs(ForwardInputs(ffi::Ffi::Bind())
                       .Ret<ffi::AnyBuffer>()    // output
                       .Ret<ffi::AnyBuffer>());  // lse
}

auto BackwardBinding() {
  return WithAttrs(GradInputs(ffi::Ffi::Bind())
                       .Ret<ffi::AnyBuffer>()    // dquery
                       .Ret<ffi::AnyBuffer>()    // dkey
                       .Ret<ffi::AnyBuffer>()    // dvalue
                       .Ret<ffi::AnyBuffer>());  // scratch (Host), empty (CUDA)
}

auto BiasGradBinding() {
  return WithAttrs(GradInputs(ffi::Ffi::Bind())
                       .Ret<ffi::AnyBuffer>()    // dquery
                       .Ret<ffi::AnyBuffer>()    // dkey
                       .Ret<ffi::AnyBuffer>()    // dvalue
                       .Ret<ffi::AnyBuffer>()    // dbias
                       .Ret<ffi::AnyBuffer>());  // scratch (Host), empty (CUDA)
}

#if TF_OPS_WITH_CUDA

ffi::Error ForwardCuda(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                       ffi::Result<ffi::AnyBuffer> out,
                       ffi::Result<ffi::AnyBuffer> lse, float scale,
                       float softcap, bool causal, int64_t window,
                       void* stream) {
  AttentionParams p;
  Dtype dtype;
  ffi::Error error = MakeParams("TfOps>Attention", q, k, v, mask, bias, scale,
                                softcap, causal, window, &p, &dtype);
  if (error.failure()) return error;
  return FfiLaunchError(LaunchAttentionForward(
      dtype, p, q.untyped_data(), k.untyped_data(), v.untyped_data(),
      out->untyped_data(), lse->untyped_data(), stream));
}

// The backward on the CUDA engine, and the bias's gradient where dbias is
// not null.
ffi::Error RunBackwardCuda(const std::string& op, ffi::AnyBuffer q,
                           ffi::AnyBuffer k, ffi::AnyBuffer v,
                           ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                           ffi::AnyBuffer out, ffi::AnyBuffer lse,
                           ffi::AnyBuffer dout, ffi::AnyBuffer* dq,
                           ffi::AnyBuffer* dk, ffi::AnyBuffer* dv,
                           ffi::AnyBuffer* dbias, float scale, float softcap,
                           bool causal, int64_t window, void* stream,
                           ffi::ScratchAllocator& allocator) {
  AttentionParams p;
  Dtype dtype;
  ffi::Error error = MakeParams(op, q, k, v, mask, bias, scale, softcap,
                                causal, window, &p, &dtype);
  if (error.failure()) return error;
  const int64_t bytes = AttentionGpuBackwardScratchBytes(dtype, p);
  void* scratch = nullptr;
  error = FfiAllocate(allocator, bytes, op, &scratch);
  if (error.failure()) return error;
  error = FfiLaunchError(LaunchAttentionBackward(
      dtype, p, q.untyped_data(), k.untyped_data(), v.untyped_data(),
      out.untyped_data(), dout.untyped_data(), lse.untyped_data(),
      dq->untyped_data(), dk->untyped_data(), dv->untyped_data(), scratch,
      stream));
  if (error.failure() || dbias == nullptr) return error;
  return FfiLaunchError(LaunchAttentionBiasGrad(
      dtype, p, q.untyped_data(), k.untyped_data(), v.untyped_data(),
      out.untyped_data(), dout.untyped_data(), lse.untyped_data(),
      dbias->untyped_data(), static_cast<int64_t>(dbias->element_count()),
      stream));
}

ffi::Error BackwardCuda(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                        ffi::AnyBuffer out, ffi::AnyBuffer lse,
                        ffi::AnyBuffer dout, ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv,
                        ffi::Result<ffi::AnyBuffer> /*scratch*/, float scale,
                        float softcap, bool causal, int64_t window,
                        void* stream, ffi::ScratchAllocator allocator) {
  return RunBackwardCuda("TfOps>AttentionGrad", q, k, v, mask, bias, out, lse,
                         dout, &*dq, &*dk, &*dv, nullptr, scale,
                         softcap, causal, window, stream, allocator);
}

ffi::Error BiasGradCuda(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                        ffi::AnyBuffer out, ffi::AnyBuffer lse,
                        ffi::AnyBuffer dout, ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv,
                        ffi::Result<ffi::AnyBuffer> dbias,
                        ffi::Result<ffi::AnyBuffer> /*scratch*/, float scale,
                        float softcap, bool causal, int64_t window,
                        void* stream, ffi::ScratchAllocator allocator) {
  return RunBackwardCuda("TfOps>AttentionBiasGrad", q, k, v, mask, bias, out,
                         lse, dout, &*dq, &*dk, &*dv, &*dbias,
                         scale, softcap, causal, window, stream, allocator);
}

XLA_FFI_DEFINE_HANDLER(kForward, ForwardCuda,
                       ForwardBinding().Ctx<ffi::PlatformStream<void*>>());
XLA_FFI_DEFINE_HANDLER(kBackward, BackwardCuda,
                       BackwardBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
XLA_FFI_DEFINE_HANDLER(kBiasGrad, BiasGradCuda,
                       BiasGradBinding()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Ctx<ffi::ScratchAllocator>());
constexpr char kPlatform[] = "CUDA";

#else  // !TF_OPS_WITH_CUDA

ffi::Error ForwardHost(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                       ffi::Result<ffi::AnyBuffer> out,
                       ffi::Result<ffi::AnyBuffer> lse, float scale,
                       float softcap, bool causal, int64_t window,
                       ffi::ThreadPool pool) {
  AttentionParams p;
  Dtype dtype;
  ffi::Error error = MakeParams("TfOps>Attention", q, k, v, mask, bias, scale,
                                softcap, causal, window, &p, &dtype);
  if (error.failure()) return error;
  CpuAttentionForward(dtype, p, q.untyped_data(), k.untyped_data(),
                      v.untyped_data(), out->untyped_data(),
                      lse->untyped_data(), XlaFfiParallelForOf(pool));
  return ffi::Error::Success();
}

// The backward on the CPU engine, with the bias's gradient where dbias is
// not null.
ffi::Error RunBackwardHost(const std::string& op, ffi::AnyBuffer q,
                           ffi::AnyBuffer k, ffi::AnyBuffer v,
                           ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                           ffi::AnyBuffer out, ffi::AnyBuffer lse,
                           ffi::AnyBuffer dout, ffi::AnyBuffer* dq,
                           ffi::AnyBuffer* dk, ffi::AnyBuffer* dv,
                           ffi::AnyBuffer* dbias,
                           ffi::Result<ffi::AnyBuffer>& scratch, float scale,
                           float softcap, bool causal, int64_t window,
                           ffi::ThreadPool& pool) {
  AttentionParams p;
  Dtype dtype;
  ffi::Error error = MakeParams(op, q, k, v, mask, bias, scale, softcap,
                                causal, window, &p, &dtype);
  if (error.failure()) return error;
  const int64_t elements =
      dbias == nullptr ? 0 : static_cast<int64_t>(dbias->element_count());
  const int64_t bytes = CpuAttentionBackwardScratchBytes(dtype, p, elements);
  void* aligned = FfiAlignedScratch(scratch, bytes, kScratchAlign);
  if (aligned == nullptr) {
    return ffi::Error::InvalidArgument(op + ": the scratch result is too small");
  }
  CpuAttentionBackward(dtype, p, q.untyped_data(), k.untyped_data(),
                       v.untyped_data(), out.untyped_data(),
                       dout.untyped_data(), lse.untyped_data(),
                       dq->untyped_data(), dk->untyped_data(),
                       dv->untyped_data(),
                       elements > 0 ? dbias->untyped_data() : nullptr,
                       elements, aligned, XlaFfiParallelForOf(pool));
  return ffi::Error::Success();
}

ffi::Error BackwardHost(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                        ffi::AnyBuffer out, ffi::AnyBuffer lse,
                        ffi::AnyBuffer dout, ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv,
                        ffi::Result<ffi::AnyBuffer> scratch, float scale,
                        float softcap, bool causal, int64_t window,
                        ffi::ThreadPool pool) {
  return RunBackwardHost("TfOps>AttentionGrad", q, k, v, mask, bias, out, lse,
                         dout, &*dq, &*dk, &*dv, nullptr, scratch,
                         scale, softcap, causal, window, pool);
}

ffi::Error BiasGradHost(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                        ffi::AnyBuffer out, ffi::AnyBuffer lse,
                        ffi::AnyBuffer dout, ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv,
                        ffi::Result<ffi::AnyBuffer> dbias,
                        ffi::Result<ffi::AnyBuffer> scratch, float scale,
                        float softcap, bool causal, int64_t window,
                        ffi::ThreadPool pool) {
  return RunBackwardHost("TfOps>AttentionBiasGrad", q, k, v, mask, bias, out,
                         lse, dout, &*dq, &*dk, &*dv, &*dbias,
                         scratch, scale, softcap, causal, window, pool);
}

XLA_FFI_DEFINE_HANDLER(kForward, ForwardHost,
                       ForwardBinding().Ctx<ffi::ThreadPool>());
XLA_FFI_DEFINE_HANDLER(kBackward, BackwardHost,
                       BackwardBinding().Ctx<ffi::ThreadPool>());
XLA_FFI_DEFINE_HANDLER(kBiasGrad, BiasGradHost,
                       BiasGradBinding().Ctx<ffi::ThreadPool>());
constexpr char kPlatform[] = "Host";

#endif  // TF_OPS_WITH_CUDA

TF_OPS_REGISTER_XLA_FFI_HANDLER(kAttentionForwardTarget, kPlatform, kForward);
TF_OPS_REGISTER_XLA_FFI_HANDLER(kAttentionBackwardTarget, kPlatform,
                                kBackward);
TF_OPS_REGISTER_XLA_FFI_HANDLER(kAttentionBiasGradTarget, kPlatform,
                                kBiasGrad);

}  // namespace
}  // namespace attention
}  // namespace tf_ops


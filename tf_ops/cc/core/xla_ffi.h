// The handler side of an XLA custom call into one of our engines (the
// lowering side, and how the two meet, is xla_custom_call.h): registration of
// XLA FFI handlers from a loaded op library, the engines' Dtype of an FFI
// buffer, the call's attributes read as the kernels read an op's (GetAttr),
// the scratch a handler gets (a result on the Host, the FFI's allocator on
// CUDA), and a ParallelFor over the intra-op thread pool XLA:CPU hands a
// handler. Uses XLA's external FFI API (xla/ffi/api/ffi.h) only: it is what
// the wheel ships complete, and it cannot share a translation unit with XLA's
// internal xla/ffi/ffi.h (both are namespace xla::ffi), which nothing of ours
// includes.

#ifndef TF_OPS_CC_CORE_XLA_FFI_H_
#define TF_OPS_CC_CORE_XLA_FFI_H_

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/parallel_for.h"
#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace tf_ops {

// XLA's FFI API table, the way into its process-wide handler registry, or
// null. Looked up when the library loads, not linked: the wheels export it
// under different names (TensorFlow 2.21: the C function XLA_FFI_GetApi, in
// libtensorflow_framework.so.2; tensorflow-cpu 2.20: only the C++ function
// xla::ffi::GetXlaFfiApi(), in libtensorflow_cc.so.2). Both libraries are
// already loaded (ours links them), so RTLD_NOLOAD only finds them.
inline const XLA_FFI_Api* XlaFfiApi() {
  using GetApi = const XLA_FFI_Api* (*)();
  for (const char* library :
       {"libtensorflow_framework.so.2", "libtensorflow_cc.so.2"}) {
    void* handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    for (const char* symbol :
         {"XLA_FFI_GetApi", "_ZN3xla3ffi12GetXlaFfiApiEv"}) {
      if (void* fn = dlsym(handle, symbol)) {
        dlclose(handle);  // drops only the reference NOLOAD added
        return reinterpret_cast<GetApi>(fn)();
      }
    }
    dlclose(handle);
  }
  return nullptr;
}

// Registers `handler` (an XLA_FFI_Handler*, e.g. from XLA_FFI_DEFINE_HANDLER)
// as `name` on `platform` ("Host" or "CUDA") in XLA's process-wide FFI
// registry (XlaFfiApi). Called by a static initialiser, i.e. when the
// library is loaded; a failure (a second library registering the same name
// with another handler, or a TensorFlow exporting no FFI API) is printed and
// registers nothing new, so the lowering finds the first registration or,
// with none, builds its composite (xla_custom_call.h).
inline bool RegisterXlaFfiHandler(std::string_view name,
                                  std::string_view platform,
                                  XLA_FFI_Handler* handler) {
  const XLA_FFI_Api* api = XlaFfiApi();
  if (api == nullptr) {
    std::fprintf(stderr,
                 "tf_ops: this TensorFlow exports no XLA FFI API; %.*s runs "
                 "as its composite under XLA\n",
                 static_cast<int>(name.size()), name.data());
    return false;
  }
  XLA_FFI_Error* error =
      xla::ffi::Ffi::RegisterStaticHandler(api, name, platform, handler);
  if (error == nullptr) return true;
  XLA_FFI_Error_GetMessage_Args args;
  args.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.error = error;
  api->XLA_FFI_Error_GetMessage(&args);
  std::fprintf(stderr, "tf_ops: cannot register XLA FFI handler %.*s on %.*s: %s\n",
               static_cast<int>(name.size()), name.data(),
               static_cast<int>(platform.size()), platform.data(),
               args.message);
  XLA_FFI_Error_Destroy_Args destroy;
  destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  destroy.extension_start = nullptr;
  destroy.error = error;
  api->XLA_FFI_Error_Destroy(&destroy);
  return false;
}

#define TF_OPS_REGISTER_XLA_FFI_HANDLER(name, platform, handler) \
  TF_OPS_REGISTER_XLA_FFI_HANDLER_(name, platform, handler, __COUNTER__)
#define TF_OPS_REGISTER_XLA_FFI_HANDLER_(name, platform, handler, n) \
  TF_OPS_REGISTER_XLA_FFI_HANDLER__(name, platform, handler, n)
#define TF_OPS_REGISTER_XLA_FFI_HANDLER__(name, platform, handler, n) \
  [[maybe_unused]] static const bool tf_ops_xla_ffi_registered_##n =  \
      ::tf_ops::RegisterXlaFfiHandler(name, platform, handler)

// The engines' Dtype of an FFI buffer's element type; false for any other.
inline bool FfiDtype(xla::ffi::DataType type, Dtype* dtype) {
  switch (type) {
    case xla::ffi::DataType::F16:
      *dtype = Dtype::kHalf;
      return true;
    case xla::ffi::DataType::BF16:
      *dtype = Dtype::kBFloat16;
      return true;
    case xla::ffi::DataType::F32:
      *dtype = Dtype::kFloat;
      return true;
    case xla::ffi::DataType::F64:
      *dtype = Dtype::kDouble;
      return true;
    default:
      return false;
  }
}

// A buffer's dimensions.
inline std::vector<int64_t> FfiDims(const xla::ffi::AnyBuffer& b) {
  const auto d = b.dimensions();
  return std::vector<int64_t>(d.begin(), d.end());
}

// A check's status as the handler's result (InvalidArgument, as the kernels).
inline xla::ffi::Error FfiErrorOf(const absl::Status& status) {
  return status.ok() ? xla::ffi::Error::Success()
                     : xla::ffi::Error::InvalidArgument(
                           std::string(status.message()));
}

// A CUDA launcher's result (null, or CUDA's message) as the handler's.
inline xla::ffi::Error FfiLaunchError(const char* error) {
  return error == nullptr ? xla::ffi::Error::Success()
                          : xla::ffi::Error::Internal(error);
}

// A custom call's attributes (bound with .Attrs<xla::ffi::Dictionary>()) seen
// through the GetAttr the kernels' attribute readers call (e.g.
// ReadBatchNormAttrs), so that a handler reads and checks them with the same
// code as the op's kernel. The lowering writes them with XlaFfiAttrs.
class FfiAttrReader {
 public:
  explicit FfiAttrReader(const xla::ffi::Dictionary& attrs) : attrs_(attrs) {}

  absl::Status GetAttr(std::string_view name, std::string* v) const {
    return Get<std::string_view>(name, v);
  }
  absl::Status GetAttr(std::string_view name, float* v) const {
    return Get<float>(name, v);
  }
  absl::Status GetAttr(std::string_view name, bool* v) const {
    return Get<bool>(name, v);
  }
  absl::Status GetAttr(std::string_view name, int64_t* v) const {
    return Get<int64_t>(name, v);
  }
  absl::Status GetAttr(std::string_view name, int* v) const {
    return Get<int64_t>(name, v);
  }

 private:
  template <typename Stored, typename T>
  absl::Status Get(std::string_view name, T* v) const {
    const xla::ffi::ErrorOr<Stored> got = attrs_.get<Stored>(name);
    if (!got.has_value()) {
      return absl::InvalidArgumentError(
          "custom call attribute '" + std::string(name) +
          "': " + std::string(got.error().message()));
    }
    *v = static_cast<T>(*got);
    return absl::OkStatus();
  }

  const xla::ffi::Dictionary& attrs_;
};

// The Host handlers' scratch: a u8 result that the lowering made `align`
// bytes longer than the engine asks for, so that it can be aligned here
// (XLA:CPU aligns a u8 array to less than a double or a vector may need, and
// gives a custom call no allocator). Null when it holds fewer than `bytes`.
inline void* FfiAlignedScratch(xla::ffi::Result<xla::ffi::AnyBuffer>& scratch,
                               int64_t bytes, int64_t align) {
  if (static_cast<int64_t>(scratch->size_bytes()) < bytes + align) {
    return nullptr;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(scratch->untyped_data());
  return reinterpret_cast<void*>((base + align - 1) &
                                 ~static_cast<uintptr_t>(align - 1));
}

// The CUDA handlers' scratch from the FFI's allocator (null for 0 bytes).
inline xla::ffi::Error FfiAllocate(xla::ffi::ScratchAllocator& allocator,
                                   int64_t bytes, const std::string& op,
                                   void** out) {
  *out = nullptr;
  if (bytes <= 0) return xla::ffi::Error::Success();
  std::optional<void*> allocated = allocator.Allocate(bytes, 256);
  if (!allocated.has_value()) {
    return xla::ffi::Error(xla::ffi::ErrorCode::kResourceExhausted,
                           op + ": cannot allocate the scratch");
  }
  *out = *allocated;
  return xla::ffi::Error::Success();
}

// fn(begin, end) over [0, total) on XLA:CPU's intra-op pool (the one
// TensorFlow's CPU device runs its ops on, which TF's XLA launch hands to
// the executable), or serially where there is none. Shards are at least
// ~100k cycles by `cost_per_unit` and at most 4 per thread. The calling
// thread works on shards too and waits only for shards already taken, so it
// never waits on a task the pool has not started (the handler may itself run
// on a pool thread); a task that starts after every shard is taken returns at
// once, touching only the shared state it owns a reference to.
inline void XlaFfiParallelFor(
    xla::ffi::ThreadPool& pool, int64_t total, int64_t cost_per_unit,
    const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  constexpr int64_t kMinShardCost = 100000;
  const int64_t threads = pool.num_threads();
  const int64_t by_cost = std::max<int64_t>(
      1, total * std::max<int64_t>(cost_per_unit, 1) / kMinShardCost);
  const int64_t wanted =
      std::min({total, by_cost, std::max<int64_t>(threads, 1) * 4});
  const int64_t block = (total + wanted - 1) / wanted;
  const int64_t shards = (total + block - 1) / block;  // none empty
  if (threads <= 1 || shards <= 1) {
    fn(0, total);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    int64_t done = 0;
    std::mutex mu;
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  const std::function<void(int64_t, int64_t)>* body = &fn;
  auto work = [state, body, shards, block, total] {
    for (;;) {
      const int64_t i = state->next.fetch_add(1);
      if (i >= shards) return;
      (*body)(i * block, std::min(total, (i + 1) * block));
      std::lock_guard<std::mutex> lock(state->mu);
      if (++state->done == shards) state->cv.notify_all();
    }
  };
  const int64_t helpers = std::min(threads, shards) - 1;
  for (int64_t i = 0; i < helpers; ++i) {
    auto task = work;
    pool.Schedule(std::move(task));
  }
  work();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done == shards; });
}

// XlaFfiParallelFor as the ParallelFor the engines take.
inline ParallelFor XlaFfiParallelForOf(xla::ffi::ThreadPool& pool) {
  return [&pool](int64_t total, int64_t cost,
                 const std::function<void(int64_t, int64_t)>& fn) {
    XlaFfiParallelFor(pool, total, cost, fn);
  };
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_XLA_FFI_H_

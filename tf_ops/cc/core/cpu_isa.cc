#include "tf_ops/cc/core/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tf_ops {
namespace {

CpuIsa Detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return CpuIsa::kAvx2;
  }
#endif
  return CpuIsa::kBaseline;
}

CpuIsa FromEnvironment(CpuIsa supported) {
  const char* env = std::getenv("TF_OPS_CPU_ISA");
  if (env == nullptr) return supported;
  CpuIsa wanted = supported;
  if (std::strcmp(env, "baseline") == 0) wanted = CpuIsa::kBaseline;
  if (std::strcmp(env, "avx2") == 0) wanted = CpuIsa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) wanted = CpuIsa::kAvx512;
  return wanted < supported ? wanted : supported;
}

std::atomic<int>& Active() {
  static std::atomic<int> active{
      static_cast<int>(FromEnvironment(SupportedCpuIsa()))};
  return active;
}

}  // namespace

CpuIsa SupportedCpuIsa() {
  static const CpuIsa supported = Detect();
  return supported;
}

CpuIsa ActiveCpuIsa() {
  return static_cast<CpuIsa>(Active().load(std::memory_order_relaxed));
}

CpuIsa SetCpuIsa(CpuIsa isa) {
  const CpuIsa capped = isa < SupportedCpuIsa() ? isa : SupportedCpuIsa();
  Active().store(static_cast<int>(capped), std::memory_order_relaxed);
  return capped;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace tf_ops

// For Python (tf_ops.active_cpu_isa, through ctypes): the one symbol the
// library exports besides what TensorFlow looks up.
extern "C" __attribute__((visibility("default"))) const char*
TfOpsActiveCpuIsa() {
  return tf_ops::CpuIsaName(tf_ops::ActiveCpuIsa());
}

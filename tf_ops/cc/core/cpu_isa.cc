#include "tf_ops/cc/core/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tf_ops {
namespace {

CpuIsa Detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // A build without the AVX-512 variants (cpu_isa.h) runs its AVX2 ones.
  if (TF_OPS_AVX512_VARIANTS && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
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

// AVX512-BF16 is reported in cpuid leaf 7, subleaf 1 (EAX bit 5), which
// __builtin_cpu_supports does not know in every GCC this builds with; the
// operating system's saving of the AVX-512 state is what Detect() checked.
bool DetectAvx512Bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (SupportedCpuIsa() != CpuIsa::kAvx512) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5) & 1u;
#else
  return false;
#endif
}

CpuIsa FromEnvironment(CpuIsa supported) {
  const char* env = std::getenv("TF_OPS_CPU_ISA");
  if (env == nullptr) return supported;
  CpuIsa wanted = supported;
  if (std::strcmp(env, "baseline") == 0) wanted = CpuIsa::kBaseline;
  if (std::strcmp(env, "avx2") == 0) wanted = CpuIsa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) wanted = CpuIsa::kAvx512;
  if (std::strcmp(env, "avx512_bf16") == 0) wanted = CpuIsa::kAvx512;
  return wanted < supported ? wanted : supported;
}

// Whether TF_OPS_CPU_ISA leaves the bfloat16 dot products on: unless it
// names a set without them (an unknown value caps nothing, as above).
bool Bf16FromEnvironment() {
  const char* env = std::getenv("TF_OPS_CPU_ISA");
  if (env == nullptr) return true;
  return std::strcmp(env, "baseline") != 0 && std::strcmp(env, "avx2") != 0 &&
         std::strcmp(env, "avx512") != 0;
}

std::atomic<int>& Active() {
  static std::atomic<int> active{
      static_cast<int>(FromEnvironment(SupportedCpuIsa()))};
  return active;
}

std::atomic<bool>& Bf16Allowed() {
  static std::atomic<bool> allowed{Bf16FromEnvironment()};
  return allowed;
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

bool SupportedAvx512Bf16() {
  static const bool supported = DetectAvx512Bf16();
  return supported;
}

bool ActiveAvx512Bf16() {
  return SupportedAvx512Bf16() && ActiveCpuIsa() == CpuIsa::kAvx512 &&
         Bf16Allowed().load(std::memory_order_relaxed);
}

bool SetAvx512Bf16(bool allowed) {
  Bf16Allowed().store(allowed, std::memory_order_relaxed);
  return ActiveAvx512Bf16();
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

// For Python (tf_ops.active_cpu_isa, through ctypes): with the next, the
// symbols the library exports besides what TensorFlow looks up.
extern "C" __attribute__((visibility("default"))) const char*
TfOpsActiveCpuIsa() {
  return tf_ops::CpuIsaName(tf_ops::ActiveCpuIsa());
}

// For Python (tf_ops.active_cpu_extensions): the extensions an engine uses on
// top of the active set, comma-separated ("" for none).
extern "C" __attribute__((visibility("default"))) const char*
TfOpsActiveCpuExtensions() {
  return tf_ops::ActiveAvx512Bf16() ? "avx512_bf16" : "";
}

// Which vector instruction set the CPU engine's loops run with, chosen once at
// run time. The library is compiled for the baseline TensorFlow's wheels need
// (AVX on x86-64); the loops are also compiled for AVX2+FMA and AVX-512, and
// the widest one this CPU supports is used, so the same .so runs everywhere
// and fast where it can.
//
// TF_OPS_CPU_ISA=baseline|avx2|avx512|avx512_bf16 in the environment caps the
// choice (to test or benchmark each path on one machine); a request the CPU
// cannot run falls back to the widest it can. avx512_bf16 is AVX-512 with
// AVX512-BF16's dot products (vdpbf16ps), which an engine may use for
// bfloat16 inputs on top of its AVX-512 loops (ActiveAvx512Bf16 below); the
// cap avx512 keeps the AVX-512 loops without them.

#ifndef TF_OPS_CC_CPU_ISA_H_
#define TF_OPS_CC_CPU_ISA_H_

namespace tf_ops {

enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest instruction set this CPU (and this build) supports.
CpuIsa SupportedCpuIsa();

// The one the loops use: SupportedCpuIsa(), capped by TF_OPS_CPU_ISA.
CpuIsa ActiveCpuIsa();

// Caps the active instruction set (tests and benchmarks); returns the one now
// active, which is `isa` or, if the CPU lacks it, the widest it has.
CpuIsa SetCpuIsa(CpuIsa isa);

const char* CpuIsaName(CpuIsa isa);

// Whether this CPU has AVX512-BF16 (cpuid leaf 7, subleaf 1, EAX bit 5) on
// top of the AVX-512 set SupportedCpuIsa() checks.
bool SupportedAvx512Bf16();

// Whether an engine may use the bfloat16 dot products: the CPU has them, the
// active set is AVX-512 and TF_OPS_CPU_ISA does not cap below avx512_bf16.
// The one test an engine makes before running its bfloat16-product variant.
bool ActiveAvx512Bf16();

// Allows or forbids them (tests and benchmarks); returns ActiveAvx512Bf16().
bool SetAvx512Bf16(bool allowed);

}  // namespace tf_ops

// Compiling a loop once per instruction set, the one idiom every CPU engine
// uses. An engine writes its entry points as a macro
// TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C) (#undef'd after use): functions
// named Name##Suffix, declared
//   TF_OPS_ISA_ENTRY(TARGET)
// so that everything they call is inlined and compiled for TARGET (F16C says
// whether that target has the half <-> float instructions). Then
//   TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
// defines NameBaseline, NameAvx2 and NameAvx512 (only NameBaseline off x86-64),
// and inside a function returning the same type
//   TF_OPS_CPU_ISA_DISPATCH(Name, args...)
// returns the variant for ActiveCpuIsa().
#define TF_OPS_ISA_ENTRY(TARGET) TARGET __attribute__((flatten, noinline))
#define TF_OPS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
#define TF_OPS_TARGET_AVX512                                        \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma," \
                        "f16c,bmi2,prefer-vector-width=512")))

// An engine's bfloat16-product variant (x86-64 only): AVX-512 plus
// AVX512-BF16, called where ActiveAvx512Bf16().
#define TF_OPS_TARGET_AVX512_BF16                                   \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16," \
                        "avx2,fma,f16c,bmi2,prefer-vector-width=512")))

// A build may leave the AVX-512 variants out (-DTF_OPS_AVX512_VARIANTS=0): the
// engine sanitizer test does on a CPU that could not run them, where they are a
// third of its compile time and never called. The library always has them.
#if !defined(TF_OPS_AVX512_VARIANTS)
#if defined(__x86_64__)
#define TF_OPS_AVX512_VARIANTS 1
#else
#define TF_OPS_AVX512_VARIANTS 0
#endif
#endif

#if defined(__x86_64__) && TF_OPS_AVX512_VARIANTS
#define TF_OPS_FOR_EACH_CPU_ISA(VARIANT)     \
  VARIANT(Baseline, , false)                 \
  VARIANT(Avx2, TF_OPS_TARGET_AVX2, true)    \
  VARIANT(Avx512, TF_OPS_TARGET_AVX512, true)
#define TF_OPS_CPU_ISA_DISPATCH(Name, ...)    \
  switch (::tf_ops::ActiveCpuIsa()) {         \
    case ::tf_ops::CpuIsa::kAvx512:           \
      return Name##Avx512(__VA_ARGS__);       \
    case ::tf_ops::CpuIsa::kAvx2:             \
      return Name##Avx2(__VA_ARGS__);         \
    case ::tf_ops::CpuIsa::kBaseline:         \
      break;                                  \
  }                                           \
  return Name##Baseline(__VA_ARGS__);
#elif defined(__x86_64__)
#define TF_OPS_FOR_EACH_CPU_ISA(VARIANT)     \
  VARIANT(Baseline, , false)                 \
  VARIANT(Avx2, TF_OPS_TARGET_AVX2, true)
#define TF_OPS_CPU_ISA_DISPATCH(Name, ...)    \
  if (::tf_ops::ActiveCpuIsa() != ::tf_ops::CpuIsa::kBaseline) { \
    return Name##Avx2(__VA_ARGS__);           \
  }                                           \
  return Name##Baseline(__VA_ARGS__);
#else
#define TF_OPS_FOR_EACH_CPU_ISA(VARIANT) VARIANT(Baseline, , false)
#define TF_OPS_CPU_ISA_DISPATCH(Name, ...) return Name##Baseline(__VA_ARGS__);
#endif

#endif  // TF_OPS_CC_CPU_ISA_H_

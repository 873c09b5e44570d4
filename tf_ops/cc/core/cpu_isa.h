// Which vector instruction set the CPU engine's loops run with, chosen once at
// run time. The library is compiled for the baseline TensorFlow's wheels need
// (AVX on x86-64); the loops are also compiled for AVX2+FMA and AVX-512, and
// the widest one this CPU supports is used, so the same .so runs everywhere
// and fast where it can.
//
// TF_OPS_CPU_ISA=baseline|avx2|avx512 in the environment caps the choice (to
// test or benchmark each path on one machine); a request the CPU cannot run
// falls back to the widest it can.

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

}  // namespace tf_ops

#endif  // TF_OPS_CC_CPU_ISA_H_

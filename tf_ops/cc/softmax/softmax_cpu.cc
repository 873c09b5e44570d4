// The softmax family's CPU loops (softmax_cpu.h), compiled once per
// instruction set (cpu_isa.h: AVX, AVX2+FMA, AVX-512, the widest chosen at
// load), each a `flatten` function so that softmax_math.h's formulas and
// fast_math.h's exponential are inlined and vectorised for its target.
//
// A row is computed in the compute type (float; double for double) in as few
// passes as the math allows, each a plain loop over contiguous memory that
// stays in L1/L2 for the row lengths of attention and vocabularies:
//   softmax      max | e = exp(x - max) stored, sum | y = e / sum
//   log_softmax  max | sum of exp(x - max)          | y = x - lse
//   masked       v = kept ? scale x : -inf, max | e, sum | y = e / sum
//   grad         sum of g y (or of g)               | dx
//   cross-ent.   max (and sum of x) | e, sum | dx, and the loss
// float and double rows are read and written in place of the output buffer
// (which may be the input's: every pass is element for element); half and
// bfloat16 rows are widened once into a float row buffer and rounded once
// when stored (half with F16C where the variant has it, float_blocks.h),
// except where bfloat16's one-shift conversion is cheaper inside a pass than
// a pass of its own: the masked softmax's first and last passes and the
// grads, which read and write bfloat16 directly.
// Row sums and maxima run in 16 lanes (element j in lane j % 16) combined in a
// fixed order, so a row's bits do not depend on how rows are spread over
// threads.

#include "tf_ops/cc/softmax/softmax_cpu.h"

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/core/float_blocks.h"
#include "tf_ops/cc/core/row_max.h"
#include "tf_ops/cc/softmax/softmax_math.h"

namespace tf_ops {
namespace {

using softmax::CrossEntropyParams;
using softmax::NegInf;

constexpr int kLanes = 16;

// sum over j in [0, n) of term(j), in lanes added in a fixed order. term may
// store to the row it reads (element j only).
template <typename C, typename Term>
C RowSum(int64_t n, const Term& term) {
  C lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma GCC ivdep
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  for (int l = 0; j + l < n; ++l) lanes[l] += term(j + l);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  }
  return lanes[0];
}

// How rows of storage S are read into the compute type and written back.
// kWide: S is stored as its compute type (float, double), so rows are used
// in place; otherwise they go through a float row buffer. kInline: S::Load
// is a few vector instructions (everything but half, whose bit arithmetic
// is ~20 per element against F16C's one per 8), so a pass may read and
// write the storage itself instead of a widened row.
template <typename S, bool kF16c>
struct RowIo {
  using T = typename S::Stored;
  using C = ComputeType<T>;
  static constexpr bool kWide = std::is_same<T, C>::value;
  static constexpr bool kInline = !std::is_same<S, cpu_storage::Half>::value;
  static void Widen(const T* in, C* out, int64_t n) {
    if constexpr (std::is_same<S, cpu_storage::Half>::value && kF16c) {
      HalfF16cBlocks::ToFloat(in, out, n);
    } else {
      BitBlocks<S>::ToFloat(in, out, n);
    }
  }
  static void Narrow(const C* in, T* out, int64_t n) {
    if constexpr (std::is_same<S, cpu_storage::Half>::value && kF16c) {
      HalfF16cBlocks::FromFloat(in, out, n);
    } else {
      BitBlocks<S>::FromFloat(in, out, n);
    }
  }
};

// A thread's row buffers (two: the grad ops widen g and y), grown as needed;
// not inlined into the loops (`flatten` would copy vector's growth code into
// every variant).
__attribute__((noinline)) float* RowBuffer(int slot, int64_t cols) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < cols) b.resize(cols);
  return b.data();
}

// The row of x in the compute type: x itself for float and double, else
// widened into row buffer `slot`.
template <typename Io>
const typename Io::C* RowIn(const typename Io::T* x, int64_t cols, int slot) {
  if constexpr (Io::kWide) {
    return x;
  } else {
    float* b = RowBuffer(slot, cols);
    Io::Widen(x, b, cols);
    return b;
  }
}

// Where a row's results are computed before they are stored: the output
// itself for float and double, else row buffer `slot` (Store rounds it out).
template <typename Io>
typename Io::C* RowOut(typename Io::T* y, int64_t cols, int slot) {
  if constexpr (Io::kWide) {
    return y;
  } else {
    return RowBuffer(slot, cols);
  }
}
template <typename Io>
void Store(const typename Io::C* work, typename Io::T* y, int64_t cols) {
  if constexpr (!Io::kWide) Io::Narrow(work, y, cols);
}

// e_j = exp(v_j - m) into out (which may be v), returning their sum.
template <typename C>
C ExpSum(const C* v, C m, C* out, int64_t cols) {
  return RowSum<C>(cols, [&](int64_t j) {
    const C e = Exp(v[j] - m);
    out[j] = e;
    return e;
  });
}

template <typename C>
void ScaleRow(C* v, C factor, int64_t cols) {
#pragma GCC ivdep
  for (int64_t j = 0; j < cols; ++j) v[j] *= factor;
}

template <typename S, bool kF16c>
void SoftmaxRows(const void* xv, void* yv, int64_t cols, bool log,
                 int64_t begin, int64_t end) {
  using Io = RowIo<S, kF16c>;
  using C = typename Io::C;
  using T = typename Io::T;
  for (int64_t r = begin; r < end; ++r) {
    const C* x = RowIn<Io>(static_cast<const T*>(xv) + r * cols, cols, 0);
    T* y = static_cast<T*>(yv) + r * cols;
    C* out = RowOut<Io>(y, cols, 0);  // may be x: element for element
    const C m = RowMax<C>(x, cols, NegInf<C>());
    if (log) {
      const C s = RowSum<C>(cols, [&](int64_t j) { return Exp(x[j] - m); });
      const C lse = m + softmax::Log(s);
#pragma GCC ivdep
      for (int64_t j = 0; j < cols; ++j) out[j] = x[j] - lse;
    } else {
      ScaleRow<C>(out, C(1) / ExpSum<C>(x, m, out, cols), cols);
    }
    Store<Io>(out, y, cols);
  }
}

template <typename S, bool kF16c>
void SoftmaxGradRows(const void* gv, const void* yv, void* dxv, int64_t cols,
                     bool log, float scale, int64_t begin, int64_t end) {
  using Io = RowIo<S, kF16c>;
  using C = typename Io::C;
  using T = typename Io::T;
  const C sc = static_cast<C>(scale);
  if constexpr (Io::kInline && !Io::kWide) {
    // bfloat16: two passes over the stored rows, none over widened copies.
    for (int64_t r = begin; r < end; ++r) {
      const T* g = static_cast<const T*>(gv) + r * cols;
      const T* y = static_cast<const T*>(yv) + r * cols;
      T* dx = static_cast<T*>(dxv) + r * cols;  // may be g or y
      if (log) {
        const C sum_g = RowSum<C>(cols, [&](int64_t j) { return S::Load(g[j]); });
#pragma GCC ivdep
        for (int64_t j = 0; j < cols; ++j) {
          dx[j] = S::Store(
              softmax::LogSoftmaxGrad<C>(S::Load(g[j]), S::Load(y[j]), sum_g));
        }
      } else {
        const C dot = RowSum<C>(
            cols, [&](int64_t j) { return S::Load(g[j]) * S::Load(y[j]); });
#pragma GCC ivdep
        for (int64_t j = 0; j < cols; ++j) {
          dx[j] = S::Store(softmax::SoftmaxGrad<C>(S::Load(g[j]), S::Load(y[j]),
                                                   dot, sc));
        }
      }
    }
    return;
  }
  for (int64_t r = begin; r < end; ++r) {
    const C* g = RowIn<Io>(static_cast<const T*>(gv) + r * cols, cols, 0);
    const C* y = RowIn<Io>(static_cast<const T*>(yv) + r * cols, cols, 1);
    T* dx = static_cast<T*>(dxv) + r * cols;
    C* out = RowOut<Io>(dx, cols, 0);  // may be g or y: element for element
    if (log) {
      const C sum_g = RowSum<C>(cols, [&](int64_t j) { return g[j]; });
#pragma GCC ivdep
      for (int64_t j = 0; j < cols; ++j) {
        out[j] = softmax::LogSoftmaxGrad<C>(g[j], y[j], sum_g);
      }
    } else {
      const C dot = RowSum<C>(cols, [&](int64_t j) { return g[j] * y[j]; });
#pragma GCC ivdep
      for (int64_t j = 0; j < cols; ++j) {
        out[j] = softmax::SoftmaxGrad<C>(g[j], y[j], dot, sc);
      }
    }
    Store<Io>(out, dx, cols);
  }
}

// Row r's kept positions: [0, kept_end) (causal: up to the query), of which
// those whose mask byte is 0 are masked (mask: null when there is none, or
// every byte the same when it is broadcast along the row).
struct RowMask {
  const uint8_t* mask;
  int64_t kept_end;
  bool row_masked;  // the mask is constant along the row, and false
};

RowMask RowMaskOf(const MaskLayout& layout, int64_t r, int64_t cols) {
  RowMask m{nullptr, cols, false};
  if (layout.causal) {
    const int64_t q = CausalQuery(layout, r);
    m.kept_end = q + 1 < cols ? q + 1 : cols;
  }
  if (layout.mask != nullptr) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(layout.mask) +
                       MaskRowOffset(layout, r);
    if (layout.col_stride == 0) {
      m.row_masked = p[0] == 0;
    } else {
      m.mask = p;
    }
  }
  return m;
}

template <typename S, bool kF16c>
void MaskedSoftmaxRows(const void* xv, const MaskLayout& layout, float scale,
                       void* yv, int64_t cols, int64_t begin, int64_t end) {
  using Io = RowIo<S, kF16c>;
  using C = typename Io::C;
  using T = typename Io::T;
  const C sc = static_cast<C>(scale);
  for (int64_t r = begin; r < end; ++r) {
    T* y = static_cast<T*>(yv) + r * cols;
    const RowMask m = RowMaskOf(layout, r, cols);
    C* v = RowOut<Io>(y, cols, 0);
    if (m.row_masked) {  // nothing kept: zeros, as Keras's Softmax
      for (int64_t j = 0; j < cols; ++j) v[j] = C(0);
      Store<Io>(v, y, cols);
      continue;
    }
    // v = scale x where kept, -inf elsewhere (v may be x: in place), x read
    // from its storage where that is cheap, else from a widened row.
    const T* xs = static_cast<const T*>(xv) + r * cols;
    const int64_t kept_end = m.kept_end;
    const auto fill = [&](const auto& x) {
      if (m.mask != nullptr) {
        const uint8_t* keep = m.mask;
#pragma GCC ivdep
        for (int64_t j = 0; j < kept_end; ++j) {
          // x read whatever the mask says: a select GCC vectorises. Read
          // only where kept, it is a conditional load, which AVX2 has for
          // 32-bit lanes only (bfloat16's loop stayed scalar: 2x the time).
          const C scaled = sc * x(j);
          v[j] = keep[j] != 0 ? scaled : NegInf<C>();
        }
      } else {
#pragma GCC ivdep
        for (int64_t j = 0; j < kept_end; ++j) v[j] = sc * x(j);
      }
    };
    if constexpr (Io::kInline) {
      fill([&](int64_t j) { return S::Load(xs[j]); });
    } else {
      const C* x = RowIn<Io>(xs, cols, 0);
      fill([&](int64_t j) { return x[j]; });
    }
    for (int64_t j = kept_end; j < cols; ++j) v[j] = NegInf<C>();
    const C mx = RowMax<C>(v, cols, NegInf<C>());
    if (mx == NegInf<C>()) {
      // Nothing kept above -inf: zeros if some position is masked (Keras),
      // else every logit is -inf and the row is NaN (TensorFlow's softmax).
      bool any_masked = kept_end < cols;
      for (int64_t j = 0; m.mask != nullptr && j < kept_end; ++j) {
        any_masked |= m.mask[j] == 0;
      }
      if (any_masked) {
        for (int64_t j = 0; j < cols; ++j) v[j] = C(0);
        Store<Io>(v, y, cols);
        continue;
      }
    }
    const C s = ExpSum<C>(v, mx, v, cols);
    if constexpr (Io::kInline && !Io::kWide) {
      if (s < INFINITY) {  // bfloat16: the scaling in the rounding pass
        const C inv = C(1) / s;
#pragma GCC ivdep
        for (int64_t j = 0; j < cols; ++j) y[j] = S::Store(v[j] * inv);
        continue;
      }
    }
    ScaleRow<C>(v, C(1) / s, cols);
    if (!(s < INFINITY)) {
      // A NaN row (a kept NaN or +inf logit): the masked positions are still
      // 0, as Keras's Softmax gives (0 * NaN is not).
      for (int64_t j = kept_end; j < cols; ++j) v[j] = C(0);
      for (int64_t j = 0; m.mask != nullptr && j < kept_end; ++j) {
        if (m.mask[j] == 0) v[j] = C(0);
      }
    }
    Store<Io>(v, y, cols);
  }
}

int64_t LabelOf(const void* labels, bool labels64, int64_t r) {
  return labels64 ? static_cast<const int64_t*>(labels)[r]
                  : static_cast<const int32_t*>(labels)[r];
}

template <typename S, bool kF16c>
void CrossEntropyRows(const void* xv, const void* labels, bool labels64,
                      void* lossv, void* dxv, int64_t cols,
                      const CrossEntropyParams& p, int64_t begin,
                      int64_t end) {
  using Io = RowIo<S, kF16c>;
  using C = typename Io::C;
  using T = typename Io::T;
  const C eps = p.label_smoothing, z = p.z_loss, classes = C(cols);
  for (int64_t r = begin; r < end; ++r) {
    T* dx = static_cast<T*>(dxv) + r * cols;
    T* loss = static_cast<T*>(lossv) + r;
    const int64_t t = LabelOf(labels, labels64, r);
    if (t == p.ignore_index || t < 0 || t >= cols) {
      const T fill = S::Store(t == p.ignore_index ? C(0) : C(NAN));
      *loss = fill;
      for (int64_t j = 0; j < cols; ++j) dx[j] = fill;
      continue;
    }
    const C* x = RowIn<Io>(static_cast<const T*>(xv) + r * cols, cols, 0);
    C* out = RowOut<Io>(dx, cols, 0);  // may be x: read x_label first
    const C x_label = x[t];
    const C x_sum =
        eps > C(0) ? RowSum<C>(cols, [&](int64_t j) { return x[j]; }) : C(0);
    const C mx = RowMax<C>(x, cols, NegInf<C>());
    const C s = ExpSum<C>(x, mx, out, cols);
    const C lse = mx + softmax::Log(s);
    *loss = S::Store(
        softmax::CrossEntropyLoss<C>(lse, x_label, x_sum, eps, classes, z));
    const C inv = C(1) / s;
    const C e_label = out[t];
#pragma GCC ivdep
    for (int64_t j = 0; j < cols; ++j) {
      out[j] = softmax::CrossEntropyGrad<C>(out[j] * inv, false, lse, eps,
                                            classes, z);
    }
    out[t] = softmax::CrossEntropyGrad<C>(e_label * inv, true, lse, eps,
                                          classes, z);
    Store<Io>(out, dx, cols);
  }
}

#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                      \
  TF_OPS_ISA_ENTRY(TARGET) void Softmax##Suffix(            \
      Dtype dtype, const void* x, void* y, int64_t cols, bool log,           \
      int64_t begin, int64_t end) {                                          \
    cpu_storage::WithStorage(dtype, [&](auto s) {                            \
      SoftmaxRows<decltype(s), F16C>(x, y, cols, log, begin, end);           \
    });                                                                      \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void SoftmaxGrad##Suffix(        \
      Dtype dtype, const void* g, const void* y, void* dx, int64_t cols,     \
      bool log, float scale, int64_t begin, int64_t end) {                   \
    cpu_storage::WithStorage(dtype, [&](auto s) {                            \
      SoftmaxGradRows<decltype(s), F16C>(g, y, dx, cols, log, scale, begin,  \
                                         end);                               \
    });                                                                      \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void MaskedSoftmax##Suffix(      \
      Dtype dtype, const void* x, const MaskLayout& mask, float scale,       \
      void* y, int64_t cols, int64_t begin, int64_t end) {                   \
    cpu_storage::WithStorage(dtype, [&](auto s) {                            \
      MaskedSoftmaxRows<decltype(s), F16C>(x, mask, scale, y, cols, begin,   \
                                           end);                             \
    });                                                                      \
  }                                                                          \
  TF_OPS_ISA_ENTRY(TARGET) void CrossEntropy##Suffix(       \
      Dtype dtype, const void* logits, const void* labels, bool labels64,    \
      void* loss, void* dlogits, int64_t cols,                               \
      const CrossEntropyParams& params, int64_t begin, int64_t end) {        \
    cpu_storage::WithStorage(dtype, [&](auto s) {                            \
      CrossEntropyRows<decltype(s), F16C>(logits, labels, labels64, loss,    \
                                          dlogits, cols, params, begin, end);\
    });                                                                      \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

void CpuSoftmax(Dtype dtype, const void* x, void* y, int64_t cols, bool log,
                int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Softmax, dtype, x, y, cols, log, begin, end)
}

void CpuSoftmaxGrad(Dtype dtype, const void* g, const void* y, void* dx,
                    int64_t cols, bool log, float scale, int64_t begin,
                    int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(SoftmaxGrad, dtype, g, y, dx, cols, log, scale,
                          begin, end)
}

void CpuMaskedSoftmax(Dtype dtype, const void* x, const MaskLayout& mask,
                      float scale, void* y, int64_t cols, int64_t begin,
                      int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(MaskedSoftmax, dtype, x, mask, scale, y, cols,
                          begin, end)
}

void CpuSparseCrossEntropy(Dtype dtype, const void* logits, const void* labels,
                           bool labels64, void* loss, void* dlogits,
                           int64_t cols, const CrossEntropyParams& params,
                           int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(CrossEntropy, dtype, logits, labels, labels64, loss,
                          dlogits, cols, params, begin, end)
}

}  // namespace tf_ops

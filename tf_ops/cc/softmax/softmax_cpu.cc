// The softmax family's CPU loops (softmax_cpu.h). Each row is read in 16
// lanes (element j in lane j % 16) whose partial max and sums are combined in
// a fixed order: the loops vectorise without reassociating, and a row's bits
// never depend on the thread count. Half and bfloat16 are widened to float as
// they are read and rounded once when written.

#include "tf_ops/cc/softmax/softmax_cpu.h"

#include <cstdint>
#include <type_traits>
#include <vector>

#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/softmax/softmax_math.h"

namespace tf_ops {
namespace {

using softmax::CrossEntropyParams;
using softmax::NegInf;

constexpr int kLanes = 16;

// max over j in [0, cols) of value(j) (NaN ignored: it reaches the sum).
template <typename C, typename Value>
C RowMax(int64_t cols, const Value& value) {
  C lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = NegInf<C>();
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const C v = value(j + l);
      lanes[l] = v > lanes[l] ? v : lanes[l];
    }
  }
  for (int l = 0; j + l < cols; ++l) {
    const C v = value(j + l);
    lanes[l] = v > lanes[l] ? v : lanes[l];
  }
  C m = lanes[0];
  for (int l = 1; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
}

// sum over j in [0, cols) of term(j), in lanes added in a fixed order.
template <typename C, typename Term>
C RowSum(int64_t cols, const Term& term) {
  C lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  for (int l = 0; j + l < cols; ++l) lanes[l] += term(j + l);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  }
  return lanes[0];
}

// float for half, bfloat16 and float; double for double.
template <typename S>
using Compute = ComputeType<typename S::Stored>;

// A row's values in the compute type, reused across the passes so that each
// exponential is computed once and every pass is a plain loop that vectorises.
template <typename C>
C* RowBuffer(int64_t cols) {
  thread_local std::vector<C> buffer;
  if (static_cast<int64_t>(buffer.size()) < cols) buffer.resize(cols);
  return buffer.data();
}

// One row of softmax (or log_softmax) of the values v[0, cols) (masked ones
// -inf); v is overwritten. write(j, y) stores. Returns false, writing
// nothing, when the row's max is -inf and zeros_if_empty holds.
template <typename C, typename Write>
bool SoftmaxRow(C* v, int64_t cols, bool log, bool zeros_if_empty,
                const Write& write) {
  const C m = RowMax<C>(cols, [&](int64_t j) { return v[j]; });
  if (zeros_if_empty && m == NegInf<C>()) return false;
  const C s = RowSum<C>(cols, [&](int64_t j) {
    const C e = Exp(v[j] - m);
    if (!log) v[j] = e;
    return e;
  });
  if (log) {
    const C lse = m + softmax::Log(s);
    for (int64_t j = 0; j < cols; ++j) write(j, v[j] - lse);
  } else {
    const C inv = C(1) / s;
    // Masked rows: a masked position (e = 0) stays 0 even in a NaN row.
    for (int64_t j = 0; j < cols; ++j) {
      write(j, zeros_if_empty && v[j] == C(0) ? C(0) : v[j] * inv);
    }
  }
  return true;
}

template <typename S>
void Softmax(const void* xv, void* yv, int64_t cols, bool log, int64_t begin,
             int64_t end) {
  using C = Compute<S>;
  using T = typename S::Stored;
  C* v = RowBuffer<C>(cols);
  for (int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(xv) + r * cols;
    T* y = static_cast<T*>(yv) + r * cols;
    for (int64_t j = 0; j < cols; ++j) v[j] = static_cast<C>(S::Load(x[j]));
    SoftmaxRow<C>(v, cols, log, false,
                  [&](int64_t j, C value) { y[j] = S::Store(value); });
  }
}

template <typename S>
void SoftmaxGrad(const void* gv, const void* yv, void* dxv, int64_t cols,
                 bool log, float scale, int64_t begin, int64_t end) {
  using C = Compute<S>;
  using T = typename S::Stored;
  for (int64_t r = begin; r < end; ++r) {
    const T* g = static_cast<const T*>(gv) + r * cols;
    const T* y = static_cast<const T*>(yv) + r * cols;
    T* dx = static_cast<T*>(dxv) + r * cols;
    if (log) {
      const C sum_g = RowSum<C>(cols, [&](int64_t j) { return C(S::Load(g[j])); });
      for (int64_t j = 0; j < cols; ++j) {
        dx[j] = S::Store(softmax::LogSoftmaxGrad<C>(S::Load(g[j]),
                                                    S::Load(y[j]), sum_g));
      }
    } else {
      const C dot = RowSum<C>(cols, [&](int64_t j) {
        return C(S::Load(g[j])) * C(S::Load(y[j]));
      });
      for (int64_t j = 0; j < cols; ++j) {
        dx[j] = S::Store(softmax::SoftmaxGrad<C>(S::Load(g[j]), S::Load(y[j]),
                                                 dot, C(scale)));
      }
    }
  }
}

template <typename S>
void MaskedSoftmax(const void* xv, const MaskLayout& mask, float scale,
                   void* yv, int64_t cols, int64_t begin, int64_t end) {
  using C = Compute<S>;
  using T = typename S::Stored;
  const C sc = static_cast<C>(scale);
  C* v = RowBuffer<C>(cols);
  for (int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(xv) + r * cols;
    T* y = static_cast<T*>(yv) + r * cols;
    const bool* m = mask.mask == nullptr ? nullptr
                                         : mask.mask + MaskRowOffset(mask, r);
    // Kept columns: mask (if any) and k <= q (if causal); masked ones -inf.
    const int64_t last = mask.causal ? CausalQuery(mask, r) : cols - 1;
    const int64_t kept_end = last + 1 < cols ? last + 1 : cols;
    bool any_masked = kept_end < cols;
    for (int64_t j = 0; j < kept_end; ++j) v[j] = sc * C(S::Load(x[j]));
    for (int64_t j = kept_end; j < cols; ++j) v[j] = NegInf<C>();
    if (m != nullptr) {
      const int64_t cs = mask.col_stride;
      for (int64_t j = 0; j < kept_end; ++j) {
        const bool keep = m[j * cs];
        any_masked |= !keep;
        v[j] = keep ? v[j] : NegInf<C>();
      }
    }
    // Nothing kept (or only -inf): Keras's Softmax gives zeros.
    const bool done = SoftmaxRow<C>(v, cols, false, any_masked,
                                    [&](int64_t j, C p) { y[j] = S::Store(p); });
    if (!done) {
      for (int64_t j = 0; j < cols; ++j) y[j] = S::Store(C(0));
    }
  }
}

int64_t LabelOf(const void* labels, bool labels64, int64_t r) {
  return labels64 ? static_cast<const int64_t*>(labels)[r]
                  : static_cast<const int32_t*>(labels)[r];
}

template <typename S>
void SparseCrossEntropy(const void* xv, const void* labels, bool labels64,
                        void* lossv, void* dxv, int64_t cols,
                        const CrossEntropyParams& p, int64_t begin,
                        int64_t end) {
  using C = Compute<S>;
  using T = typename S::Stored;
  const C eps = p.label_smoothing, z = p.z_loss, classes = C(cols);
  for (int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(xv) + r * cols;
    T* dx = static_cast<T*>(dxv) + r * cols;
    T* loss = static_cast<T*>(lossv) + r;
    const int64_t t = LabelOf(labels, labels64, r);
    if (t == p.ignore_index || t < 0 || t >= cols) {
      const C fill = t == p.ignore_index ? C(0) : C(NAN);
      *loss = S::Store(fill);
      for (int64_t j = 0; j < cols; ++j) dx[j] = S::Store(fill);
      continue;
    }
    // The row widened once; e^(x - max) then replaces it (one exponential
    // per element), and the label's column is corrected after the loop.
    C* v = RowBuffer<C>(cols);
    for (int64_t j = 0; j < cols; ++j) v[j] = C(S::Load(x[j]));
    const C x_label = v[t];
    const C x_sum =
        eps > C(0) ? RowSum<C>(cols, [&](int64_t j) { return v[j]; }) : C(0);
    const C mx = RowMax<C>(cols, [&](int64_t j) { return v[j]; });
    const C s = RowSum<C>(cols, [&](int64_t j) {
      const C e = Exp(v[j] - mx);
      v[j] = e;
      return e;
    });
    const C lse = mx + softmax::Log(s);
    *loss = S::Store(
        softmax::CrossEntropyLoss<C>(lse, x_label, x_sum, eps, classes, z));
    const C inv = C(1) / s;
    for (int64_t j = 0; j < cols; ++j) {
      dx[j] = S::Store(softmax::CrossEntropyGrad<C>(v[j] * inv, false, lse, eps,
                                                    classes, z));
    }
    dx[t] = S::Store(softmax::CrossEntropyGrad<C>(v[t] * inv, true, lse, eps,
                                                  classes, z));
  }
}

}  // namespace

void CpuSoftmax(Dtype dtype, const void* x, void* y, int64_t cols, bool log,
                int64_t begin, int64_t end) {
  cpu_storage::WithStorage(dtype, [&](auto s) {
    Softmax<decltype(s)>(x, y, cols, log, begin, end);
  });
}

void CpuSoftmaxGrad(Dtype dtype, const void* g, const void* y, void* dx,
                    int64_t cols, bool log, float scale, int64_t begin,
                    int64_t end) {
  cpu_storage::WithStorage(dtype, [&](auto s) {
    SoftmaxGrad<decltype(s)>(g, y, dx, cols, log, scale, begin, end);
  });
}

void CpuMaskedSoftmax(Dtype dtype, const void* x, const MaskLayout& mask,
                      float scale, void* y, int64_t cols, int64_t begin,
                      int64_t end) {
  cpu_storage::WithStorage(dtype, [&](auto s) {
    MaskedSoftmax<decltype(s)>(x, mask, scale, y, cols, begin, end);
  });
}

void CpuSparseCrossEntropy(Dtype dtype, const void* logits, const void* labels,
                           bool labels64, void* loss, void* dlogits,
                           int64_t cols, const CrossEntropyParams& params,
                           int64_t begin, int64_t end) {
  cpu_storage::WithStorage(dtype, [&](auto s) {
    SparseCrossEntropy<decltype(s)>(logits, labels, labels64, loss, dlogits,
                                    cols, params, begin, end);
  });
}

}  // namespace tf_ops

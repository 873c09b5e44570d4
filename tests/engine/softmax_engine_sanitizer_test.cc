// Memory-safety and value test of the softmax family's CPU engine
// (softmax_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like engine_sanitizer_test.cc (`make
// engine-test` builds and runs it).
//
// Heap buffers of exactly the size each call may touch (ASan reports any
// access past either end), row lengths around the 16 lanes, four dtypes (the
// 16-bit ones as raw bits through narrow_float.h), in odd shards and in place:
//   - softmax and log_softmax against a double reference, their gradients;
//   - the scaled masked softmax with masks broadcast as [B, 1, Q, K] and
//     [K], causal, fully masked rows (zeros);
//   - the sparse cross-entropy with smoothing, z-loss, ignored and bad labels;
//   - specials: logits near +-FLT_MAX, -inf (probability 0), NaN (the row).
// Exit status: 0 when every check passes, 1 otherwise.

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cc/softmax/softmax_cpu.h"

namespace tf_ops {
namespace {

int failures = 0;
int checks = 0;

void Check(bool ok, const char* what, Dtype dtype, int64_t cols, int64_t at,
           double got, double want) {
  ++checks;
  if (ok) return;
  ++failures;
  if (failures <= 20) {
    std::printf("FAIL %s dtype=%d cols=%lld at=%lld got=%.9g want=%.9g\n", what,
                static_cast<int>(dtype), static_cast<long long>(cols),
                static_cast<long long>(at), got, want);
  }
}

// Storage of one dtype as bytes, values read and written as double.
struct Buf {
  Dtype dtype;
  int64_t n;
  std::unique_ptr<unsigned char[]> bytes;
  Buf(Dtype d, int64_t count) : dtype(d), n(count) {
    bytes.reset(count == 0 ? nullptr : new unsigned char[count * Size()]);
  }
  int Size() const {
    return dtype == Dtype::kDouble ? 8 : dtype == Dtype::kFloat ? 4 : 2;
  }
  void* data() { return bytes.get(); }
  double Get(int64_t i) const {
    const unsigned char* p = bytes.get() + i * Size();
    switch (dtype) {
      case Dtype::kDouble: { double v; std::memcpy(&v, p, 8); return v; }
      case Dtype::kFloat: { float v; std::memcpy(&v, p, 4); return v; }
      case Dtype::kHalf: { uint16_t v; std::memcpy(&v, p, 2); return narrow_float::HalfToFloat(v); }
      case Dtype::kBFloat16: { uint16_t v; std::memcpy(&v, p, 2); return narrow_float::BFloat16ToFloat(v); }
    }
    return 0;
  }
  void Set(int64_t i, double x) {
    unsigned char* p = bytes.get() + i * Size();
    switch (dtype) {
      case Dtype::kDouble: std::memcpy(p, &x, 8); break;
      case Dtype::kFloat: { float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
      case Dtype::kHalf: { uint16_t v = narrow_float::FloatToHalf(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
      case Dtype::kBFloat16: { uint16_t v = narrow_float::FloatToBFloat16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    }
  }
};

double Tol(Dtype d) {
  return d == Dtype::kDouble ? 1e-12 : d == Dtype::kFloat ? 2e-6
         : d == Dtype::kHalf ? 2e-3 : 1.6e-2;
}

// want as the dtype stores it (a result beyond its range is infinite there).
double Rounded(Dtype d, double want) {
  Buf b(d, 1);
  b.Set(0, want);
  return b.Get(0);
}

bool Close(double got, double want, Dtype d) {
  want = Rounded(d, want);
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= Tol(d) * (1.0 + std::fabs(want));
}

// Runs fn(begin, end) over rows in shards of 1, 2, 5, ... rows.
template <typename Fn>
void InShards(int64_t rows, const Fn& fn) {
  int64_t b = 0, step = 1;
  while (b < rows) {
    const int64_t e = b + step < rows ? b + step : rows;
    fn(b, e);
    b = e;
    step = step * 2 + 1;
  }
}

void RefSoftmax(const std::vector<double>& x, int64_t cols, int64_t r, bool log,
                std::vector<double>* y) {
  double m = -INFINITY;
  for (int64_t j = 0; j < cols; ++j) m = std::fmax(m, x[r * cols + j]);
  double s = 0;
  for (int64_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - m);
  for (int64_t j = 0; j < cols; ++j) {
    const double v = x[r * cols + j];
    (*y)[r * cols + j] = log ? v - m - std::log(s) : std::exp(v - m) / s;
  }
  bool nan = false;
  for (int64_t j = 0; j < cols; ++j) nan |= std::isnan(x[r * cols + j]);
  if (nan) for (int64_t j = 0; j < cols; ++j) (*y)[r * cols + j] = NAN;
}

void TestSoftmax(Dtype d, int64_t rows, int64_t cols, std::mt19937* rng,
                 bool specials) {
  const int64_t n = rows * cols;
  Buf x(d, n), y(d, n), g(d, n), dx(d, n);
  std::uniform_real_distribution<double> u(-6, 6);
  for (int64_t i = 0; i < n; ++i) {
    x.Set(i, u(*rng));
    g.Set(i, u(*rng));
  }
  if (specials && cols >= 3) {
    const double big = d == Dtype::kHalf ? 65504.0 : d == Dtype::kDouble ? DBL_MAX : FLT_MAX;
    x.Set(0, big);
    x.Set(1, -big);
    x.Set(2, -INFINITY);
    if (rows > 1) x.Set(cols + 1, NAN);
  }
  std::vector<double> xv(n), ref(n);
  for (int64_t i = 0; i < n; ++i) xv[i] = x.Get(i);
  for (bool log : {false, true}) {
    for (int64_t r = 0; r < rows; ++r) RefSoftmax(xv, cols, r, log, &ref);
    InShards(rows, [&](int64_t b, int64_t e) {
      CpuSoftmax(d, x.data(), y.data(), cols, log, b, e);
    });
    for (int64_t i = 0; i < n; ++i) {
      Check(Close(y.Get(i), ref[i], d), log ? "log_softmax" : "softmax", d, cols, i,
            y.Get(i), ref[i]);
    }
    // The gradient against the double formula at the (stored) outputs.
    InShards(rows, [&](int64_t b, int64_t e) {
      CpuSoftmaxGrad(d, g.data(), y.data(), dx.data(), cols, log, 0.5f, b, e);
    });
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0, mag = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double gj = g.Get(r * cols + j), yj = y.Get(r * cols + j);
        acc += log ? gj : gj * yj;
        mag += std::fabs(log ? gj : gj * yj);
      }
      for (int64_t j = 0; j < cols; ++j) {
        const double gj = g.Get(r * cols + j), yj = y.Get(r * cols + j);
        const double want = log ? gj - std::exp(yj) * acc : 0.5 * yj * (gj - acc);
        const double got = dx.Get(r * cols + j);
        const bool ok = std::isnan(want) ? std::isnan(got)
                        : std::fabs(got - want) <= Tol(d) * (1 + std::fabs(want) + mag * (log ? std::exp(yj) : 1));
        Check(ok, log ? "log_softmax_grad" : "softmax_grad", d, cols, r * cols + j, got, want);
      }
    }
    // In place gives the same bits, forward and grad (dx in g's buffer).
    Buf z(d, n);
    if (n) std::memcpy(z.data(), x.data(), n * x.Size());
    CpuSoftmax(d, z.data(), z.data(), cols, log, 0, rows);
    Check(n == 0 || std::memcmp(z.data(), y.data(), n * y.Size()) == 0, "in place",
          d, cols, 0, 0, 0);
    if (n) std::memcpy(z.data(), g.data(), n * g.Size());
    CpuSoftmaxGrad(d, z.data(), y.data(), z.data(), cols, log, 0.5f, 0, rows);
    Check(n == 0 || std::memcmp(z.data(), dx.data(), n * dx.Size()) == 0,
          "grad in place", d, cols, 0, 0, 0);
  }
}

// [B, H, Q, K] logits, masks [B, 1, Q, K] (bits) and causal.
void TestMasked(Dtype d, int64_t B, int64_t H, int64_t Q, int64_t K,
                std::mt19937* rng) {
  const int64_t rows = B * H * Q, n = rows * K;
  Buf x(d, n), y(d, n);
  std::uniform_real_distribution<double> u(-5, 5);
  for (int64_t i = 0; i < n; ++i) x.Set(i, u(*rng));
  const int64_t mn = B * Q * K;
  std::unique_ptr<bool[]> mask(new bool[mn]);
  std::bernoulli_distribution keep(0.6);
  for (int64_t i = 0; i < mn; ++i) mask[i] = keep(*rng);
  for (int64_t j = 0; j < K; ++j) mask[j] = false;  // (b 0, q 0): fully masked
  const float scale = 0.37f;
  // The [B, 1, Q, K] mask broadcast over the heads.
  auto layout = [&](bool causal) {
    MaskLayout m;
    m.mask = mask.get();
    m.rank = 3;
    m.dims[0] = B; m.dims[1] = H; m.dims[2] = Q;
    m.strides[0] = Q * K; m.strides[1] = 0; m.strides[2] = K;
    m.col_stride = 1;
    m.causal = causal;
    return m;
  };
  for (bool causal : {false, true}) {
    const MaskLayout m = layout(causal);
    InShards(rows, [&](int64_t b, int64_t e) {
      CpuMaskedSoftmax(d, x.data(), m, scale, y.data(), K, b, e);
    });
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (H * Q), q = r % Q;
      const bool* mr = mask.get() + b * Q * K + q * K;
      double mx = -INFINITY, s = 0;
      auto kept = [&](int64_t j) { return mr[j] && (!causal || j <= q); };
      for (int64_t j = 0; j < K; ++j) if (kept(j)) mx = std::fmax(mx, scale * x.Get(r * K + j));
      for (int64_t j = 0; j < K; ++j) if (kept(j)) s += std::exp(scale * x.Get(r * K + j) - mx);
      for (int64_t j = 0; j < K; ++j) {
        const double want = kept(j) ? std::exp(scale * x.Get(r * K + j) - mx) / s : 0.0;
        Check(Close(y.Get(r * K + j), want, d), causal ? "causal masked" : "masked", d, K,
              r * K + j, y.Get(r * K + j), want);
      }
    }
  }
  // In place (y in x's buffer) gives the same bits.
  {
    const MaskLayout m = layout(false);
    CpuMaskedSoftmax(d, x.data(), m, scale, y.data(), K, 0, rows);
    Buf z(d, n);
    std::memcpy(z.data(), x.data(), n * x.Size());
    CpuMaskedSoftmax(d, z.data(), m, scale, z.data(), K, 0, rows);
    Check(std::memcmp(z.data(), y.data(), n * y.Size()) == 0, "masked in place",
          d, K, 0, 0, 0);
  }
  // A mask constant along the rows ([B, 1, Q, 1]: col_stride 0): rows whose
  // bit is false are zeros, the others plain softmax.
  {
    MaskLayout m;
    m.mask = mask.get();
    m.rank = 3;
    m.dims[0] = B; m.dims[1] = H; m.dims[2] = Q;
    m.strides[0] = Q; m.strides[1] = 0; m.strides[2] = 1;
    m.col_stride = 0;
    CpuMaskedSoftmax(d, x.data(), m, 1.0f, y.data(), K, 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      const bool row_kept = mask[(r / (H * Q)) * Q + r % Q];
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < K; ++j) mx = std::fmax(mx, x.Get(r * K + j));
      for (int64_t j = 0; j < K; ++j) s += std::exp(x.Get(r * K + j) - mx);
      for (int64_t j = 0; j < K; ++j) {
        const double want = row_kept ? std::exp(x.Get(r * K + j) - mx) / s : 0.0;
        Check(Close(y.Get(r * K + j), want, d), "row mask", d, K, r * K + j,
              y.Get(r * K + j), want);
      }
    }
  }
  // A kept NaN: the row's kept positions are NaN, its masked ones 0 (Keras's
  // Softmax); a row whose every logit is -inf and none masked is NaN.
  {
    Buf xs(d, K), ys(d, K);
    std::unique_ptr<bool[]> mk(new bool[K]);
    for (int64_t j = 0; j < K; ++j) {
      xs.Set(j, u(*rng));
      mk[j] = j % 3 != 0;
    }
    xs.Set(1, NAN);
    MaskLayout m;
    m.mask = mk.get();
    m.col_stride = 1;
    CpuMaskedSoftmax(d, xs.data(), m, 1.0f, ys.data(), K, 0, 1);
    for (int64_t j = 0; j < K; ++j) {
      const bool ok = mk[j] ? std::isnan(ys.Get(j)) : ys.Get(j) == 0;
      Check(ok, "masked NaN row", d, K, j, ys.Get(j), mk[j] ? NAN : 0.0);
    }
    for (int64_t j = 0; j < K; ++j) xs.Set(j, -INFINITY);
    MaskLayout none;
    CpuMaskedSoftmax(d, xs.data(), none, 1.0f, ys.data(), K, 0, 1);
    for (int64_t j = 0; j < K; ++j) {
      Check(std::isnan(ys.Get(j)), "all -inf row", d, K, j, ys.Get(j), NAN);
    }
  }
  // Causal alone, no mask tensor.
  MaskLayout c;
  c.rank = 3;
  c.dims[0] = B; c.dims[1] = H; c.dims[2] = Q;
  c.causal = true;
  CpuMaskedSoftmax(d, x.data(), c, 1.0f, y.data(), K, 0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q = r % Q;
    for (int64_t j = q + 1; j < K; ++j) Check(y.Get(r * K + j) == 0, "causal zero", d, K, j, y.Get(r * K + j), 0);
  }
}

void TestCrossEntropy(Dtype d, int64_t rows, int64_t cols, bool labels64,
                      std::mt19937* rng) {
  const int64_t n = rows * cols;
  Buf x(d, n), loss(d, rows), dx(d, n);
  std::uniform_real_distribution<double> u(-4, 4);
  for (int64_t i = 0; i < n; ++i) x.Set(i, u(*rng));
  std::vector<int64_t> labels(rows);
  std::uniform_int_distribution<int64_t> lab(0, cols - 1);
  for (int64_t r = 0; r < rows; ++r) labels[r] = lab(*rng);
  if (rows > 1) labels[1] = -7;  // ignored
  std::unique_ptr<int64_t[]> l64(new int64_t[rows]);
  std::unique_ptr<int32_t[]> l32(new int32_t[rows]);
  for (int64_t r = 0; r < rows; ++r) { l64[r] = labels[r]; l32[r] = static_cast<int32_t>(labels[r]); }
  const void* lp = labels64 ? static_cast<const void*>(l64.get()) : l32.get();
  softmax::CrossEntropyParams p;
  p.label_smoothing = 0.1f;
  p.ignore_index = -7;
  p.z_loss = 1e-3f;
  Check(FirstBadLabel(lp, labels64, rows, cols, -7) == -1, "no bad label", d, cols, 0, 0, 0);
  InShards(rows, [&](int64_t b, int64_t e) {
    CpuSparseCrossEntropy(d, x.data(), lp, labels64, loss.data(), dx.data(), cols, p, b, e);
  });
  const double eps = 0.1f, z = 1e-3f;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = labels[r];
    if (t == -7) {
      Check(loss.Get(r) == 0, "ignored loss", d, cols, r, loss.Get(r), 0);
      for (int64_t j = 0; j < cols; ++j) Check(dx.Get(r * cols + j) == 0, "ignored dx", d, cols, j, 0, 0);
      continue;
    }
    double mx = -INFINITY, s = 0, sum = 0;
    for (int64_t j = 0; j < cols; ++j) mx = std::fmax(mx, x.Get(r * cols + j));
    for (int64_t j = 0; j < cols; ++j) { s += std::exp(x.Get(r * cols + j) - mx); sum += x.Get(r * cols + j); }
    const double lse = mx + std::log(s);
    const double want = lse - (1 - eps) * x.Get(r * cols + t) - eps / cols * sum + z * lse * lse;
    Check(std::fabs(loss.Get(r) - want) <= Tol(d) * 4 * (1 + std::fabs(want)), "ce loss", d, cols, r, loss.Get(r), want);
    for (int64_t j = 0; j < cols; ++j) {
      const double pj = std::exp(x.Get(r * cols + j) - lse);
      const double wj = pj * (1 + 2 * z * lse) - ((j == t) ? 1 - eps : 0) - eps / cols;
      Check(std::fabs(dx.Get(r * cols + j) - wj) <= Tol(d) * 2, "ce dx", d, cols, j, dx.Get(r * cols + j), wj);
    }
  }
  // In place (dlogits in the logits' buffer) gives the same bits.
  {
    Buf z(d, n), zl(d, rows);
    if (n) std::memcpy(z.data(), x.data(), n * x.Size());
    CpuSparseCrossEntropy(d, z.data(), lp, labels64, zl.data(), z.data(), cols, p, 0, rows);
    Check(n == 0 || std::memcmp(z.data(), dx.data(), n * dx.Size()) == 0,
          "ce in place", d, cols, 0, 0, 0);
    Check(rows == 0 || std::memcmp(zl.data(), loss.data(), rows * loss.Size()) == 0,
          "ce loss in place", d, cols, 0, 0, 0);
  }
  // A bad label: found, and the engine writes NaN without reading outside.
  if (rows > 2) {
    if (labels64) l64[2] = cols; else l32[2] = static_cast<int32_t>(cols);
    Check(FirstBadLabel(lp, labels64, rows, cols, -7) == 2, "bad label found", d, cols, 2, 0, 0);
    CpuSparseCrossEntropy(d, x.data(), lp, labels64, loss.data(), dx.data(), cols, p, 0, rows);
    Check(std::isnan(loss.Get(2)), "bad label NaN", d, cols, 2, loss.Get(2), NAN);
  }
}

}  // namespace
}  // namespace tf_ops

int main() {
  using tf_ops::Dtype;
  std::mt19937 rng(7);
  // Every instruction-set variant of the loops this CPU can run.
  for (tf_ops::CpuIsa isa : {tf_ops::CpuIsa::kBaseline, tf_ops::CpuIsa::kAvx2,
                             tf_ops::CpuIsa::kAvx512}) {
    if (tf_ops::SetCpuIsa(isa) != isa) continue;
    for (Dtype d : {Dtype::kFloat, Dtype::kDouble, Dtype::kHalf, Dtype::kBFloat16}) {
      for (int64_t cols : {1, 2, 3, 15, 16, 17, 31, 33, 100, 257, 1030}) {
        tf_ops::TestSoftmax(d, 5, cols, &rng, false);
        tf_ops::TestSoftmax(d, 3, cols, &rng, true);
        tf_ops::TestCrossEntropy(d, 6, cols, cols % 2 == 0, &rng);
      }
      tf_ops::TestSoftmax(d, 0, 7, &rng, false);
      tf_ops::TestMasked(d, 2, 3, 5, 7, &rng);
      tf_ops::TestMasked(d, 1, 2, 17, 33, &rng);
    }
    std::printf("%s done: %d checks so far\n", tf_ops::CpuIsaName(isa),
                tf_ops::checks);
  }
  std::printf("SUMMARY checks family=softmax passed=%d failed=%d\n",
              tf_ops::checks - tf_ops::failures, tf_ops::failures);
  return tf_ops::failures == 0 ? 0 : 1;
}

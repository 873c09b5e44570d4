// Memory-safety test of the CPU engine and the activation math, TF-free.
//
// Built with AddressSanitizer and UndefinedBehaviorSanitizer (see
// CMakeLists.txt here; `make engine-test` builds and runs it), it calls the
// engine's interface, CpuForward / CpuBackward / CpuGradGrad from
// activation_cpu.h (through the typed shorthands below), for every activation in activation_list.h, every attribute variant below,
// every dtype the TensorFlow kernels instantiate (float, double, and
// Eigen::half / Eigen::bfloat16 when Eigen's headers are available), on
// heap buffers of exactly the size the call may touch, so that ASan reports
// any read or write past either end:
//   - whole ranges [0, n), out of place and in place (TF may forward an input
//     buffer as an output; the grad-grad op in every pairing TF can make, and
//     with either output left out), for n = 0..70, around every power of two up to
//     2^12 and at 2^16 + 1 (vector widths, unroll factors, cache lines);
//   - shards [begin, end) as TF's thread pool hands them out, at odd offsets:
//     the buffer ends exactly at `end` and the elements before `begin` are
//     poisoned, so touching either side of the shard is reported;
//   - misaligned buffers (one element past a 64-byte boundary), for UBSan's
//     alignment checks and for vector loads that assume alignment.
// Every value is checked against the same functor run one element at a time
// in double (the engine's double path uses the C library, its float path
// fast_math.h), with tolerances meant to catch wrong elements, not ulps.
//
// Exit status: 0 when every check passes; 1 otherwise (each sanitizer error
// aborts the program with its own report).

#include <sanitizer/asan_interface.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#ifndef TF_OPS_ENGINE_TEST_HALF
#define TF_OPS_ENGINE_TEST_HALF 0
#endif
#if TF_OPS_ENGINE_TEST_HALF
#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16, as TensorFlow uses them
#endif

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/activation/activation_cpu.h"

namespace tf_ops {
namespace {

// ------------------------------------------------------------ dtypes -------

template <typename T>
struct DtypeInfo;
template <>
struct DtypeInfo<float> {
  static constexpr const char* kName = "float";
  static constexpr Dtype kDtype = Dtype::kFloat;
  static constexpr double kRtol = 1e-4;   // up to ~800 float ulps: the Gelu tail
  static constexpr double kAtol = 1e-30;  // float underflow of tails
};
template <>
struct DtypeInfo<double> {
  static constexpr const char* kName = "double";
  static constexpr Dtype kDtype = Dtype::kDouble;
  static constexpr double kRtol = 1e-12;
  static constexpr double kAtol = 1e-290;
};
#if TF_OPS_ENGINE_TEST_HALF
template <>
struct DtypeInfo<Eigen::half> {
  static constexpr const char* kName = "half";
  static constexpr Dtype kDtype = Dtype::kHalf;
  static constexpr double kRtol = 2.0 / 1024;  // 2 half ulps
  static constexpr double kAtol = 6e-8;        // the smallest half subnormal
};
template <>
struct DtypeInfo<Eigen::bfloat16> {
  static constexpr const char* kName = "bfloat16";
  static constexpr Dtype kDtype = Dtype::kBFloat16;
  static constexpr double kRtol = 2.0 / 128;  // 2 bfloat16 ulps
  static constexpr double kAtol = 1e-30;
};
#endif

// The engine takes untyped buffers and a Dtype; these typed shorthands keep
// the checks below readable.
template <typename Op, typename T>
void ForwardRange(const Op& op, const T* x, T* y, int64_t begin, int64_t end) {
  CpuForward(op, DtypeInfo<T>::kDtype, x, y, begin, end);
}
template <typename Op, typename T>
void BackwardRange(const Op& op, const T* g, const T* v, T* dx, int64_t begin,
                   int64_t end) {
  CpuBackward(op, DtypeInfo<T>::kDtype, g, v, dx, begin, end);
}

template <typename Op, typename T>
void GradGradRange(const Op& op, const T* u, const T* g, const T* v, T* d_g,
                   T* d_v, int64_t begin, int64_t end) {
  CpuGradGrad(op, DtypeInfo<T>::kDtype, u, g, v, d_g, d_v, begin, end);
}

template <typename T>
double ToDouble(T v) {
  return static_cast<double>(static_cast<ComputeType<T>>(v));
}

// Rounds a double to T the way the engine stores: to the compute type, then T.
// Values beyond the compute type's range become infinities (not UB).
template <typename T>
T FromDouble(double d) {
  using C = ComputeType<T>;
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<C>::max()) {
    d = d > 0 ? std::numeric_limits<double>::infinity()
              : -std::numeric_limits<double>::infinity();
  }
  return static_cast<T>(static_cast<C>(d));
}

// ------------------------------------------------------------ buffers ------

// A heap array of exactly n elements of T, optionally starting one element
// past a 64-byte boundary (that element poisoned), so ASan reports any access
// outside [data, data + n) and UBSan any misaligned typed access.
template <typename T>
class ExactBuffer {
 public:
  ExactBuffer(int64_t n, bool misaligned) : n_(n), misaligned_(misaligned) {
    const size_t offset = misaligned ? 1 : 0;
    const size_t bytes = sizeof(T) * static_cast<size_t>(n + offset);
    // operator new with alignment: ASan puts redzones right after `bytes`.
    raw_ = static_cast<T*>(::operator new(bytes > 0 ? bytes : 1,
                                          std::align_val_t(64)));
    data_ = raw_ + offset;
    if (misaligned) ASAN_POISON_MEMORY_REGION(raw_, sizeof(T));
  }
  ~ExactBuffer() {
    if (misaligned_) ASAN_UNPOISON_MEMORY_REGION(raw_, sizeof(T));
    ::operator delete(raw_, std::align_val_t(64));
  }
  ExactBuffer(const ExactBuffer&) = delete;
  ExactBuffer& operator=(const ExactBuffer&) = delete;

  T* data() { return data_; }
  int64_t size() const { return n_; }
  // Marks [0, k) as off limits (a shard must not touch what precedes it).
  void PoisonPrefix(int64_t k) {
    ASAN_POISON_MEMORY_REGION(data_, sizeof(T) * static_cast<size_t>(k));
  }
  void UnpoisonPrefix(int64_t k) {
    ASAN_UNPOISON_MEMORY_REGION(data_, sizeof(T) * static_cast<size_t>(k));
  }

 private:
  int64_t n_;
  bool misaligned_;
  T* raw_;
  T* data_;
};

// ------------------------------------------------------------ inputs -------

// Values that stress the math: zeros, infinities, NaN, subnormals, the
// thresholds of fast_math.h (exp overflow / underflow clamps) and of Mish's
// cut-off, huge and tiny magnitudes.
const double kSpecials[] = {
    0.0,     -0.0,    INFINITY, -INFINITY, NAN,     1e-40,  -1e-40, 1e-310,
    -1e-310, 1e-30,   -1e-30,   3e38,      -3e38,   1e300,  -1e300, 88.7,
    -88.7,   88.8,    -88.8,    104.0,     -104.0,  20.0,   -20.0,  20.5,
    0.5,     -0.5,    1.0,      -1.0,      -13.0,   -40.0,  -745.0, 710.0};
constexpr int kNumSpecials = sizeof(kSpecials) / sizeof(kSpecials[0]);

// n values: mostly normal(0, 4), every ~5th a special value, at positions
// that vary with the seed so that specials land in vector tails too.
template <typename T>
void FillInput(T* out, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 4.0);
  std::uniform_int_distribution<int> pick(0, 4 * kNumSpecials);
  for (int64_t i = 0; i < n; ++i) {
    const int k = pick(rng);
    out[i] = FromDouble<T>(k < kNumSpecials ? kSpecials[k] : normal(rng));
  }
}

// ------------------------------------------------------------ checking -----

struct Tally {
  int64_t cases = 0;
  int64_t elements = 0;
  int64_t failures = 0;
};

// What an element may be: `want` within rtol and `atol`; NaN only where want
// is NaN (or where `nan_ok`); infinities exactly.
struct Expected {
  double want;
  double atol;
  bool nan_ok;
};

bool Close(double got, const Expected& e, double rtol) {
  if (std::isnan(got)) return std::isnan(e.want) || e.nan_ok;
  if (std::isnan(e.want)) return false;
  if (std::isinf(e.want) || std::isinf(got)) return got == e.want;
  return std::fabs(got - e.want) <= e.atol + rtol * std::fabs(e.want);
}

// Below this, a value computed in the compute type C may underflow to 0 on
// its way to the result (e.g. the tail of a logistic inside f'(v)).
template <typename T>
constexpr double UnderflowScale() {
  return std::is_same<ComputeType<T>, double>::value ? 0x1p-1000 : 0x1p-100;
}

// The reference: the functor in double, one element at a time, rounded to T.
template <typename Op, typename T>
Expected ForwardRef(const Op& op, T x) {
  return {ToDouble(FromDouble<T>(op.Forward(ToDouble(x)))),
          DtypeInfo<T>::kAtol, false};
}
// dx = g * f'(v), with f'(v) computed in the compute type C. f' is a sum of
// terms of opposite signs where it crosses zero (gelu' at -0.75, swish' at
// -1.28), so its error is absolute: some ulps of C, times |g|. Where it
// underflows in C, dx loses up to |g| times the underflow threshold, and an
// infinite g gives inf * 0 = NaN (as TensorFlow's own grad kernels do).
template <typename Op, typename T>
Expected BackwardRef(const Op& op, T g, T v) {
  using C = ComputeType<T>;
  const double gd = ToDouble(g), vd = ToDouble(v);
  const double derivative = op.Derivative(vd);
  const bool underflows = std::fabs(derivative) < UnderflowScale<T>();
  const double abs_slack =
      64 * std::numeric_limits<C>::epsilon() + UnderflowScale<T>();
  return {ToDouble(FromDouble<T>(GradOf(op, gd, vd))),
          DtypeInfo<T>::kAtol +
              (std::isfinite(gd) ? std::fabs(gd) * abs_slack : 0.0),
          std::isinf(gd) && underflows};
}

// The grad-grad op's outputs: d_g = u f'(v) is the grad op's value for u;
// d_v = (u g) f''(v), with u g rounded to C as the engine has it (it may
// overflow there), f'' under the same absolute slack as f' above, and NaN
// allowed where an infinite u g meets an f'' that underflows in C.
template <typename Op, typename T>
Expected GradGradRef(const Op& op, T u, T g, T v) {
  using C = ComputeType<T>;
  const double ug = static_cast<double>(
      static_cast<C>(static_cast<C>(ToDouble(u)) * static_cast<C>(ToDouble(g))));
  const double second = op.SecondDerivative(ToDouble(v));
  const bool underflows = std::fabs(second) < UnderflowScale<T>();
  const double abs_slack =
      64 * std::numeric_limits<C>::epsilon() + UnderflowScale<T>();
  return {ToDouble(FromDouble<T>(ug * second)),
          DtypeInfo<T>::kAtol +
              (std::isfinite(ug) ? std::fabs(ug) * abs_slack : 0.0),
          std::isinf(ug) && underflows};
}

// Compares got[begin, end) with want[begin, end); reports the first mismatch.
template <typename T>
void Check(const std::string& what, const T* got,
           const std::vector<Expected>& want, const std::vector<T>& input,
           int64_t begin, int64_t end, Tally* tally) {
  ++tally->cases;
  tally->elements += end - begin;
  int64_t bad = 0, first = -1;
  for (int64_t i = begin; i < end; ++i) {
    if (!Close(ToDouble(got[i]), want[i], DtypeInfo<T>::kRtol)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return;
  ++tally->failures;
  std::printf("FAIL %s: %" PRId64 " of %" PRId64
              " elements differ; first at %" PRId64
              ": input %.9g, got %.9g, want %.9g\n",
              what.c_str(), bad, end - begin, first, ToDouble(input[first]),
              ToDouble(got[first]), want[first].want);
}

template <typename T>
void CopyInto(const std::vector<T>& from, ExactBuffer<T>* to) {
  if (to->size() > 0) {
    std::memcpy(to->data(), from.data(), sizeof(T) * to->size());
  }
}

// Shard boundaries for n elements split into k parts, deliberately uneven
// (TF's pool uses block sizes that need not be multiples of a vector width).
std::vector<int64_t> ShardBounds(int64_t n, int k) {
  std::vector<int64_t> b = {0};
  for (int j = 1; j < k; ++j) {
    int64_t cut = n * j / k + (j % 2 == 1 ? 1 : -1);
    if (cut < b.back()) cut = b.back();
    if (cut > n) cut = n;
    b.push_back(cut);
  }
  b.push_back(n);
  return b;
}

// ------------------------------------------------------------ one case -----

template <typename Op, typename T>
void CheckForward(const Op& op, const std::string& label, int64_t n,
                  bool misaligned, Tally* tally) {
  const std::string what = label + " forward n=" + std::to_string(n) +
                           (misaligned ? " misaligned" : "");
  std::vector<T> x(n);
  std::vector<Expected> want(n);
  FillInput(x.data(), n, 7919u * static_cast<uint32_t>(n) + 1u);
  for (int64_t i = 0; i < n; ++i) want[i] = ForwardRef(op, x[i]);

  {  // Out of place, whole range.
    ExactBuffer<T> in(n, misaligned), out(n, misaligned);
    CopyInto(x, &in);
    ForwardRange(op, static_cast<const T*>(in.data()), out.data(), 0, n);
    Check(what, out.data(), want, x, 0, n, tally);
  }
  {  // In place: TF forwards the input buffer as the output.
    ExactBuffer<T> buf(n, misaligned);
    CopyInto(x, &buf);
    ForwardRange(op, static_cast<const T*>(buf.data()), buf.data(), 0, n);
    Check(what + " in-place", buf.data(), want, x, 0, n, tally);
  }
  // Shards: each call sees buffers that end at `end`, with [0, begin)
  // poisoned; also an empty range, which must touch nothing.
  for (int k : {2, 3, 7}) {
    if (n < k) continue;
    const std::vector<int64_t> b = ShardBounds(n, k);
    for (size_t s = 0; s + 1 < b.size(); ++s) {
      const int64_t begin = b[s], end = b[s + 1];
      ExactBuffer<T> in(end, misaligned), out(end, misaligned);
      std::memcpy(in.data(), x.data(), sizeof(T) * end);
      in.PoisonPrefix(begin);
      out.PoisonPrefix(begin);
      ForwardRange(op, static_cast<const T*>(in.data()), out.data(), begin,
                   end);
      ForwardRange(op, static_cast<const T*>(in.data()), out.data(), end,
                   end);
      in.UnpoisonPrefix(begin);
      out.UnpoisonPrefix(begin);
      Check(what + " shard [" + std::to_string(begin) + "," +
                std::to_string(end) + ")",
            out.data(), want, x, begin, end, tally);
    }
  }
}

template <typename Op, typename T>
void CheckBackward(const Op& op, const std::string& label, int64_t n,
                   bool misaligned, Tally* tally) {
  const std::string what = label + " backward n=" + std::to_string(n) +
                           (misaligned ? " misaligned" : "");
  std::vector<T> g(n), v(n);
  std::vector<Expected> want(n);
  FillInput(g.data(), n, 104729u * static_cast<uint32_t>(n) + 3u);
  FillInput(v.data(), n, 7919u * static_cast<uint32_t>(n) + 5u);
  for (int64_t i = 0; i < n; ++i) want[i] = BackwardRef(op, g[i], v[i]);

  {  // Out of place.
    ExactBuffer<T> gb(n, misaligned), vb(n, misaligned), dx(n, misaligned);
    CopyInto(g, &gb);
    CopyInto(v, &vb);
    BackwardRange(op, static_cast<const T*>(gb.data()),
                  static_cast<const T*>(vb.data()), dx.data(), 0, n);
    Check(what, dx.data(), want, v, 0, n, tally);
  }
  {  // dx aliases the gradients (TF may forward input 0).
    ExactBuffer<T> gb(n, misaligned), vb(n, misaligned);
    CopyInto(g, &gb);
    CopyInto(v, &vb);
    BackwardRange(op, static_cast<const T*>(gb.data()),
                  static_cast<const T*>(vb.data()), gb.data(), 0, n);
    Check(what + " in-place(g)", gb.data(), want, v, 0, n, tally);
  }
  {  // dx aliases the features / outputs (TF may forward input 1).
    ExactBuffer<T> gb(n, misaligned), vb(n, misaligned);
    CopyInto(g, &gb);
    CopyInto(v, &vb);
    BackwardRange(op, static_cast<const T*>(gb.data()),
                  static_cast<const T*>(vb.data()), vb.data(), 0, n);
    Check(what + " in-place(v)", vb.data(), want, v, 0, n, tally);
  }
  for (int k : {2, 3, 7}) {
    if (n < k) continue;
    const std::vector<int64_t> b = ShardBounds(n, k);
    for (size_t s = 0; s + 1 < b.size(); ++s) {
      const int64_t begin = b[s], end = b[s + 1];
      ExactBuffer<T> gb(end, misaligned), vb(end, misaligned),
          dx(end, misaligned);
      std::memcpy(gb.data(), g.data(), sizeof(T) * end);
      std::memcpy(vb.data(), v.data(), sizeof(T) * end);
      gb.PoisonPrefix(begin);
      vb.PoisonPrefix(begin);
      dx.PoisonPrefix(begin);
      BackwardRange(op, static_cast<const T*>(gb.data()),
                    static_cast<const T*>(vb.data()), dx.data(), begin, end);
      BackwardRange(op, static_cast<const T*>(gb.data()),
                    static_cast<const T*>(vb.data()), dx.data(), end, end);
      gb.UnpoisonPrefix(begin);
      vb.UnpoisonPrefix(begin);
      dx.UnpoisonPrefix(begin);
      Check(what + " shard [" + std::to_string(begin) + "," +
                std::to_string(end) + ")",
            dx.data(), want, v, begin, end, tally);
    }
  }
}

// Where each grad-grad output goes: a fresh buffer, the buffer of an input
// (TF forwards u or v to d_g, g or v to d_v), or nowhere (not required).
enum class Into { kFresh, kU, kG, kV, kNone };

template <typename Op, typename T>
void CheckGradGrad(const Op& op, const std::string& label, int64_t n,
                   bool misaligned, Tally* tally) {
  const std::string what = label + " grad-grad n=" + std::to_string(n) +
                           (misaligned ? " misaligned" : "");
  std::vector<T> u(n), g(n), v(n);
  std::vector<Expected> want_g(n), want_v(n);
  FillInput(u.data(), n, 15485863u * static_cast<uint32_t>(n) + 7u);
  FillInput(g.data(), n, 104729u * static_cast<uint32_t>(n) + 3u);
  FillInput(v.data(), n, 7919u * static_cast<uint32_t>(n) + 5u);
  for (int64_t i = 0; i < n; ++i) {
    want_g[i] = BackwardRef(op, u[i], v[i]);
    want_v[i] = GradGradRef(op, u[i], g[i], v[i]);
  }
  const struct {
    Into d_g, d_v;
    const char* name;
  } kPlacements[] = {
      {Into::kFresh, Into::kFresh, ""},
      {Into::kU, Into::kG, " in-place(u,g)"},
      {Into::kV, Into::kG, " in-place(v,g)"},
      {Into::kU, Into::kV, " in-place(u,v)"},
      {Into::kNone, Into::kFresh, " d_v only"},
      {Into::kNone, Into::kV, " d_v only in-place(v)"},
      {Into::kFresh, Into::kNone, " d_g only"},
      {Into::kU, Into::kNone, " d_g only in-place(u)"},
  };
  for (const auto& p : kPlacements) {
    ExactBuffer<T> ub(n, misaligned), gb(n, misaligned), vb(n, misaligned),
        ab(n, misaligned), bb(n, misaligned);
    CopyInto(u, &ub);
    CopyInto(g, &gb);
    CopyInto(v, &vb);
    auto place = [&](Into into, ExactBuffer<T>* fresh) -> T* {
      switch (into) {
        case Into::kFresh:
          return fresh->data();
        case Into::kU:
          return ub.data();
        case Into::kG:
          return gb.data();
        case Into::kV:
          return vb.data();
        case Into::kNone:
          return nullptr;
      }
      return nullptr;
    };
    T* d_g = place(p.d_g, &ab);
    T* d_v = place(p.d_v, &bb);
    GradGradRange(op, static_cast<const T*>(ub.data()),
                  static_cast<const T*>(gb.data()),
                  static_cast<const T*>(vb.data()), d_g, d_v, 0, n);
    if (d_g != nullptr) {
      Check(what + p.name + " d_g", d_g, want_g, v, 0, n, tally);
    }
    if (d_v != nullptr) {
      Check(what + p.name + " d_v", d_v, want_v, v, 0, n, tally);
    }
  }
  for (int k : {2, 3, 7}) {
    if (n < k) continue;
    const std::vector<int64_t> b = ShardBounds(n, k);
    for (size_t s = 0; s + 1 < b.size(); ++s) {
      const int64_t begin = b[s], end = b[s + 1];
      ExactBuffer<T> ub(end, misaligned), gb(end, misaligned),
          vb(end, misaligned), ab(end, misaligned), bb(end, misaligned);
      std::memcpy(ub.data(), u.data(), sizeof(T) * end);
      std::memcpy(gb.data(), g.data(), sizeof(T) * end);
      std::memcpy(vb.data(), v.data(), sizeof(T) * end);
      for (auto* buf : {&ub, &gb, &vb, &ab, &bb}) buf->PoisonPrefix(begin);
      GradGradRange(op, static_cast<const T*>(ub.data()),
                    static_cast<const T*>(gb.data()),
                    static_cast<const T*>(vb.data()), ab.data(), bb.data(),
                    begin, end);
      GradGradRange(op, static_cast<const T*>(ub.data()),
                    static_cast<const T*>(gb.data()),
                    static_cast<const T*>(vb.data()), ab.data(), bb.data(),
                    end, end);
      for (auto* buf : {&ub, &gb, &vb, &ab, &bb}) buf->UnpoisonPrefix(begin);
      const std::string shard =
          " shard [" + std::to_string(begin) + "," + std::to_string(end) + ")";
      Check(what + shard + " d_g", ab.data(), want_g, v, begin, end, tally);
      Check(what + shard + " d_v", bb.data(), want_v, v, begin, end, tally);
    }
  }
}

// ------------------------------------------------------------ the matrix ---

// Sizes: every n up to 70, then one under, at and over each power of two up
// to 2^12 (all vector widths and unroll factors the engine could use), and
// 2^16 + 1. Sizes over 4097 run for the first attribute variant only.
std::vector<int64_t> Sizes(bool first_variant) {
  std::vector<int64_t> sizes;
  for (int64_t n = 0; n <= 70; ++n) sizes.push_back(n);
  for (int64_t p = 128; p <= 4096; p *= 2) {
    for (int64_t n : {p - 1, p, p + 1}) sizes.push_back(n);
  }
  if (first_variant) {
    for (int64_t n : {int64_t{65535}, int64_t{65537}}) sizes.push_back(n);
  }
  return sizes;
}

// The attribute values each activation is run with: TensorFlow's defaults
// first, then edge values the attribute checks accept (0, negative where
// allowed, subnormal, huge). An activation without an overload here runs with
// its default attributes only, so a new entry in activation_list.h is still
// covered.
template <typename Op>
std::vector<Op> Variants(Op) {
  return {Op{}};
}
std::vector<LeakyRelu> Variants(LeakyRelu) {
  std::vector<LeakyRelu> v;
  for (float a : {0.2f, 0.0f, -0.0f, 1.0f, 1.5f, -0.3f, 1e-40f, 3e38f}) {
    v.push_back(LeakyRelu{a});
  }
  return v;
}
std::vector<Elu> Variants(Elu) {
  std::vector<Elu> v;
  for (float a : {1.0f, 0.0f, 0.2f, 1.5f, 1e-40f, 3e38f}) v.push_back(Elu{a});
  return v;
}
std::vector<Gelu> Variants(Gelu) { return {Gelu{false}, Gelu{true}}; }
std::vector<Swish> Variants(Swish) {
  std::vector<Swish> v;
  for (float b : {1.0f, 0.5f, 2.0f, 0.0f, -1.0f, 1e-40f, 1e30f, -1e30f}) {
    v.push_back(Swish{b});
  }
  return v;
}

template <typename Op, typename T>
void CheckDtype(const Op& op, const std::string& label, bool first_variant,
                Tally* tally) {
  const std::string name = label + " " + DtypeInfo<T>::kName;
  for (int64_t n : Sizes(first_variant)) {
    for (bool misaligned : {false, true}) {
      // Misalignment matters for vector loads only: cover it on small sizes.
      if (misaligned && n > 1025) continue;
      CheckForward<Op, T>(op, name, n, misaligned, tally);
      CheckBackward<Op, T>(op, name, n, misaligned, tally);
      CheckGradGrad<Op, T>(op, name, n, misaligned, tally);
    }
  }
}

template <typename Op>
void CheckActivation(Tally* tally) {
  const std::vector<Op> variants = Variants(Op{});
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::string label =
        std::string(Op::kName) + "#" + std::to_string(i);
    const bool first = i == 0;
    CheckDtype<Op, float>(variants[i], label, first, tally);
    CheckDtype<Op, double>(variants[i], label, first, tally);
#if TF_OPS_ENGINE_TEST_HALF
    CheckDtype<Op, Eigen::half>(variants[i], label, first, tally);
    CheckDtype<Op, Eigen::bfloat16>(variants[i], label, first, tally);
#endif
  }
}

}  // namespace
}  // namespace tf_ops

int main() {
  tf_ops::Tally tally;
  int activations = 0;
  // Every instruction-set variant of the loops this CPU can run.
  for (tf_ops::CpuIsa isa : {tf_ops::CpuIsa::kBaseline, tf_ops::CpuIsa::kAvx2,
                             tf_ops::CpuIsa::kAvx512}) {
    if (tf_ops::SetCpuIsa(isa) != isa) continue;
    activations = 0;
#define TF_OPS_CHECK(Name)                                                 \
  tf_ops::CheckActivation<tf_ops::Name>(&tally);                           \
  ++activations;                                                           \
  std::printf("%-8s %-10s done: %" PRId64 " checks so far\n",               \
              tf_ops::CpuIsaName(isa), #Name, tally.cases);
    TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_CHECK)
#undef TF_OPS_CHECK
  }
  std::printf(
      "engine sanitizer test (%s): %d activations, %d dtypes, %" PRId64
      " checks over %" PRId64 " elements, %" PRId64 " failed\n",
#if defined(__SANITIZE_ADDRESS__)
      "ASan+UBSan",
#else
      "no sanitizers",
#endif
      activations, TF_OPS_ENGINE_TEST_HALF ? 4 : 2, tally.cases,
      tally.elements, tally.failures);
  return tally.failures == 0 ? 0 : 1;
}

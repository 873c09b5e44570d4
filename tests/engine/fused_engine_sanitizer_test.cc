// Memory-safety and value test of the fused ops' CPU engine (fused_cpu.h),
// TF-free, built with AddressSanitizer and UndefinedBehaviorSanitizer like
// engine_sanitizer_test.cc (`make engine-test` builds and runs both).
//
// For every activation in activation_list.h, float and double, on heap
// buffers of exactly the size each call may touch (ASan reports any access
// past either end):
//   - bias forward and grad for NHWC-like (inner = 1) and NCHW-like layouts,
//     shapes around the vector widths and the tile size, out of place and in
//     place, forward in odd shards;
//   - the bias gradient's tiles run in several different splits (as different
//     thread counts would split them): bit-identical results each time;
//   - gated forward and grad, in odd shards, out of place and in place;
//   - gated with a bias: forward in odd shards, grad in several tile splits
//     (bit-identical db), out of place and in place.
// Values are checked against the functor run element by element in double
// through fused_math.h, the bias sums against a double sum.
//
// Exit status: 0 when every check passes, 1 otherwise.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/fused/fused_cpu.h"
#include "tf_ops/cc/fused/fused_math.h"

namespace tf_ops {
namespace {

int failures = 0;
int checks = 0;

template <typename T>
constexpr Dtype DtypeOf() {
  return sizeof(T) == 4 ? Dtype::kFloat : Dtype::kDouble;
}
template <typename T>
constexpr double Rtol() {
  return sizeof(T) == 4 ? 1e-4 : 1e-12;
}

// A heap buffer of exactly n elements (none when n = 0: a null pointer).
template <typename T>
std::unique_ptr<T[]> Buffer(int64_t n) {
  return n == 0 ? nullptr : std::unique_ptr<T[]>(new T[n]);
}

template <typename T>
void Fill(T* p, int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<double> d(-4.0, 3.0);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(d(*rng));
}

void Expect(bool ok, const char* what, const char* op, double got,
            double want, int64_t at) {
  ++checks;
  if (ok) return;
  if (++failures <= 20) {
    std::printf("FAIL %s %s at %lld: got %.17g, want %.17g\n", op, what,
                static_cast<long long>(at), got, want);
  }
}

bool Close(double got, double want, double rtol, double scale = 0.0) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <=
         rtol * std::max({std::fabs(want), scale, 1e-30}) + 1e-30;
}

template <typename Op, typename T>
void TestBias(const Op& op, int64_t outer, int64_t channels, int64_t inner,
              std::mt19937* rng) {
  const int64_t n = outer * channels * inner;
  const BiasLayout layout{channels, inner};
  auto x = Buffer<T>(n), g = Buffer<T>(n), y = Buffer<T>(n), dx = Buffer<T>(n);
  auto b = Buffer<T>(channels);
  Fill(x.get(), n, rng);
  Fill(g.get(), n, rng);
  Fill(b.get(), channels, rng);
  auto channel = [&](int64_t i) { return (i / inner) % channels; };
  // Forward in three odd shards.
  const int64_t cut1 = n / 3, cut2 = n - n / 5;
  for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, cut1}, {cut1, cut2},
                        {cut2, n}}) {
    CpuBiasForward(op, DtypeOf<T>(), x.get(), b.get(), y.get(), layout, lo, hi);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double want = BiasForwardOf(op, double(x[i]), double(b[channel(i)]));
    // x + b is rounded once in T: near a kink or zero of f (HardSwish at -3)
    // that rounding is absolute, ~|x| + |b|.
    const double scale = std::fabs(double(x[i])) + std::fabs(double(b[channel(i)]));
    Expect(Close(y[i], want, Rtol<T>(), scale), "forward", Op::kName, y[i],
           want, i);
  }
  // Grad: tiles in several splits, bit-identical db each time.
  const BiasGradTiling tiling = MakeBiasGradTiling(layout, n);
  std::vector<T> first_db;
  for (int64_t parts : {1, 2, 3, 7}) {
    auto db = Buffer<T>(channels);
    auto partials = Buffer<double>(tiling.partials());
    const int64_t tiles = tiling.tiles();
    for (int64_t p = 0; p < parts; ++p) {
      CpuBiasGradTiles(op, DtypeOf<T>(), g.get(), x.get(), b.get(), dx.get(),
                       partials.get(), tiling, tiles * p / parts,
                       tiles * (p + 1) / parts);
    }
    CpuBiasGradReduce(DtypeOf<T>(), partials.get(), tiling, db.get(), 0,
                      channels);
    std::vector<double> sum(channels, 0.0), abs_sum(channels, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double want = BiasGradOf(op, double(g[i]), double(x[i]),
                                     double(b[channel(i)]));
      // f' crosses zero (Gelu near -0.75): its rounding is absolute, ~|g|.
      Expect(Close(dx[i], want, Rtol<T>(), std::fabs(double(g[i]))), "grad dx",
             Op::kName, dx[i], want, i);
      sum[channel(i)] += want;
      abs_sum[channel(i)] += std::fabs(want) + std::fabs(double(g[i]));
    }
    for (int64_t c = 0; c < channels; ++c) {
      Expect(Close(db[c], sum[c], Rtol<T>(), abs_sum[c]), "grad db", Op::kName,
             db[c], sum[c], c);
    }
    if (first_db.empty()) {
      first_db.assign(db.get(), db.get() + channels);
    } else {
      ++checks;
      if (channels > 0 &&
          std::memcmp(first_db.data(), db.get(), channels * sizeof(T)) != 0) {
        ++failures;
        std::printf("FAIL %s db differs between tile splits (%lld, %lld, %lld)\n",
                    Op::kName, static_cast<long long>(outer),
                    static_cast<long long>(channels),
                    static_cast<long long>(inner));
      }
    }
  }
  // In place: dx over g (TF may forward it).
  if (n > 0) {
    std::vector<T> g_copy(g.get(), g.get() + n);
    auto partials = Buffer<double>(tiling.partials());
    CpuBiasGradTiles(op, DtypeOf<T>(), g.get(), x.get(), b.get(), g.get(),
                     partials.get(), tiling, 0, tiling.tiles());
    for (int64_t i = 0; i < n; ++i) {
      const double want = BiasGradOf(op, double(g_copy[i]), double(x[i]),
                                     double(b[channel(i)]));
      Expect(Close(g[i], want, Rtol<T>(), std::fabs(double(g_copy[i]))),
             "grad in place", Op::kName, g[i], want, i);
    }
  }
}

// The add ops: the bias loops with one channel per element (AddLayoutOf), the
// output over either input (the kernel may forward the residual's buffer).
template <typename Op, typename T>
void TestAdd(const Op& op, int64_t n, std::mt19937* rng) {
  const BiasLayout layout{n, 1};
  auto x = Buffer<T>(n), r = Buffer<T>(n);
  Fill(x.get(), n, rng);
  Fill(r.get(), n, rng);
  for (int over : {0, 1}) {
    std::vector<T> x0(x.get(), x.get() + n), r0(r.get(), r.get() + n);
    T* y = over == 0 ? x.get() : r.get();
    const int64_t cut = n / 3;
    CpuBiasForward(op, DtypeOf<T>(), x.get(), r.get(), y, layout, 0, cut);
    CpuBiasForward(op, DtypeOf<T>(), x.get(), r.get(), y, layout, cut, n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = BiasForwardOf(op, double(x0[i]), double(r0[i]));
      const double scale = std::fabs(double(x0[i])) + std::fabs(double(r0[i]));
      Expect(Close(y[i], want, Rtol<T>(), scale), "add in place", Op::kName,
             y[i], want, i);
    }
    Fill(x.get(), n, rng);
    Fill(r.get(), n, rng);
  }
}

template <typename Op, typename T>
void TestGated(const Op& op, int64_t rows, int64_t half, std::mt19937* rng) {
  const int64_t n_out = rows * half, n_in = 2 * n_out;
  auto x = Buffer<T>(n_in), y = Buffer<T>(n_out), g = Buffer<T>(n_out);
  auto dx = Buffer<T>(n_in);
  Fill(x.get(), n_in, rng);
  Fill(g.get(), n_out, rng);
  const int64_t cut = n_out / 3 + 1 < n_out ? n_out / 3 + 1 : n_out;
  CpuGatedForward(op, DtypeOf<T>(), x.get(), nullptr, y.get(), half, 0, cut);
  CpuGatedForward(op, DtypeOf<T>(), x.get(), nullptr, y.get(), half, cut,
                  n_out);
  CpuGatedGrad(op, DtypeOf<T>(), g.get(), x.get(), dx.get(), half, 0, cut);
  CpuGatedGrad(op, DtypeOf<T>(), g.get(), x.get(), dx.get(), half, cut, n_out);
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t r = i / half, j = i % half;
    const double a = x[r * 2 * half + j], bb = x[r * 2 * half + half + j];
    const double want = GatedForwardOf(op, a, bb);
    Expect(Close(y[i], want, Rtol<T>()), "gated forward", Op::kName, y[i],
           want, i);
    const GatedGradValues<double> d = GatedGradOf(op, double(g[i]), a, bb);
    Expect(Close(dx[r * 2 * half + j], d.d_a, Rtol<T>(), std::fabs(g[i] * bb)),
           "gated d_a",
           Op::kName, dx[r * 2 * half + j], d.d_a, i);
    Expect(Close(dx[r * 2 * half + half + j], d.d_b, Rtol<T>()), "gated d_b",
           Op::kName, dx[r * 2 * half + half + j], d.d_b, i);
  }
  // In place: dx over x.
  if (n_out > 0) {
    std::vector<T> x_copy(x.get(), x.get() + n_in);
    CpuGatedGrad(op, DtypeOf<T>(), g.get(), x.get(), x.get(), half, 0, n_out);
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t r = i / half, j = i % half;
      const GatedGradValues<double> d =
          GatedGradOf(op, double(g[i]), double(x_copy[r * 2 * half + j]),
                      double(x_copy[r * 2 * half + half + j]));
      Expect(Close(x[r * 2 * half + j], d.d_a, Rtol<T>(),
                   std::fabs(g[i] * double(x_copy[r * 2 * half + half + j]))),
             "gated in place",
             Op::kName, x[r * 2 * half + j], d.d_a, i);
    }
  }
}

template <typename Op, typename T>
void TestBiasGated(const Op& op, int64_t rows, int64_t half,
                   std::mt19937* rng) {
  const int64_t n_out = rows * half, n_in = 2 * n_out, cols = 2 * half;
  auto x = Buffer<T>(n_in), y = Buffer<T>(n_out), g = Buffer<T>(n_out);
  auto b = Buffer<T>(cols), dx = Buffer<T>(n_in);
  Fill(x.get(), n_in, rng);
  Fill(g.get(), n_out, rng);
  Fill(b.get(), cols, rng);
  const int64_t cut = n_out / 3 + 1 < n_out ? n_out / 3 + 1 : n_out;
  CpuGatedForward(op, DtypeOf<T>(), x.get(), b.get(), y.get(), half, 0, cut);
  CpuGatedForward(op, DtypeOf<T>(), x.get(), b.get(), y.get(), half, cut,
                  n_out);
  // The features plus the bias, as the kernel forms them (in T).
  auto z = [&](const T* xs, int64_t r, int64_t c) {
    return double(T(xs[r * cols + c] + b[c]));
  };
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t r = i / half, j = i % half;
    const double want = GatedForwardOf(op, z(x.get(), r, j),
                                       z(x.get(), r, half + j));
    const double scale = std::fabs(z(x.get(), r, half + j)) *
                         (std::fabs(double(x[r * cols + j])) +
                          std::fabs(double(b[j])));
    Expect(Close(y[i], want, Rtol<T>(), scale), "bias-gated forward",
           Op::kName, y[i], want, i);
  }
  const BiasGradTiling tiling = MakeGatedBiasGradTiling(half, rows);
  std::vector<T> first_db;
  for (int64_t parts : {1, 2, 5}) {
    auto db = Buffer<T>(cols);
    auto partials = Buffer<double>(tiling.partials());
    const int64_t tiles = tiling.tiles();
    for (int64_t p = 0; p < parts; ++p) {
      CpuBiasGatedGradTiles(op, DtypeOf<T>(), g.get(), x.get(), b.get(),
                            dx.get(), partials.get(), tiling,
                            tiles * p / parts, tiles * (p + 1) / parts);
    }
    CpuBiasGradReduce(DtypeOf<T>(), partials.get(), tiling, db.get(), 0, cols);
    std::vector<double> sum(cols, 0.0), abs_sum(cols, 0.0);
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t r = i / half, j = i % half;
      const double bb = z(x.get(), r, half + j);
      const GatedGradValues<double> d =
          GatedGradOf(op, double(g[i]), z(x.get(), r, j), bb);
      const double scale = std::fabs(g[i] * bb);
      Expect(Close(dx[r * cols + j], d.d_a, Rtol<T>(), scale),
             "bias-gated d_a", Op::kName, dx[r * cols + j], d.d_a, i);
      Expect(Close(dx[r * cols + half + j], d.d_b, Rtol<T>()),
             "bias-gated d_b", Op::kName, dx[r * cols + half + j], d.d_b, i);
      sum[j] += d.d_a;
      sum[half + j] += d.d_b;
      abs_sum[j] += std::fabs(d.d_a) + scale;
      abs_sum[half + j] += std::fabs(d.d_b);
    }
    for (int64_t c = 0; c < cols; ++c) {
      Expect(Close(db[c], sum[c], Rtol<T>(), abs_sum[c]), "bias-gated db",
             Op::kName, db[c], sum[c], c);
    }
    if (first_db.empty()) {
      first_db.assign(db.get(), db.get() + cols);
    } else {
      ++checks;
      if (cols > 0 &&
          std::memcmp(first_db.data(), db.get(), cols * sizeof(T)) != 0) {
        ++failures;
        std::printf("FAIL %s bias-gated db differs between tile splits "
                    "(%lld, %lld)\n",
                    Op::kName, static_cast<long long>(rows),
                    static_cast<long long>(half));
      }
    }
  }
  // In place: dx over x.
  if (n_out > 0) {
    std::vector<T> x_copy(x.get(), x.get() + n_in);
    auto partials = Buffer<double>(tiling.partials());
    CpuBiasGatedGradTiles(op, DtypeOf<T>(), g.get(), x.get(), b.get(),
                          x.get(), partials.get(), tiling, 0, tiling.tiles());
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t r = i / half, j = i % half;
      const double bb = z(x_copy.data(), r, half + j);
      const GatedGradValues<double> d =
          GatedGradOf(op, double(g[i]), z(x_copy.data(), r, j), bb);
      Expect(Close(x[r * cols + j], d.d_a, Rtol<T>(), std::fabs(g[i] * bb)),
             "bias-gated in place", Op::kName, x[r * cols + j], d.d_a, i);
      Expect(Close(x[r * cols + half + j], d.d_b, Rtol<T>()),
             "bias-gated in place", Op::kName, x[r * cols + half + j], d.d_b,
             i);
    }
  }
}

template <typename Op, typename T>
void TestOp(const Op& op) {
  std::mt19937 rng(7);
  // (outer, channels, inner): NHWC-like and NCHW-like, empty, tails, and
  // shapes that make several tiles in each direction.
  const int64_t shapes[][3] = {{0, 3, 1},  {1, 1, 1},    {5, 17, 1},
                               {3, 1, 33}, {2, 5, 7},    {4, 3, 0},
                               {70, 1030, 1}, {1, 70000, 1}, {2, 3, 70001},
                               {300, 4, 97}};
  for (const auto& s : shapes) TestBias<Op, T>(op, s[0], s[1], s[2], &rng);
  for (const int64_t n : {0, 1, 33, 70001}) TestAdd<Op, T>(op, n, &rng);
  const int64_t gated[][2] = {{0, 4}, {1, 1}, {3, 17}, {5, 64}, {2, 40001}};
  for (const auto& s : gated) TestGated<Op, T>(op, s[0], s[1], &rng);
  // BiasGated: also several tiles down the rows (kTileElements = 2^16).
  const int64_t bias_gated[][2] = {{0, 4}, {1, 1}, {3, 17}, {700, 64},
                                   {2, 40001}};
  for (const auto& s : bias_gated) {
    TestBiasGated<Op, T>(op, s[0], s[1], &rng);
  }
}

}  // namespace
}  // namespace tf_ops

int main() {
  using namespace tf_ops;  // NOLINT
#define TF_OPS_TEST_ACTIVATION(Act) \
  TestOp<Act, float>(Act{});        \
  TestOp<Act, double>(Act{});
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_TEST_ACTIVATION)
#undef TF_OPS_TEST_ACTIVATION
  // Gelu's tanh form too (a different formula, chosen at run time).
  Gelu tanh_gelu;
  tanh_gelu.approximate = true;
  TestOp<Gelu, float>(tanh_gelu);
  std::printf("fused engine: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

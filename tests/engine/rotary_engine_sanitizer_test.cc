// Memory-safety and value test of the rotary embedding's CPU engine
// (rotary_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like the other engine tests (`make engine-test`
// builds and runs it).
//
// In half, bfloat16, float and double; ranks 2 to 4 with the sequence and
// feature axes anywhere (feature axis last: the per-position tables; not
// last: an angle per element); positions as a start, [S], [B, S] and
// broadcast [1, S] and [B, 1]; feature sizes 2 to 130 (vector widths' edges
// and tails); every rope type; on heap buffers of exactly x's size (ASan
// reports any access past either end):
//   - the forward in odd unit shards, against a double reference computed
//     from each element's own coordinates (not the engine's layout), with
//     the angle rounded to the compute type as the engine rounds it;
//   - in place (y = x), the same bits;
//   - the transpose (the backward) undoes the forward;
//   - no units for an empty x.
//
// Exit status: 0 when every check passes, 1 otherwise.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tests/engine/engine_check.h"
#include "tf_ops/cc/rotary/rotary_cpu.h"
#include "tf_ops/cc/rotary/rotary_layout.h"
#include "tf_ops/cc/rotary/rotary_math.h"

namespace tf_ops {
namespace rotary {
namespace {

using engine_check::Buffer;
using engine_check::checks;
using engine_check::Expect;
using engine_check::failures;
using engine_check::Store;

// eps: the dtype's unit roundoff.
const Store kStores[] = {{Dtype::kHalf, "half", 2, 0x1p-11},
                         {Dtype::kBFloat16, "bfloat16", 2, 0x1p-8},
                         {Dtype::kFloat, "float", 4, 0x1p-24},
                         {Dtype::kDouble, "double", 8, 0x1p-53}};

// The compute type's rounding (positions, angles).
double Round(const Store& k, double v) {
  return k.wide() ? v : static_cast<double>(static_cast<float>(v));
}

struct Case {
  std::vector<int64_t> dims;
  int seq_axis, feature_axis;
  std::vector<int64_t> positions;  // dims; {} for a start
  RopeParams params;
};

void Run(const Store& k, const Case& c, std::mt19937* rng) {
  const int rank = static_cast<int>(c.dims.size());
  char ctx[200];
  int len = std::snprintf(ctx, sizeof(ctx), "%s x[", k.name);
  for (int a = 0; a < rank; ++a) {
    len += std::snprintf(ctx + len, sizeof(ctx) - len, "%s%lld", a ? "," : "",
                         static_cast<long long>(c.dims[a]));
  }
  std::snprintf(ctx + len, sizeof(ctx) - len,
                "] seq=%d feat=%d pos_rank=%d type=%d", c.seq_axis,
                c.feature_axis, static_cast<int>(c.positions.size()),
                static_cast<int>(c.params.type));
  int64_t n = 1;
  for (int64_t d : c.dims) n *= d;
  const int p_rank = static_cast<int>(c.positions.size());
  const RotaryLayout l = MakeRotaryLayout(c.dims.data(), rank, c.seq_axis,
                                          c.feature_axis, p_rank,
                                          c.positions.data());
  const int64_t units = CpuRotaryUnits(l);
  if (n == 0) {
    Expect(units == 0, "units of empty x", ctx, units, 0, 0);
    return;
  }
  const int64_t d = c.dims[c.feature_axis], half = d / 2;
  int64_t p_count = 1;
  for (int64_t v : c.positions) p_count *= v;
  auto positions = Buffer(p_count * k.stat_size());
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  std::uniform_int_distribution<int> position(0, 3000);
  std::vector<double> p_values(p_count);
  for (int64_t i = 0; i < p_count; ++i) {
    p_values[i] = p_rank == 0 ? 17.0 : position(*rng);
    k.PutStat(positions.get(), i, p_values[i]);
  }
  std::vector<double> inverse(half);
  for (int64_t j = 0; j < half; ++j) {
    inverse[j] = InverseFrequency(c.params, d, j);
  }
  RotaryArgs args;
  args.dtype = k.dtype;
  args.layout = l;
  args.positions = positions.get();
  args.inverse_frequencies = inverse.data();
  args.magnitude = Magnitude(c.params);
  auto x = Buffer(n * k.size), y = Buffer(n * k.size), z = Buffer(n * k.size),
       back = Buffer(n * k.size);
  for (int64_t i = 0; i < n; ++i) k.Put(x.get(), i, value(*rng));
  // Forward in odd shards of units.
  const int64_t cut = units / 3;
  CpuRotary(args, x.get(), y.get(), 0, cut);
  CpuRotary(args, x.get(), y.get(), cut, units);
  // In place.
  std::memcpy(z.get(), x.get(), n * k.size);
  CpuRotary(args, z.get(), z.get(), 0, units);
  Expect(std::memcmp(z.get(), y.get(), n * k.size) == 0, "in place bits", ctx,
         0, 0, 0);
  // Backward of the forward.
  args.transpose = true;
  CpuRotary(args, y.get(), back.get(), 0, units);
  // Reference from each element's coordinates.
  int batch_axis = 0;
  while (batch_axis == c.seq_axis || batch_axis == c.feature_axis) ++batch_axis;
  const double m = Round(k, Magnitude(c.params));
  // The compute type's unit roundoff.
  const double ce = k.wide() ? 0x1p-53 : 0x1p-24;
  std::vector<int64_t> index(rank);
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e;
    for (int a = rank - 1; a >= 0; --a) {
      index[a] = rest % c.dims[a];
      rest /= c.dims[a];
    }
    const int64_t f = index[c.feature_axis];
    const int64_t j = f % half;
    int64_t stride = 1;
    for (int a = rank - 1; a > c.feature_axis; --a) stride *= c.dims[a];
    const int64_t partner = f < half ? e + half * stride : e - half * stride;
    const int64_t s = index[c.seq_axis];
    double pos;
    if (p_rank == 0) {
      pos = Round(k, p_values[0] + static_cast<double>(s));
    } else {
      const int64_t ps = c.positions.back() == 1 ? 0 : s;
      const int64_t pb =
          p_rank == 2 && c.positions[0] != 1 ? index[batch_axis] : 0;
      pos = Round(k, p_values[pb * c.positions.back() + ps]);
    }
    const double angle = Round(k, pos * Round(k, inverse[j]));
    const double cs = Round(k, m * std::cos(angle));
    const double sn = Round(k, m * std::sin(angle));
    const double xv = k.Get(x.get(), e), other = k.Get(x.get(), partner);
    const double want = f < half ? xv * cs - other * sn : xv * cs + other * sn;
    const double got = k.Get(y.get(), e);
    // The compute type's roundings (sine, cosine, products, sum), then the
    // output's.
    const double scale = (std::fabs(xv) + std::fabs(other)) * m;
    const double tol = 8 * ce * scale + k.eps * std::fabs(want) + 1e-300;
    Expect(std::isfinite(got) && std::fabs(got - want) <= tol, "y", ctx, got,
           want, e);
    // R^T R = m^2 (the yarn temperature squared), to the roundings of two
    // passes.
    const double want_back = k.Get(x.get(), e) * m * m;
    const double got_back = k.Get(back.get(), e);
    const double tol_back = 8 * (8 * ce + 2 * k.eps) * (scale + m) * m;
    Expect(std::fabs(got_back - want_back) <= tol_back, "transpose", ctx,
           got_back, want_back, e);
  }
}

RopeParams Params(RopeType type, double scaling = 1.0, int64_t denom = 0) {
  RopeParams p;
  p.type = type;
  p.scaling_factor = scaling;
  p.denominator_dim = denom;
  return p;
}

}  // namespace
}  // namespace rotary
}  // namespace tf_ops

int main() {
  using namespace tf_ops::rotary;
  std::mt19937 rng(25);
  const RopeParams linear = Params(RopeType::kLinear);
  const std::vector<Case> cases = {
      {{2, 5, 8}, 1, 2, {}, linear},
      {{2, 5, 8}, 1, 2, {5}, Params(RopeType::kLinear, 2.0)},
      {{3, 7, 2, 130}, 1, 3, {3, 7}, Params(RopeType::kDynamic, 4.0)},
      {{3, 7, 2, 130}, 1, 3, {1, 7}, Params(RopeType::kYarn, 8.0)},
      {{3, 7, 2, 6}, 1, 3, {3, 1}, Params(RopeType::kLlama3)},
      {{3, 7, 2, 18}, 1, 3, {1}, Params(RopeType::kLinear, 1.0, 32)},
      {{2, 3, 9, 16}, 2, 3, {2, 9}, linear},   // [B, H, S, D]
      {{9, 2, 3, 16}, 0, 3, {2, 9}, linear},   // [S, B, H, D]: batch after seq
      {{2, 12, 7}, 2, 1, {2, 7}, linear},      // [B, D, S]: angle per element
      {{2, 5, 10, 3}, 1, 2, {5}, linear},      // [B, S, D, H]
      {{7, 4}, 0, 1, {}, linear},              // [S, D]
      {{4, 7}, 1, 0, {7}, Params(RopeType::kYarn, 2.0)},  // [D, S]
      {{1, 1, 2}, 1, 2, {}, linear},
      {{2, 0, 8}, 1, 2, {}, linear},
      {{2, 4, 0}, 1, 2, {}, linear},
  };
  for (const Store& k : kStores) {
    for (const Case& c : cases) Run(k, c, &rng);
  }
  std::printf("SUMMARY checks family=rotary-engine passed=%d failed=%d\n",
              checks - failures, failures);
  return failures == 0 ? 0 : 1;
}

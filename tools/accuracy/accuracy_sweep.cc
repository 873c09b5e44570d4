// accuracy_sweep: the largest error of every activation, forward op and grad
// op, over every input of a dtype, on every instruction-set path of the CPU
// engine, against a reference in double (reference.h). TF-free: it calls the
// engine's public entry points, CpuForward / CpuBackward (activation_cpu.h),
// exactly as the TensorFlow kernels do, for every activation in
// activation_list.h.
//
//   accuracy_sweep --full                 every float32 bit pattern (2^32,
//                                         non-finite ones included), every
//                                         half and bfloat16 one (variants
//                                         not marked `full` in reference.h:
//                                         the sampled float32 inputs)
//   accuracy_sweep [--sample N]           a strided subset of N float32
//                                         patterns (seeded offset), plus every
//                                         half and bfloat16 pattern
//   options: --ops Gelu,Swish  --dtypes float32,half,bfloat16
//            --isas baseline,avx2,avx512  --variants default|all
//            --seed S  --threads T  --extra-float-bits 0x..,0x..
//            --json FILE  --no-ftz  --check-reference
//            --perturb Op[/attrs]:pass:ulps|nan   (the tool's self-test: a
//                                deliberately inaccurate op)
//            --tolerances FILE   also the largest error in units of a test
//                                tolerance (tests/activation/test_accuracy.py passes
//                                tests/op_specs.py's)
//   accuracy_sweep --primitives [--full]  fast_math.h's functions on their
//                                         own (primitives.h), float32 only
//
// What is measured (docs/ops.md, "Accuracy", says the same for readers):
//   forward  y = f(x) for every input x;
//   grad     dx = 1 * f'(v), the grad op with an upstream gradient of 1, and
//            v the features x, or for Elu the outputs y that the forward op
//            gave for x on the same path;
//   error    |got - exact| in ulps of the output dtype (formats.h), for grad
//            ops of Gelu, Swish and Mish in ulps of the sum of the magnitudes
//            of f''s terms (reference.h, Value);
//   specials NaN in gives NaN out (every NaN pattern), +-inf give the limits
//            of docs/ops.md (an error of inf otherwise), f(+-0) is a zero of
//            the reference's sign; a NaN upstream gradient gives NaN.
// The threads run in flush-to-zero and denormals-are-zero mode, as
// TensorFlow's do, so subnormal float32/bfloat16 inputs are zeros to the
// kernels and the reference alike (--no-ftz: IEEE mode, exact inputs).
//
// Exit status: 0 when no NaN, infinity or zero sign is wrong; 1 otherwise; 2
// on bad usage. Bounds on the ulp errors are the caller's (accuracy_table.py
// checks them against docs/ops.md).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/activation/activation_cpu.h"
#include "tools/accuracy/formats.h"
#include "tools/accuracy/isa_loops.h"
#include "tools/accuracy/primitives.h"
#include "tools/accuracy/reference.h"
#include "tools/accuracy/thread_pool.h"

namespace tf_ops {
namespace accuracy {
namespace {

// ------------------------------------------------------------- options ----

// The self-test's deliberately inaccurate op: results moved `ulps`
// representable numbers away from zero, or (nan_at_infinity) NaN where the
// input is an infinity.
struct Perturbation {
  std::string op, attrs, pass;  // empty attrs: every variant
  int ulps = 0;
  bool nan_at_infinity = false;
};

// A test tolerance, |got - want| <= rtol |want| + atol (tests/op_specs.py's
// form), for one (op, attrs, pass, dtype).
struct Tolerance {
  std::string op, attrs, pass, dtype;
  double rtol = 0, atol = 0;
};

struct Options {
  bool full = false;
  uint64_t sample = uint64_t{1} << 22;
  uint64_t seed = 1;
  int threads = 0;  // 0: all cores
  bool all_variants = false;
  bool ftz = true;
  bool check_reference = false;
  bool primitives = false;  // fast_math.h's functions instead of the ops
  std::vector<std::string> ops, dtypes, isas;
  std::vector<uint32_t> extra_float_bits;
  std::string json_path;
  std::vector<Perturbation> perturb;
  std::vector<Tolerance> tolerances;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    const std::string item =
        s.substr(start, end == std::string::npos ? std::string::npos
                                                 : end - start);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

bool Wanted(const std::vector<std::string>& list, const std::string& item) {
  return list.empty() ||
         std::find(list.begin(), list.end(), item) != list.end();
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "accuracy_sweep: %s\nusage: accuracy_sweep [--full | --sample "
               "N] [--seed S] [--threads T] [--ops A,B] [--dtypes float32,"
               "half,bfloat16] [--isas baseline,avx2,avx512] [--variants "
               "default|all] [--extra-float-bits 0x..,..] [--json FILE] "
               "[--no-ftz] [--primitives] [--check-reference] [--tolerances FILE] "
               "[--perturb Op[/attrs]:"
               "forward|grad:ulps|nan]\n",
               why);
  std::exit(2);
}

// Lines "op attrs pass dtype rtol atol" (attrs "-" when none; # comments).
std::vector<Tolerance> ReadTolerances(const std::string& path) {
  std::vector<Tolerance> out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) Usage(("cannot read " + path).c_str());
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char op[64], attrs[128], pass[16], dtype[16];
    Tolerance t;
    if (std::sscanf(line, "%63s %127s %15s %15s %lf %lf", op, attrs, pass,
                    dtype, &t.rtol, &t.atol) != 6) {
      Usage(("bad tolerance line: " + std::string(line)).c_str());
    }
    t.op = op;
    t.attrs = std::string(attrs) == "-" ? "" : attrs;
    t.pass = pass;
    t.dtype = dtype;
    out.push_back(t);
  }
  std::fclose(f);
  return out;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--full") {
      o.full = true;
    } else if (a == "--sample") {
      o.sample = std::strtoull(value().c_str(), nullptr, 0);
    } else if (a == "--seed") {
      o.seed = std::strtoull(value().c_str(), nullptr, 0);
    } else if (a == "--threads") {
      o.threads = std::atoi(value().c_str());
    } else if (a == "--ops") {
      o.ops = Split(value(), ',');
    } else if (a == "--dtypes") {
      o.dtypes = Split(value(), ',');
    } else if (a == "--isas") {
      o.isas = Split(value(), ',');
    } else if (a == "--variants") {
      const std::string v = value();
      if (v != "default" && v != "all") Usage("--variants: default or all");
      o.all_variants = v == "all";
    } else if (a == "--extra-float-bits") {
      for (const std::string& b : Split(value(), ',')) {
        o.extra_float_bits.push_back(
            static_cast<uint32_t>(std::strtoul(b.c_str(), nullptr, 0)));
      }
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "--no-ftz") {
      o.ftz = false;
    } else if (a == "--tolerances") {
      o.tolerances = ReadTolerances(value());
    } else if (a == "--primitives") {
      o.primitives = true;
    } else if (a == "--check-reference") {
      o.check_reference = true;
    } else if (a == "--perturb") {
      const std::vector<std::string> parts = Split(value(), ':');
      if (parts.size() != 3) Usage("--perturb Op[/attrs]:pass:ulps");
      Perturbation p;
      const size_t slash = parts[0].find('/');
      p.op = parts[0].substr(0, slash);
      if (slash != std::string::npos) p.attrs = parts[0].substr(slash + 1);
      p.pass = parts[1];
      p.nan_at_infinity = parts[2] == "nan";
      p.ulps = p.nan_at_infinity ? 0 : std::atoi(parts[2].c_str());
      o.perturb.push_back(p);
    } else {
      Usage(("unknown argument " + a).c_str());
    }
  }
  if (o.threads <= 0) {
    o.threads = static_cast<int>(std::thread::hardware_concurrency());
    if (o.threads <= 0) o.threads = 1;
  }
  return o;
}

// ------------------------------------------------------------- results ----

// The worst element of one (op, attrs, pass, dtype, path).
struct Worst {
  double error = -1;
  uint32_t input = 0;  // the input's bits (x, also for Elu's grad op)
  double got = 0, want = 0;

  // Larger error wins; among equal errors the smaller input bits, so that the
  // result does not depend on how the inputs were split over threads.
  void Offer(double e, uint32_t in, double g, double w) {
    if (e > error || (e == error && in < input)) {
      error = e;
      input = in;
      got = g;
      want = w;
    }
  }
  void Merge(const Worst& o) {
    if (o.error >= 0) Offer(o.error, o.input, o.got, o.want);
  }
};

struct Stats {
  // Finite inputs whose exact result is at least Format::TailBound() (or 0):
  // the error in ulps.
  uint64_t count = 0;
  Worst ulps;
  uint64_t over_half = 0;  // above 0.5 ulp: not correctly rounded
  uint64_t over_one = 0;   // above 1 ulp
  // |got - want| / (rtol |want| + atol) for the row's test tolerance, if any.
  Worst tolerance;
  // Finite inputs in the underflow tail (formats.h): the absolute error in
  // units of FLT_MIN.
  uint64_t tail_count = 0;
  Worst tail;
  // Non-finite inputs: NaN, +-inf; a failure is a result not within 0.5 ulp
  // of the limit (or not NaN).
  uint64_t special = 0;
  uint64_t special_failures = 0;
  std::string first_special_failure;
  // Zero results whose sign differs from the reference's.
  uint64_t zero_sign_failures = 0;
  // f(+0) and f(-0) as the kernel gave them (NaN: input not swept).
  double at_plus_zero = std::numeric_limits<double>::quiet_NaN();
  double at_minus_zero = std::numeric_limits<double>::quiet_NaN();

  void Merge(const Stats& o) {
    count += o.count;
    ulps.Merge(o.ulps);
    over_half += o.over_half;
    over_one += o.over_one;
    tolerance.Merge(o.tolerance);
    tail_count += o.tail_count;
    tail.Merge(o.tail);
    special += o.special;
    special_failures += o.special_failures;
    if (first_special_failure.empty()) {
      first_special_failure = o.first_special_failure;
    }
    zero_sign_failures += o.zero_sign_failures;
    if (!std::isnan(o.at_plus_zero)) at_plus_zero = o.at_plus_zero;
    if (!std::isnan(o.at_minus_zero)) at_minus_zero = o.at_minus_zero;
  }
};

struct Row {
  std::string op, attrs, pass, dtype, isa;
  Stats stats;
  uint64_t nan_gradient_failures = 0;  // grad rows: NaN upstream gradient
  double seconds = 0;
};

std::string Hex(uint32_t bits, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%0*" PRIx32, width, bits);
  return buf;
}

std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// --------------------------------------------------------------- inputs ----

// The bit patterns one sweep covers, by index: every pattern of the format, or
// an explicit list.
struct Inputs {
  uint64_t size = 0;
  const std::vector<uint32_t>* list = nullptr;  // null: index = bits
  uint32_t At(uint64_t i) const {
    return list ? (*list)[i] : static_cast<uint32_t>(i);
  }
};

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// n float32 patterns spread evenly over all 2^32 (an odd stride, so the low
// mantissa bits vary too) from a seeded offset; +-0, +-inf, NaNs, the
// extremes of the range and the caller's extras are always in.
std::vector<uint32_t> SampledFloatBits(uint64_t n, uint64_t seed,
                                       const std::vector<uint32_t>& extra) {
  std::vector<uint32_t> bits;
  if (n > 0) {
    uint64_t state = seed;
    const uint64_t stride = ((uint64_t{1} << 32) / n) | 1;
    uint64_t at = SplitMix64(&state);
    for (uint64_t k = 0; k < n; ++k, at += stride) {
      bits.push_back(static_cast<uint32_t>(at));
    }
  }
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t b : {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u,
                       0x3f800000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u,
                       0x7fc00000u, 0x7fffffffu}) {
      bits.push_back(sign | b);
    }
  }
  bits.insert(bits.end(), extra.begin(), extra.end());
  return bits;
}

// --------------------------------------------------------------- sweep -----

struct Path {
  CpuIsa isa;
  const char* name;
};

// Storage helpers: the buffers hold 32- or 16-bit patterns.
struct Buffer {
  std::vector<uint32_t> b32;
  std::vector<uint16_t> b16;
  void Resize(const Format& f, size_t n) {
    if (f.bits == 32) {
      b32.resize(n);
    } else {
      b16.resize(n);
    }
  }
  void* data(const Format& f) {
    return f.bits == 32 ? static_cast<void*>(b32.data())
                        : static_cast<void*>(b16.data());
  }
  uint32_t Get(const Format& f, size_t i) const {
    return f.bits == 32 ? b32[i] : b16[i];
  }
  void Set(const Format& f, size_t i, uint32_t v) {
    if (f.bits == 32) {
      b32[i] = v;
    } else {
      b16[i] = static_cast<uint16_t>(v);
    }
  }
  void Fill(const Format& f, uint32_t v) {
    if (f.bits == 32) {
      std::fill(b32.begin(), b32.end(), v);
    } else {
      std::fill(b16.begin(), b16.end(), static_cast<uint16_t>(v));
    }
  }
};

// An output as the perturbation makes it (see Perturbation).
uint32_t Perturbed(const Format& f, const Perturbation& p, uint32_t in,
                   uint32_t out) {
  const uint32_t magnitude_mask = f.bits == 32 ? 0x7fffffffu : 0x7fffu;
  const uint32_t exponent_mask =
      f.bits == 32 ? 0x7f800000u : (f.dtype == Dtype::kHalf ? 0x7c00u : 0x7f80u);
  if (p.nan_at_infinity) {
    return (in & magnitude_mask) == exponent_mask ? (exponent_mask | 1u) : out;
  }
  if ((out & exponent_mask) == exponent_mask) return out;  // inf / NaN
  if ((out & magnitude_mask) == 0) return out;
  return out + static_cast<uint32_t>(p.ulps);
}

struct ThreadState {
  Buffer x, g;
  std::vector<Buffer> y, dx;  // per path
  Stats forward_stats[3], grad_stats[3];
};

// Adds one element's error to `st`.
inline void Record(Stats* st, const Format& f, double got, double want,
                   double scale, uint32_t in, bool finite_input,
                   const Tolerance* tol) {
  const double err = ErrorInUlps(f, got, want, scale);
  if (!finite_input) {
    ++st->special;
    if (err > 0.5) {  // limits are simple numbers: correctly rounded
      if (st->special_failures++ == 0) {
        st->first_special_failure =
            "input " + Hex(in, f.bits / 4) + " gave " + Num(got) +
            ", want " + Num(want);
      }
    }
    return;
  }
  if (std::fabs(want) < f.TailBound() && want != 0) {
    ++st->tail_count;
    st->tail.Offer(std::fabs(got - want) / f.MinNormal(), in, got, want);
    return;
  }
  ++st->count;
  st->over_half += err > 0.5;
  st->over_one += err > 1;
  st->ulps.Offer(err, in, got, want);
  if (tol != nullptr) {
    const double allowed = tol->rtol * std::fabs(want) + tol->atol;
    // A correct overflow (err 0: the infinity `want` rounds to) is no error.
    const double e =
        err == 0 ? 0.0 : (std::isfinite(err) ? std::fabs(got - want) : err);
    st->tolerance.Offer(e / allowed, in, got, want);
  }
}

template <typename Op>
class Sweeper {
 public:
  Sweeper(const Options& o, Pool* pool, const std::vector<Path>& paths)
      : options_(o), pool_(pool), paths_(paths) {}

  // Sweeps one variant over one format; appends the forward and grad rows.
  void Run(const Variant<Op>& variant, const Format& format,
           const Inputs& inputs, std::vector<Row>* rows) {
    const auto start = std::chrono::steady_clock::now();
    const int nthreads = pool_->size();
    const int npaths = static_cast<int>(paths_.size());
    const uint64_t slice = uint64_t{1} << 20;  // per thread per round
    std::vector<ThreadState> states(nthreads);
    for (ThreadState& s : states) {
      s.y.resize(npaths);
      s.dx.resize(npaths);
    }
    const Perturbation* forward_perturb = FindPerturbation(variant, "forward");
    const Perturbation* grad_perturb = FindPerturbation(variant, "grad");
    forward_tol_ = FindTolerance(variant, "forward", format);
    grad_tol_ = FindTolerance(variant, "grad", format);

    for (uint64_t round = 0; round < inputs.size;
         round += slice * nthreads) {
      auto range = [&](int t, uint64_t* begin, uint64_t* n) {
        *begin = std::min(inputs.size, round + slice * t);
        *n = std::min(inputs.size, *begin + slice) - *begin;
      };
      // Inputs, and the upstream gradient of 1.
      pool_->Run([&](int t) {
        uint64_t begin, n;
        range(t, &begin, &n);
        ThreadState& s = states[t];
        s.x.Resize(format, n);
        s.g.Resize(format, n);
        s.g.Fill(format, format.one);
        for (uint64_t i = 0; i < n; ++i) s.x.Set(format, i, inputs.At(begin + i));
      });
      // The engine, one path at a time (the path is process-wide).
      for (int p = 0; p < npaths; ++p) {
        SetCpuIsa(paths_[p].isa);
        pool_->Run([&](int t) {
          uint64_t begin, n;
          range(t, &begin, &n);
          ThreadState& s = states[t];
          s.y[p].Resize(format, n);
          s.dx[p].Resize(format, n);
          CpuForward(variant.op, format.dtype, s.x.data(format),
                     s.y[p].data(format), 0, static_cast<int64_t>(n));
          for (uint64_t i = 0; forward_perturb && i < n; ++i) {
            s.y[p].Set(format, i,
                       Perturbed(format, *forward_perturb, s.x.Get(format, i),
                                 s.y[p].Get(format, i)));
          }
          Buffer& v = Op::kGradTakesOutputs ? s.y[p] : s.x;
          CpuBackward(variant.op, format.dtype, s.g.data(format),
                      v.data(format), s.dx[p].data(format), 0,
                      static_cast<int64_t>(n));
          for (uint64_t i = 0; grad_perturb && i < n; ++i) {
            s.dx[p].Set(format, i,
                        Perturbed(format, *grad_perturb, s.x.Get(format, i),
                                  s.dx[p].Get(format, i)));
          }
        });
      }
      // The reference, compared with every path.
      pool_->Run([&](int t) {
        uint64_t begin, n;
        range(t, &begin, &n);
        Compare(variant.op, format, &states[t], n);
      });
    }

    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    for (int p = 0; p < npaths; ++p) {
      Row forward{Op::kName, variant.attrs, "forward", format.name,
                  paths_[p].name};
      Row grad{Op::kName, variant.attrs, "grad", format.name, paths_[p].name};
      for (const ThreadState& s : states) {
        forward.stats.Merge(s.forward_stats[p]);
        grad.stats.Merge(s.grad_stats[p]);
      }
      forward.seconds = grad.seconds = seconds;
      grad.nan_gradient_failures = NanGradientFailures(variant.op, format, p);
      rows->push_back(forward);
      rows->push_back(grad);
    }
  }

 private:
  const Tolerance* FindTolerance(const Variant<Op>& variant, const char* pass,
                                 const Format& f) const {
    for (const Tolerance& t : options_.tolerances) {
      if (t.op == Op::kName && t.attrs == variant.attrs && t.pass == pass &&
          t.dtype == f.name) {
        return &t;
      }
    }
    return nullptr;
  }

  const Perturbation* FindPerturbation(const Variant<Op>& variant,
                                       const char* pass) const {
    for (const Perturbation& p : options_.perturb) {
      if (p.op == Op::kName && (p.attrs.empty() || p.attrs == variant.attrs) &&
          p.pass == pass) {
        return &p;
      }
    }
    return nullptr;
  }

  // The value the kernels compute with for stored bits `b`.
  double Input(const Format& f, uint32_t b) const {
    const double v = f.Decode(b);
    if (options_.ftz && f.SubnormalInputsAreZero() && v != 0 &&
        std::fabs(v) < f.MinNormal()) {
      return std::copysign(0.0, v);
    }
    return v;
  }

  void Compare(const Op& op, const Format& f, ThreadState* s, uint64_t n) {
    const int npaths = static_cast<int>(paths_.size());
    // Counters in locals, written back once: updating them through `s` per
    // element was a chain of stores and reloads.
    Stats fwd[3], grad[3];
    for (int p = 0; p < npaths; ++p) {
      fwd[p] = s->forward_stats[p];
      grad[p] = s->grad_stats[p];
    }
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t in = s->x.Get(f, i);
      const double x = Input(f, in);
      const bool finite = std::isfinite(x);
      const double want_y = ForwardAt(op, x);
      Value<double> want_dx{0, 0};
      if (!Op::kGradTakesOutputs) want_dx = GradAt(op, x);
      for (int p = 0; p < npaths; ++p) {
        const uint32_t y_bits = s->y[p].Get(f, i);
        const double got_y = f.Decode(y_bits);
        Record(&fwd[p], f, got_y, want_y, std::fabs(want_y), in,
               finite, forward_tol_);
        // A zero result has the reference's sign (f(-0) = -0 for all ops).
        if (got_y == 0 && want_y == 0 &&
            std::signbit(got_y) != std::signbit(want_y)) {
          ++fwd[p].zero_sign_failures;
        }
        if ((in & ~(f.bits == 32 ? 0x80000000u : 0x8000u)) == 0) {
          (std::signbit(x) ? fwd[p].at_minus_zero : fwd[p].at_plus_zero) =
              got_y;
        }
        if (Op::kGradTakesOutputs) want_dx = GradAt(op, Input(f, y_bits));
        const double got_dx = f.Decode(s->dx[p].Get(f, i));
        Record(&grad[p], f, got_dx, want_dx.value, want_dx.scale, in, finite,
               grad_tol_);
      }
    }
    for (int p = 0; p < npaths; ++p) {
      s->forward_stats[p] = fwd[p];
      s->grad_stats[p] = grad[p];
    }
  }

  // dx for a NaN upstream gradient must be NaN, whatever v is.
  uint64_t NanGradientFailures(const Op& op, const Format& f, int p) const {
    const double vs[] = {0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 0.5, -100.0,
                         100.0, std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity()};
    const int n = sizeof(vs) / sizeof(vs[0]);
    Buffer g, v, dx;
    g.Resize(f, n);
    v.Resize(f, n);
    dx.Resize(f, n);
    const uint32_t nan = f.bits == 32 ? 0x7fc00000u
                         : f.dtype == Dtype::kHalf ? 0x7e00u
                                                   : 0x7fc0u;
    g.Fill(f, nan);
    for (int i = 0; i < n; ++i) v.Set(f, i, Encode(f, vs[i]));
    SetCpuIsa(paths_[p].isa);
    CpuBackward(op, f.dtype, g.data(f), v.data(f), dx.data(f), 0, n);
    uint64_t failures = 0;
    for (int i = 0; i < n; ++i) failures += !std::isnan(f.Decode(dx.Get(f, i)));
    return failures;
  }

  // Bits of a value exactly representable in every format (small integers,
  // halves, zeros, infinities).
  static uint32_t Encode(const Format& f, double v) {
    const float fv = static_cast<float>(v);
    uint32_t b;
    std::memcpy(&b, &fv, sizeof(b));
    if (f.bits == 32) return b;
    if (f.dtype == Dtype::kBFloat16) return b >> 16;
    // half: these values are normal halves or zeros or infinities
    const uint32_t sign = (b >> 16) & 0x8000u;
    if (std::isinf(v)) return sign | 0x7c00u;
    if (v == 0) return sign;
    const int e = static_cast<int>((b >> 23) & 0xffu) - 127 + 15;
    return sign | (static_cast<uint32_t>(e) << 10) | ((b >> 13) & 0x3ffu);
  }

  const Options& options_;
  Pool* pool_;
  const std::vector<Path>& paths_;
  const Tolerance* forward_tol_ = nullptr;
  const Tolerance* grad_tol_ = nullptr;
};

// ---------------------------------------------------------- primitives ----

// A primitive's value at +-inf: its reference's limit (the C library's
// functions give their limits at infinities; 1/x gives 0), NaN at NaN.
template <typename P>
double LimitOf(double x) {
  return P::Reference(x);
}

// One fast_math.h function over `inputs` on every path: rows with pass
// "value", dtype float32.
template <typename P>
void SweepPrimitive(const Options& o, Pool* pool, const std::vector<Path>& paths,
                    const Inputs& inputs, std::vector<Row>* rows) {
  const auto start = std::chrono::steady_clock::now();
  const int nthreads = pool->size();
  const int npaths = static_cast<int>(paths.size());
  const uint64_t slice = uint64_t{1} << 20;
  std::vector<std::vector<Stats>> stats(nthreads, std::vector<Stats>(npaths));
  std::vector<std::vector<float>> in(nthreads), out(nthreads);
  for (uint64_t round = 0; round < inputs.size; round += slice * nthreads) {
    pool->Run([&](int t) {
      const uint64_t begin = std::min(inputs.size, round + slice * t);
      const uint64_t n = std::min(inputs.size, begin + slice) - begin;
      in[t].resize(n);
      out[t].resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t b = inputs.At(begin + i);
        std::memcpy(&in[t][i], &b, sizeof(b));
      }
      for (int p = 0; p < npaths; ++p) {
        ApplyOnIsa(paths[p].isa, P(), in[t].data(), out[t].data(),
                   static_cast<int64_t>(n));
        for (uint64_t i = 0; i < n; ++i) {
          uint32_t b;
          std::memcpy(&b, &in[t][i], sizeof(b));
          double x = in[t][i];
          if (o.ftz && x != 0 && std::fabs(x) < kFloat32.MinNormal()) {
            x = std::copysign(0.0, x);  // read as zero in FTZ/DAZ mode
          }
          if (!P::InDomain(x)) continue;
          const double want = std::isinf(x) || std::isnan(x)
                                  ? LimitOf<P>(x)
                                  : P::Reference(x);
          Record(&stats[t][p], kFloat32, out[t][i], want, std::fabs(want), b,
                 std::isfinite(x), nullptr);
        }
      }
    });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (int p = 0; p < npaths; ++p) {
    Row row{P::kName, "", "value", kFloat32.name, paths[p].name};
    for (int t = 0; t < nthreads; ++t) row.stats.Merge(stats[t][p]);
    row.seconds = seconds;
    rows->push_back(row);
  }
}

// ----------------------------------------------------- reference check -----

// How far the double reference is from the long double one, in float32 ulps
// of the same scale, over the sampled float32 inputs: the evidence that
// double is enough for errors quoted to a hundredth of an ulp.
template <typename Op>
void CheckReference(const Options& o, const std::vector<uint32_t>& bits,
                    std::vector<std::string>* lines, double* worst) {
  const std::vector<Variant<Op>> variants = Reference<Op>::Variants();
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    if (vi > 0 && !o.all_variants) break;
    const Variant<Op>& v = variants[vi];
    double fwd = 0, grad = 0;
    uint32_t fwd_at = 0, grad_at = 0;
    for (uint32_t b : bits) {
      const double x = kFloat32.Decode(b);
      if (!std::isfinite(x)) continue;
      const double yd = ForwardAt(v.op, x);
      const long double yl = ForwardAt(v.op, static_cast<long double>(x));
      const double e = std::fabs(static_cast<long double>(yd) - yl) /
                       kFloat32.Ulp(static_cast<double>(std::fabs(yl)));
      if (e > fwd) fwd = e, fwd_at = b;
      const Value<double> gd = GradAt(v.op, x);
      const Value<long double> gl = GradAt(v.op, static_cast<long double>(x));
      const double eg = std::fabs(static_cast<long double>(gd.value) - gl.value) /
                        kFloat32.Ulp(static_cast<double>(gl.scale));
      if (eg > grad) grad = eg, grad_at = b;
    }
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%-10s %-18s forward %.3g ulp (x %s), grad %.3g ulp (x %s)",
                  Op::kName, v.attrs.c_str(), fwd, Hex(fwd_at, 8).c_str(), grad,
                  Hex(grad_at, 8).c_str());
    lines->push_back(line);
    *worst = std::max(*worst, std::max(fwd, grad));
  }
}

// ----------------------------------------------------------------- main ----

const Format& FormatNamed(const std::string& name) {
  if (name == kHalf.name) return kHalf;
  if (name == kBFloat16.name) return kBFloat16;
  return kFloat32;
}

// One JSON object per line, keys in a fixed order.
class JsonObject {
 public:
  JsonObject& Str(const char* key, const std::string& v) {
    Key(key);
    out_ += "\"" + v + "\"";
    return *this;
  }
  JsonObject& Number(const char* key, double v) {
    Key(key);
    if (std::isnan(v) || std::isinf(v)) {
      out_ += "\"" + Num(v) + "\"";
    } else {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.17g", v);
      out_ += buf;
    }
    return *this;
  }
  JsonObject& Count(const char* key, uint64_t v) {
    Key(key);
    out_ += std::to_string(v);
    return *this;
  }
  JsonObject& Bool(const char* key, bool v) {
    Key(key);
    out_ += v ? "true" : "false";
    return *this;
  }
  std::string Done() const { return "{" + out_ + "}"; }

 private:
  void Key(const char* key) {
    if (!out_.empty()) out_ += ", ";
    out_ += "\"" + std::string(key) + "\": ";
  }
  std::string out_;
};

std::string RowJson(const Row& r) {
  const Format& f = FormatNamed(r.dtype);
  const Stats& s = r.stats;
  const int digits = f.bits / 4;
  JsonObject j;
  j.Str("op", r.op).Str("attrs", r.attrs).Str("pass", r.pass)
      .Str("dtype", r.dtype).Str("isa", r.isa)
      .Count("inputs", s.count)
      .Count("swept", s.count + s.tail_count + s.special)
      .Number("max_ulps", s.ulps.error)
      .Str("at_bits", Hex(s.ulps.input, digits))
      .Number("at_value", f.Decode(s.ulps.input))
      .Number("got", s.ulps.got).Number("want", s.ulps.want)
      .Count("over_half_ulp", s.over_half).Count("over_one_ulp", s.over_one)
      .Number("tolerance_ratio", s.tolerance.error)
      .Str("tolerance_at_bits", Hex(s.tolerance.input, digits))
      .Count("tail_inputs", s.tail_count)
      .Number("tail_max_abs_in_min_normals", std::max(0.0, s.tail.error))
      .Str("tail_at_bits", Hex(s.tail.input, digits))
      .Number("tail_at_value", f.Decode(s.tail.input))
      .Number("tail_got", s.tail.got).Number("tail_want", s.tail.want)
      .Count("specials", s.special)
      .Count("special_failures", s.special_failures)
      .Str("first_special_failure", s.first_special_failure)
      .Count("zero_sign_failures", s.zero_sign_failures)
      .Number("at_plus_zero", s.at_plus_zero)
      .Number("at_minus_zero", s.at_minus_zero)
      .Count("nan_gradient_failures", r.nan_gradient_failures)
      .Number("seconds", r.seconds);
  return j.Done();
}

std::string RowLine(const Row& r) {
  const Format& f = FormatNamed(r.dtype);
  const Stats& s = r.stats;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%-10s %-18s %-7s %-8s %-8s max %9.4g ulp at %s (x=%s got %s "
                "want %s), >0.5 ulp: %" PRIu64 " of %" PRIu64,
                r.op.c_str(), r.attrs.c_str(), r.pass.c_str(), r.dtype.c_str(),
                r.isa.c_str(), s.ulps.error,
                Hex(s.ulps.input, f.bits / 4).c_str(),
                Num(f.Decode(s.ulps.input)).c_str(), Num(s.ulps.got).c_str(),
                Num(s.ulps.want).c_str(), s.over_half, s.count);
  std::string line = buf;
  if (s.tail_count > 0) {
    std::snprintf(buf, sizeof(buf),
                  "; tail (%" PRIu64 "): %.3g FLT_MIN at x=%s (got %s want %s)",
                  s.tail_count, s.tail.error,
                  Num(f.Decode(s.tail.input)).c_str(), Num(s.tail.got).c_str(),
                  Num(s.tail.want).c_str());
    line += buf;
  }
  if (s.tolerance.error >= 0) {
    std::snprintf(buf, sizeof(buf), "; %.3g of the test tolerance at x=%s",
                  s.tolerance.error, Num(f.Decode(s.tolerance.input)).c_str());
    line += buf;
  }
  if (s.special_failures > 0) {
    line += "; SPECIAL VALUE FAILURES: " + std::to_string(s.special_failures) +
            ", first: " + s.first_special_failure;
  }
  if (s.zero_sign_failures > 0) {
    line += "; ZERO SIGN FAILURES: " + std::to_string(s.zero_sign_failures);
  }
  if (r.nan_gradient_failures > 0) {
    line += "; NaN GRADIENT FAILURES: " +
            std::to_string(r.nan_gradient_failures);
  }
  return line;
}

void WriteJson(const Options& o, const std::vector<Row>& rows,
               double seconds, uint64_t float_inputs) {
  FILE* f = std::fopen(o.json_path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
    std::exit(2);
  }
  JsonObject head;
  head.Str("mode", o.full ? "full" : "sample")
      .Count("float32_inputs", float_inputs)
      .Count("seed", o.seed)
      .Count("threads", static_cast<uint64_t>(o.threads))
      .Bool("ftz", o.ftz)
      .Number("seconds", seconds);
  std::string text = head.Done();
  text.pop_back();
  std::fprintf(f, "%s, \"rows\": [\n", text.c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::fprintf(f, "  %s%s\n", RowJson(rows[i]).c_str(),
                 i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

int Main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);

  std::vector<Path> paths;
  for (Path p : {Path{CpuIsa::kBaseline, "baseline"}, Path{CpuIsa::kAvx2, "avx2"},
                 Path{CpuIsa::kAvx512, "avx512"}}) {
    if (!Wanted(o.isas, p.name)) continue;
    if (SetCpuIsa(p.isa) != p.isa) {
      std::printf("path %s: not on this CPU, skipped\n", p.name);
      continue;
    }
    paths.push_back(p);
  }

  // Also the float32 inputs of the variants a full sweep does not cover.
  const std::vector<uint32_t> sampled =
      SampledFloatBits(o.sample, o.seed, o.extra_float_bits);

  if (o.check_reference) {
    std::vector<std::string> lines;
    double worst = 0;
    const std::vector<uint32_t> bits =
        SampledFloatBits(o.sample, o.seed, o.extra_float_bits);
#define TF_OPS_CHECK_REFERENCE(Name)                               \
  if (Wanted(o.ops, #Name)) CheckReference<Name>(o, bits, &lines, &worst);
    TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_CHECK_REFERENCE)
#undef TF_OPS_CHECK_REFERENCE
    std::printf("double vs long double reference, in float32 ulps:\n");
    for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
    std::printf("largest difference: %.3g float32 ulp\n", worst);
    return 0;
  }

  Pool pool(o.threads, o.ftz);
  std::vector<Row> rows;
  const auto start = std::chrono::steady_clock::now();
  uint64_t float_inputs = 0;

  if (o.primitives) {
    Inputs inputs;
    if (o.full) {
      inputs.size = uint64_t{1} << 32;
    } else {
      inputs.size = sampled.size();
      inputs.list = &sampled;
    }
    float_inputs = inputs.size;
#define TF_OPS_SWEEP_PRIMITIVE(Name)                                     \
  if (Wanted(o.ops, primitives::Name::kName)) {                          \
    const size_t first = rows.size();                                    \
    SweepPrimitive<primitives::Name>(o, &pool, paths, inputs, &rows);    \
    for (size_t r = first; r < rows.size(); ++r) {                       \
      std::printf("%s  [%.1f s]\n", RowLine(rows[r]).c_str(),            \
                  rows[r].seconds);                                      \
      std::fflush(stdout);                                               \
    }                                                                    \
  }
    TF_OPS_FOR_EACH_PRIMITIVE(TF_OPS_SWEEP_PRIMITIVE)
#undef TF_OPS_SWEEP_PRIMITIVE
  }


  auto sweep_op = [&](auto tag) {
    using Op = decltype(tag);
    if (o.primitives || !Wanted(o.ops, Op::kName)) return;
    Sweeper<Op> sweeper(o, &pool, paths);
    const std::vector<Variant<Op>> variants = Reference<Op>::Variants();
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      if (vi > 0 && !o.all_variants) break;
      for (const Format* f : {&kFloat32, &kHalf, &kBFloat16}) {
        if (!Wanted(o.dtypes, f->name)) continue;
        Inputs inputs;
        if (f->bits == 16) {
          inputs.size = uint64_t{1} << 16;
        } else if (o.full && variants[vi].full) {
          inputs.size = uint64_t{1} << 32;
        } else {
          inputs.size = sampled.size();
          inputs.list = &sampled;
        }
        if (f->bits == 32) float_inputs = std::max(float_inputs, inputs.size);
        const size_t first = rows.size();
        sweeper.Run(variants[vi], *f, inputs, &rows);
        for (size_t r = first; r < rows.size(); ++r) {
          std::printf("%s  [%.1f s]\n", RowLine(rows[r]).c_str(),
                      rows[r].seconds);
          std::fflush(stdout);
        }
      }
    }
  };
#define TF_OPS_SWEEP(Name) sweep_op(Name());
  TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_SWEEP)
#undef TF_OPS_SWEEP

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  uint64_t failures = 0;
  for (const Row& r : rows) {
    failures += r.stats.special_failures + r.stats.zero_sign_failures +
                r.nan_gradient_failures;
  }
  std::printf("%zu rows, %d threads, %.1f s; %" PRIu64
              " NaN / infinity / zero-sign failures\n",
              rows.size(), o.threads, seconds, failures);
  if (!o.json_path.empty()) WriteJson(o, rows, seconds, float_inputs);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace accuracy
}  // namespace tf_ops

int main(int argc, char** argv) { return tf_ops::accuracy::Main(argc, argv); }

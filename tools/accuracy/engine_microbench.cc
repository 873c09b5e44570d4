// engine_microbench: what the CPU engine's loops and fast_math.h's functions
// cost, TF-free. The speed side of the accuracy sweep's question (does a
// faster formula cost accuracy?), built from the same engine sources.
//
//   engine_microbench [--log2 24] [--threads 1,2] [--reps 9]
//                     [--ops Gelu,..] [--dtypes float32,half,bfloat16]
//                     [--isas baseline,avx2,avx512] [--primitives-only]
//                     [--engine-only]
//
// Engine: CpuForward / CpuBackward over 2^log2 elements (the bench's normal(0,
// 3) inputs; normal(0, 1) upstream gradients), split into one contiguous shard
// per thread as TensorFlow's pool does, against memcpy of the bytes the pass
// moves (forward reads and writes n elements, grad reads 2n and writes n: the
// bench's copy floor). Interleaved with the copy; the best of --reps, in CPU
// time of the slowest thread (CLOCK_THREAD_CPUTIME_ID), so that other loads
// on a shared machine count as little as they can.
// Primitives: each function over 4096 floats that stay in L1, one thread, in
// a loop compiled for each instruction set as the engine's are: the compute
// cost without memory traffic.
// Times are CPU ns per element; cycles per element use the clock measured by
// a chain of dependent adds (the VM this was written on has no cycle
// counter, so `perf stat -e cycles` is not an option there).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/activation/activation_cpu.h"
#include "tf_ops/cc/core/fast_math.h"
#include "tools/accuracy/isa_loops.h"
#include "tools/accuracy/primitives.h"
#include "tools/accuracy/thread_pool.h"

namespace tf_ops {
namespace accuracy {
namespace {

// CPU time of the calling thread: on a shared machine, time the thread was
// not running is not counted (wall time is, and varies with the load).
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Runs fn on every worker; returns the largest CPU time a worker spent.
double RunTimed(Pool* pool, const std::function<void(int)>& fn) {
  std::vector<double> spent(pool->size());
  pool->Run([&](int t) {
    const double t0 = ThreadSeconds();
    fn(t);
    spent[t] = ThreadSeconds() - t0;
  });
  return *std::max_element(spent.begin(), spent.end());
}

// GHz of this core, from a chain of dependent adds (1 cycle each), in CPU
// time.
double MeasureGhz() {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t v = 1;
    const uint64_t n = 200000000;
    const double t0 = ThreadSeconds();
    for (uint64_t i = 0; i < n; ++i) {
      asm volatile("add $1, %0" : "+r"(v));
    }
    best = std::max(best, n / (ThreadSeconds() - t0) / 1e9);
  }
  return best;
}

struct Options {
  int log2 = 24;
  std::vector<int> threads = {1, 2};
  int reps = 9;
  std::vector<std::string> ops, dtypes, isas;
  bool engine = true, primitives = true;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

bool Wanted(const std::vector<std::string>& list, const std::string& item) {
  return list.empty() ||
         std::find(list.begin(), list.end(), item) != list.end();
}

// The least time: on a shared machine the other loads only ever add to it.
double Best(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

// ------------------------------------------------------------- engine -----

struct DtypeCase {
  const char* name;
  Dtype dtype;
  int bytes;
};

// Bits of a float value in each storage type (round to nearest even).
uint32_t Store(Dtype d, float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  if (d == Dtype::kFloat) return b;
  if (d == Dtype::kBFloat16) return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  // half, for the normal(0, 3) values used here: normal or zero results.
  const uint32_t sign = (b >> 16) & 0x8000u;
  const float a = std::fabs(v);
  if (a < 6.1035156e-05f) return sign;  // flush the rare tiny ones
  int e;
  const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));
  if (mant == 2048) mant = 1024, ++e;
  return sign | (static_cast<uint32_t>(e + 14) << 10) | (mant & 0x3ffu);
}

struct Buffers {
  std::vector<unsigned char> x, g, v, out, copy_src, copy_dst;
};

template <typename Op>
void BenchOp(const Options& o, Pool* pool, const DtypeCase& d,
             const Op& op, const std::string& label, CpuIsa isa,
             const char* isa_name, double ghz) {
  const int64_t n = int64_t{1} << o.log2;
  const size_t bytes = static_cast<size_t>(n) * d.bytes;
  Buffers b;
  b.x.resize(bytes);
  b.g.resize(bytes);
  b.v.resize(bytes);
  b.out.resize(bytes);
  b.copy_src.resize(2 * bytes);
  b.copy_dst.resize(2 * bytes);
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t xb = Store(d.dtype, 3.0f * normal(rng));
    const uint32_t gb = Store(d.dtype, normal(rng));
    std::memcpy(&b.x[i * d.bytes], &xb, d.bytes);
    std::memcpy(&b.g[i * d.bytes], &gb, d.bytes);
  }
  SetCpuIsa(isa);
  CpuForward(op, d.dtype, b.x.data(), b.v.data(), 0, n);  // Elu's outputs
  if (!Op::kGradTakesOutputs) b.v = b.x;
  std::memset(b.out.data(), 0, bytes);
  std::memset(b.copy_dst.data(), 0, 2 * bytes);

  const int threads = pool->size();
  auto shard = [&](int t, int64_t* begin, int64_t* end) {
    *begin = n * t / threads;
    *end = n * (t + 1) / threads;
  };
  auto forward = [&](int t) {
    int64_t begin, end;
    shard(t, &begin, &end);
    CpuForward(op, d.dtype, b.x.data(), b.out.data(), begin, end);
  };
  auto grad = [&](int t) {
    int64_t begin, end;
    shard(t, &begin, &end);
    CpuBackward(op, d.dtype, b.g.data(), b.v.data(), b.out.data(), begin,
                end);
  };
  // The copy floor: memcpy of half the bytes moved (read + write).
  auto copy = [&](size_t copy_bytes) {
    return [&, copy_bytes](int t) {
      const size_t begin = copy_bytes * t / threads;
      const size_t end = copy_bytes * (t + 1) / threads;
      std::memcpy(b.copy_dst.data() + begin, b.copy_src.data() + begin,
                  end - begin);
    };
  };
  for (const char* pass : {"forward", "grad"}) {
    const bool is_forward = pass[0] == 'f';
    const std::function<void(int)> work =
        is_forward ? std::function<void(int)>(forward)
                   : std::function<void(int)>(grad);
    const std::function<void(int)> floor =
        copy(is_forward ? bytes : bytes * 3 / 2);
    std::vector<double> tw, tf;
    pool->Run(work);  // warm up
    pool->Run(floor);
    for (int r = 0; r < o.reps; ++r) {
      tw.push_back(RunTimed(pool, work));
      tf.push_back(RunTimed(pool, floor));
    }
    // Per element, in CPU time of the slowest thread (the wall time alone).
    const double ns = Best(tw) / n * 1e9;
    const double floor_ns = Best(tf) / n * 1e9;
    std::printf(
        "%-18s %-8s %-7s %-8s %d thr  %7.3f ns/elem  floor %7.3f  x floor "
        "%5.2f  %6.2f cycles/elem/core\n",
        label.c_str(), d.name, pass, isa_name, threads, ns, floor_ns,
        ns / floor_ns, ns * threads * ghz);
    std::fflush(stdout);
  }
}

// --------------------------------------------------------- primitives -----

template <typename P>
void BenchPrimitive(const char* name, P fn, float lo, float hi,
                    const Options& o, double ghz) {
  const int n = 4096;
  std::vector<float> in(n), out(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& v : in) v = u(rng);
  for (const auto& isa : {std::make_pair(CpuIsa::kBaseline, "baseline"),
                          std::make_pair(CpuIsa::kAvx2, "avx2"),
                          std::make_pair(CpuIsa::kAvx512, "avx512")}) {
    if (!Wanted(o.isas, isa.second) || SetCpuIsa(isa.first) != isa.first) {
      continue;
    }
    const int inner = 2000;
    std::vector<double> t;
    ApplyOnIsa(isa.first, fn, in.data(), out.data(), n);
    for (int r = 0; r < o.reps; ++r) {
      const double t0 = ThreadSeconds();
      for (int k = 0; k < inner; ++k) {
        ApplyOnIsa(isa.first, fn, in.data(), out.data(), n);
        asm volatile("" : : "r"(out.data()) : "memory");
      }
      t.push_back((ThreadSeconds() - t0) / (double(inner) * n));
    }
    const double ns = Best(t) * 1e9;
    std::printf("%-24s %-8s %7.3f ns/elem  %6.2f cycles/elem\n", name,
                isa.second, ns, ns * ghz);
    std::fflush(stdout);
  }
}

void BenchPrimitives(const Options& o, double ghz) {
  // Yardsticks: a copy, and the division the logistic had.
  BenchPrimitive("copy", [](float x) { return x; }, -10, 10, o, ghz);
  BenchPrimitive("1/(1+x) (division)", [](float x) { return 1.0f / (1.0f + x); },
                 0, 10, o, ghz);
  BenchPrimitive("logistic, 1/(1+e)",
                 [](float x) { return 1.0f / (1.0f + fast_math::ExpF(-x)); },
                 -20, 20, o, ghz);
  BenchPrimitive("logistic, ReciprocalF(1+e)",
                 [](float x) {
                   return fast_math::ReciprocalF(1.0f + fast_math::ExpF(-x));
                 },
                 -20, 20, o, ghz);
#define TF_OPS_BENCH_PRIMITIVE(Name)                                      \
  if (Wanted(o.ops, primitives::Name::kName)) {                           \
    BenchPrimitive(primitives::Name::kName, primitives::Name(),           \
                   primitives::Name::kBenchLo, primitives::Name::kBenchHi, \
                   o, ghz);                                               \
  }
  TF_OPS_FOR_EACH_PRIMITIVE(TF_OPS_BENCH_PRIMITIVE)
#undef TF_OPS_BENCH_PRIMITIVE
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--log2") {
      o.log2 = std::atoi(value().c_str());
    } else if (a == "--threads") {
      o.threads.clear();
      for (const std::string& t : Split(value())) o.threads.push_back(std::atoi(t.c_str()));
    } else if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
    } else if (a == "--ops") {
      o.ops = Split(value());
    } else if (a == "--dtypes") {
      o.dtypes = Split(value());
    } else if (a == "--isas") {
      o.isas = Split(value());
    } else if (a == "--primitives-only") {
      o.engine = false;
    } else if (a == "--engine-only") {
      o.primitives = false;
    } else {
      std::fprintf(stderr, "unknown argument %s (see the file comment)\n",
                   a.c_str());
      return 2;
    }
  }
  const double ghz = MeasureGhz();
  std::printf("clock %.2f GHz (dependent adds)\n", ghz);
  if (o.primitives) BenchPrimitives(o, ghz);
  if (!o.engine) return 0;

  const DtypeCase dtypes[] = {{"float32", Dtype::kFloat, 4},
                              {"half", Dtype::kHalf, 2},
                              {"bfloat16", Dtype::kBFloat16, 2}};
  for (int threads : o.threads) {
    Pool pool(threads, /*ftz=*/true);
    for (const auto& isa : {std::make_pair(CpuIsa::kBaseline, "baseline"),
                            std::make_pair(CpuIsa::kAvx2, "avx2"),
                            std::make_pair(CpuIsa::kAvx512, "avx512")}) {
      if (!Wanted(o.isas, isa.second) || SetCpuIsa(isa.first) != isa.first) {
        continue;
      }
      for (const DtypeCase& d : dtypes) {
        if (!Wanted(o.dtypes, d.name)) continue;
        auto bench = [&](auto op, const std::string& label) {
          BenchOp(o, &pool, d, op, label, isa.first, isa.second, ghz);
        };
#define TF_OPS_BENCH(Name)                  \
  if (Wanted(o.ops, #Name)) {               \
    bench(Name(), #Name);                   \
  }
        TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_BENCH)
#undef TF_OPS_BENCH
        if (Wanted(o.ops, "Gelu")) {  // the tanh form, a formula of its own
          Gelu tanh_form;
          tanh_form.approximate = true;
          bench(tanh_form, "Gelu(approximate)");
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace accuracy
}  // namespace tf_ops

int main(int argc, char** argv) { return tf_ops::accuracy::Main(argc, argv); }

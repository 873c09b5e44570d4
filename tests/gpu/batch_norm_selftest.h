// The batch-norm family of the GPU self-test: the CUDA engine
// (cu/batch_norm/batch_norm_gpu.h) against the CPU engine
// (cc/batch_norm/batch_norm_cpu.h) for the five ops, every activation (and
// Identity), four dtypes, channels-last, channels-first and a channel longer
// than one reduction chunk, with and without gamma/beta; the passes left out
// when y or dx is null (statistics alone, sums alone); the training grad as
// the inference grad's sums plus the input-grad pass, bit for bit; and the
// GPU's reductions bit-identical between two runs. Prints
//   SUMMARY checks family=batch_norm passed=N failed=M
// and returns the tally (gpu_selftest.cu's main adds it to the total).

#ifndef TF_OPS_TESTS_GPU_BATCH_NORM_SELFTEST_H_
#define TF_OPS_TESTS_GPU_BATCH_NORM_SELFTEST_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/activation/activation_choice.h"
#include "tf_ops/cc/batch_norm/batch_norm_cpu.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cu/batch_norm/batch_norm_gpu.h"

namespace tf_ops {
namespace batch_norm_selftest {

struct Result {
  int passed = 0;
  int failed = 0;
};

inline int ElementBytes(Dtype d) {
  return d == Dtype::kDouble ? 8 : d == Dtype::kFloat ? 4 : 2;
}
inline const char* DtypeName(Dtype d) {
  switch (d) {
    case Dtype::kHalf: return "float16";
    case Dtype::kBFloat16: return "bfloat16";
    case Dtype::kFloat: return "float32";
    case Dtype::kDouble: return "float64";
  }
  return "?";
}
// Tolerance relative to max(1, the largest |value| of the output).
inline double Rtol(Dtype d) {
  switch (d) {
    case Dtype::kHalf: return 4e-3;
    case Dtype::kBFloat16: return 3e-2;
    case Dtype::kFloat: return 2e-4;
    case Dtype::kDouble: return 1e-10;
  }
  return 0;
}

// A host buffer of n elements of dtype d (x-typed) or of the channel type.
struct Buffer {
  Dtype dtype;
  std::vector<unsigned char> bytes;
  Buffer(Dtype d, int64_t n) : dtype(d), bytes(n * ElementBytes(d)) {}
  int64_t size() const { return bytes.size() / ElementBytes(dtype); }
  double Get(int64_t i) const {
    switch (dtype) {
      case Dtype::kHalf: {
        uint16_t v;
        std::memcpy(&v, &bytes[2 * i], 2);
        return narrow_float::HalfToFloat(v);
      }
      case Dtype::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, &bytes[2 * i], 2);
        return narrow_float::BFloat16ToFloat(v);
      }
      case Dtype::kFloat: {
        float v;
        std::memcpy(&v, &bytes[4 * i], 4);
        return v;
      }
      case Dtype::kDouble: {
        double v;
        std::memcpy(&v, &bytes[8 * i], 8);
        return v;
      }
    }
    return 0;
  }
  void Set(int64_t i, double x) {
    switch (dtype) {
      case Dtype::kHalf: {
        const uint16_t v = narrow_float::FloatToHalf(static_cast<float>(x));
        std::memcpy(&bytes[2 * i], &v, 2);
        return;
      }
      case Dtype::kBFloat16: {
        const uint16_t v = narrow_float::FloatToBFloat16(static_cast<float>(x));
        std::memcpy(&bytes[2 * i], &v, 2);
        return;
      }
      case Dtype::kFloat: {
        const float v = static_cast<float>(x);
        std::memcpy(&bytes[4 * i], &v, 4);
        return;
      }
      case Dtype::kDouble:
        std::memcpy(&bytes[8 * i], &x, 8);
        return;
    }
  }
};

// A device copy of a host buffer, freed on scope exit.
struct Device {
  void* p = nullptr;
  size_t n = 0;
  explicit Device(const Buffer& b) : n(b.bytes.size()) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1)));
    if (n) CUDA_CHECK(cudaMemcpy(p, b.bytes.data(), n, cudaMemcpyHostToDevice));
  }
  explicit Device(size_t bytes) : n(bytes) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1)));
    CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(n, 1)));
  }
  ~Device() { cudaFree(p); }
  void CopyTo(Buffer* b) const {
    if (n) CUDA_CHECK(cudaMemcpy(b->bytes.data(), p, n, cudaMemcpyDeviceToHost));
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

inline void Serial(int64_t total, int64_t,
                   const std::function<void(int64_t, int64_t)>& fn) {
  if (total > 0) fn(0, total);
}

inline bool Close(const Buffer& cpu, const Buffer& gpu, double rtol,
                  std::string* where) {
  double scale = 1.0;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    if (std::isfinite(cpu.Get(i))) scale = std::max(scale, std::fabs(cpu.Get(i)));
  }
  for (int64_t i = 0; i < cpu.size(); ++i) {
    const double a = cpu.Get(i), b = gpu.Get(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::fabs(a - b) <= rtol * scale)) {
      *where = "element " + std::to_string(i) + ": cpu " + std::to_string(a) +
               " gpu " + std::to_string(b);
      return false;
    }
  }
  return true;
}

inline void Check(Result* r, bool ok, const std::string& what) {
  if (ok) {
    ++r->passed;
  } else {
    ++r->failed;
    std::printf("FAILED batch_norm %s\n", what.c_str());
  }
}

// The four ops for one activation, dtype and layout.
inline void CheckCase(const ActivationChoice& act, const char* act_name,
                      Dtype dtype, BatchNormLayout l, bool affine,
                      std::mt19937* rng, Result* r) {
  const Dtype u = dtype == Dtype::kDouble ? Dtype::kDouble : Dtype::kFloat;
  const int64_t n = l.outer * l.channels * l.inner, c = l.channels;
  std::normal_distribution<double> normal(0.0, 1.0);
  Buffer x(dtype, n), dy(dtype, n), gamma(u, c), beta(u, c), dm(u, c), dv(u, c);
  for (int64_t i = 0; i < n; ++i) {
    x.Set(i, 3.0 + 2.0 * normal(*rng));
    dy.Set(i, normal(*rng));
  }
  for (int64_t i = 0; i < c; ++i) {
    gamma.Set(i, 1.0 + 0.5 * normal(*rng));
    beta.Set(i, 0.5 * normal(*rng));
    dm.Set(i, normal(*rng));
    dv.Set(i, normal(*rng));
  }
  const float eps = 1e-3f;
  const std::string what = std::string(act_name) + " " + DtypeName(dtype) +
                           " [" + std::to_string(l.outer) + "," +
                           std::to_string(l.channels) + "," +
                           std::to_string(l.inner) + "]" +
                           (affine ? "" : " no gamma/beta");
  const void* g_host = affine ? gamma.bytes.data() : nullptr;
  const void* b_host = affine ? beta.bytes.data() : nullptr;
  std::vector<double> scratch(BatchNormScratchDoubles(l) + 1);

  // CPU reference.
  Buffer y(dtype, n), mean(u, c), var(u, c);
  CpuBatchNormTraining(act, dtype, x.bytes.data(), g_host, b_host, eps,
                       y.bytes.data(), mean.bytes.data(), var.bytes.data(), l,
                       scratch.data(), Serial);
  Buffer dx(dtype, n), dg(u, c), db(u, c);
  CpuBatchNormTrainingGrad(act, dtype, dy.bytes.data(), x.bytes.data(), g_host,
                           b_host, mean.bytes.data(), var.bytes.data(),
                           dm.bytes.data(), dv.bytes.data(), eps,
                           dx.bytes.data(), dg.bytes.data(), db.bytes.data(), l,
                           scratch.data(), Serial);
  Buffer yi(dtype, n);
  CpuBatchNormInference(act, dtype, x.bytes.data(), g_host, b_host,
                        mean.bytes.data(), var.bytes.data(), eps,
                        yi.bytes.data(), l, scratch.data(), Serial);
  Buffer dxi(dtype, n), dgi(u, c), dbi(u, c);
  CpuBatchNormInferenceGrad(act, dtype, dy.bytes.data(), x.bytes.data(),
                            g_host, b_host, mean.bytes.data(),
                            var.bytes.data(), eps, dxi.bytes.data(),
                            dgi.bytes.data(), dbi.bytes.data(), l,
                            scratch.data(), Serial);

  // GPU, twice for the bit-identity check.
  Device d_x(x), d_dy(dy), d_gamma(gamma), d_beta(beta), d_dm(dm), d_dv(dv);
  Device d_scratch(sizeof(double) * (BatchNormGpuScratchDoubles(l) + 1));
  const void* g_dev = affine ? d_gamma.p : nullptr;
  const void* b_dev = affine ? d_beta.p : nullptr;
  Buffer runs[2][10] = {
      {Buffer(dtype, n), Buffer(u, c), Buffer(u, c), Buffer(dtype, n),
       Buffer(u, c), Buffer(u, c), Buffer(dtype, n), Buffer(dtype, n),
       Buffer(u, c), Buffer(u, c)},
      {Buffer(dtype, n), Buffer(u, c), Buffer(u, c), Buffer(dtype, n),
       Buffer(u, c), Buffer(u, c), Buffer(dtype, n), Buffer(dtype, n),
       Buffer(u, c), Buffer(u, c)}};
  bool launched = true;
  // --small (selftest_size.h): one run (the GPU's run checks the bits).
  const int run_count = SmallShapes() ? 1 : 2;
  for (int run = 0; run < run_count; ++run) {
    Buffer* o = runs[run];
    Device gy(o[0].bytes.size()), gm(o[1].bytes.size()), gv(o[2].bytes.size());
    Device gdx(o[3].bytes.size()), gdg(o[4].bytes.size()), gdb(o[5].bytes.size());
    Device gyi(o[6].bytes.size()), gdxi(o[7].bytes.size());
    Device gdgi(o[8].bytes.size()), gdbi(o[9].bytes.size());
    double* s = static_cast<double*>(d_scratch.p);
    const char* e[4] = {
        LaunchBatchNormTraining(act, dtype, d_x.p, g_dev, b_dev, eps, gy.p,
                                gm.p, gv.p, l, s, nullptr),
        nullptr, nullptr, nullptr};
    e[1] = LaunchBatchNormTrainingGrad(act, dtype, d_dy.p, d_x.p, g_dev, b_dev,
                                       gm.p, gv.p, d_dm.p, d_dv.p, eps, gdx.p,
                                       gdg.p, gdb.p, l, s, nullptr);
    e[2] = LaunchBatchNormInference(act, dtype, d_x.p, g_dev, b_dev, gm.p,
                                    gv.p, eps, gyi.p, l, s, nullptr);
    e[3] = LaunchBatchNormInferenceGrad(act, dtype, d_dy.p, d_x.p, g_dev,
                                        b_dev, gm.p, gv.p, eps, gdxi.p,
                                        gdgi.p, gdbi.p, l, s, nullptr);
    // The passes left out, and the training grad in two halves.
    Device gm2(o[1].bytes.size()), gv2(o[2].bytes.size());
    Device gdg2(o[4].bytes.size()), gdb2(o[5].bytes.size());
    Device gdx2(o[3].bytes.size());
    const char* e2[3] = {
        LaunchBatchNormTraining(act, dtype, d_x.p, g_dev, b_dev, eps, nullptr,
                                gm2.p, gv2.p, l, s, nullptr),
        LaunchBatchNormInferenceGrad(act, dtype, d_dy.p, d_x.p, g_dev, b_dev,
                                     gm.p, gv.p, eps, nullptr, gdg2.p,
                                     gdb2.p, l, s, nullptr),
        nullptr};
    e2[2] = LaunchBatchNormTrainingInputGrad(
        act, dtype, d_dy.p, d_x.p, g_dev, b_dev, gm.p, gv.p, d_dm.p, d_dv.p,
        gdg2.p, gdb2.p, static_cast<double>(l.count()), eps, gdx2.p, l, s,
        nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const char* err : e2) {
      if (err != nullptr) {
        launched = false;
        std::printf("launch error: %s\n", err);
      }
    }
    if (run == 0) {
      Buffer a(u, c), b(u, c), da(dtype, n);
      gm2.CopyTo(&a);
      gv2.CopyTo(&b);
      gdx2.CopyTo(&da);
      gm.CopyTo(&o[1]);
      gv.CopyTo(&o[2]);
      gdx.CopyTo(&o[3]);
      Check(r, a.bytes == o[1].bytes && b.bytes == o[2].bytes,
            what + " statistics alone (y null) as with y");
      gdg2.CopyTo(&a);
      gdb2.CopyTo(&b);
      gdgi.CopyTo(&o[8]);
      gdbi.CopyTo(&o[9]);
      Check(r, a.bytes == o[8].bytes && b.bytes == o[9].bytes,
            what + " grad sums alone (dx null) as with dx");
      Check(r, da.bytes == o[3].bytes,
            what + " training grad = inference grad sums + input-grad pass");
    }
    for (const char* err : e) {
      if (err != nullptr) {
        launched = false;
        std::printf("launch error: %s\n", err);
      }
    }
    gy.CopyTo(&o[0]); gm.CopyTo(&o[1]); gv.CopyTo(&o[2]);
    gdx.CopyTo(&o[3]); gdg.CopyTo(&o[4]); gdb.CopyTo(&o[5]);
    gyi.CopyTo(&o[6]); gdxi.CopyTo(&o[7]); gdgi.CopyTo(&o[8]);
    gdbi.CopyTo(&o[9]);
  }
  Check(r, launched, what + " launches");
  const Buffer* cpu[10] = {&y, &mean, &var, &dx, &dg, &db, &yi, &dxi, &dgi, &dbi};
  const char* names[10] = {"y", "batch_mean", "batch_variance", "dx", "dgamma",
                           "dbeta", "inference y", "inference dx",
                           "inference dgamma", "inference dbeta"};
  const double rtol = Rtol(dtype) * (dtype == Dtype::kFloat ? 1.0 : 1.0);
  for (int k = 0; k < 10; ++k) {
    std::string where;
    Check(r, Close(*cpu[k], runs[0][k], rtol, &where),
          what + " " + names[k] + " " + where);
    if (run_count == 2) {
      Check(r, runs[0][k].bytes == runs[1][k].bytes,
            what + " " + names[k] + " bit-identical across runs");
    }
  }

  // In place, as TensorFlow may run them (forward_input_or_allocate_output):
  // y over x (training, inference) and dx over dy or over x (both
  // gradients), the gradients at the CPU's statistics. --small
  // (selftest_size.h): float16 and float64 over channels last, float32 over
  // an inner dimension.
  if (SmallShapes() && dtype != Dtype::kHalf && dtype != Dtype::kDouble &&
      !(dtype == Dtype::kFloat && l.inner > 1)) {
    return;
  }
  double* s = static_cast<double*>(d_scratch.p);
  Device d_mean(mean), d_var(var), m2(mean.bytes.size()), v2(var.bytes.size());
  Device g1(dg.bytes.size()), b1(db.bytes.size()), g2(dgi.bytes.size()),
      b2(dbi.bytes.size());
  struct InPlace {
    const char* what;
    const Buffer& input;  // what the buffer holds before the launch
    const Buffer& want;
  };
  const InPlace in_place[6] = {{"y over x", x, y},
                           {"inference y over x", x, yi},
                           {"dx over dy", dy, dx},
                           {"dx over x", x, dx},
                           {"inference dx over dy", dy, dxi},
                           {"inference dx over x", x, dxi}};
  for (int k = 0; k < 6; ++k) {
    Device b(in_place[k].input);
    // The gradients' dy and x: the buffer where the run writes over it.
    const void* grad_dy = k == 2 || k == 4 ? b.p : d_dy.p;
    const void* grad_x = k == 3 || k == 5 ? b.p : d_x.p;
    const char* e =
        k == 0 ? LaunchBatchNormTraining(act, dtype, b.p, g_dev, b_dev, eps,
                                         b.p, m2.p, v2.p, l, s, nullptr)
        : k == 1 ? LaunchBatchNormInference(act, dtype, b.p, g_dev, b_dev,
                                            d_mean.p, d_var.p, eps, b.p, l, s,
                                            nullptr)
        : k < 4 ? LaunchBatchNormTrainingGrad(
                      act, dtype, grad_dy, grad_x, g_dev, b_dev, d_mean.p,
                      d_var.p, d_dm.p, d_dv.p, eps, b.p, g1.p, b1.p, l, s,
                      nullptr)
                : LaunchBatchNormInferenceGrad(act, dtype, grad_dy, grad_x,
                                               g_dev, b_dev, d_mean.p, d_var.p,
                                               eps, b.p, g2.p, b2.p, l, s,
                                               nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::string name = what + " in place (" + in_place[k].what + ")";
    if (e != nullptr) {
      Check(r, false, name + " launch: " + e);
      continue;
    }
    Buffer out(dtype, n);
    b.CopyTo(&out);
    std::string where;
    Check(r, Close(in_place[k].want, out, rtol, &where), name + " " + where);
  }
}

inline Result RunAll(bool quick) {
  Result r;
  std::mt19937 rng(23);
  const std::vector<BatchNormLayout> layouts = {
      {30, 7, 1}, {3, 5, 37}, {2, 3, 4500}, {9000, 2, 1}};
  const Dtype dtypes[] = {Dtype::kHalf, Dtype::kBFloat16, Dtype::kFloat,
                          Dtype::kDouble};
#define TF_OPS_BN_SELFTEST(Name)                                          \
  {                                                                       \
    ActivationChoice act;                                                 \
    act.SetKind(#Name);                                                   \
    for (Dtype d : dtypes) {                                              \
      for (size_t li = 0; li < layouts.size(); ++li) {                    \
        if (quick && li > 1) continue;                                    \
        /* --small: Identity in every dtype (the second layout in        \
           float32), Swish in float32 */                                  \
        if (SmallShapes() &&                                              \
            (std::strcmp(#Name, "Identity") == 0                          \
                 ? li == 1 && d != Dtype::kFloat                          \
                 : std::strcmp(#Name, "Swish") != 0 ||                    \
                       d != Dtype::kFloat || li == 1)) {                  \
          continue;                                                       \
        }                                                                 \
        CheckCase(act, #Name, d, layouts[li], li != 1, &rng, &r);         \
      }                                                                   \
    }                                                                     \
  }
  TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_BN_SELFTEST)
#undef TF_OPS_BN_SELFTEST
  std::printf("SUMMARY checks family=batch_norm passed=%d failed=%d\n",
              r.passed, r.failed);
  return r;
}

}  // namespace batch_norm_selftest
}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_BATCH_NORM_SELFTEST_H_

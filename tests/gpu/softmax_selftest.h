// The softmax family in the TF-free GPU self-test (gpu_selftest.cu calls
// CheckSoftmaxFamily from main): softmax, log_softmax, their gradients, the
// scaled masked softmax (mask [B, 1, Q, K], causal, fully masked rows) and the
// sparse cross-entropy (smoothing, z-loss, ignored rows), in four dtypes, row
// lengths on both sides of the warp/block switch (kWarpRowCols), each through
// the launchers of cu/softmax/softmax_gpu.h, compared with the CPU engine
// (softmax_cpu.h) on the same inputs; the GPU run twice must give the same
// bits. Prints `SUMMARY checks family=softmax passed=N failed=M`.

#ifndef TF_OPS_TESTS_GPU_SOFTMAX_SELFTEST_H_
#define TF_OPS_TESTS_GPU_SOFTMAX_SELFTEST_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/core/narrow_float.h"
#include "tf_ops/cc/softmax/softmax_cpu.h"
#include "tf_ops/cu/softmax/softmax_gpu.h"

namespace tf_ops {
namespace softmax_selftest {

struct Result {
  int passed = 0;
  int failed = 0;
};

inline int Bytes(Dtype d) {
  return d == Dtype::kDouble ? 8 : d == Dtype::kFloat ? 4 : 2;
}
inline double Get(Dtype d, const std::vector<unsigned char>& b, int64_t i) {
  const unsigned char* p = b.data() + i * Bytes(d);
  if (d == Dtype::kDouble) { double v; std::memcpy(&v, p, 8); return v; }
  if (d == Dtype::kFloat) { float v; std::memcpy(&v, p, 4); return v; }
  uint16_t v; std::memcpy(&v, p, 2);
  return d == Dtype::kHalf ? narrow_float::HalfToFloat(v) : narrow_float::BFloat16ToFloat(v);
}
inline void Set(Dtype d, std::vector<unsigned char>* b, int64_t i, double x) {
  unsigned char* p = b->data() + i * Bytes(d);
  if (d == Dtype::kDouble) { std::memcpy(p, &x, 8); return; }
  const float f = static_cast<float>(x);
  if (d == Dtype::kFloat) { std::memcpy(p, &f, 4); return; }
  const uint16_t v = d == Dtype::kHalf ? narrow_float::FloatToHalf(f) : narrow_float::FloatToBFloat16(f);
  std::memcpy(p, &v, 2);
}
inline double Tol(Dtype d) {
  return d == Dtype::kDouble ? 1e-12 : d == Dtype::kFloat ? 1e-5 : d == Dtype::kHalf ? 2e-3 : 1.6e-2;
}

struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes)); }
  ~Device() { cudaFree(p); }
  void Put(const void* host, size_t bytes) { CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice)); }
  void Take(void* host, size_t bytes) { CUDA_CHECK(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost)); }
};

// Compares a GPU result with the CPU engine's, element by element.
inline void Compare(const std::string& what, Dtype d, const std::vector<unsigned char>& got,
                    const std::vector<unsigned char>& want, int64_t n, Result* r) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = Get(d, got, i), w = Get(d, want, i);
    const bool ok = (std::isnan(w) && std::isnan(g)) || g == w ||
                    std::fabs(g - w) <= Tol(d) * (1.0 + std::fabs(w));
    if (!ok && bad++ < 3) {
      std::printf("FAIL softmax %s dtype=%d at %lld: gpu %.9g cpu %.9g\n", what.c_str(),
                  static_cast<int>(d), static_cast<long long>(i), g, w);
    }
  }
  if (bad) ++r->failed; else ++r->passed;
}

inline void CheckShape(Dtype d, int64_t B, int64_t H, int64_t Q, int64_t K, Result* res) {
  const int64_t rows = B * H * Q, n = rows * K, bytes = n * Bytes(d);
  std::mt19937 rng(static_cast<uint32_t>(K * 31 + Q));
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<unsigned char> x(bytes), g(bytes), cpu(bytes), gpu(bytes), again(bytes);
  for (int64_t i = 0; i < n; ++i) { Set(d, &x, i, normal(rng)); Set(d, &g, i, normal(rng)); }
  if (n > 3) { Set(d, &x, 0, -INFINITY); Set(d, &x, 1, 3e38); Set(d, &x, 2, -3e38); }
  if (n > K + 1) Set(d, &x, K + 1, NAN);
  Device dx(bytes), dg(bytes), dy(bytes);
  dx.Put(x.data(), bytes);
  dg.Put(g.data(), bytes);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(K);
  auto check = [&](const std::string& what, const char* err) {
    if (err != nullptr) { std::printf("FAIL softmax %s: %s\n", what.c_str(), err); ++res->failed; return false; }
    CUDA_CHECK(cudaDeviceSynchronize());
    return true;
  };
  // TensorFlow may hand a kernel an input's buffer as its output
  // (forward_input_or_allocate_output): `launch(buffer)` writes over
  // `input`, and must give `want`. --small (selftest_size.h) runs these in
  // float16 and float64 only (8 and 2 elements a 16-byte pack).
  const bool in_place_runs =
      !SmallShapes() || d == Dtype::kHalf || d == Dtype::kDouble;
  auto in_place = [&](const std::string& what,
                      const std::vector<unsigned char>& input,
                      const std::vector<unsigned char>& want,
                      const auto& launch) {
    if (!in_place_runs) return;
    Device buffer(bytes);
    buffer.Put(input.data(), bytes);
    if (!check(what + " in place", launch(buffer.p))) return;
    std::vector<unsigned char> got(bytes);
    buffer.Take(got.data(), bytes);
    Compare(what + " in place", d, got, want, n, res);
  };
  for (bool log : {false, true}) {
    const std::string name = std::string(log ? "log_softmax " : "softmax ") + shape;
    CpuSoftmax(d, x.data(), cpu.data(), K, log, 0, rows);
    if (!check(name, LaunchSoftmax(d, dx.p, dy.p, rows, K, log, nullptr))) continue;
    dy.Take(gpu.data(), bytes);
    Compare(name, d, gpu, cpu, n, res);
    in_place(name + " (y over x)", x, cpu, [&](void* b) {
      return LaunchSoftmax(d, b, b, rows, K, log, nullptr);
    });
    // Its gradient at the CPU's outputs.
    std::vector<unsigned char> cgrad(bytes), ggrad(bytes);
    dy.Put(cpu.data(), bytes);
    CpuSoftmaxGrad(d, g.data(), cpu.data(), cgrad.data(), K, log, 0.75f, 0, rows);
    Device dd(bytes);
    if (!check(name + " grad", LaunchSoftmaxGrad(d, dg.p, dy.p, dd.p, rows, K, log, 0.75f, nullptr))) continue;
    dd.Take(ggrad.data(), bytes);
    Compare(name + " grad", d, ggrad, cgrad, n, res);
    in_place(name + " grad (dx over g)", g, cgrad, [&](void* b) {
      return LaunchSoftmaxGrad(d, b, dy.p, b, rows, K, log, 0.75f, nullptr);
    });
    in_place(name + " grad (dx over y)", cpu, cgrad, [&](void* b) {
      return LaunchSoftmaxGrad(d, dg.p, b, b, rows, K, log, 0.75f, nullptr);
    });
  }
  // Masked: [B, 1, Q, K] mask, with causal on and off, row (0, 0) fully masked.
  std::vector<unsigned char> mask_bytes(B * Q * K);
  std::bernoulli_distribution keep(0.6);
  for (auto& m : mask_bytes) m = keep(rng);
  for (int64_t j = 0; j < K; ++j) mask_bytes[j] = 0;
  bool* host_mask = reinterpret_cast<bool*>(mask_bytes.data());
  Device dm(mask_bytes.size());
  dm.Put(mask_bytes.data(), mask_bytes.size());
  for (bool causal : {false, true}) {
    MaskLayout m;
    m.rank = 3;
    m.dims[0] = B; m.dims[1] = H; m.dims[2] = Q;
    m.strides[0] = Q * K; m.strides[1] = 0; m.strides[2] = K;
    m.col_stride = 1;
    m.causal = causal;
    m.mask = host_mask;
    CpuMaskedSoftmax(d, x.data(), m, 0.3f, cpu.data(), K, 0, rows);
    m.mask = static_cast<const bool*>(dm.p);
    const std::string name = std::string(causal ? "causal masked " : "masked ") + shape;
    if (!check(name, LaunchMaskedSoftmax(d, dx.p, m, 0.3f, dy.p, rows, K, nullptr))) continue;
    dy.Take(gpu.data(), bytes);
    Compare(name, d, gpu, cpu, n, res);
    in_place(name + " (y over x)", x, cpu, [&](void* b) {
      return LaunchMaskedSoftmax(d, b, m, 0.3f, b, rows, K, nullptr);
    });
    // Deterministic: a second run gives the same bits (not in --small: the
    // GPU's run checks the bits).
    if (SmallShapes()) continue;
    LaunchMaskedSoftmax(d, dx.p, m, 0.3f, dy.p, rows, K, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    dy.Take(again.data(), bytes);
    if (std::memcmp(gpu.data(), again.data(), bytes) == 0) ++res->passed;
    else { ++res->failed; std::printf("FAIL softmax %s: not bit-identical run to run\n", name.c_str()); }
  }
  // Cross-entropy over [rows, K], int64 labels, row 1 ignored.
  std::vector<int64_t> labels(rows);
  std::uniform_int_distribution<int64_t> lab(0, K - 1);
  for (auto& l : labels) l = lab(rng);
  if (rows > 1) labels[1] = -100;
  softmax::CrossEntropyParams p;
  p.label_smoothing = 0.1f;
  p.z_loss = 1e-4f;
  std::vector<unsigned char> closs(rows * Bytes(d)), gloss(rows * Bytes(d));
  // Finite logits for the loss (the specials are the softmax's test).
  for (int64_t i = 0; i < 3 && i < n; ++i) Set(d, &x, i, 0.5);
  if (n > K + 1) Set(d, &x, K + 1, 0.25);
  dx.Put(x.data(), bytes);
  CpuSparseCrossEntropy(d, x.data(), labels.data(), true, closs.data(), cpu.data(), K, p, 0, rows);
  Device dl(rows * 8), dloss(rows * Bytes(d));
  dl.Put(labels.data(), rows * 8);
  const std::string name = "cross-entropy " + shape;
  if (check(name, LaunchSparseCrossEntropy(d, dx.p, dl.p, true, dloss.p, dy.p, rows, K, p, nullptr))) {
    dy.Take(gpu.data(), bytes);
    dloss.Take(gloss.data(), rows * Bytes(d));
    Compare(name + " dlogits", d, gpu, cpu, n, res);
    Compare(name + " loss", d, gloss, closs, rows, res);
    in_place(name + " dlogits (over the logits)", x, cpu, [&](void* b) {
      return LaunchSparseCrossEntropy(d, b, dl.p, true, dloss.p, b, rows, K, p,
                                      nullptr);
    });
  }
}

}  // namespace softmax_selftest

// Every case in every dtype; quick: fewer shapes.
inline softmax_selftest::Result CheckSoftmaxFamily(bool quick) {
  softmax_selftest::Result r;
  for (Dtype d : {Dtype::kFloat, Dtype::kDouble, Dtype::kHalf, Dtype::kBFloat16}) {
    // --small (selftest_size.h): 12 rows of the warp kernel, not 30, and 2
    // of the block kernel, not 18 (every row a warp or block reduction).
    softmax_selftest::CheckShape(d, 2, SmallShapes() ? 2 : 3,
                                 SmallShapes() ? 3 : 5, 7, &r);
    softmax_selftest::CheckShape(d, 1, 2, SmallShapes() ? 1 : 9,
                                 kWarpRowCols + 3, &r);
    if (!quick) {
      softmax_selftest::CheckShape(d, 2, 4, 33, 256, &r);
      softmax_selftest::CheckShape(d, 1, 1, 3, 50000, &r);
    }
  }
  std::printf("SUMMARY checks family=softmax passed=%d failed=%d\n", r.passed, r.failed);
  return r;
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_SOFTMAX_SELFTEST_H_

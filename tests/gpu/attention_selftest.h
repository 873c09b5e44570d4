// The attention family of the GPU self-test (gpu_selftest.cu calls
// RunAttentionSelftest): the CUDA engine (cu/attention/attention_gpu.h)
// against a float64 reference written here from attention_params.h's
// formulas, naively (every logit of every row), on the same inputs rounded to
// the dtype. Forward (out, lse) and backward (dq, dk, dv, the backward fed the
// GPU's own out and lse, as the TF kernels do) in four dtypes; multi-head,
// grouped and multi-query heads; causal with T == S and T != S (Keras's
// alignment, s <= t); a bool mask broadcast as [B, 1, T, S] and [T, S] with
// fully masked rows; bias as [1, N, T, S] and [B, N, T, S], and with rows of
// -inf (keys kept, NaN weights); sliding windows (rows left with no key
// included); the soft cap; head dims 1, 64, 80, 128, 256 (and Dv != D);
// lengths 1, 17, 130; empty T and S. Every output starts as NaN bits, so an
// element a kernel does not write fails (except where the reference is NaN);
// on the GPU the backward runs twice and must give the same bits (no
// atomics). The bias's gradient (LaunchAttentionBiasGrad) wherever there is a
// bias, [1, N, T, S] summed over the batch. Prints `SUMMARY checks
// family=attention passed=N failed=M`.

#ifndef TF_OPS_TESTS_GPU_ATTENTION_SELFTEST_H_
#define TF_OPS_TESTS_GPU_ATTENTION_SELFTEST_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_check.h"
#include "tests/gpu/norm_selftest.h"
#include "tests/gpu/selftest_size.h"
#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cu/attention/attention_gpu.h"

namespace tf_ops {
namespace attention_selftest {

using attention::AttentionParams;
using norm_selftest::Device;
using norm_selftest::Get;
using norm_selftest::Kind;
using norm_selftest::Put;
using norm_selftest::Tally;

enum MaskKind { kNoMask, kMaskB1TS, kMaskTS };
// kBias1NTSNegInf: [1, N, T, S] with rows t = 5, 12, 19, ... all -inf, so
// that they keep keys whose logits are all -inf: not dead rows but NaN
// weights (Keras's softmax of all -inf), lse -inf, and in the backward the
// dead rows' way (only value gets dout / S), as the CPU engine.
enum BiasKind { kNoBias, kBias1NTS, kBiasBNTS, kBias1NTSNegInf };

struct Case {
  int64_t batch, q_len, kv_len, heads, kv_heads, head_dim, value_dim;
  bool causal;
  int64_t window;
  float softcap;
  MaskKind mask;
  BiasKind bias;
};

// Tolerances, relative to max(|reference|, 1): the forward's outputs, the
// gradients (the backward also reads the rounded out for Delta), and lse
// (computed in float from the rounded inputs even for half and bfloat16).
struct Tolerance {
  double out, grad, lse;
};
inline Tolerance TolFor(Dtype dtype) {
  switch (dtype) {
    case Dtype::kHalf: return {2e-3, 5e-3, 4e-6};
    case Dtype::kBFloat16: return {1.6e-2, 4e-2, 4e-6};
    case Dtype::kFloat: return {1e-5, 3e-5, 4e-6};
    case Dtype::kDouble: return {1e-12, 1e-12, 1e-12};
  }
  return {};
}

// The float64 reference of attention_params.h, for one call.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv, dbias;
};

inline Reference Compute(const AttentionParams& p, const std::vector<double>& q,
                         const std::vector<double>& k,
                         const std::vector<double>& v,
                         const std::vector<double>& dout,
                         const std::vector<char>& mask,
                         const std::vector<double>& bias) {
  const int64_t B = p.batch, T = p.q_len, S = p.kv_len, N = p.heads,
                K = p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  Reference r;
  r.out.assign(B * T * N * Dv, 0.0);
  r.lse.assign(B * N * T, 0.0);
  r.dq.assign(B * T * N * D, 0.0);
  r.dk.assign(B * S * K * D, 0.0);
  r.dv.assign(B * S * K * Dv, 0.0);
  r.dbias.assign(bias.size(), 0.0);
  std::vector<double> pre(S), x(S), pr(S), dp(S);
  std::vector<char> kept(S);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t kh = n / p.group();
      for (int64_t t = 0; t < T; ++t) {
        const double* qt = &q[p.QOffset(b, t, n)];
        const double* gt = &dout[p.OutOffset(b, t, n)];
        double* ot = &r.out[p.OutOffset(b, t, n)];
        bool any = false;
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          kept[s] = p.KeptByPosition(t, s) &&
                    (mask.empty() ||
                     mask[p.BroadcastOffset(p.mask, b, n, t, s)] != 0);
          if (!kept[s]) continue;
          any = true;
          const double* ks = &k[p.KOffset(b, s, kh)];
          double dot = 0.0;
          for (int64_t e = 0; e < D; ++e) dot += qt[e] * ks[e];
          pre[s] = static_cast<double>(p.scale) * dot +
                   (bias.empty() ? 0.0
                                 : bias[p.BroadcastOffset(p.bias, b, n, t, s)]);
          x[s] = p.softcap > 0.0f
                     ? p.softcap * std::tanh(pre[s] / p.softcap)
                     : pre[s];
          mx = std::max(mx, x[s]);
        }
        if (!any || mx == -INFINITY) {
          // Keras's uniform weights: the mean of the values (NaN where the
          // kept logits are all -inf); only value gets a gradient.
          for (int64_t s = 0; s < S; ++s) {
            const double* vs = &v[p.VOffset(b, s, kh)];
            double* dvs = &r.dv[p.VOffset(b, s, kh)];
            for (int64_t e = 0; e < Dv; ++e) {
              ot[e] += any ? NAN : vs[e] / S;
              dvs[e] += gt[e] / S;
            }
          }
          r.lse[p.LseOffset(b, n, t)] = -INFINITY;
          continue;
        }
        double sum = 0.0;
        for (int64_t s = 0; s < S; ++s) {
          pr[s] = kept[s] ? std::exp(x[s] - mx) : 0.0;
          sum += pr[s];
        }
        r.lse[p.LseOffset(b, n, t)] = mx + std::log(sum);
        double delta = 0.0;
        for (int64_t s = 0; s < S; ++s) {
          pr[s] /= sum;
          if (!kept[s]) continue;
          const double* vs = &v[p.VOffset(b, s, kh)];
          double* dvs = &r.dv[p.VOffset(b, s, kh)];
          dp[s] = 0.0;
          for (int64_t e = 0; e < Dv; ++e) {
            ot[e] += pr[s] * vs[e];
            dp[s] += gt[e] * vs[e];
            dvs[e] += pr[s] * gt[e];
          }
          delta += pr[s] * dp[s];
        }
        double* dqt = &r.dq[p.QOffset(b, t, n)];
        for (int64_t s = 0; s < S; ++s) {
          if (!kept[s]) continue;
          double ds = pr[s] * (dp[s] - delta);
          if (p.softcap > 0.0f) {
            const double th = std::tanh(pre[s] / p.softcap);
            ds *= 1.0 - th * th;
          }
          if (!bias.empty()) r.dbias[p.BroadcastOffset(p.bias, b, n, t, s)] += ds;
          ds *= p.scale;
          const double* ks = &k[p.KOffset(b, s, kh)];
          double* dks = &r.dk[p.KOffset(b, s, kh)];
          for (int64_t e = 0; e < D; ++e) {
            dqt[e] += ds * ks[e];
            dks[e] += ds * qt[e];
          }
        }
      }
    }
  }
  return r;
}

// Each element within rtol of the reference (relative to max(|ref|, 1));
// infinities and NaN must match exactly.
inline void Compare(const Kind& k, const char* what, const char* ctx,
                    const std::vector<double>& want,
                    const std::vector<char>& got, bool stat, double rtol,
                    Tally* t) {
  int64_t worst = -1;
  double worst_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], g = Get(k, got, static_cast<int64_t>(i), stat);
    double err;
    if (std::isnan(w)) {
      err = std::isnan(g) ? 0.0 : INFINITY;
    } else if (std::isinf(w) || std::isinf(g)) {
      err = w == g ? 0.0 : INFINITY;
    } else {
      err = std::fabs(g - w) / std::max(std::fabs(w), 1.0);
      if (std::isnan(err)) err = INFINITY;
    }
    if (err > rtol && (worst < 0 || err > worst_err)) {
      worst = static_cast<int64_t>(i);
      worst_err = err;
    }
  }
  if (worst < 0) {
    ++t->passed;
    return;
  }
  ++t->failed;
  std::printf("FAIL attention %s %s at %lld: ref %.9g gpu %.9g (rel %.3g > %.3g)\n",
              ctx, what, static_cast<long long>(worst), want[worst],
              Get(k, got, worst, stat), worst_err, rtol);
}

inline std::vector<double> AsDouble(const Kind& k, const std::vector<char>& b,
                                    int64_t n) {
  std::vector<double> d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = Get(k, b, i, false);
  return d;
}

// A device buffer of `bytes` holding NaN bits (0xff in every byte is a NaN
// in each dtype): an element a kernel leaves unwritten reads back as NaN.
struct Output : Device {
  explicit Output(size_t bytes) : Device(bytes) {
    if (p != nullptr) CUDA_CHECK(cudaMemset(p, 0xff, bytes));
  }
};

inline void CheckCase(const Kind& k, const Case& c, std::mt19937* rng,
                      Tally* t) {
  char ctx[200];
  std::snprintf(
      ctx, sizeof(ctx),
      "%s B=%lld T=%lld S=%lld N=%lld K=%lld D=%lld Dv=%lld%s window=%lld "
      "softcap=%g mask=%d bias=%d",
      k.name, static_cast<long long>(c.batch), static_cast<long long>(c.q_len),
      static_cast<long long>(c.kv_len), static_cast<long long>(c.heads),
      static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim),
      static_cast<long long>(c.value_dim), c.causal ? " causal" : "",
      static_cast<long long>(c.window), c.softcap, static_cast<int>(c.mask),
      static_cast<int>(c.bias));
  AttentionParams p;
  p.batch = c.batch;
  p.q_len = c.q_len;
  p.kv_len = c.kv_len;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.value_dim = c.value_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  p.softcap = c.softcap;
  p.causal = c.causal;
  p.window = c.window;
  const int64_t T = c.q_len, S = c.kv_len, B = c.batch, N = c.heads;
  const int64_t nq = B * T * N * c.head_dim, nk = B * S * c.kv_heads * c.head_dim,
                nv = B * S * c.kv_heads * c.value_dim,
                no = B * T * N * c.value_dim, nl = B * N * T;
  std::uniform_real_distribution<double> value(-2.0, 2.0), uniform(0.0, 1.0);
  std::vector<char> q(nq * k.size), kk(nk * k.size), v(nv * k.size),
      dout(no * k.size);
  for (int64_t i = 0; i < nq; ++i) Put(k, &q, i, value(*rng), false);
  for (int64_t i = 0; i < nk; ++i) Put(k, &kk, i, value(*rng), false);
  for (int64_t i = 0; i < nv; ++i) Put(k, &v, i, value(*rng), false);
  for (int64_t i = 0; i < no; ++i) Put(k, &dout, i, value(*rng), false);
  // The mask keeps about 70% of the keys; rows t = 3, 8, 13, ... of batch 0
  // keep none (dead rows).
  std::vector<char> mask;
  if (c.mask == kMaskB1TS) {
    mask.resize(B * T * S);
    for (int64_t i = 0; i < B * T * S; ++i) {
      const int64_t row = i / S;  // b * T + t
      mask[i] = row < T && row % 5 == 3 ? 0 : uniform(*rng) < 0.7;
    }
    p.mask.strides[0] = T * S;
    p.mask.strides[2] = S;
    p.mask.strides[3] = 1;
  } else if (c.mask == kMaskTS) {
    mask.resize(T * S);
    for (int64_t i = 0; i < T * S; ++i) {
      mask[i] = i / S % 5 == 3 ? 0 : uniform(*rng) < 0.7;
    }
    p.mask.strides[2] = S;
    p.mask.strides[3] = 1;
  }
  std::vector<char> bias;
  int64_t nb = 0;
  if (c.bias != kNoBias) {
    nb = (c.bias == kBiasBNTS ? B : 1) * N * T * S;
    bias.resize(nb * k.size);
    for (int64_t i = 0; i < nb; ++i) {
      const bool neg_inf = c.bias == kBias1NTSNegInf && i / S % T % 7 == 5;
      Put(k, &bias, i, neg_inf ? -INFINITY : value(*rng), false);
    }
    p.bias.strides[0] = c.bias == kBiasBNTS ? N * T * S : 0;
    p.bias.strides[1] = T * S;
    p.bias.strides[2] = S;
    p.bias.strides[3] = 1;
  }
  const Reference ref =
      Compute(p, AsDouble(k, q, nq), AsDouble(k, kk, nk), AsDouble(k, v, nv),
              AsDouble(k, dout, no), mask, AsDouble(k, bias, nb));

  const Tolerance tol = TolFor(k.dtype);
  const size_t stat = k.dtype == Dtype::kDouble ? 8 : 4;
  Device d_q(q), d_k(kk), d_v(v), d_dout(dout), d_mask(mask), d_bias(bias);
  Output d_out(no * k.size), d_lse(nl * stat);
  p.mask.data = d_mask.p;
  p.bias.data = d_bias.p;
  const char* err = attention::LaunchAttentionForward(
      k.dtype, p, d_q.p, d_k.p, d_v.p, d_out.p, d_lse.p, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (err != nullptr) {
    std::printf("FAIL attention %s forward launch: %s\n", ctx, err);
    ++t->failed;
    return;
  }
  Compare(k, "out", ctx, ref.out, d_out.Host(no * k.size), false, tol.out, t);
  Compare(k, "lse", ctx, ref.lse, d_lse.Host(nl * stat), true, tol.lse, t);

  std::vector<char> first;
  // --small (selftest_size.h): one run; the CPU runs blocks one after
  // another, so only the GPU's run can show an order-dependent sum.
  for (int run = 0; run < (SmallShapes() ? 1 : 2); ++run) {
    Output d_dq(nq * k.size), d_dk(nk * k.size), d_dv(nv * k.size);
    Device scratch(static_cast<size_t>(
        attention::AttentionGpuBackwardScratchBytes(k.dtype, p)));
    err = attention::LaunchAttentionBackward(
        k.dtype, p, d_q.p, d_k.p, d_v.p, d_out.p, d_dout.p, d_lse.p, d_dq.p,
        d_dk.p, d_dv.p, scratch.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (err != nullptr) {
      std::printf("FAIL attention %s backward launch: %s\n", ctx, err);
      ++t->failed;
      return;
    }
    std::vector<char> dq = d_dq.Host(nq * k.size), dk = d_dk.Host(nk * k.size),
                      dv = d_dv.Host(nv * k.size);
    if (run == 0) {
      Compare(k, "dq", ctx, ref.dq, dq, false, tol.grad, t);
      Compare(k, "dk", ctx, ref.dk, dk, false, tol.grad, t);
      Compare(k, "dv", ctx, ref.dv, dv, false, tol.grad, t);
      first = dq;
      first.insert(first.end(), dk.begin(), dk.end());
      first.insert(first.end(), dv.begin(), dv.end());
    } else {
      dq.insert(dq.end(), dk.begin(), dk.end());
      dq.insert(dq.end(), dv.begin(), dv.end());
      if (dq == first) {
        ++t->passed;
      } else {
        ++t->failed;
        std::printf("FAIL attention %s dq/dk/dv differ between runs\n", ctx);
      }
    }
  }
  if (nb == 0) return;
  Output d_dbias(nb * k.size);
  err = attention::LaunchAttentionBiasGrad(k.dtype, p, d_q.p, d_k.p, d_v.p,
                                           d_out.p, d_dout.p, d_lse.p,
                                           d_dbias.p, nb, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (err != nullptr) {
    std::printf("FAIL attention %s bias grad launch: %s\n", ctx, err);
    ++t->failed;
    return;
  }
  Compare(k, "dbias", ctx, ref.dbias, d_dbias.Host(nb * k.size), false,
          tol.grad, t);
}

}  // namespace attention_selftest

// Every case; prints the family's SUMMARY line. Returns {passed, failed}.
inline std::pair<int, int> RunAttentionSelftest(bool quick) {
  using namespace attention_selftest;
  std::mt19937 rng(45);
  // {B, T, S, N, K, D, Dv, causal, window, softcap, mask, bias}
  const std::vector<Case> cases = {
      // Multi-head, causal, T == S.
      {2, 17, 17, 4, 4, 64, 64, true, -1, 0.0f, kNoMask, kNoBias},
      // Grouped (2 query heads per key head), causal with T < S, bias.
      {1, 17, 130, 4, 2, 80, 80, true, -1, 0.0f, kNoMask, kBias1NTS},
      // Multi-query, [B, 1, T, S] mask with dead rows, Dv != D, T > S.
      {2, 130, 17, 3, 1, 128, 64, false, -1, 0.0f, kMaskB1TS, kNoBias},
      // One query row against long keys, the largest head dim.
      {1, 1, 130, 2, 1, 256, 256, false, -1, 0.0f, kNoMask, kNoBias},
      // Head dim 1, soft cap, bias per batch and head.
      {2, 17, 17, 2, 2, 1, 1, false, -1, 5.0f, kNoMask, kBiasBNTS},
      // Sliding window under causal, soft cap, Dv < D.
      {1, 130, 130, 2, 1, 64, 32, true, 16, 30.0f, kNoMask, kNoBias},
      // Window without causal, T > S: rows past S + window keep no key.
      {1, 130, 17, 2, 2, 64, 64, false, 8, 0.0f, kNoMask, kNoBias},
      // One key, causal with T != S, [T, S] mask.
      {2, 17, 1, 4, 1, 128, 128, true, -1, 0.0f, kMaskTS, kNoBias},
      // Causal T > S, mask and bias together, grouped, head dim 80.
      {1, 130, 17, 4, 2, 80, 80, true, -1, 0.0f, kMaskB1TS, kBias1NTS},
      // Rows whose kept logits are all -inf, beside masked-out rows.
      {2, 17, 33, 4, 2, 64, 64, true, -1, 0.0f, kMaskB1TS, kBias1NTSNegInf},
      // window 0: every row dead.
      {1, 17, 17, 2, 1, 64, 64, false, 0, 0.0f, kNoMask, kBias1NTS},
      // Empty: no query, no key.
      {1, 0, 17, 2, 1, 64, 64, true, -1, 0.0f, kNoMask, kNoBias},
      {1, 17, 0, 2, 1, 64, 64, false, -1, 0.0f, kNoMask, kNoBias},
      // Larger (the GPU's run): several tiles each way, head dims 128, 256.
      {2, 513, 513, 8, 2, 128, 128, true, -1, 0.0f, kNoMask, kNoBias},
      {1, 300, 700, 4, 4, 256, 256, false, 100, 0.0f, kMaskB1TS, kBias1NTS},
  };
  Tally t;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int64_t logits = c.batch * c.heads * c.q_len * c.kv_len;
    if (quick && logits > 200000) continue;
    for (size_t j = 0; j < 4; ++j) {
      // --small (the CPU run, selftest_size.h): each case in two dtypes,
      // turn about, so that each dtype meets most shapes.
      if (SmallShapes() && j != i % 4 && j != (i + 1) % 4) continue;
      CheckCase(norm_selftest::kKinds[j], c, &rng, &t);
    }
  }
  std::printf("SUMMARY checks family=attention passed=%d failed=%d\n",
              t.passed, t.failed);
  return {t.passed, t.failed};
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_ATTENTION_SELFTEST_H_

// Memory-safety and value test of the attention family's CPU engine
// (attention_cpu.h), TF-free, built with AddressSanitizer and
// UndefinedBehaviorSanitizer like the other engine tests (`make engine-test`
// builds and runs it).
//
// In half, bfloat16, float and double, on heap buffers of exactly each
// tensor's size (ASan reports any access past either end), against a double
// reference written from attention_params.h's formulas element by element
// (not the engine's tiles): the output, the log-sum-exp and dq, dk, dv, for
// multi-head, grouped and multi-query heads, causal with T == S, T < S and
// T > S, a broadcast mask with fully masked rows, a bias, a window, a soft
// cap, head dims 1 to 130, lengths across the tiles, and S = 0; the work
// split in odd shards on 3 threads must give the same bits as one. bfloat16
// runs twice where the CPU has AVX512-BF16: with its bfloat16 products and
// with the float ones (core/cpu_isa.h's SetAvx512Bf16).
//
// Exit status: 0 when every check passes, 1 otherwise.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "tests/engine/engine_check.h"
#include "tf_ops/cc/attention/attention_cpu.h"
#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cc/core/cpu_isa.h"

namespace tf_ops {
namespace attention {
namespace {

using engine_check::Buffer;
using engine_check::Expect;
using engine_check::Store;

const Store kStores[] = {{Dtype::kHalf, "half", 2, 0x1p-11},
                         {Dtype::kBFloat16, "bfloat16", 2, 0x1p-8},
                         {Dtype::kFloat, "float", 4, 0x1p-24},
                         {Dtype::kDouble, "double", 8, 0x1p-53}};

struct Case {
  const char* name;
  int64_t b, t, s, n, k, d, dv;
  bool causal;
  int64_t window;
  float softcap;
  // 0 none, 1 [B, 1, T, S] with dead rows, 2 [1, 1, 1, S], 3 [B, 1, 1, S]
  // padding (key lengths S - 5 and S / 3: whole key tiles masked, skipped)
  int mask;
  // 0 none, 1 [B, N, T, S], 2 [1, N, 1, S], 3 [1, 1, 1, S] (one bias for
  // every head: its gradient in the pass after the backward)
  int bias;
};

const Case kCases[] = {
    {"mha", 1, 5, 5, 2, 2, 8, 8, false, -1, 0, 0, 0},
    {"causal_gqa_tiles", 2, 70, 70, 4, 2, 16, 12, true, -1, 0, 0, 0},
    {"mqa_long", 1, 135, 135, 2, 1, 33, 33, true, -1, 0, 0, 0},
    {"t_lt_s", 1, 9, 20, 2, 2, 8, 8, true, -1, 0, 0, 0},
    {"t_gt_s", 1, 20, 9, 2, 2, 8, 8, true, -1, 0, 0, 0},
    {"mask_dead", 2, 30, 40, 2, 2, 16, 16, false, -1, 0, 1, 0},
    {"mask_keys", 1, 12, 17, 2, 1, 8, 8, true, -1, 0, 2, 0},
    {"window", 1, 140, 140, 2, 2, 8, 8, true, 37, 0, 0, 0},
    {"window_both", 1, 40, 40, 2, 2, 8, 8, false, 5, 0, 0, 0},
    {"softcap_bias", 1, 20, 20, 4, 2, 8, 8, false, -1, 2.0f, 0, 1},
    {"bias_row", 1, 10, 14, 2, 2, 8, 8, true, -1, 0, 0, 2},
    {"bias_keys_shared", 2, 30, 40, 4, 2, 8, 8, false, -1, 1.5f, 1, 3},
    {"d1", 1, 7, 7, 1, 1, 1, 1, true, -1, 0, 0, 0},
    {"d130", 1, 9, 9, 1, 1, 130, 65, false, -1, 0, 0, 0},
    {"no_keys", 1, 3, 0, 2, 2, 8, 8, false, -1, 0, 0, 0},
    {"padding_tiles", 2, 70, 300, 2, 1, 8, 8, false, -1, 0, 3, 0},
    {"padding_causal", 2, 300, 300, 2, 2, 8, 8, true, -1, 0, 3, 0},
};

// Case::mask 3: batch b's key length.
int64_t PaddedLength(const Case& c, int64_t b) {
  return b == 0 ? c.s - 5 : c.s / 3;
}

double Logit(const Case& c, const std::vector<double>& q,
             const std::vector<double>& k, const std::vector<double>& bias,
             double scale, int64_t b, int64_t n, int64_t t, int64_t s,
             double* cap_grad) {
  const int64_t kh = n / (c.n / c.k);
  double dot = 0;
  for (int64_t d = 0; d < c.d; ++d) {
    dot += q[((b * c.t + t) * c.n + n) * c.d + d] *
           k[((b * c.s + s) * c.k + kh) * c.d + d];
  }
  double x = scale * dot;
  if (c.bias == 1) x += bias[((b * c.n + n) * c.t + t) * c.s + s];
  if (c.bias == 2) x += bias[n * c.s + s];
  if (c.bias == 3) x += bias[s];
  *cap_grad = 1;
  if (c.softcap > 0) {
    const double th = std::tanh(x / c.softcap);
    x = c.softcap * th;
    *cap_grad = 1 - th * th;
  }
  return x;
}

bool Kept(const Case& c, const std::vector<char>& mask, int64_t b, int64_t t,
          int64_t s) {
  if (c.causal && s > t) return false;
  if (c.window >= 0 && std::abs(t - s) >= c.window) return false;
  if (c.mask == 1 && !mask[(b * c.t + t) * c.s + s]) return false;
  if (c.mask == 2 && !mask[s]) return false;
  if (c.mask == 3 && !mask[b * c.s + s]) return false;
  return true;
}

void Reference(const Case& c, const std::vector<double>& q,
               const std::vector<double>& k, const std::vector<double>& v,
               const std::vector<char>& mask, const std::vector<double>& bias,
               const std::vector<double>& dout, double scale,
               std::vector<double>* out, std::vector<double>* lse,
               std::vector<double>* dq, std::vector<double>* dk,
               std::vector<double>* dv, std::vector<double>* dbias) {
  out->assign(c.b * c.t * c.n * c.dv, 0);
  dbias->assign(bias.size(), 0);
  lse->assign(c.b * c.n * c.t, 0);
  dq->assign(q.size(), 0);
  dk->assign(k.size(), 0);
  dv->assign(v.size(), 0);
  const int64_t group = c.n / c.k;
  std::vector<double> p(c.s), g(c.s), dp(c.s);
  for (int64_t b = 0; b < c.b; ++b) {
    for (int64_t n = 0; n < c.n; ++n) {
      const int64_t kh = n / group;
      for (int64_t t = 0; t < c.t; ++t) {
        double mx = -INFINITY;
        bool any = false;
        for (int64_t s = 0; s < c.s; ++s) {
          p[s] = Logit(c, q, k, bias, scale, b, n, t, s, &g[s]);
          const bool kept = Kept(c, mask, b, t, s);
          any |= kept;
          if (!kept) p[s] = -INFINITY;
          mx = std::max(mx, p[s]);
        }
        double sum = 0;
        for (int64_t s = 0; s < c.s; ++s) {
          p[s] = any ? std::exp(p[s] - mx) : 1.0;
          sum += p[s];
        }
        for (int64_t s = 0; s < c.s; ++s) p[s] /= sum;
        (*lse)[(b * c.n + n) * c.t + t] =
            any ? mx + std::log(sum) : -INFINITY;
        const int64_t orow = ((b * c.t + t) * c.n + n) * c.dv;
        for (int64_t s = 0; s < c.s; ++s) {
          for (int64_t d = 0; d < c.dv; ++d) {
            (*out)[orow + d] += p[s] * v[((b * c.s + s) * c.k + kh) * c.dv + d];
          }
        }
        // Backward.
        double delta = 0;
        for (int64_t d = 0; d < c.dv; ++d) delta += dout[orow + d] * (*out)[orow + d];
        for (int64_t s = 0; s < c.s; ++s) {
          const int64_t vrow = ((b * c.s + s) * c.k + kh) * c.dv;
          double dps = 0;
          for (int64_t d = 0; d < c.dv; ++d) {
            (*dv)[vrow + d] += p[s] * dout[orow + d];
            dps += dout[orow + d] * v[vrow + d];
          }
          if (!any) continue;  // dead rows reach only value
          const double ds = p[s] * (dps - delta) * g[s] * scale;
          if (c.bias == 1) (*dbias)[((b * c.n + n) * c.t + t) * c.s + s] += ds / scale;
          if (c.bias == 2) (*dbias)[n * c.s + s] += ds / scale;
          if (c.bias == 3) (*dbias)[s] += ds / scale;
          for (int64_t d = 0; d < c.d; ++d) {
            (*dq)[((b * c.t + t) * c.n + n) * c.d + d] +=
                ds * k[((b * c.s + s) * c.k + kh) * c.d + d];
            (*dk)[((b * c.s + s) * c.k + kh) * c.d + d] +=
                ds * q[((b * c.t + t) * c.n + n) * c.d + d];
          }
        }
      }
    }
  }
}

ParallelFor Threads(int threads) {
  return [threads](int64_t total, int64_t,
                   const std::function<void(int64_t, int64_t)>& fn) {
    if (threads <= 1) return fn(0, total);
    std::vector<std::thread> pool;
    // Odd shards: 1, 2, 3, ... units, round robin over the threads.
    std::vector<std::pair<int64_t, int64_t>> shards;
    for (int64_t at = 0, size = 1; at < total; at += size, ++size) {
      shards.push_back({at, std::min(total, at + size)});
    }
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        for (size_t j = i; j < shards.size(); j += threads) {
          fn(shards[j].first, shards[j].second);
        }
      });
    }
    for (auto& th : pool) th.join();
  };
}

struct Buffers {
  std::unique_ptr<char[]> q, k, v, bias, out, lse, dout, dq, dk, dv, scratch;
  std::unique_ptr<char[]> dbias, bias_scratch;
};

void RunCase(const Case& c, const Store& st, std::mt19937* rng) {
  std::normal_distribution<double> normal;
  const double scale = static_cast<float>(1.0 / std::sqrt(c.d));
  auto fill = [&](int64_t n, std::unique_ptr<char[]>* buf) {
    std::vector<double> x(n);
    *buf = Buffer(n * st.size);
    for (int64_t i = 0; i < n; ++i) {
      st.Put(buf->get(), i, normal(*rng));
      x[i] = st.Get(buf->get(), i);
    }
    return x;
  };
  Buffers in;
  const auto q = fill(c.b * c.t * c.n * c.d, &in.q);
  const auto k = fill(c.b * c.s * c.k * c.d, &in.k);
  const auto v = fill(c.b * c.s * c.k * c.dv, &in.v);
  const auto dout = fill(c.b * c.t * c.n * c.dv, &in.dout);
  std::vector<double> bias;
  if (c.bias == 1) bias = fill(c.b * c.n * c.t * c.s, &in.bias);
  if (c.bias == 2) bias = fill(c.n * c.s, &in.bias);
  if (c.bias == 3) bias = fill(c.s, &in.bias);
  std::vector<char> mask;
  std::unique_ptr<bool[]> mask_buf;
  const int64_t mask_size = c.mask == 1   ? c.b * c.t * c.s
                            : c.mask == 2 ? c.s
                            : c.mask == 3 ? c.b * c.s
                                          : 0;
  if (mask_size > 0) {
    mask_buf.reset(new bool[mask_size]);
    mask.resize(mask_size);
    for (int64_t i = 0; i < mask_size; ++i) {
      if (c.mask == 3) {
        mask[i] = i % c.s < PaddedLength(c, i / c.s);
      } else {
        const int64_t t = c.mask == 1 ? (i / c.s) % c.t : 1;
        mask[i] = t % 4 == 0 ? 0 : ((*rng)() % 3 != 0);  // every 4th row dead
      }
      mask_buf[i] = mask[i];
    }
  }
  AttentionParams p;
  p.batch = c.b;
  p.q_len = c.t;
  p.kv_len = c.s;
  p.heads = c.n;
  p.kv_heads = c.k;
  p.head_dim = c.d;
  p.value_dim = c.dv;
  p.scale = static_cast<float>(scale);
  p.softcap = c.softcap;
  p.causal = c.causal;
  p.window = c.window;
  if (c.mask == 1) {
    p.mask = {mask_buf.get(), {c.t * c.s, 0, c.s, 1}};
  } else if (c.mask == 2) {
    p.mask = {mask_buf.get(), {0, 0, 0, 1}};
  } else if (c.mask == 3) {
    p.mask = {mask_buf.get(), {c.s, 0, 0, 1}};
  }
  if (c.bias == 1) {
    p.bias = {in.bias.get(), {c.n * c.t * c.s, c.t * c.s, c.s, 1}};
  } else if (c.bias == 2) {
    p.bias = {in.bias.get(), {0, c.s, 0, 1}};
  } else if (c.bias == 3) {
    p.bias = {in.bias.get(), {0, 0, 0, 1}};
  }
  std::vector<double> out, lse, dq, dk, dv, dbias;
  Reference(c, q, k, v, mask, bias, dout, scale, &out, &lse, &dq, &dk, &dv,
            &dbias);

  const size_t lse_size = st.stat_size();
  std::vector<char> first[6];
  for (int threads : {1, 3}) {
    Buffers o;
    o.out = Buffer(out.size() * st.size);
    o.lse = Buffer(lse.size() * lse_size);
    o.dq = Buffer(dq.size() * st.size);
    o.dk = Buffer(dk.size() * st.size);
    o.dv = Buffer(dv.size() * st.size);
    o.scratch = Buffer(CpuAttentionBackwardScratchBytes(st.dtype, p));
    CpuAttentionForward(st.dtype, p, in.q.get(), in.k.get(), in.v.get(),
                        o.out.get(), o.lse.get(), Threads(threads));
    CpuAttentionBackward(st.dtype, p, in.q.get(), in.k.get(), in.v.get(),
                         o.out.get(), in.dout.get(), o.lse.get(), o.dq.get(),
                         o.dk.get(), o.dv.get(), nullptr, 0, o.scratch.get(),
                         Threads(threads));
    // With the bias's gradient: dq, dk, dv must keep their bits (the split by
    // the bias walks the same heads with the same math).
    const int64_t nb = static_cast<int64_t>(dbias.size());
    o.dbias = Buffer(nb * st.size);
    o.bias_scratch =
        Buffer(CpuAttentionBackwardScratchBytes(st.dtype, p, nb));
    if (nb > 0) {
      Buffers again;
      again.dq = Buffer(dq.size() * st.size);
      again.dk = Buffer(dk.size() * st.size);
      again.dv = Buffer(dv.size() * st.size);
      CpuAttentionBackward(st.dtype, p, in.q.get(), in.k.get(), in.v.get(),
                           o.out.get(), in.dout.get(), o.lse.get(),
                           again.dq.get(), again.dk.get(), again.dv.get(),
                           o.dbias.get(), nb, o.bias_scratch.get(),
                           Threads(threads));
      const bool same =
          std::memcmp(again.dq.get(), o.dq.get(), dq.size() * st.size) == 0 &&
          std::memcmp(again.dk.get(), o.dk.get(), dk.size() * st.size) == 0 &&
          std::memcmp(again.dv.get(), o.dv.get(), dv.size() * st.size) == 0;
      Expect(same, "dq, dk, dv the same bits with the bias gradient",
             c.name, 0, 0, 0);
    }
    char ctx[160];
    std::snprintf(ctx, sizeof(ctx), "%s %s%s threads=%d", c.name, st.name,
                  st.dtype == Dtype::kBFloat16 && ActiveAvx512Bf16()
                      ? " (bf16 products)"
                      : "",
                  threads);
    // Tolerance: a few roundings of the dtype, scaled by the sizes summed.
    const double tol = 8 * st.eps * (1 + std::sqrt(double(c.s) + c.d));
    auto check = [&](const char* what, const char* buf,
                     const std::vector<double>& want, bool stat) {
      double top = 1;
      for (double w : want) top = std::isfinite(w) ? std::max(top, std::abs(w)) : top;
      for (size_t i = 0; i < want.size(); ++i) {
        const double got = stat ? st.GetStat(buf, i) : st.Get(buf, i);
        const bool ok = std::isinf(want[i])
                            ? got == want[i]
                            : std::abs(got - want[i]) <= tol * top;
        Expect(ok, what, ctx, got, want[i], i);
      }
    };
    check("out", o.out.get(), out, false);
    check("lse", o.lse.get(), lse, true);
    check("dq", o.dq.get(), dq, false);
    check("dk", o.dk.get(), dk, false);
    check("dv", o.dv.get(), dv, false);
    check("dbias", o.dbias.get(), dbias, false);
    const char* results[6] = {o.out.get(), o.dq.get(), o.dk.get(), o.dv.get(),
                              o.lse.get(), o.dbias.get()};
    const size_t sizes[6] = {out.size() * st.size, dq.size() * st.size,
                             dk.size() * st.size, dv.size() * st.size,
                             lse.size() * lse_size, dbias.size() * st.size};
    for (int i = 0; i < 6; ++i) {
      if (threads == 1) {
        first[i].assign(results[i], results[i] + sizes[i]);
      } else {
        const bool same = sizes[i] == 0 ||
                          std::memcmp(first[i].data(), results[i], sizes[i]) == 0;
        Expect(same, "same bits on 3 threads", ctx, 0, 0, i);
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace tf_ops

int main() {
  using namespace tf_ops;
  std::mt19937 rng(7);
  for (const auto& c : attention::kCases) {
    for (const auto& st : attention::kStores) {
#if !TF_OPS_ENGINE_TEST_HALF
      if (st.size == 2) continue;
#endif
      attention::RunCase(c, st, &rng);
      if (st.dtype == Dtype::kBFloat16 && ActiveAvx512Bf16()) {
        SetAvx512Bf16(false);
        attention::RunCase(c, st, &rng);
        SetAvx512Bf16(true);
      }
    }
  }
  std::printf("attention engine: %d checks, %d failures\n",
              engine_check::checks, engine_check::failures);
  return engine_check::failures == 0 ? 0 : 1;
}

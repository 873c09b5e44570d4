// The fused ops' CPU loops (fused_cpu.h), compiled once per instruction set
// as activation_cpu.cc's: each variant is a function with GCC's `target` and
// `flatten` attributes, so that the functor's math is inlined and vectorised
// for that target.

#include "tf_ops/cc/fused/fused_cpu.h"

#include <algorithm>
#include <cstdint>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/fused/fused_math.h"

namespace tf_ops {
namespace {

using cpu_storage::WithFixedFormula;
using cpu_storage::WithStorage;

// Elements per bias grad tile: large enough that a tile's partial sums are a
// small fraction of its traffic, small enough for both cores to share work.
constexpr int64_t kTileElements = int64_t{1} << 16;
// Lanes of the running sums along a row (inner > 1): independent sums that
// vectorise, added together in a fixed order at the end of each tile row.
constexpr int kLanes = 16;

// ------------------------------------------------------------ loops ------
// Outputs may be inputs' buffers, element for element only: `ivdep`.

// y[j] = f(x[j] + b[j]): a run of channels (inner = 1).
template <typename Op, typename S>
void BiasForwardVector(const Op& op, const typename S::Stored* x,
                       const typename S::Stored* b, typename S::Stored* y,
                       int64_t len) {
#pragma GCC ivdep
  for (int64_t j = 0; j < len; ++j) {
    y[j] = S::Store(BiasForwardOf(op, S::Load(x[j]), S::Load(b[j])));
  }
}

// y[j] = f(x[j] + b): a run of one channel (inner > 1).
template <typename Op, typename S>
void BiasForwardScalar(const Op& op, const typename S::Stored* x,
                       typename S::Stored b_stored, typename S::Stored* y,
                       int64_t len) {
  const auto b = S::Load(b_stored);
#pragma GCC ivdep
  for (int64_t j = 0; j < len; ++j) {
    y[j] = S::Store(BiasForwardOf(op, S::Load(x[j]), b));
  }
}

template <typename Op, typename S>
void BiasForwardRange(const Op& op, const void* x_raw, const void* b_raw,
                      void* y_raw, BiasLayout layout, int64_t begin,
                      int64_t end) {
  using Stored = typename S::Stored;
  const Stored* x = static_cast<const Stored*>(x_raw);
  const Stored* b = static_cast<const Stored*>(b_raw);
  Stored* y = static_cast<Stored*>(y_raw);
  const int64_t channels = layout.channels, inner = layout.inner;
  for (int64_t i = begin; i < end;) {
    if (inner == 1) {
      const int64_t c = i % channels;
      const int64_t len = std::min(channels - c, end - i);
      BiasForwardVector<Op, S>(op, x + i, b + c, y + i, len);
      i += len;
    } else {
      const int64_t k = i % inner;
      const int64_t len = std::min(inner - k, end - i);
      BiasForwardScalar<Op, S>(op, x + i, b[(i / inner) % channels], y + i,
                               len);
      i += len;
    }
  }
}

// One row of a tile, inner = 1: dx[j] and acc[j] += dx[j] (unrounded).
template <typename Op, typename S>
void BiasGradVector(const Op& op, const typename S::Stored* g,
                    const typename S::Stored* x, const typename S::Stored* b,
                    typename S::Stored* dx, typename S::Acc* acc,
                    int64_t len) {
#pragma GCC ivdep
  for (int64_t j = 0; j < len; ++j) {
    const auto d = BiasGradOf(op, S::Load(g[j]), S::Load(x[j]), S::Load(b[j]));
    dx[j] = S::Store(d);
    acc[j] += static_cast<typename S::Acc>(d);
  }
}

// One row of a tile, inner > 1 (one channel): dx[j], and their sum.
template <typename Op, typename S>
typename S::Acc BiasGradScalar(const Op& op, const typename S::Stored* g,
                               const typename S::Stored* x,
                               typename S::Stored b_stored,
                               typename S::Stored* dx, int64_t len) {
  using Acc = typename S::Acc;
  const auto b = S::Load(b_stored);
  Acc lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
#pragma GCC ivdep
    for (int k = 0; k < kLanes; ++k) {
      const auto d = BiasGradOf(op, S::Load(g[j + k]), S::Load(x[j + k]), b);
      dx[j + k] = S::Store(d);
      lanes[k] += static_cast<Acc>(d);
    }
  }
  for (int k = 0; j < len; ++j, ++k) {
    const auto d = BiasGradOf(op, S::Load(g[j]), S::Load(x[j]), b);
    dx[j] = S::Store(d);
    lanes[k] += static_cast<Acc>(d);
  }
  Acc sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

template <typename Op, typename S>
void BiasGradTileRange(const Op& op, const void* g_raw, const void* x_raw,
                       const void* b_raw, void* dx_raw, void* partials_raw,
                       const BiasGradTiling& t, int64_t tile_begin,
                       int64_t tile_end) {
  using Stored = typename S::Stored;
  using Acc = typename S::Acc;
  const Stored* g = static_cast<const Stored*>(g_raw);
  const Stored* x = static_cast<const Stored*>(x_raw);
  const Stored* b = static_cast<const Stored*>(b_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
  Acc* partials = static_cast<Acc*>(partials_raw);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t rt = tile / t.col_tiles, ct = tile % t.col_tiles;
    const int64_t r0 = rt * t.row_block, r1 = std::min(t.rows, r0 + t.row_block);
    const int64_t c0 = ct * t.col_block, c1 = std::min(t.cols, c0 + t.col_block);
    if (t.layout.inner == 1) {
      Acc* acc = partials + rt * t.cols + c0;
      std::fill(acc, acc + (c1 - c0), Acc(0));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t at = r * t.cols + c0;
        BiasGradVector<Op, S>(op, g + at, x + at, b + c0, dx + at, acc,
                              c1 - c0);
      }
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t at = r * t.cols + c0;
        partials[r * t.col_tiles + ct] = BiasGradScalar<Op, S>(
            op, g + at, x + at, b[r % t.layout.channels], dx + at, c1 - c0);
      }
    }
  }
}

// A run of output columns j0.. of one row, without (bias_a null) or with the
// bias of the a and b columns.
template <typename Op, typename S>
void GatedForwardRun(const Op& op, const typename S::Stored* a,
                     const typename S::Stored* b,
                     const typename S::Stored* bias_a,
                     const typename S::Stored* bias_b, typename S::Stored* out,
                     int64_t len) {
  if (bias_a == nullptr) {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j) {
      out[j] = S::Store(GatedForwardOf(op, S::Load(a[j]), S::Load(b[j])));
    }
  } else {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j) {
      out[j] = S::Store(GatedForwardOf(op, S::Load(a[j]) + S::Load(bias_a[j]),
                                       S::Load(b[j]) + S::Load(bias_b[j])));
    }
  }
}

template <typename Op, typename S>
void GatedForwardRange(const Op& op, const void* x_raw, const void* bias_raw,
                       void* y_raw, int64_t half, int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  const Stored* x = static_cast<const Stored*>(x_raw);
  const Stored* bias = static_cast<const Stored*>(bias_raw);
  Stored* y = static_cast<Stored*>(y_raw);
  for (int64_t i = begin; i < end;) {
    const int64_t r = i / half, j0 = i % half;
    const int64_t len = std::min(half - j0, end - i);
    const Stored* a = x + r * 2 * half + j0;
    const Stored* bias_a = bias == nullptr ? nullptr : bias + j0;
    GatedForwardRun<Op, S>(op, a, a + half, bias_a,
                           bias_a == nullptr ? nullptr : bias_a + half, y + i,
                           len);
    i += len;
  }
}

template <typename Op, typename S>
void GatedGradRange(const Op& op, const void* g_raw, const void* x_raw,
                    void* dx_raw, int64_t half, int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  const Stored* g = static_cast<const Stored*>(g_raw);
  const Stored* x = static_cast<const Stored*>(x_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
  for (int64_t i = begin; i < end;) {
    const int64_t r = i / half, j0 = i % half;
    const int64_t len = std::min(half - j0, end - i);
    const int64_t at = r * 2 * half + j0;
    const Stored* a = x + at;
    const Stored* b = a + half;
    const Stored* gi = g + i;
    Stored* da = dx + at;
    Stored* db = da + half;
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j) {
      const auto v = GatedGradOf(op, S::Load(gi[j]), S::Load(a[j]),
                                 S::Load(b[j]));
      da[j] = S::Store(v.d_a);
      db[j] = S::Store(v.d_b);
    }
    i += len;
  }
}

// BiasGated grad tiles: each row of a tile writes dx for its output columns'
// a and b features and adds them, unrounded, to the tile's partial sums.
template <typename Op, typename S>
void BiasGatedGradTileRange(const Op& op, const void* g_raw, const void* x_raw,
                            const void* b_raw, void* dx_raw,
                            void* partials_raw, const BiasGradTiling& t,
                            int64_t tile_begin, int64_t tile_end) {
  using Stored = typename S::Stored;
  using Acc = typename S::Acc;
  const Stored* g = static_cast<const Stored*>(g_raw);
  const Stored* x = static_cast<const Stored*>(x_raw);
  const Stored* bias = static_cast<const Stored*>(b_raw);
  Stored* dx = static_cast<Stored*>(dx_raw);
  Acc* partials = static_cast<Acc*>(partials_raw);
  const int64_t half = t.cols / 2;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t rt = tile / t.col_tiles, ct = tile % t.col_tiles;
    const int64_t r0 = rt * t.row_block, r1 = std::min(t.rows, r0 + t.row_block);
    const int64_t c0 = ct * t.col_block, c1 = std::min(half, c0 + t.col_block);
    const int64_t len = c1 - c0;
    Acc* acc_a = partials + rt * t.cols + c0;
    Acc* acc_b = acc_a + half;
    std::fill(acc_a, acc_a + len, Acc(0));
    std::fill(acc_b, acc_b + len, Acc(0));
    const Stored* bias_a = bias + c0;
    const Stored* bias_b = bias_a + half;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = r * t.cols + c0;
      const Stored* a = x + at;
      const Stored* b = a + half;
      const Stored* gi = g + r * half + c0;
      Stored* da = dx + at;
      Stored* db = da + half;
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        const auto v = GatedGradOf(op, S::Load(gi[j]),
                                   S::Load(a[j]) + S::Load(bias_a[j]),
                                   S::Load(b[j]) + S::Load(bias_b[j]));
        da[j] = S::Store(v.d_a);
        db[j] = S::Store(v.d_b);
        acc_a[j] += static_cast<Acc>(v.d_a);
        acc_b[j] += static_cast<Acc>(v.d_b);
      }
    }
  }
}

// ------------------------------------------- dtype and formula dispatch ---

// fn(fixed, s): op with its formula fixed at compile time (cpu_storage.h), and
// the storage policy of dtype.
template <typename Op, typename Fn>
void WithFormulaAndStorage(const Op& op, Dtype dtype, const Fn& fn) {
  WithFixedFormula(
      op,
      [&](auto fixed) { WithStorage(dtype, [&](auto s) { fn(fixed, s); }); },
      0);
}

template <typename Op>
void BiasForwardAny(const Op& op, Dtype dtype, const void* x, const void* b,
                    void* y, BiasLayout layout, int64_t begin, int64_t end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    BiasForwardRange<decltype(fixed), decltype(s)>(fixed, x, b, y, layout,
                                                   begin, end);
  });
}

template <typename Op>
void BiasGradAny(const Op& op, Dtype dtype, const void* g, const void* x,
                 const void* b, void* dx, void* partials,
                 const BiasGradTiling& tiling, int64_t tile_begin,
                 int64_t tile_end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    BiasGradTileRange<decltype(fixed), decltype(s)>(
        fixed, g, x, b, dx, partials, tiling, tile_begin, tile_end);
  });
}

template <typename Op>
void GatedForwardAny(const Op& op, Dtype dtype, const void* x, const void* b,
                     void* y, int64_t half, int64_t begin, int64_t end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    GatedForwardRange<decltype(fixed), decltype(s)>(fixed, x, b, y, half,
                                                    begin, end);
  });
}

template <typename Op>
void BiasGatedGradAny(const Op& op, Dtype dtype, const void* g, const void* x,
                      const void* b, void* dx, void* partials,
                      const BiasGradTiling& tiling, int64_t tile_begin,
                      int64_t tile_end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    BiasGatedGradTileRange<decltype(fixed), decltype(s)>(
        fixed, g, x, b, dx, partials, tiling, tile_begin, tile_end);
  });
}

template <typename Op>
void GatedGradAny(const Op& op, Dtype dtype, const void* g, const void* x,
                  void* dx, int64_t half, int64_t begin, int64_t end) {
  WithFormulaAndStorage(op, dtype, [&](auto fixed, auto s) {
    GatedGradRange<decltype(fixed), decltype(s)>(fixed, g, x, dx, half, begin,
                                                 end);
  });
}

// One copy of each per instruction set; `flatten` inlines all they call.
#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                        \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void BiasForward##Suffix(         \
      const Op& op, Dtype dtype, const void* x, const void* b, void* y,       \
      BiasLayout layout, int64_t begin, int64_t end) {                        \
    BiasForwardAny(op, dtype, x, b, y, layout, begin, end);                   \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void BiasGrad##Suffix(            \
      const Op& op, Dtype dtype, const void* g, const void* x, const void* b, \
      void* dx, void* partials, const BiasGradTiling& tiling,                 \
      int64_t tile_begin, int64_t tile_end) {                                 \
    BiasGradAny(op, dtype, g, x, b, dx, partials, tiling, tile_begin,         \
                tile_end);                                                    \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void GatedForward##Suffix(        \
      const Op& op, Dtype dtype, const void* x, const void* b, void* y,       \
      int64_t half, int64_t begin, int64_t end) {                             \
    GatedForwardAny(op, dtype, x, b, y, half, begin, end);                    \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void BiasGatedGrad##Suffix(       \
      const Op& op, Dtype dtype, const void* g, const void* x, const void* b, \
      void* dx, void* partials, const BiasGradTiling& tiling,                 \
      int64_t tile_begin, int64_t tile_end) {                                 \
    BiasGatedGradAny(op, dtype, g, x, b, dx, partials, tiling, tile_begin,    \
                     tile_end);                                               \
  }                                                                           \
  template <typename Op>                                                      \
  TF_OPS_ISA_ENTRY(TARGET) void GatedGrad##Suffix(           \
      const Op& op, Dtype dtype, const void* g, const void* x, void* dx,      \
      int64_t half, int64_t begin, int64_t end) {                             \
    GatedGradAny(op, dtype, g, x, dx, half, begin, end);                      \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

BiasGradTiling MakeBiasGradTiling(BiasLayout layout, int64_t n) {
  BiasGradTiling t;
  t.layout = layout;
  t.cols = layout.inner == 1 ? layout.channels : layout.inner;
  t.rows = t.cols == 0 ? 0 : n / t.cols;
  t.col_block = std::max<int64_t>(1, std::min(t.cols, kTileElements));
  t.row_block = std::max<int64_t>(1, kTileElements / t.col_block);
  t.row_tiles = (t.rows + t.row_block - 1) / t.row_block;
  t.col_tiles = (t.cols + t.col_block - 1) / t.col_block;
  return t;
}

BiasGradTiling MakeGatedBiasGradTiling(int64_t half, int64_t rows) {
  BiasGradTiling t;
  t.layout = {2 * half, 1};
  t.cols = 2 * half;
  t.rows = rows;
  // Tiles of about kTileElements features: output column blocks of up to
  // half that, each covering its a and b columns.
  t.col_block = std::max<int64_t>(1, std::min(half, kTileElements / 2));
  t.row_block = std::max<int64_t>(1, kTileElements / (2 * t.col_block));
  t.row_tiles = (t.rows + t.row_block - 1) / t.row_block;
  t.col_tiles = (half + t.col_block - 1) / t.col_block;
  return t;
}

template <typename Op>
void CpuBiasForward(const Op& op, Dtype dtype, const void* x, const void* bias,
                    void* y, BiasLayout layout, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(BiasForward,
                          op, dtype, x, bias, y, layout, begin, end)
}

template <typename Op>
void CpuBiasGradTiles(const Op& op, Dtype dtype, const void* g, const void* x,
                      const void* bias, void* dx, void* partials,
                      const BiasGradTiling& tiling, int64_t tile_begin,
                      int64_t tile_end) {
  TF_OPS_CPU_ISA_DISPATCH(BiasGrad, op, dtype, g, x, bias, dx, partials,
                          tiling, tile_begin, tile_end)
}

template <typename Op>
void CpuGatedForward(const Op& op, Dtype dtype, const void* x,
                     const void* bias, void* y, int64_t half, int64_t begin,
                     int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GatedForward, op, dtype, x, bias, y, half, begin, end)
}

template <typename Op>
void CpuBiasGatedGradTiles(const Op& op, Dtype dtype, const void* g,
                           const void* x, const void* bias, void* dx,
                           void* partials, const BiasGradTiling& tiling,
                           int64_t tile_begin, int64_t tile_end) {
  TF_OPS_CPU_ISA_DISPATCH(BiasGatedGrad, op, dtype, g, x, bias, dx, partials,
                          tiling, tile_begin, tile_end)
}

template <typename Op>
void CpuGatedGrad(const Op& op, Dtype dtype, const void* g, const void* x,
                  void* dx, int64_t half, int64_t begin, int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(GatedGrad, op, dtype, g, x, dx, half, begin, end)
}

void CpuBiasGradReduce(Dtype dtype, const void* partials_raw,
                       const BiasGradTiling& t, void* out_raw, int64_t begin,
                       int64_t end) {
  WithStorage(dtype, [&](auto s) {
    using S = decltype(s);
    using Acc = typename S::Acc;
    const Acc* partials = static_cast<const Acc*>(partials_raw);
    auto* out = static_cast<typename S::Stored*>(out_raw);
    const int64_t channels = t.layout.channels;
    for (int64_t c = begin; c < end; ++c) {
      Acc sum = 0;
      if (t.layout.inner == 1) {
        for (int64_t rt = 0; rt < t.row_tiles; ++rt) sum += partials[rt * t.cols + c];
      } else {
        // Rows of channel c: c, c + channels, ...; each with its column tiles.
        for (int64_t r = c; r < t.rows; r += channels) {
          for (int64_t ct = 0; ct < t.col_tiles; ++ct) {
            sum += partials[r * t.col_tiles + ct];
          }
        }
      }
      out[c] = S::Store(static_cast<decltype(S::Load(out[c]))>(sum));
    }
  });
}

#define TF_OPS_INSTANTIATE_FUSED_CPU(Name)                                     \
  template void CpuBiasForward<Name>(const Name&, Dtype, const void*,          \
                                     const void*, void*, BiasLayout, int64_t,  \
                                     int64_t);                                 \
  template void CpuBiasGradTiles<Name>(const Name&, Dtype, const void*,        \
                                       const void*, const void*, void*, void*, \
                                       const BiasGradTiling&, int64_t,         \
                                       int64_t);                               \
  template void CpuGatedForward<Name>(const Name&, Dtype, const void*,         \
                                      const void*, void*, int64_t, int64_t,    \
                                      int64_t);                                \
  template void CpuBiasGatedGradTiles<Name>(                                   \
      const Name&, Dtype, const void*, const void*, const void*, void*, void*, \
      const BiasGradTiling&, int64_t, int64_t);                                \
  template void CpuGatedGrad<Name>(const Name&, Dtype, const void*,            \
                                   const void*, void*, int64_t, int64_t,       \
                                   int64_t);
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_INSTANTIATE_FUSED_CPU)
#undef TF_OPS_INSTANTIATE_FUSED_CPU

}  // namespace tf_ops

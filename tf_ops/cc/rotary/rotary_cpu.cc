// The rotary embedding's CPU loops (rotary_cpu.h), compiled once per
// instruction set (TF_OPS_FOR_EACH_CPU_ISA): each variant has GCC's `target`
// and `flatten` attributes, so rotary_math.h's formulas and the vectorisable
// sine and cosine (fast_math::SinCosF) are inlined and vectorised for it.

#include "tf_ops/cc/rotary/rotary_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tf_ops/cc/core/cpu_isa.h"
#include "tf_ops/cc/core/cpu_storage.h"
#include "tf_ops/cc/rotary/rotary_math.h"

namespace tf_ops {
namespace rotary {
namespace {

using cpu_storage::WithStorage;

template <typename S>
using Compute = decltype(S::Load(typename S::Stored()));

// Rows of leading axes that share a unit: the sequence index's rows in one
// block of the axes before the sequence axis.
int64_t BlocksBeforeSequence(const RotaryLayout& l) {
  const int64_t per_block = l.seq_len * l.seq_div;
  return per_block == 0 ? 0 : l.outer / per_block;
}

// Element i of the two halves (x1, x2) turned into (y1, y2): both read
// before either is written, so y may be x.
template <typename S>
inline void TurnPair(const Rotation<Compute<S>>& r,
                     const typename S::Stored* x1,
                     const typename S::Stored* x2, typename S::Stored* y1,
                     typename S::Stored* y2, int64_t i) {
  const RotatedPair<Compute<S>> p = Rotate(r, S::Load(x1[i]), S::Load(x2[i]));
  y1[i] = S::Store(p.first);
  y2[i] = S::Store(p.second);
}

// One row of D features, turned by the table's rotations.
template <typename S>
inline void RotateRow(int64_t half, const Compute<S>* cos_table,
                      const Compute<S>* sin_table,
                      const typename S::Stored* x, typename S::Stored* y) {
  using C = Compute<S>;
  // No two j share an element: the loop vectorises, also in place.
#pragma GCC ivdep
  for (int64_t j = 0; j < half; ++j) {
    TurnPair<S>(Rotation<C>{cos_table[j], sin_table[j]}, x, x + half, y,
                y + half, j);
  }
}

// The feature axis last: unit u is sequence index s = u / blocks of block
// a = u % blocks, seq_div rows. The table is recomputed only when a row's
// position changes.
template <typename S>
void Rows(const RotaryArgs& args, const void* x_raw, void* y_raw,
          int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  const RotaryLayout& l = args.layout;
  const int64_t half = l.half(), d = l.features;
  const int64_t blocks = BlocksBeforeSequence(l);
  const C* positions = static_cast<const C*>(args.positions);
  const C magnitude = static_cast<C>(args.magnitude);
  std::vector<C> inverse(half), cos_table(half), sin_table(half);
  for (int64_t j = 0; j < half; ++j) {
    inverse[j] = static_cast<C>(args.inverse_frequencies[j]);
  }
  // The batch index changes inside a unit only when the batch axis comes
  // after the sequence axis; otherwise a unit has one position (no division
  // per row).
  const bool batch_inside = l.batch_len > 1 && l.batch_div < l.seq_div;
  int64_t cached = -1;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t s = u / blocks, a = u % blocks;
    const int64_t first = (a * l.seq_len + s) * l.seq_div;
    const int64_t unit_index = l.PositionIndex(first);
    for (int64_t row = first; row < first + l.seq_div; ++row) {
      const int64_t index = batch_inside ? l.PositionIndex(row) : unit_index;
      if (index != cached) {
        const C position = PositionAt(l, positions, index);
#pragma GCC ivdep
        for (int64_t j = 0; j < half; ++j) {
          const Rotation<C> r = RotationOf(Angle(position, inverse[j]),
                                           magnitude, args.transpose);
          cos_table[j] = r.cos;
          sin_table[j] = r.sin;
        }
        cached = index;
      }
      RotateRow<S>(half, cos_table.data(), sin_table.data(),
                   static_cast<const Stored*>(x_raw) + row * d,
                   static_cast<Stored*>(y_raw) + row * d);
    }
  }
}

// Any layout: unit o is the [D, inner] block x[o]; element i of a pair
// turns by the angle of its own position.
template <typename S>
void Blocks(const RotaryArgs& args, const void* x_raw, void* y_raw,
            int64_t begin, int64_t end) {
  using Stored = typename S::Stored;
  using C = Compute<S>;
  const RotaryLayout& l = args.layout;
  const int64_t half = l.half(), inner = l.inner;
  const C* positions = static_cast<const C*>(args.positions);
  const C magnitude = static_cast<C>(args.magnitude);
  const bool transpose = args.transpose;
  std::vector<C> position_buffer(inner);
  C* position = position_buffer.data();
  for (int64_t o = begin; o < end; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      position[i] = PositionAt(l, positions, l.PositionIndex(o * inner + i));
    }
    for (int64_t j = 0; j < half; ++j) {
      const C inverse = static_cast<C>(args.inverse_frequencies[j]);
      const int64_t at = (o * l.features + j) * inner;
      const Stored* x1 = static_cast<const Stored*>(x_raw) + at;
      const Stored* x2 = x1 + half * inner;
      Stored* y1 = static_cast<Stored*>(y_raw) + at;
      Stored* y2 = y1 + half * inner;
#pragma GCC ivdep
      for (int64_t i = 0; i < inner; ++i) {
        TurnPair<S>(
            RotationOf(Angle(position[i], inverse), magnitude, transpose), x1,
            x2, y1, y2, i);
      }
    }
  }
}

void RotaryAny(const RotaryArgs& args, const void* x, void* y, int64_t begin,
               int64_t end) {
  WithStorage(args.dtype, [&](auto s) {
    if (args.layout.inner == 1) {
      Rows<decltype(s)>(args, x, y, begin, end);
    } else {
      Blocks<decltype(s)>(args, x, y, begin, end);
    }
  });
}

#define TF_OPS_ISA_VARIANT(Suffix, TARGET, F16C)                   \
  TF_OPS_ISA_ENTRY(TARGET) void Rotary##Suffix(         \
      const RotaryArgs& args, const void* x, void* y, int64_t begin,     \
      int64_t end) {                                                     \
    RotaryAny(args, x, y, begin, end);                                   \
  }

TF_OPS_FOR_EACH_CPU_ISA(TF_OPS_ISA_VARIANT)
#undef TF_OPS_ISA_VARIANT

}  // namespace

int64_t CpuRotaryUnits(const RotaryLayout& l) {
  if (l.points() == 0 || l.features == 0) return 0;
  return l.inner == 1 ? l.seq_len * BlocksBeforeSequence(l) : l.outer;
}

int64_t CpuRotaryUnitElements(const RotaryLayout& l) {
  return l.inner == 1 ? l.seq_div * l.features : l.features * l.inner;
}

void CpuRotary(const RotaryArgs& args, const void* x, void* y, int64_t begin,
               int64_t end) {
  TF_OPS_CPU_ISA_DISPATCH(Rotary, args, x, y, begin, end)
}

}  // namespace rotary
}  // namespace tf_ops

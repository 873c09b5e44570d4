// The attention family's input rules, written once for the shape functions
// (attention_ops.cc, where a dimension may be unknown: -1), the kernels
// (attention_kernels.cc) and the XLA lowerings (attention_xla.cc):
//   query [B, T, N, D], key [B, S, K, D], value [B, S, K, Dv]: rank 4, one
//   batch, one S, D and Dv >= 1, K >= 1 dividing N;
//   mask (bool) and bias: rank <= 4, each dimension (aligned from the last)
//   1 or the matching one of [B, N, T, S];
//   window >= -1 (-1: none), softcap >= 0 (0: none), scale finite;
// and what the optional inputs, always given, mean (SetMaskAndBias).
// Every message names the op and the shapes. Uses absl only (no TF types).

#ifndef TF_OPS_CC_ATTENTION_ATTENTION_CHECKS_H_
#define TF_OPS_CC_ATTENTION_ATTENTION_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tf_ops/cc/attention/attention_params.h"

namespace tf_ops {
namespace attention {

using Dims = std::vector<int64_t>;  // -1: unknown

inline std::string ShapeString(const Dims& d) {
  std::vector<std::string> parts;
  for (int64_t x : d) parts.push_back(x < 0 ? "?" : absl::StrCat(x));
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

// a and b agree where both are known.
inline bool Agree(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

inline absl::Status CheckAttrs(const std::string& op, float scale,
                               float softcap, int64_t window) {
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scale must be finite, got ", scale));
  }
  if (!(softcap >= 0.0f) || !std::isfinite(softcap)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": softcap must be >= 0 and finite (0: none), got ", softcap));
  }
  if (window < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": window must be >= 0, or -1 for none, got ", window));
  }
  return absl::OkStatus();
}

// A mask's or bias's broadcast against [B, N, T, S] (full, -1 unknown):
// strides in elements, 0 where it has size 1 (or is absent there).
inline absl::Status CheckBroadcast(const std::string& op, const char* name,
                                   const Dims& operand, const Dims& full,
                                   int64_t strides[4]) {
  const int rank = static_cast<int>(operand.size());
  bool ok = rank <= 4;
  int64_t stride = 1;
  for (int i = 0; i < 4; ++i) strides[i] = 0;
  for (int i = 1; ok && i <= rank; ++i) {
    const int64_t m = operand[rank - i];
    const int64_t f = full[4 - i];
    ok = m == 1 || m < 0 || Agree(m, f);
    strides[4 - i] = m == 1 ? 0 : stride;
    if (m >= 0) stride *= m;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", name, " of shape ", ShapeString(operand),
      " does not broadcast to the logits [batch, heads, T, S] = ",
      ShapeString(full)));
}

// Checks query, key, value, mask and bias; where every dimension is known
// and p is given, fills p's sizes and the broadcast strides (the data
// pointers, scale and attributes are the caller's).
inline absl::Status CheckAttention(const std::string& op, const Dims& q,
                                   const Dims& k, const Dims& v,
                                   const Dims& mask, const Dims& bias,
                                   AttentionParams* p) {
  const std::string shapes = absl::StrCat(
      "query ", ShapeString(q), ", key ", ShapeString(k), ", value ",
      ShapeString(v));
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": query, key and value must have rank 4 ([batch, length, heads, "
        "head_dim]), got ", shapes));
  }
  if (!Agree(q[0], k[0]) || !Agree(q[0], v[0]) || !Agree(k[0], v[0])) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": query, key and value must have one batch size, got ", shapes));
  }
  if (!Agree(k[1], v[1])) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": key and value must have one length, got ", shapes));
  }
  if (!Agree(k[2], v[2])) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": key and value must have the same number of heads, got ",
        shapes));
  }
  if (!Agree(q[3], k[3])) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": query and key must have the same head_dim, got ", shapes));
  }
  if (q[2] == 0 || k[2] == 0 || q[3] == 0 || v[3] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": heads and head dims must be >= 1, got ", shapes));
  }
  if (q[2] > 0 && k[2] > 0 && q[2] % k[2] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the key/value heads (", k[2],
        ") must divide the query heads (", q[2], "), got ", shapes));
  }
  const int64_t kv_len = k[1] >= 0 ? k[1] : v[1];
  const Dims full = {q[0] >= 0 ? q[0] : k[0], q[2], q[1], kv_len};
  int64_t mask_strides[4], bias_strides[4];
  absl::Status status = CheckBroadcast(op, "mask", mask, full, mask_strides);
  if (status.ok()) {
    status = CheckBroadcast(op, "bias", bias, full, bias_strides);
  }
  if (!status.ok()) return status;
  if (p != nullptr) {
    p->batch = full[0];
    p->q_len = q[1];
    p->kv_len = kv_len;
    p->heads = q[2];
    p->kv_heads = k[2];
    p->head_dim = q[3];
    p->value_dim = v[3];
    for (int i = 0; i < 4; ++i) {
      p->mask.strides[i] = mask_strides[i];
      p->bias.strides[i] = bias_strides[i];
    }
  }
  return absl::OkStatus();
}

// The data of the mask and bias, by the op's rule for them: a rank-0 bias is
// none (a constant added to every logit changes no probability, and its
// gradient is 0), and a rank-0 mask that is true keeps every key, so the
// engine need not read it. The GPU library's inputs are in GPU memory: there a
// scalar mask is never read by the host, the engine reads it as any broadcast
// mask (strides 0).
inline void SetMaskAndBias(int mask_rank, const void* mask, int bias_rank,
                           const void* bias, AttentionParams* p) {
#if TF_OPS_WITH_CUDA
  constexpr bool kMaskOnHost = false;
#else
  constexpr bool kMaskOnHost = true;
#endif
  p->bias.data = bias_rank == 0 ? nullptr : bias;
  const bool keeps_all = kMaskOnHost && mask_rank == 0 &&
                         *static_cast<const bool*>(mask);
  p->mask.data = keeps_all ? nullptr : mask;
}

}  // namespace attention
}  // namespace tf_ops

#endif  // TF_OPS_CC_ATTENTION_ATTENTION_CHECKS_H_

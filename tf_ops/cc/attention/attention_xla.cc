// XLA lowerings of the attention family (attention_ops.cc) on XLA_CPU_JIT and
// XLA_GPU_JIT, for tf.function(jit_compile=True) and Keras jit_compile.
//
// Where XLA's FFI registry holds a handler for the platform compiled for
// ("Host": attention_ffi.cc in _tf_ops.so, over the CPU engine; "CUDA": the
// same file in _tf_ops_gpu.so, over the CUDA engine, when the loader loaded
// it), each op is one typed-FFI custom call into that engine
// (core/xla_custom_call.h), so the [batch, heads, T, S] tensors never exist
// under jit either. Elsewhere (a device without a handler, or the GPU when the
// GPU library was not loaded) it is the composite below: two dots and a
// softmax in the compute type (F32 for half, bfloat16 and float, F64 for
// double), with the T x S logits and probabilities in memory.
//
// Inputs are checked as the shape functions and kernels check them
// (attention_checks.h), with every dimension known here.
// Registered with REGISTER_KERNEL_BUILDER for the reason activation_xla.cc
// gives.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ops/cc/attention/attention_checks.h"
#include "tf_ops/cc/attention/attention_cpu.h"
#include "tf_ops/cc/attention/attention_ffi.h"
#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/xla_compute_type.h"
#include "tf_ops/cc/core/xla_custom_call.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/xla_data.pb.h"

namespace tf_ops {
namespace attention {
namespace {

using xla::XlaOp;

// The attributes every attention op has.
struct Attrs {
  float scale = 1.0f;
  float softcap = 0.0f;
  bool causal = false;
  int64_t window = -1;

  explicit Attrs(tensorflow::OpKernelConstruction* ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("softcap", &softcap));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("causal", &causal));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("window", &window));
  }
  XlaFfiAttrs Ffi() const {
    XlaFfiAttrs a;
    a.Add("scale", scale).Add("softcap", softcap).Add("causal", causal);
    a.Add("window", window);
    return a;
  }
};

absl::StatusOr<Dims> InputDims(tensorflow::XlaOpKernelContext* ctx, int i) {
  absl::StatusOr<xla::Shape> shape = ctx->InputXlaShape(i);
  TF_RETURN_IF_ERROR(shape.status());
  return Dims(shape->dimensions().begin(), shape->dimensions().end());
}

// Checks the attributes and inputs 0-4, and the lse type `lse_type` against
// the compute type of `type`; fills p's sizes and broadcast strides.
absl::Status Check(tensorflow::XlaOpKernelContext* ctx, const std::string& op,
                   const Attrs& a, xla::PrimitiveType type,
                   xla::PrimitiveType lse_type, AttentionParams* p) {
  TF_RETURN_IF_ERROR(CheckAttrs(op, a.scale, a.softcap, a.window));
  std::vector<Dims> dims;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Dims> d = InputDims(ctx, i);
    TF_RETURN_IF_ERROR(d.status());
    dims.push_back(*d);
  }
  TF_RETURN_IF_ERROR(
      CheckAttention(op, dims[0], dims[1], dims[2], dims[3], dims[4], p));
  if (lse_type != XlaComputeType(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": lse must be float (double for double inputs), got ",
        xla::PrimitiveType_Name(lse_type), " with ",
        xla::PrimitiveType_Name(type)));
  }
  p->scale = a.scale;
  p->softcap = a.softcap;
  p->causal = a.causal;
  p->window = a.window;
  return absl::OkStatus();
}

Dtype DtypeOf(xla::PrimitiveType type) {
  switch (type) {
    case xla::F16:
      return Dtype::kHalf;
    case xla::BF16:
      return Dtype::kBFloat16;
    case xla::F64:
      return Dtype::kDouble;
    default:
      return Dtype::kFloat;
  }
}

xla::Shape ShapeOf(xla::PrimitiveType type, std::vector<int64_t> dims) {
  return xla::ShapeUtil::MakeShape(type, dims);
}

// ----------------------------------------------------------- composite ------
// [B, N, T, S] = the logits' shape.
std::vector<int64_t> Full(const AttentionParams& p) {
  return {p.batch, p.heads, p.q_len, p.kv_len};
}

// A mask or bias (rank <= 4, aligned from the last) broadcast to [B, N, T, S].
XlaOp BroadcastOperand(XlaOp x, const Dims& dims, const AttentionParams& p) {
  const std::vector<int64_t> full = Full(p);
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> kept_dims, map;
  for (int i = 0; i < rank; ++i) {
    const int axis = 4 - rank + i;
    if (dims[i] == full[axis]) {
      kept_dims.push_back(dims[i]);
      map.push_back(axis);
    }
  }
  return xla::BroadcastInDim(xla::Reshape(x, kept_dims), full, map);
}

xla::DotDimensionNumbers Dot(std::vector<int64_t> lhs_batch,
                             std::vector<int64_t> rhs_batch,
                             std::vector<int64_t> lhs_contract,
                             std::vector<int64_t> rhs_contract) {
  xla::DotDimensionNumbers d;
  for (int64_t i : lhs_batch) d.add_lhs_batch_dimensions(i);
  for (int64_t i : rhs_batch) d.add_rhs_batch_dimensions(i);
  for (int64_t i : lhs_contract) d.add_lhs_contracting_dimensions(i);
  for (int64_t i : rhs_contract) d.add_rhs_contracting_dimensions(i);
  return d;
}

// What the forward and the backward composites share: the logits after the
// soft cap, which keys each row keeps, and the inputs in the compute type.
struct Logits {
  XlaOp q, k, v;     // compute type
  XlaOp capped;      // [B, N, T, S]
  XlaOp kept;        // PRED [B, N, T, S]
};

Logits ComputeLogits(tensorflow::XlaOpKernelContext* ctx,
                     const AttentionParams& p, xla::PrimitiveType type) {
  xla::XlaBuilder* b = ctx->builder();
  const int64_t B = p.batch, T = p.q_len, S = p.kv_len, N = p.heads;
  const int64_t K = p.kv_heads, G = p.group(), D = p.head_dim;
  Logits l;
  l.q = Widen(ctx->Input(0), type).op();
  l.k = Widen(ctx->Input(1), type).op();
  l.v = Widen(ctx->Input(2), type).op();
  const XlaOp q5 = xla::Reshape(l.q, {B, T, K, G, D});
  // [B, K, T, G, S] -> [B, K, G, T, S] -> [B, N, T, S] (n = k G + g).
  XlaOp s = xla::DotGeneral(q5, l.k, Dot({0, 2}, {0, 2}, {4}, {3}));
  s = xla::Reshape(xla::Transpose(s, {0, 1, 3, 2, 4}), {B, N, T, S});
  XlaOp raw = s * xla::ScalarLike(s, p.scale);
  const Dims bias_dims = *InputDims(ctx, 4);
  if (!bias_dims.empty()) {
    raw = raw + BroadcastOperand(Widen(ctx->Input(4), type).op(), bias_dims,
                                 p);
  }
  if (p.softcap > 0) {
    const XlaOp c = xla::ScalarLike(raw, p.softcap);
    raw = c * xla::Tanh(raw / c);
  }
  l.capped = raw;
  const std::vector<int64_t> full = Full(p);
  XlaOp kept = BroadcastOperand(ctx->Input(3), *InputDims(ctx, 3), p);
  const xla::Shape iota = xla::ShapeUtil::MakeShape(xla::S64, full);
  const XlaOp t = xla::Iota(b, iota, 2);
  const XlaOp si = xla::Iota(b, iota, 3);
  if (p.causal) kept = xla::And(kept, xla::Le(si, t));
  if (p.window >= 0) {
    kept = xla::And(kept, xla::Lt(xla::Abs(t - si),
                                  xla::ConstantR0<int64_t>(b, p.window)));
  }
  l.kept = kept;
  return l;
}

XlaOp RowBroadcast(XlaOp row, const AttentionParams& p) {
  return xla::BroadcastInDim(row, Full(p), {0, 1, 2});
}

// x summed over `axes`.
XlaOp SumOver(XlaOp x, const std::vector<int64_t>& axes) {
  xla::XlaBuilder* b = x.builder();
  const xla::PrimitiveType type = b->GetShape(x)->element_type();
  return xla::Reduce(x, xla::Zero(b, type),
                     xla::CreateScalarAddComputation(type, b), axes);
}

XlaOp RowSum(XlaOp x, int axis) { return SumOver(x, {axis}); }

// The probabilities' contribution to out or dv of a row with no kept key:
// uniform over the S keys (Keras's).
XlaOp Uniform(XlaOp like, const AttentionParams& p) {
  return xla::FullLike(like, 1.0 / static_cast<double>(p.kv_len));
}

// output, lse.
void ForwardComposite(tensorflow::XlaOpKernelContext* ctx,
                      const AttentionParams& p, xla::PrimitiveType type,
                      XlaOp* out, XlaOp* lse) {
  xla::XlaBuilder* b = ctx->builder();
  const int64_t B = p.batch, T = p.q_len, S = p.kv_len, N = p.heads;
  const int64_t K = p.kv_heads, G = p.group(), Dv = p.value_dim;
  const Logits l = ComputeLogits(ctx, p, type);
  const xla::PrimitiveType c = XlaComputeType(type);
  const XlaOp neg_inf = xla::FullLike(l.capped, -std::numeric_limits<double>::infinity());
  const XlaOp x = xla::Select(l.kept, l.capped, neg_inf);
  const XlaOp m = xla::Reduce(x, xla::MinValue(b, c),
                              xla::CreateScalarMaxComputation(c, b), {3});
  const XlaOp dead = xla::Eq(m, xla::FullLike(m, -std::numeric_limits<double>::infinity()));
  const XlaOp m0 = xla::Select(dead, xla::ZerosLike(m), m);
  const XlaOp e = xla::Select(l.kept, xla::Exp(x - RowBroadcast(m0, p)),
                              xla::ZerosLike(x));
  const XlaOp sum = RowSum(e, 3);
  const XlaOp probs = xla::Select(RowBroadcast(dead, p), Uniform(e, p),
                                  e / RowBroadcast(sum, p));
  *lse = xla::Select(dead, xla::FullLike(m, -std::numeric_limits<double>::infinity()),
                     m + xla::Log(sum));
  // [B, K, G, T, S] . [B, S, K, Dv] -> [B, K, G, T, Dv] -> [B, T, N, Dv].
  const XlaOp p5 = xla::Reshape(probs, {B, K, G, T, S});
  const XlaOp o = xla::DotGeneral(p5, l.v, Dot({0, 1}, {0, 2}, {4}, {1}));
  *out = xla::Reshape(xla::Transpose(o, {0, 3, 1, 2, 4}), {B, T, N, Dv});
}

// What the backward composites share: dS, the gradient of the logits before
// the scale [B, N, T, S], from output (5), lse (6) and doutput (7); and the
// weights dv needs (uniform on a row that keeps no key).
struct LogitGrads {
  Logits l;
  XlaOp dout;     // compute type
  XlaOp probs_v;  // [B, N, T, S]
  XlaOp ds;       // [B, N, T, S]
};

LogitGrads ComputeLogitGrads(tensorflow::XlaOpKernelContext* ctx,
                             const AttentionParams& p,
                             xla::PrimitiveType type) {
  const int64_t B = p.batch, T = p.q_len, S = p.kv_len, N = p.heads;
  const int64_t K = p.kv_heads, G = p.group(), Dv = p.value_dim;
  LogitGrads r{ComputeLogits(ctx, p, type)};
  const Logits& l = r.l;
  const XlaOp out = Widen(ctx->Input(5), type).op();
  const XlaOp lse = ctx->Input(6);
  const XlaOp dout = Widen(ctx->Input(7), type).op();
  r.dout = dout;
  const XlaOp dead = xla::Eq(
      lse, xla::FullLike(lse, -std::numeric_limits<double>::infinity()));
  const XlaOp dead_b = RowBroadcast(dead, p);
  const XlaOp live = xla::And(l.kept, xla::Not(dead_b));
  const XlaOp zeros = xla::ZerosLike(l.capped);
  const XlaOp e = xla::Exp(l.capped - RowBroadcast(lse, p));
  const XlaOp probs = xla::Select(live, e, zeros);
  r.probs_v = xla::Select(dead_b, Uniform(zeros, p), probs);
  const XlaOp dout5 = xla::Reshape(dout, {B, T, K, G, Dv});
  // dp: [B, T, K, G, Dv] . [B, S, K, Dv] -> [B, K, T, G, S] -> [B, N, T, S].
  XlaOp dp = xla::DotGeneral(dout5, l.v, Dot({0, 2}, {0, 2}, {4}, {3}));
  dp = xla::Reshape(xla::Transpose(dp, {0, 1, 3, 2, 4}), {B, N, T, S});
  // The row sums of dout * out: [B, T, N] -> [B, N, T].
  const XlaOp delta = xla::Transpose(RowSum(dout * out, 3), {0, 2, 1});
  XlaOp ds = probs * (dp - RowBroadcast(delta, p));
  if (p.softcap > 0) {
    const XlaOp t = l.capped / xla::ScalarLike(ds, p.softcap);
    ds = ds * (xla::ScalarLike(ds, 1.0) - t * t);
  }
  r.ds = ds;
  return r;
}

// dbias: dS summed over the axes the bias is broadcast along, in the bias's
// shape (0 for the scalar "none" bias).
XlaOp BiasGradOf(tensorflow::XlaOpKernelContext* ctx, const XlaOp& ds,
                 xla::PrimitiveType type) {
  const Dims bias = *InputDims(ctx, 4);
  if (bias.empty()) return xla::Zero(ctx->builder(), XlaComputeType(type));
  const int rank = static_cast<int>(bias.size());
  std::vector<int64_t> axes;
  for (int j = 0; j < 4; ++j) {
    if (j < 4 - rank || bias[j - (4 - rank)] == 1) axes.push_back(j);
  }
  return xla::Reshape(SumOver(ds, axes), bias);
}

// dquery, dkey, dvalue, and dbias where asked (not null).
void BackwardComposite(tensorflow::XlaOpKernelContext* ctx,
                       const AttentionParams& p, xla::PrimitiveType type,
                       XlaOp* dq, XlaOp* dk, XlaOp* dv,
                       XlaOp* dbias = nullptr) {
  const int64_t B = p.batch, T = p.q_len, S = p.kv_len, N = p.heads;
  const int64_t K = p.kv_heads, G = p.group(), D = p.head_dim;
  const int64_t Dv = p.value_dim;
  const LogitGrads r = ComputeLogitGrads(ctx, p, type);
  const Logits& l = r.l;
  const XlaOp dout5 = xla::Reshape(r.dout, {B, T, K, G, Dv});
  // dv: [B, K, G, T, S] . [B, T, K, G, Dv] over (G, T) -> [B, K, S, Dv].
  const XlaOp dv4 = xla::DotGeneral(xla::Reshape(r.probs_v, {B, K, G, T, S}),
                                    dout5, Dot({0, 1}, {0, 2}, {2, 3}, {3, 1}));
  *dv = xla::Transpose(dv4, {0, 2, 1, 3});
  if (dbias != nullptr) *dbias = BiasGradOf(ctx, r.ds, type);
  const XlaOp ds = r.ds * xla::ScalarLike(r.ds, p.scale);
  const XlaOp ds5 = xla::Reshape(ds, {B, K, G, T, S});
  // dq: [B, K, G, T, S] . [B, S, K, D] -> [B, K, G, T, D] -> [B, T, N, D].
  const XlaOp dq5 = xla::DotGeneral(ds5, l.k, Dot({0, 1}, {0, 2}, {4}, {1}));
  *dq = xla::Reshape(xla::Transpose(dq5, {0, 3, 1, 2, 4}), {B, T, N, D});
  // dk: [B, K, G, T, S] . [B, T, K, G, D] over (G, T) -> [B, K, S, D].
  const XlaOp q5 = xla::Reshape(l.q, {B, T, K, G, D});
  const XlaOp dk4 =
      xla::DotGeneral(ds5, q5, Dot({0, 1}, {0, 2}, {2, 3}, {3, 1}));
  *dk = xla::Transpose(dk4, {0, 2, 1, 3});
}

XlaOp Narrowed(XlaOp x, xla::PrimitiveType type) {
  return XlaComputeType(type) == type ? x : xla::ConvertElementType(x, type);
}

// ------------------------------------------------------------- kernels ------
// Check for the gradient ops, whose inputs 5-7 (output, lse, doutput) must
// have the forward's shapes.
absl::Status CheckGrad(tensorflow::XlaOpKernelContext* ctx,
                       const std::string& op, const Attrs& a,
                       AttentionParams* p) {
  TF_RETURN_IF_ERROR(Check(ctx, op, a, ctx->input_xla_type(0),
                           ctx->input_xla_type(6), p));
  const std::vector<Dims> expected = {
      {p->batch, p->q_len, p->heads, p->value_dim},
      {p->batch, p->heads, p->q_len},
      {p->batch, p->q_len, p->heads, p->value_dim}};
  const char* names[] = {"output", "lse", "doutput"};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Dims> d = InputDims(ctx, 5 + i);
    TF_RETURN_IF_ERROR(d.status());
    if (*d != expected[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", names[i], " must have shape ", ShapeString(expected[i]),
          ", got ", ShapeString(*d)));
    }
  }
  return absl::OkStatus();
}

class AttentionXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit AttentionXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), attrs_(ctx) {}

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = "TfOps>Attention";
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    const xla::PrimitiveType lse_type = ctx->output_xla_type(1);
    AttentionParams p;
    OP_REQUIRES_OK(ctx, Check(ctx, op, attrs_, type, lse_type, &p));
    if (XlaFfiHandlerRegistered(ctx, kAttentionForwardTarget)) {
      XlaFfiCallOp(ctx, kAttentionForwardTarget,
                   {ShapeOf(type, {p.batch, p.q_len, p.heads, p.value_dim}),
                    ShapeOf(lse_type, {p.batch, p.heads, p.q_len})},
                   kNoScratch, attrs_.Ffi());
      return;
    }
    XlaOp out, lse;
    ForwardComposite(ctx, p, type, &out, &lse);
    ctx->SetOutput(0, Narrowed(out, type));
    ctx->SetOutput(1, lse);
  }

 private:
  Attrs attrs_;
};

class AttentionGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit AttentionGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), attrs_(ctx) {}

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = "TfOps>AttentionGrad";
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    AttentionParams p;
    OP_REQUIRES_OK(ctx, CheckGrad(ctx, op, attrs_, &p));
    if (XlaFfiHandlerRegistered(ctx, kAttentionBackwardTarget)) {
      XlaFfiCallOp(
          ctx, kAttentionBackwardTarget,
          {ShapeOf(type, {p.batch, p.q_len, p.heads, p.head_dim}),
           ShapeOf(type, {p.batch, p.kv_len, p.kv_heads, p.head_dim}),
           ShapeOf(type, {p.batch, p.kv_len, p.kv_heads, p.value_dim})},
          CpuAttentionBackwardScratchBytes(DtypeOf(type), p) + kScratchAlign,
          attrs_.Ffi());
      return;
    }
    XlaOp dq, dk, dv;
    BackwardComposite(ctx, p, type, &dq, &dk, &dv);
    ctx->SetOutput(0, Narrowed(dq, type));
    ctx->SetOutput(1, Narrowed(dk, type));
    ctx->SetOutput(2, Narrowed(dv, type));
  }

 private:
  Attrs attrs_;
};

class AttentionBiasGradXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit AttentionBiasGradXlaOp(tensorflow::OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), attrs_(ctx) {}

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string op = "TfOps>AttentionBiasGrad";
    const xla::PrimitiveType type = ctx->input_xla_type(0);
    AttentionParams p;
    OP_REQUIRES_OK(ctx, CheckGrad(ctx, op, attrs_, &p));
    const Dims bias = *InputDims(ctx, 4);
    int64_t elements = 1;
    for (int64_t d : bias) elements *= d;
    if (XlaFfiHandlerRegistered(ctx, kAttentionBiasGradTarget)) {
      XlaFfiCallOp(
          ctx, kAttentionBiasGradTarget,
          {ShapeOf(type, {p.batch, p.q_len, p.heads, p.head_dim}),
           ShapeOf(type, {p.batch, p.kv_len, p.kv_heads, p.head_dim}),
           ShapeOf(type, {p.batch, p.kv_len, p.kv_heads, p.value_dim}),
           ShapeOf(type, bias)},
          CpuAttentionBackwardScratchBytes(DtypeOf(type), p, elements) +
              kScratchAlign,
          attrs_.Ffi());
      return;
    }
    XlaOp dq, dk, dv, dbias;
    BackwardComposite(ctx, p, type, &dq, &dk, &dv, &dbias);
    ctx->SetOutput(0, Narrowed(dq, type));
    ctx->SetOutput(1, Narrowed(dk, type));
    ctx->SetOutput(2, Narrowed(dv, type));
    ctx->SetOutput(3, Narrowed(dbias, type));
  }

 private:
  Attrs attrs_;
};

constexpr tensorflow::DataType kXlaDtypes[] = {
    tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
    tensorflow::DT_DOUBLE};

}  // namespace

using tensorflow::register_kernel::Name;

#define TF_OPS_REGISTER_ATTENTION_XLA(DEV)                                  \
  REGISTER_KERNEL_BUILDER(                                                  \
      Name("TfOps>Attention").Device(DEV).TypeConstraint("T", kXlaDtypes),  \
      AttentionXlaOp);                                                      \
  REGISTER_KERNEL_BUILDER(Name("TfOps>AttentionGrad")                       \
                              .Device(DEV)                                  \
                              .TypeConstraint("T", kXlaDtypes),             \
                          AttentionGradXlaOp);                             \
  REGISTER_KERNEL_BUILDER(Name("TfOps>AttentionBiasGrad")                   \
                              .Device(DEV)                                  \
                              .TypeConstraint("T", kXlaDtypes),             \
                          AttentionBiasGradXlaOp);

TF_OPS_REGISTER_ATTENTION_XLA(tensorflow::DEVICE_CPU_XLA_JIT)
TF_OPS_REGISTER_ATTENTION_XLA(tensorflow::DEVICE_GPU_XLA_JIT)

}  // namespace attention
}  // namespace tf_ops

// The primitives of math_primitives.h over XLA builder ops, so that the
// activation functors of activation_math.h build XLA graphs: XlaValue is the
// functors' value type T in the XLA lowering (activation_xla.cc, the only
// file that includes this header; the CPU and CUDA headers stay TF-free).
//
// An XlaValue is an xla::XlaOp, or a constant not yet given an element type
// or shape: T(0.5) in a functor. A constant takes the element type of the
// value it meets (F32 or F64, the compute types), as T(0.5) takes T's
// precision for scalars; constants meeting only constants fold in double.
// Comparisons give an XlaMask (a PRED op, or a folded bool).
//
// The functors find these by argument-dependent lookup (XlaValue and XlaMask
// are in namespace tf_ops), also from inside the generic helpers of
// math_primitives.h, which are templates.
//
// One quirk of XLA's simplifier is handled here, generically: it folds x + 0
// into x, which keeps a -0 where IEEE gives +0; adding a constant +0 is
// therefore spelled as a select that gives +0 for both zeros.

#ifndef TF_OPS_CC_XLA_VALUE_H_
#define TF_OPS_CC_XLA_VALUE_H_

#include <cmath>
#include <limits>
#include <optional>

#include "tf_ops/cc/core/math_primitives.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/lib/math.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_ops {

class XlaValue {
 public:
  explicit XlaValue(xla::XlaOp op) : op_(op) {}
  explicit XlaValue(double constant) : constant_(constant) {}

  bool is_constant() const { return !op_.has_value(); }
  double constant() const { return constant_; }
  // The op; for a constant, an array of `like`'s element type and shape.
  xla::XlaOp Op(xla::XlaOp like) const {
    return op_.has_value() ? *op_ : xla::FullLike(like, constant_);
  }
  // The op; a constant must have met a value first.
  xla::XlaOp op() const { return *op_; }

 private:
  std::optional<xla::XlaOp> op_;
  double constant_ = 0.0;
};

class XlaMask {
 public:
  // `like` is a value operand of the comparison, for the shape and element
  // type of constants a Select picks between.
  XlaMask(xla::XlaOp pred, xla::XlaOp like) : pred_(pred), like_(like) {}
  explicit XlaMask(bool constant) : constant_(constant) {}

  bool is_constant() const { return !pred_.has_value(); }
  bool constant() const { return constant_; }
  xla::XlaOp pred() const { return *pred_; }
  xla::XlaOp like() const { return *like_; }

 private:
  std::optional<xla::XlaOp> pred_, like_;
  bool constant_ = false;
};

// Applies `op` to a and b as XlaOps (a constant takes the other's type), or
// `fold` to two constants.
template <typename OpFn, typename FoldFn>
XlaValue XlaBinary(const XlaValue& a, const XlaValue& b, OpFn op,
                   FoldFn fold) {
  if (a.is_constant() && b.is_constant()) {
    return XlaValue(fold(a.constant(), b.constant()));
  }
  const xla::XlaOp x = a.is_constant() ? xla::ScalarLike(b.op(), a.constant())
                                       : a.op();
  const xla::XlaOp y = b.is_constant() ? xla::ScalarLike(a.op(), b.constant())
                                       : b.op();
  return XlaValue(op(x, y));
}

// v + (+0): what IEEE gives, which XLA's `v + 0` (folded to v) does not for
// v = -0.
inline XlaValue XlaPlusZero(const XlaValue& v) {
  const xla::XlaOp x = v.op();
  return XlaValue(
      xla::Select(xla::Eq(x, xla::ScalarLike(x, 0)), xla::ZerosLike(x), x));
}
inline bool IsPositiveZero(const XlaValue& v) {
  return v.is_constant() && v.constant() == 0 && !std::signbit(v.constant());
}

// ------------------------------------------------------- arithmetic ------

inline XlaValue operator+(const XlaValue& a, const XlaValue& b) {
  if (!a.is_constant() && IsPositiveZero(b)) return XlaPlusZero(a);
  if (IsPositiveZero(a) && !b.is_constant()) return XlaPlusZero(b);
  return XlaBinary(
      a, b, [](xla::XlaOp x, xla::XlaOp y) { return xla::Add(x, y); },
      [](double x, double y) { return x + y; });
}
inline XlaValue operator-(const XlaValue& a, const XlaValue& b) {
  // a - (-0) = a + 0.
  if (!a.is_constant() && b.is_constant() && b.constant() == 0 &&
      std::signbit(b.constant())) {
    return XlaPlusZero(a);
  }
  return XlaBinary(
      a, b, [](xla::XlaOp x, xla::XlaOp y) { return xla::Sub(x, y); },
      [](double x, double y) { return x - y; });
}
inline XlaValue operator*(const XlaValue& a, const XlaValue& b) {
  return XlaBinary(
      a, b, [](xla::XlaOp x, xla::XlaOp y) { return xla::Mul(x, y); },
      [](double x, double y) { return x * y; });
}
inline XlaValue operator/(const XlaValue& a, const XlaValue& b) {
  return XlaBinary(
      a, b, [](xla::XlaOp x, xla::XlaOp y) { return xla::Div(x, y); },
      [](double x, double y) { return x / y; });
}
inline XlaValue operator-(const XlaValue& a) {
  return a.is_constant() ? XlaValue(-a.constant()) : XlaValue(xla::Neg(a.op()));
}

// ------------------------------------------------------ comparisons ------

template <typename OpFn, typename FoldFn>
XlaMask XlaCompare(const XlaValue& a, const XlaValue& b, OpFn op,
                   FoldFn fold) {
  if (a.is_constant() && b.is_constant()) {
    return XlaMask(fold(a.constant(), b.constant()));
  }
  const xla::XlaOp like = a.is_constant() ? b.op() : a.op();
  const xla::XlaOp x = a.is_constant() ? xla::ScalarLike(like, a.constant())
                                       : a.op();
  const xla::XlaOp y = b.is_constant() ? xla::ScalarLike(like, b.constant())
                                       : b.op();
  return XlaMask(op(x, y), like);
}

#define TF_OPS_XLA_COMPARISON(OPERATOR, XLA_OP)                              \
  inline XlaMask operator OPERATOR(const XlaValue& a, const XlaValue& b) {   \
    return XlaCompare(                                                       \
        a, b, [](xla::XlaOp x, xla::XlaOp y) { return xla::XLA_OP(x, y); }, \
        [](double x, double y) { return x OPERATOR y; });                   \
  }
TF_OPS_XLA_COMPARISON(<, Lt)
TF_OPS_XLA_COMPARISON(<=, Le)
TF_OPS_XLA_COMPARISON(>, Gt)
TF_OPS_XLA_COMPARISON(>=, Ge)
TF_OPS_XLA_COMPARISON(==, Eq)
TF_OPS_XLA_COMPARISON(!=, Ne)
#undef TF_OPS_XLA_COMPARISON

// --------------------------------------------------- selects and masks ---

inline XlaValue Select(const XlaMask& mask, const XlaValue& a,
                       const XlaValue& b) {
  if (mask.is_constant()) return mask.constant() ? a : b;
  const xla::XlaOp like = !a.is_constant()   ? a.op()
                          : !b.is_constant() ? b.op()
                                             : mask.like();
  return XlaValue(xla::Select(mask.pred(), a.Op(like), b.Op(like)));
}

inline XlaMask And(const XlaMask& a, const XlaMask& b) {
  if (a.is_constant()) return a.constant() ? b : a;
  if (b.is_constant()) return b.constant() ? a : b;
  return XlaMask(xla::And(a.pred(), b.pred()), a.like());
}
inline XlaMask Or(const XlaMask& a, const XlaMask& b) {
  if (a.is_constant()) return a.constant() ? a : b;
  if (b.is_constant()) return b.constant() ? b : a;
  return XlaMask(xla::Or(a.pred(), b.pred()), a.like());
}
inline XlaMask IsNan(const XlaValue& x) {
  if (x.is_constant()) return XlaMask(std::isnan(x.constant()));
  return XlaMask(xla::IsNan(x.op()), x.op());
}

// ------------------------------------------------------- functions -------
// Applied to a constant, they fold in double (the functors do not do that).

#define TF_OPS_XLA_FUNCTION(NAME, XLA_OP, STD_FN)              \
  inline XlaValue NAME(const XlaValue& x) {                    \
    if (x.is_constant()) return XlaValue(STD_FN(x.constant())); \
    return XlaValue(xla::XLA_OP(x.op()));                      \
  }
TF_OPS_XLA_FUNCTION(Exp, Exp, std::exp)
TF_OPS_XLA_FUNCTION(Expm1, Expm1, std::expm1)
TF_OPS_XLA_FUNCTION(Erfc, Erfc, std::erfc)
TF_OPS_XLA_FUNCTION(Abs, Abs, std::fabs)
#undef TF_OPS_XLA_FUNCTION

inline SinCosPair<XlaValue> SinCos(const XlaValue& x) {
  if (x.is_constant()) {
    return {XlaValue(std::sin(x.constant())), XlaValue(std::cos(x.constant()))};
  }
  return {XlaValue(xla::Sin(x.op())), XlaValue(xla::Cos(x.op()))};
}

// ------------------------------------ helpers mapped to better XLA ops ---
// Same values as math_primitives.h's generic versions, spelled so that XLA's
// CPU fusion keeps each op in one loop (it materialises a shared
// subexpression, e.g. a select chain of x used twice, as a temporary array).

inline XlaValue Clamp(const XlaValue& x, const XlaValue& lo,
                      const XlaValue& hi) {
  if (x.is_constant()) {
    return XlaValue(std::fmin(std::fmax(x.constant(), lo.constant()),
                              hi.constant()));
  }
  const xla::XlaOp op = x.op();
  return XlaValue(xla::Clamp(lo.Op(op), op, hi.Op(op)));  // NaN stays NaN
}

// x * w; an infinite x times a zero w gives sign(x) * w. w, typically the
// expensive operand (a logistic, a density), is used once: p = sign(x) w for
// an infinite x, which is the result when w is 0 and becomes +-inf otherwise.
inline XlaValue SafeMul(const XlaValue& x, const XlaValue& w) {
  if (w.is_constant() && w.constant() != 0) return x * w;  // no inf * 0
  if (x.is_constant() && !std::isinf(x.constant())) return x * w;
  const xla::XlaOp xo = x.is_constant() ? x.Op(w.op()) : x.op();
  const xla::XlaOp inf = xla::IsInf(xo);
  const xla::XlaOp p = xla::Select(inf, xla::Sign(xo), xo) * w.Op(xo);
  const xla::XlaOp infinite_p =
      xla::And(inf, xla::Ne(p, xla::ScalarLike(p, 0)));
  return XlaValue(xla::Select(
      infinite_p, p * xla::ScalarLike(p, std::numeric_limits<double>::infinity()),
      p));
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_XLA_VALUE_H_

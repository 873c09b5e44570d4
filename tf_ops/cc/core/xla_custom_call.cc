// See xla_custom_call.h.

#include "tf_ops/cc/core/xla_custom_call.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tensorflow/compiler/tf2xla/xla_compiler.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "xla/ffi/api/c_api.h"
#include "xla/shape_util.h"
#include "xla/xla_data.pb.h"

// xla/ffi/ffi_api.h's lookup, declared as there (see xla_custom_call.h): the
// registry's entry for a name and platform (canonicalised there: "Host" and
// "host" are one), or NotFound.
namespace xla {
namespace ffi {
struct HandlerRegistration {
  XLA_FFI_Metadata metadata;
  XLA_FFI_Handler_Bundle bundle;
};
absl::StatusOr<HandlerRegistration> FindHandler(std::string_view name,
                                                std::string_view platform);
}  // namespace ffi
}  // namespace xla

namespace tf_ops {

XlaFfiAttrs& XlaFfiAttrs::Add(const std::string& name, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  entries_.push_back(absl::StrFormat("%s = 0x%08X : f32", name, bits));
  return *this;
}

XlaFfiAttrs& XlaFfiAttrs::Add(const std::string& name, int64_t value) {
  entries_.push_back(absl::StrCat(name, " = ", value, " : i64"));
  return *this;
}

XlaFfiAttrs& XlaFfiAttrs::Add(const std::string& name, bool value) {
  entries_.push_back(absl::StrCat(name, " = ", value ? "true" : "false"));
  return *this;
}

XlaFfiAttrs& XlaFfiAttrs::AddName(const std::string& name,
                                  const std::string& value) {
  entries_.push_back(absl::StrCat(name, " = \"", value, "\""));
  return *this;
}

absl::Status XlaFfiAttrs::AddOpAttrs(
    const tensorflow::OpKernelConstruction* ctx,
    std::initializer_list<const char*> names) {
  const tensorflow::AttrSlice attrs(ctx->def());
  for (const char* name : names) {
    const tensorflow::AttrValue* v = attrs.Find(name);
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx->def().op(), " has no attribute ", name));
    }
    switch (v->value_case()) {
      case tensorflow::AttrValue::kF:
        Add(name, v->f());
        break;
      case tensorflow::AttrValue::kI:
        Add(name, static_cast<int64_t>(v->i()));
        break;
      case tensorflow::AttrValue::kB:
        Add(name, v->b());
        break;
      case tensorflow::AttrValue::kS:
        for (char c : v->s()) {
          if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
            return absl::InvalidArgumentError(absl::StrCat(
                ctx->def().op(), ": attribute ", name, " '", v->s(),
                "' is not a name"));
          }
        }
        AddName(name, v->s());
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(ctx->def().op(), ": attribute ", name,
                         " is not a float, int, bool or string"));
    }
  }
  return absl::OkStatus();
}

std::string XlaFfiAttrs::Dictionary() const {
  return absl::StrCat("{", absl::StrJoin(entries_, ", "), "}");
}

std::string XlaFfiPlatform(const tensorflow::XlaOpKernelContext* ctx) {
  const std::string& device =
      ctx->compiler()->options().device_type.type_string();
  if (device == tensorflow::DEVICE_CPU_XLA_JIT) return "Host";
  if (device == tensorflow::DEVICE_GPU_XLA_JIT) return "CUDA";
  return "";
}

bool XlaFfiHandlerRegistered(const tensorflow::XlaOpKernelContext* ctx,
                             const std::string& target) {
  const char* custom_calls = std::getenv("TF_OPS_XLA_CUSTOM_CALLS");
  if (custom_calls != nullptr && std::string(custom_calls) == "0") {
    return false;
  }
  const std::string platform = XlaFfiPlatform(ctx);
  return !platform.empty() && xla::ffi::FindHandler(target, platform).ok();
}

namespace {

// The custom call itself, one op per result.
std::vector<xla::XlaOp> XlaFfiCall(xla::XlaBuilder* b,
                                   const std::string& target,
                                   absl::Span<const xla::XlaOp> operands,
                                   absl::Span<const xla::Shape> results,
                                   const XlaFfiAttrs& attrs) {
  const auto row_major = [](const xla::Shape& s) {
    return xla::ShapeUtil::MakeShapeWithDescendingLayout(s.element_type(),
                                                         s.dimensions());
  };
  std::vector<xla::Shape> operand_shapes;
  for (const xla::XlaOp& op : operands) {
    absl::StatusOr<xla::Shape> shape = b->GetShape(op);
    if (!shape.ok()) {
      // Reported by the builder when the computation is built.
      return std::vector<xla::XlaOp>(results.size(),
                                     b->ReportError(shape.status()));
    }
    operand_shapes.push_back(row_major(*shape));
  }
  std::vector<xla::Shape> result_shapes;
  for (const xla::Shape& s : results) result_shapes.push_back(row_major(s));
  const xla::XlaOp call = xla::CustomCallWithLayout(
      b, target, operands, xla::ShapeUtil::MakeTupleShape(result_shapes),
      operand_shapes, attrs.Dictionary(), /*has_side_effect=*/false,
      /*output_operand_aliasing=*/{}, /*literal=*/nullptr,
      xla::CustomCallSchedule::SCHEDULE_NONE,
      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  std::vector<xla::XlaOp> outputs;
  for (int i = 0; i < static_cast<int>(results.size()); ++i) {
    outputs.push_back(xla::GetTupleElement(call, i));
  }
  return outputs;
}

}  // namespace

void XlaFfiCallOp(tensorflow::XlaOpKernelContext* ctx,
                  const std::string& target, std::vector<xla::Shape> results,
                  int64_t host_scratch_bytes, const XlaFfiAttrs& attrs) {
  const int outputs = static_cast<int>(results.size());
  if (host_scratch_bytes != kNoScratch) {
    const int64_t bytes = XlaFfiPlatform(ctx) == "Host" ? host_scratch_bytes : 0;
    results.push_back(xla::ShapeUtil::MakeShape(xla::U8, {bytes}));
  }
  std::vector<xla::XlaOp> inputs;
  for (int i = 0; i < ctx->num_inputs(); ++i) inputs.push_back(ctx->Input(i));
  const std::vector<xla::XlaOp> r =
      XlaFfiCall(ctx->builder(), target, inputs, results, attrs);
  for (int i = 0; i < outputs; ++i) ctx->SetOutput(i, r[i]);
}

}  // namespace tf_ops

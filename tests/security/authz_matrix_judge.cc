#include "tests/security/authz_matrix_judge.h"

#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "google/protobuf/message.h"

namespace eonce::authz {
namespace {

std::string DescribeRefusal(const Refusal& refusal) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(refusal.code)), " ",
                      refusal.reason != nullptr ? refusal.reason : "(any reason)");
}

bool Matches(const Refusal& refusal, const absl::Status& status) {
  return static_cast<int>(status.code()) == static_cast<int>(refusal.code) &&
         (refusal.reason == nullptr || ReasonOf(status) == refusal.reason);
}

}  // namespace

const char* ModeName(Mode mode) { return mode == Mode::kPlaintext ? "plaintext" : "mtls"; }

Refusal Unidentified(Mode mode, const std::string& door) {
  if (mode == Mode::kPlaintext) return Refusal{grpc::StatusCode::UNAUTHENTICATED, "NO_IDENTITY"};
  if (door == "business") return kBusinessCallerNotAllowed;
  return Refusal{grpc::StatusCode::PERMISSION_DENIED, "NO_TENANT_IN_CERTIFICATE"};
}

bool Holds(Mode mode, const Expect& cell, const std::string& door, const absl::Status& got) {
  switch (cell.kind) {
    case Expect::kOk:
      return got.ok();
    case Expect::kPast:
      return !RefusedForIdentity(got);
    case Expect::kRefused:
      return Matches(cell.refusal, got) || (cell.has_also && Matches(cell.also, got));
    case Expect::kUnidentified:
      return Matches(Unidentified(mode, door), got) || (cell.has_also && Matches(cell.also, got));
  }
  return false;
}

std::string Describe(const absl::Status& status) {
  if (status.ok()) return "OK";
  std::string reason = ReasonOf(status);
  return absl::StrCat(absl::StatusCodeToString(status.code()), reason.empty() ? "" : " ", reason);
}

std::string Describe(Mode mode, const Expect& cell, const std::string& door) {
  std::string text;
  switch (cell.kind) {
    case Expect::kOk:
      return "OK";
    case Expect::kPast:
      return "past every identity check";
    case Expect::kRefused:
      text = DescribeRefusal(cell.refusal);
      break;
    case Expect::kUnidentified:
      text = DescribeRefusal(Unidentified(mode, door));
      break;
  }
  if (cell.has_also) absl::StrAppend(&text, " or ", DescribeRefusal(cell.also));
  return text;
}

bool RefusedForIdentity(const absl::Status& status) {
  return status.code() == absl::StatusCode::kPermissionDenied ||
         status.code() == absl::StatusCode::kUnauthenticated;
}

absl::Status FirstItemStatus(const google::protobuf::MethodDescriptor& method,
                             const testing::ProbeAnswer& answer) {
  if (!answer.status.ok() || answer.responses.empty()) return answer.status;
  const google::protobuf::Descriptor* type = method.output_type();
  const google::protobuf::FieldDescriptor* items = type->FindFieldByName("items");
  if (items == nullptr || !items->is_repeated() ||
      items->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
    return answer.status;
  }
  std::unique_ptr<google::protobuf::Message> response(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(type)->New());
  if (!response->ParseFromString(answer.responses.front())) {
    return absl::DataLossError("an answer that does not parse");
  }
  const google::protobuf::Reflection* reflection = response->GetReflection();
  if (reflection->FieldSize(*response, items) == 0) return answer.status;
  const google::protobuf::Message& item = reflection->GetRepeatedMessage(*response, items, 0);
  const google::protobuf::Descriptor* item_type = item.GetDescriptor();
  const auto* code = item_type->FindFieldByName("code");
  const auto* message = item_type->FindFieldByName("message");
  const auto* details = item_type->FindFieldByName("error_details");
  if (code == nullptr || message == nullptr || details == nullptr) return answer.status;
  const google::protobuf::Reflection* item_reflection = item.GetReflection();
  const int item_code = item_reflection->GetInt32(item, code);
  if (item_code == 0) return absl::OkStatus();
  return StatusFromParts(item_code, item_reflection->GetString(item, message),
                         item_reflection->GetString(item, details));
}

std::string LineDiff(const std::string& before, const std::string& after) {
  std::vector<std::string> old_lines = absl::StrSplit(before, '\n', absl::SkipEmpty());
  std::vector<std::string> new_lines = absl::StrSplit(after, '\n', absl::SkipEmpty());
  const std::set<std::string> old_set(old_lines.begin(), old_lines.end());
  const std::set<std::string> new_set(new_lines.begin(), new_lines.end());
  std::string diff;
  for (const std::string& line : old_lines) {
    if (new_set.count(line) == 0) absl::StrAppend(&diff, "\n      - ", line);
  }
  for (const std::string& line : new_lines) {
    if (old_set.count(line) == 0) absl::StrAppend(&diff, "\n      + ", line);
  }
  return diff;
}

}  // namespace eonce::authz

#include "common/rpc/identity_uri.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace eonce {

namespace {

// The segments after "spiffe://<trust domain>/tenant/"; none when the id is not of
// that form.
std::vector<absl::string_view> TenantPath(absl::string_view spiffe_id) {
  constexpr absl::string_view kScheme = "spiffe://";
  if (!absl::StartsWith(spiffe_id, kScheme)) return {};
  std::vector<absl::string_view> parts = absl::StrSplit(spiffe_id.substr(kScheme.size()), '/');
  // parts[0] is the trust domain.
  if (parts.size() < 3 || parts[0].empty() || parts[1] != "tenant" || parts[2].empty()) return {};
  return std::vector<absl::string_view>(parts.begin() + 2, parts.end());
}

}  // namespace

std::string TenantFromSpiffeId(absl::string_view spiffe_id) {
  std::vector<absl::string_view> path = TenantPath(spiffe_id);
  return path.empty() ? "" : std::string(path[0]);
}

std::string OperatorFromSpiffeId(absl::string_view spiffe_id) {
  std::vector<absl::string_view> path = TenantPath(spiffe_id);
  if (path.size() != 3 || path[1] != "operator") return "";
  return std::string(path[2]);
}

std::string WorkloadFromSpiffeId(absl::string_view spiffe_id) {
  std::vector<absl::string_view> path = TenantPath(spiffe_id);
  if (path.size() == 3 && path[1] == "workload") return std::string(path[2]);
  if (path.size() == 2 && path[1] != "workload" && path[1] != "operator") {
    return std::string(path[1]);
  }
  return "";
}

std::string ComponentFromSpiffeId(absl::string_view spiffe_id) {
  constexpr absl::string_view kScheme = "spiffe://";
  if (!absl::StartsWith(spiffe_id, kScheme)) return "";
  std::vector<absl::string_view> parts = absl::StrSplit(spiffe_id.substr(kScheme.size()), '/');
  // parts[0] is the trust domain; exactly one segment names the component.
  if (parts.size() != 3 || parts[0].empty() || parts[1] != "eonce" || parts[2].empty()) return "";
  return std::string(parts[2]);
}

std::optional<int64_t> EpochFromUri(absl::string_view uri) {
  constexpr absl::string_view kPrefix = "urn:eonce:credential-epoch:";
  int64_t epoch = 0;
  if (!absl::StartsWith(uri, kPrefix) || !absl::SimpleAtoi(uri.substr(kPrefix.size()), &epoch) ||
      epoch <= 0) {
    return std::nullopt;
  }
  return epoch;
}

}  // namespace eonce

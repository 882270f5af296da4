#include "dedupe_sidecar/core/in_flight_claims.h"

#include "absl/strings/str_cat.h"

namespace eonce {

std::string InFlightClaims::CommandKey(const std::string& tenant,
                                       const std::string& command_id) {
  return absl::StrCat(tenant, absl::string_view("\0", 1), command_id);
}

bool InFlightClaims::Add(const std::string& scoped_key, const Record& record) {
  absl::MutexLock lock(&mu_);
  if (claims_.size() >= max_claims_) return false;
  if (!claims_.try_emplace(scoped_key, record).second) return false;
  if (!record.command_id().empty()) {
    by_command_[CommandKey(record.tenant(), record.command_id())] = record.idempotency_key();
  }
  return true;
}

std::optional<Record> InFlightClaims::Get(const std::string& scoped_key) const {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find(scoped_key);
  if (it == claims_.end()) return std::nullopt;
  return it->second;
}

std::optional<Record> InFlightClaims::HeldBy(const std::string& scoped_key,
                                             uint64_t token) const {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find(scoped_key);
  if (it == claims_.end() || it->second.fencing_token() != token) return std::nullopt;
  return it->second;
}

std::optional<std::string> InFlightClaims::KeyOfCommand(const std::string& tenant,
                                                        const std::string& command_id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_command_.find(CommandKey(tenant, command_id));
  if (it == by_command_.end()) return std::nullopt;
  return it->second;
}

bool InFlightClaims::Remove(const std::string& scoped_key, uint64_t token) {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find(scoped_key);
  if (it == claims_.end() || it->second.fencing_token() != token) return false;
  const Record& record = it->second;
  if (!record.command_id().empty()) {
    auto command = by_command_.find(CommandKey(record.tenant(), record.command_id()));
    // Another key's claim may name the same command id (a reused id is refused later).
    if (command != by_command_.end() && command->second == record.idempotency_key()) {
      by_command_.erase(command);
    }
  }
  claims_.erase(it);
  return true;
}

size_t InFlightClaims::size() const {
  absl::MutexLock lock(&mu_);
  return claims_.size();
}

}  // namespace eonce

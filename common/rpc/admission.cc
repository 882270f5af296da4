#include "common/rpc/admission.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    admission_ = other.admission_;
    tenant_ = std::move(other.tenant_);
    other.admission_ = nullptr;
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (admission_ == nullptr) return;
  admission_->Leave(tenant_);
  admission_ = nullptr;
}

absl::StatusOr<Admission::Ticket> Admission::Admit(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  if (total_ >= max_total_) {
    ++refused_;
    return WithErrorMetadata(
        WithRetryAfter(
            Error(absl::StatusCode::kResourceExhausted, "OVERLOADED",
                  absl::StrCat(total_, " calls in flight (the limit); nothing was recorded")),
            kRetryAfterMs),
        "limit", absl::StrCat(max_total_));
  }
  int& mine = per_tenant_[tenant];
  if (mine >= max_per_tenant_) {
    ++refused_;
    return WithErrorMetadata(
        WithErrorMetadata(
            WithRetryAfter(
                Error(absl::StatusCode::kResourceExhausted, "TENANT_OVERLOADED",
                      absl::StrCat("this tenant has ", mine,
                                   " calls in flight (its limit); nothing was recorded")),
                kRetryAfterMs),
            "tenant", tenant),
        "limit", absl::StrCat(max_per_tenant_));
  }
  ++mine;
  ++total_;
  return Ticket(this, tenant);
}

void Admission::Leave(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  --total_;
  auto it = per_tenant_.find(tenant);
  if (it != per_tenant_.end() && --it->second <= 0) per_tenant_.erase(it);
}

int Admission::in_flight() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

int Admission::in_flight(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : it->second;
}

int64_t Admission::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

}  // namespace eonce

// Admission: caps the calls in flight, in total and per tenant, so that a flood from one
// tenant cannot starve the others. A call is admitted before anything is written and
// holds its Ticket until it is answered; past a cap it is refused with
// RESOURCE_EXHAUSTED (reason OVERLOADED or TENANT_OVERLOADED) and a retry hint.
//
// Memory is bounded: a tenant is tracked only while it has calls in flight, so at most
// max_total tenants are. Thread-safe; the Admission must outlive its tickets.
#ifndef EONCE_COMMON_RPC_ADMISSION_H_
#define EONCE_COMMON_RPC_ADMISSION_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class Admission {
 public:
  // The retry hint given with a refusal.
  static constexpr int64_t kRetryAfterMs = 100;

  Admission(int max_total, int max_per_tenant)
      : max_total_(max_total), max_per_tenant_(max_per_tenant) {}

  // Move-only; gives its place back when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }
    void Release();

   private:
    friend class Admission;
    Ticket(Admission* admission, std::string tenant)
        : admission_(admission), tenant_(std::move(tenant)) {}
    Admission* admission_ = nullptr;
    std::string tenant_;
  };

  absl::StatusOr<Ticket> Admit(const std::string& tenant);

  int in_flight() const;
  int in_flight(const std::string& tenant) const;
  int64_t refused() const;

 private:
  void Leave(const std::string& tenant);

  const int max_total_;
  const int max_per_tenant_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_tenant_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_ADMISSION_H_

#include "common/rpc/admission.h"

#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(AdmissionTest, CapsEachTenantAndTheTotalAndGivesPlacesBack) {
  Admission admission(/*max_total=*/5, /*max_per_tenant=*/3);
  std::vector<Admission::Ticket> held;
  for (int i = 0; i < 3; ++i) held.push_back(*admission.Admit("flood"));
  auto refused = admission.Admit("flood");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReasonOf(refused.status()), "TENANT_OVERLOADED");
  EXPECT_EQ(*RetryAfterOf(refused.status()), Admission::kRetryAfterMs);
  // Another tenant still gets in, up to the total.
  held.push_back(*admission.Admit("acme"));
  held.push_back(*admission.Admit("acme"));
  EXPECT_EQ(ReasonOf(admission.Admit("globex").status()), "OVERLOADED");
  EXPECT_EQ(admission.refused(), 2);
  held.erase(held.begin());  // a flood call is answered
  EXPECT_EQ(admission.in_flight("flood"), 2);
  EXPECT_TRUE(admission.Admit("globex").ok());  // its ticket goes at once
  held.clear();
  EXPECT_EQ(admission.in_flight(), 0);
  EXPECT_EQ(admission.in_flight("acme"), 0);
}

TEST(AdmissionTest, AMovedTicketIsReleasedOnce) {
  Admission admission(2, 2);
  Admission::Ticket a = *admission.Admit("t");
  Admission::Ticket b = std::move(a);
  a.Release();  // moved from: nothing to give back
  EXPECT_EQ(admission.in_flight(), 1);
  b.Release();
  b.Release();
  EXPECT_EQ(admission.in_flight(), 0);
}

}  // namespace
}  // namespace eonce

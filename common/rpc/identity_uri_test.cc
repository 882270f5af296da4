#include "common/rpc/identity_uri.h"

#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(IdentityUriTest, AWorkloadNamesItsTenantAndItself) {
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/tenant/acme/workload/payroll"), "acme");
  EXPECT_EQ(WorkloadFromSpiffeId("spiffe://eonce.test/tenant/acme/workload/payroll"), "payroll");
  EXPECT_EQ(OperatorFromSpiffeId("spiffe://eonce.test/tenant/acme/workload/payroll"), "");
  EXPECT_EQ(ComponentFromSpiffeId("spiffe://eonce.test/tenant/acme/workload/payroll"), "");
  // The older form.
  EXPECT_EQ(WorkloadFromSpiffeId("spiffe://eonce.test/tenant/acme/payroll"), "payroll");
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/tenant/acme/payroll"), "acme");
}

TEST(IdentityUriTest, AnOperatorNamesItsTenantAndItself) {
  EXPECT_EQ(OperatorFromSpiffeId("spiffe://eonce.test/tenant/acme/operator/oncall"), "oncall");
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/tenant/acme/operator/oncall"), "acme");
  EXPECT_EQ(WorkloadFromSpiffeId("spiffe://eonce.test/tenant/acme/operator/oncall"), "");
  EXPECT_EQ(ComponentFromSpiffeId("spiffe://eonce.test/tenant/acme/operator/oncall"), "");
}

TEST(IdentityUriTest, AComponentNamesItselfAndNoTenant) {
  EXPECT_EQ(ComponentFromSpiffeId("spiffe://eonce.test/eonce/sidecar"), "sidecar");
  EXPECT_EQ(ComponentFromSpiffeId("spiffe://prod.example.com/eonce/relay"), "relay");
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/eonce/sidecar"), "");
  EXPECT_EQ(WorkloadFromSpiffeId("spiffe://eonce.test/eonce/sidecar"), "");
  EXPECT_EQ(OperatorFromSpiffeId("spiffe://eonce.test/eonce/sidecar"), "");
}

TEST(IdentityUriTest, AnythingElseNamesNoComponent) {
  for (const char* uri : {
           "spiffe://eonce.test/eonce/",                 // no name
           "spiffe://eonce.test/eonce",                  // no segment
           "spiffe://eonce.test/eonce/sidecar/extra",    // one segment only
           "spiffe:///eonce/sidecar",                    // no trust domain
           "spiffe://eonce.test/service/sidecar",        // another namespace
           "spiffe://eonce.test/tenant/eonce/sidecar",   // a tenant's workload named so
           "https://eonce.test/eonce/sidecar",           // not SPIFFE
           "urn:eonce:credential-epoch:3",
           "",
       }) {
    EXPECT_EQ(ComponentFromSpiffeId(uri), "") << uri;
  }
  // A tenant called "eonce" is a tenant like any other: its workloads are no components.
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/tenant/eonce/workload/sidecar"), "eonce");
}

TEST(IdentityUriTest, TheEpochIsAPositiveNumber) {
  EXPECT_EQ(EpochFromUri("urn:eonce:credential-epoch:7"), 7);
  EXPECT_EQ(EpochFromUri("urn:eonce:credential-epoch:0"), std::nullopt);
  EXPECT_EQ(EpochFromUri("urn:eonce:credential-epoch:-1"), std::nullopt);
  EXPECT_EQ(EpochFromUri("urn:eonce:credential-epoch:x"), std::nullopt);
  EXPECT_EQ(EpochFromUri("spiffe://eonce.test/eonce/sidecar"), std::nullopt);
}

}  // namespace
}  // namespace eonce

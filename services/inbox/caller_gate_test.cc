// The gate's one decision, over every kind of caller; the gate on real ports (mutual TLS
// and plaintext) is in tests/security/business_port_test.cc.
#include "services/inbox/caller_gate.h"

#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

CallerClaims Certificate(std::vector<std::string> uris, const std::string& tenant = "") {
  CallerClaims claims;
  claims.authenticated = true;
  claims.certificate_uris = std::move(uris);
  claims.tenant = tenant;
  return claims;
}

CallerClaims Headers(const std::string& component, const std::string& operator_name,
                     const std::string& workload, const std::string& tenant) {
  CallerClaims claims;
  claims.component = component;
  claims.operator_name = operator_name;
  claims.workload = workload;
  claims.tenant = tenant;
  return claims;
}

std::string Refusal(const absl::StatusOr<BusinessCaller>& decided) {
  if (decided.ok()) return "admitted";
  return absl::StatusCodeToString(decided.status().code()) + " " + ReasonOf(decided.status());
}

TEST(CallerGateTest, OverTlsAComponentMayStateAnyTenant) {
  auto caller = DecideBusinessCaller(Certificate({"spiffe://eonce.test/eonce/sidecar"}, "acme"));
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->kind, BusinessCaller::Kind::kComponent);
  EXPECT_EQ(caller->name, "sidecar");
  EXPECT_EQ(caller->tenant, "acme");
  // A relay's certificate may name its workload too: the component decides.
  auto relay = DecideBusinessCaller(Certificate(
      {"spiffe://eonce.test/tenant/acme/workload/ledger-relay", "spiffe://eonce.test/eonce/relay"},
      "beta"));
  ASSERT_TRUE(relay.ok()) << relay.status();
  EXPECT_EQ(relay->name, "relay");
  EXPECT_EQ(relay->tenant, "beta");
}

TEST(CallerGateTest, OverTlsAnOperatorActsForItsOwnTenantOnly) {
  auto stated = DecideBusinessCaller(
      Certificate({"spiffe://eonce.test/tenant/acme/operator/oncall"}, "acme"));
  ASSERT_TRUE(stated.ok()) << stated.status();
  EXPECT_EQ(stated->kind, BusinessCaller::Kind::kOperator);
  EXPECT_EQ(stated->name, "oncall");
  EXPECT_EQ(stated->tenant, "acme");
  // Stating none, it still acts for its own (never for every tenant).
  auto unstated =
      DecideBusinessCaller(Certificate({"spiffe://eonce.test/tenant/acme/operator/oncall"}));
  ASSERT_TRUE(unstated.ok()) << unstated.status();
  EXPECT_EQ(unstated->tenant, "acme");
  EXPECT_EQ(Refusal(DecideBusinessCaller(
                Certificate({"spiffe://eonce.test/tenant/acme/operator/oncall"}, "beta"))),
            "PERMISSION_DENIED TENANT_MISMATCH");
  EXPECT_EQ(Refusal(DecideBusinessCaller(
                Certificate({"spiffe://eonce.test/tenant/acme/operator/oncall",
                             "spiffe://eonce.test/tenant/beta/workload/shop"}))),
            "PERMISSION_DENIED AMBIGUOUS_TENANT");
}

TEST(CallerGateTest, OverTlsEveryoneElseIsRefusedWhateverTheHeadersSay) {
  for (const auto& uris : std::vector<std::vector<std::string>>{
           {"spiffe://eonce.test/tenant/acme/workload/payroll"},  // a tenant's workload
           {"spiffe://eonce.test/tenant/acme/payroll"},           // older form
           {"spiffe://eonce.test/service/sidecar"},               // no eonce identity
           {},                                                     // no URI at all
           {"spiffe://eonce.test/eonce/sidecar", "spiffe://eonce.test/eonce/relay"},
           {"spiffe://eonce.test/tenant/acme/operator/a", "spiffe://eonce.test/tenant/acme/operator/b"},
       }) {
    CallerClaims claims = Certificate(uris, "acme");
    // Headers that claim a component or an operator count for nothing here.
    claims.component = "sidecar";
    claims.operator_name = "oncall";
    EXPECT_EQ(Refusal(DecideBusinessCaller(claims)), "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED")
        << (uris.empty() ? "" : uris[0]);
  }
}

TEST(CallerGateTest, OverPlaintextTheCallerStatesWhoItIs) {
  auto component = DecideBusinessCaller(Headers("checker", "", "", ""));
  ASSERT_TRUE(component.ok()) << component.status();
  EXPECT_EQ(component->kind, BusinessCaller::Kind::kComponent);
  EXPECT_EQ(component->tenant, "");  // every tenant, as a ground-truth reader asks
  auto op = DecideBusinessCaller(Headers("", "oncall", "", "acme"));
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->kind, BusinessCaller::Kind::kOperator);
  EXPECT_EQ(op->tenant, "acme");

  EXPECT_EQ(Refusal(DecideBusinessCaller(Headers("", "", "", "acme"))),
            "UNAUTHENTICATED NO_IDENTITY");
  EXPECT_EQ(Refusal(DecideBusinessCaller(Headers("", "", "", ""))), "UNAUTHENTICATED NO_IDENTITY");
  EXPECT_EQ(Refusal(DecideBusinessCaller(Headers("", "", "payroll", "acme"))),
            "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED");
}

// An operator of one tenant must not reach another's through a call that is not filed by
// tenant: SlotData drops a slot's rows, Forwards applies commands, AckFollowUps deletes
// credits in flight.
TEST(CallerGateTest, OperatorsReadEffectsAndOutcomesAndComponentsDoTheRest) {
  for (const char* method : {"/eonce.v1.SlotData/DropSlotData", "/eonce.v1.SlotData/ExportSlotData",
                             "/eonce.v1.SlotData/HoldSlotData",
                             "/eonce.v1.Forwards/ForwardBatch", "/eonce.v1.FollowUps/AckFollowUps",
                             "/eonce.v1.FollowUps/PullFollowUps",
                             "/eonce.ledger.v1.Ledger/Transfer"}) {
    CallerClaims op = Headers("", "oncall", "", "acme");
    op.method = method;
    EXPECT_EQ(Refusal(DecideBusinessCaller(op)), "PERMISSION_DENIED COMPONENT_REQUIRED") << method;
    CallerClaims certified = Certificate({"spiffe://eonce.test/tenant/acme/operator/oncall"});
    certified.method = method;
    EXPECT_EQ(Refusal(DecideBusinessCaller(certified)), "PERMISSION_DENIED COMPONENT_REQUIRED")
        << method;
    CallerClaims component = Headers("relay", "", "", "acme");
    component.method = method;
    EXPECT_TRUE(DecideBusinessCaller(component).ok()) << method;
  }
  for (const char* method : {"/eonce.v1.Effects/ListEffects", "/eonce.v1.Outcome/QueryOutcome"}) {
    CallerClaims op = Headers("", "oncall", "", "acme");
    op.method = method;
    EXPECT_TRUE(DecideBusinessCaller(op).ok()) << method;
  }
}

TEST(CallerGateTest, HealthAndReflectionAreOpenAndNothingElse) {
  EXPECT_TRUE(OpenToEveryCaller("/grpc.health.v1.Health/Check"));
  EXPECT_TRUE(OpenToEveryCaller("/grpc.health.v1.Health/Watch"));
  EXPECT_TRUE(OpenToEveryCaller("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"));
  for (const char* closed : {"/eonce.v1.Effects/ListEffects", "/eonce.ledger.v1.Ledger/Transfer",
                             "/grpc.health.v1.HealthX/Check", "", "/grpc.health.v1.Health"}) {
    EXPECT_FALSE(OpenToEveryCaller(closed)) << closed;
  }
}

}  // namespace
}  // namespace eonce

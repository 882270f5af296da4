#include "common/command/command.h"

#include "common/base/hash.h"
#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

v1::Command Valid() {
  v1::Command c;
  c.set_command_id("cmd-1");
  c.set_tenant("acme");
  c.set_actor("alice");
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request("bytes");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id("a-1");
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

TEST(HashTest, Sha256KnownVector) {
  EXPECT_EQ(HexOf(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(HashTest, PayloadHashSeparatesMethodFromRequest) {
  EXPECT_NE(PayloadHashV1("/a.B/C", "xy"), PayloadHashV1("/a.B/Cx", "y"));
  EXPECT_EQ(PayloadHashV1("/a.B/C", "xy"), PayloadHashV1("/a.B/C", "xy"));
  EXPECT_EQ(PayloadHashV1("/a.B/C", "xy").size(), 32u);
}

TEST(CommandTest, DerivesKeyFromOperationEntityAndId) {
  EXPECT_EQ(DeriveIdempotencyKey(Valid()), "Transfer:account/a-1:cmd-1");
}

TEST(CommandTest, ValidCommandPasses) {
  EXPECT_TRUE(ValidateCommand(Valid(), CommandLimits()).ok());
}

struct Case {
  const char* name;
  void (*mutate)(v1::Command*);
  const char* field;
};

TEST(CommandTest, EachViolationNamesItsField) {
  const Case cases[] = {
      {"no id", [](v1::Command* c) { c->clear_command_id(); }, "command_id"},
      {"bad id", [](v1::Command* c) { c->set_command_id("a b"); }, "command_id"},
      {"long id", [](v1::Command* c) { c->set_command_id(std::string(129, 'a')); },
       "command_id"},
      {"no key", [](v1::Command* c) { c->clear_idempotency_key(); }, "idempotency_key"},
      {"long key", [](v1::Command* c) { c->set_idempotency_key(std::string(257, 'k')); },
       "idempotency_key"},
      {"no method", [](v1::Command* c) { c->clear_target_method(); }, "target_method"},
      {"bad method", [](v1::Command* c) { c->set_target_method("Transfer"); },
       "target_method"},
      {"eonce's own method",
       [](v1::Command* c) { c->set_target_method("/eonce.v1.FollowUps/AckFollowUps"); },
       "target_method"},
      {"big request", [](v1::Command* c) { c->set_request(std::string((1 << 20) + 1, 'x')); },
       "request"},
      {"no entity", [](v1::Command* c) { c->clear_entity(); }, "entity.type"},
      {"bad tenant", [](v1::Command* c) { c->set_tenant("a\nb"); }, "tenant"},
      {"bad actor", [](v1::Command* c) { c->set_actor(std::string(200, 'a')); }, "actor"},
      {"hash version", [](v1::Command* c) { c->mutable_payload_hash()->set_version(2); },
       "payload_hash.version"},
      {"hash mismatch", [](v1::Command* c) { c->set_request("other"); },
       "payload_hash.sha256"},
  };
  for (const Case& test : cases) {
    v1::Command c = Valid();
    test.mutate(&c);
    absl::Status status = ValidateCommand(c, CommandLimits());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << test.name;
    EXPECT_EQ(status.message().substr(0, strlen(test.field)), test.field) << test.name;
    EXPECT_EQ(ReasonOf(status), "INVALID_FIELD") << test.name;
  }
}

}  // namespace
}  // namespace eonce

// The commands eonce bench sends: transfers of 1 between the ledger's accounts a0..aN,
// and how it submits them to a sidecar.
#ifndef EONCE_BENCH_COMMANDS_H_
#define EONCE_BENCH_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/submit_batcher.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/command.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce::bench {

// Command `id`: a transfer from account a(i mod accounts) to the next one.
inline v1::Command TransferCommand(const std::string& id, int accounts, int64_t i) {
  ledger::v1::TransferRequest t;
  t.set_from(absl::StrCat("a", i % accounts));
  t.set_to(absl::StrCat("a", (i + 1) % accounts));
  t.set_amount(1);
  v1::Command c;
  c.set_command_id(id);
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request(t.SerializeAsString());
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(t.from());
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

}  // namespace eonce::bench

namespace eonce::bench {

// Calls the ledger's Transfer directly (as a component, for tenant "bench") as command
// `command_id`, the transfer TransferCommand's number `i` makes, without waiting;
// `done(ok)` once it is answered.
inline void TransferAsync(ledger::v1::Ledger::Stub& ledger, const std::string& command_id,
                          int accounts, int64_t i, std::function<void(bool)> done) {
  struct Call {
    grpc::ClientContext context;
    ledger::v1::TransferRequest request;
    ledger::v1::TransferResponse response;
  };
  auto call = std::make_shared<Call>();
  call->context.AddMetadata(kComponentHeader, "bench");  // a business port admits components
  call->context.AddMetadata(kCommandIdHeader, command_id);
  call->context.AddMetadata(kTenantHeader, "bench");
  call->request.set_from(absl::StrCat("a", i % accounts));
  call->request.set_to(absl::StrCat("a", (i + 1) % accounts));
  call->request.set_amount(1);
  ledger.async()->Transfer(&call->context, &call->request, &call->response,
                           [call, done = std::move(done)](grpc::Status s) { done(s.ok()); });
}

// Submits `command` for tenant "bench" without waiting; `done(true)` once it is answered
// with the disposition `want` (APPLIED for a first-seen command, REPLAYED for a duplicate).
inline void SubmitAsync(v1::Sidecar::Stub& sidecar, const v1::Command& command,
                        v1::Disposition want, std::function<void(bool)> done) {
  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
  };
  auto call = std::make_shared<Call>();
  call->context.AddMetadata(kTenantHeader, "bench");
  *call->request.mutable_command() = command;
  sidecar.async()->Submit(&call->context, &call->request, &call->response,
                          [call, want, done = std::move(done)](grpc::Status s) {
                            done(s.ok() && call->response.disposition() == want);
                          });
}

// Sends `request` again without waiting, as a client's retry resends the command it built
// and hashed for the first attempt; `request` must outlive the call. `done(true)` once it
// is answered with the disposition `want`.
inline void ResendAsync(v1::Sidecar::Stub& sidecar, const v1::SubmitRequest& request,
                        v1::Disposition want, std::function<void(bool)> done) {
  struct Call {
    grpc::ClientContext context;
    v1::SubmitResponse response;
  };
  auto call = std::make_shared<Call>();
  call->context.AddMetadata(kTenantHeader, "bench");
  sidecar.async()->Submit(&call->context, &request, &call->response,
                          [call, want, done = std::move(done)](grpc::Status s) {
                            done(s.ok() && call->response.disposition() == want);
                          });
}

// Submits as SubmitAsync does, but through a SubmitBatcher: the commands in flight at
// once share SubmitBatch calls (at most `max_calls` of them in flight), as a client that
// batches sends them.
class BatchedSubmitter {
 public:
  explicit BatchedSubmitter(v1::Sidecar::Stub& sidecar, int max_calls = 2)
      : batcher_(Options(max_calls), [&sidecar](std::vector<v1::Command> commands,
                                                int64_t /*deadline_ms: none*/,
                                                SubmitBatcher::BatchDone done) {
          struct Call {
            grpc::ClientContext context;
            v1::SubmitBatchRequest request;
            v1::SubmitBatchResponse response;
          };
          auto call = std::make_shared<Call>();
          call->context.AddMetadata(kTenantHeader, "bench");
          for (v1::Command& c : commands) *call->request.add_commands() = std::move(c);
          sidecar.async()->SubmitBatch(
              &call->context, &call->request, &call->response,
              [call, done = std::move(done)](grpc::Status s) {
                if (!s.ok()) {
                  done(FromGrpcStatus(s, &call->context));
                  return;
                }
                done(SubmitBatcher::AnswersOf(call->response));
              });
        }) {}

  void Submit(const v1::Command& command, v1::Disposition want, std::function<void(bool)> done) {
    batcher_.Submit(command, /*deadline_ms=*/0, [want, done = std::move(done)](SubmitBatcher::Answer answer) {
      done(answer.ok() && answer->disposition() == want);
    });
  }

 private:
  static SubmitBatcher::Options Options(int max_calls) {
    SubmitBatcher::Options options;
    options.max_calls = max_calls;
    return options;
  }

  SubmitBatcher batcher_;
};

}  // namespace eonce::bench

#endif  // EONCE_BENCH_COMMANDS_H_

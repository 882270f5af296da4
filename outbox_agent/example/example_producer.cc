// example_producer: a producing service in miniature. It opens two accounts through the
// agent and waits for both, enqueues transfers from one to the other, watches for
// changes, reads each changed record and folds acks into its Projection, then prints the
// derived totals.
//
//   example_producer --agent=ADDR --transfers=N
#include <chrono>
#include <iostream>
#include <set>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/rpc/tls_flags.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "outbox_agent/client/client.h"
#include "outbox_agent/example/projection.h"

ABSL_FLAG(std::string, agent, "127.0.0.1:7000", "the agent's address");
ABSL_FLAG(int32_t, transfers, 10, "transfers to send (from account a to account b)");
ABSL_FLAG(int32_t, timeout_s, 60, "give up after this long");

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv, {"example_producer --agent=ADDR [--transfers=N]"});
  eonce::TlsFiles tls = eonce::TlsFilesFromFlags();
  if (absl::Status valid = eonce::ValidateTlsFiles(tls); !valid.ok()) {
    std::cerr << "example_producer: " << valid.message() << "\n";
    return 2;
  }
  auto agent = eonce::AgentClient::Connect(absl::GetFlag(FLAGS_agent), tls);
  grpc::ClientContext watch_context;
  // The stream ends with the producer's patience: a command that never ends as it waits
  // (a sidecar down, a dead letter) wakes nothing, and the wait must still end.
  watch_context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  // Only the ends this producer waits for wake it.
  eonce::v1::WatchRequest ends;
  ends.add_states(eonce::v1::ACKED);
  ends.add_states(eonce::v1::REJECTED);
  auto watch = agent->stub().Watch(&watch_context, ends);
  watch->WaitForInitialMetadata();  // subscribed: no state change from here on is missed

  eonce::Projection projection;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  // Waits until each of `ids` is ACKED or REJECTED (removing it from `ids`), or until the
  // deadline; folds each finished record into the projection.
  auto settle = [&](std::set<std::string>& ids) {
    auto fold = [&](const std::string& id) {
      auto record = agent->Get(id);  // the store says what is true
      if (!record.ok()) return;
      projection.Apply(*record);
      if (record->state() == eonce::v1::ACKED || record->state() == eonce::v1::REJECTED) {
        ids.erase(id);
      }
    };
    // Commands may have finished before the watch saw them: read each once first.
    for (const std::string& id : std::set<std::string>(ids)) fold(id);
    eonce::v1::WatchEvent event;
    while (!ids.empty() && std::chrono::steady_clock::now() < deadline && watch->Read(&event)) {
      if (ids.count(event.command_id()) > 0) fold(event.command_id());
    }
  };

  // The accounts first. Each transfer is ordered behind earlier commands on account a (its
  // entity), not behind the opening of b: sent at once, a transfer could reach the ledger
  // before b exists, and be refused. So the producer waits for both to be acknowledged.
  std::set<std::string> opens;
  for (const char* id : {"a", "b"}) {
    eonce::ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    open.set_initial_balance(1000);
    eonce::v1::Entity entity;
    entity.set_type("account");
    entity.set_id(id);
    eonce::EnqueueOptions options;
    options.command_id = absl::StrCat("example-open-", id);  // harmless when run again
    auto record = agent->Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open, entity, options);
    if (!record.ok()) {
      std::cerr << "example_producer: cannot reach the agent\n";
      return 1;
    }
    opens.insert(record->command().command_id());
  }
  settle(opens);
  if (!opens.empty()) {
    std::cerr << "example_producer: the accounts were not opened in time\n";
    return 1;
  }

  std::set<std::string> pending;
  std::string last_transfer;
  for (int i = 0; i < absl::GetFlag(FLAGS_transfers); ++i) {
    eonce::ledger::v1::TransferRequest t;
    t.set_from("a");
    t.set_to("b");
    t.set_amount(1);
    eonce::v1::Entity entity;
    entity.set_type("account");
    entity.set_id("a");
    auto record = agent->Enqueue("/eonce.ledger.v1.Ledger/Transfer", t, entity);
    if (!record.ok()) {
      std::cerr << "example_producer: " << record.status() << "\n";
      return 1;
    }
    pending.insert(record->command().command_id());
    last_transfer = record->command().command_id();
  }
  settle(pending);
  watch_context.TryCancel();
  std::cout << "transfers acked " << projection.transfers() << ", amount moved "
            << projection.amount_moved() << ", still pending " << pending.size() << "\n";
  // One command to follow through the stack (`eonce explain`).
  if (!last_transfer.empty()) std::cout << "last transfer " << last_transfer << "\n";
  return pending.empty() ? 0 : 1;
}

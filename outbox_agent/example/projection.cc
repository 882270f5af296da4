#include "outbox_agent/example/projection.h"

#include "eonce/ledger/v1/ledger.pb.h"

namespace eonce {

bool Projection::Apply(const v1::OutboxRecord& record) {
  if (record.state() != v1::ACKED || record.result().code() != 0) return false;
  if (record.command().target_method() != "/eonce.ledger.v1.Ledger/Transfer") return false;
  const std::string& id = record.command().command_id();
  if (applied_.count(id) > 0) return false;  // the same ack again: nothing to do
  ledger::v1::TransferRequest request;
  ledger::v1::TransferResponse response;
  if (!request.ParseFromString(record.command().request()) ||
      !response.ParseFromString(record.result().response())) {
    return false;
  }
  TransferView view;
  view.from = request.from();
  view.to = request.to();
  view.amount = request.amount();
  view.from_balance_after = response.from_balance();
  applied_.emplace(id, view);
  return true;
}

int64_t Projection::amount_moved() const {
  int64_t total = 0;
  for (const auto& [id, view] : applied_) total += view.amount;
  return total;
}

}  // namespace eonce

// Negative controls: record stores broken on purpose, so that a test can prove that the
// suite catches the bug each one stands for. Test code only (testonly); nothing in a
// binary can reach them.
//   ForgettingRecordStore   remembers nothing: every command looks first seen, as if
//                           there were no sidecar
//   UnsyncedRecordStore     neither syncs records in the given states nor waits for them
//                           to be durable: the `started` record before a forward, or the
//                           outcome before an answer
//   UnfencedRecordStore     fencing off: any token holds a started record, so a late
//                           answer of a superseded forward may write
//   ForgetfulClaims         takes every in-flight claim and keeps none: a duplicate of a
//                           command in flight to an inbox-keeping business looks first
//                           seen and is forwarded again
#ifndef EONCE_DEDUPE_SIDECAR_CORE_NEGATIVE_CONTROLS_H_
#define EONCE_DEDUPE_SIDECAR_CORE_NEGATIVE_CONTROLS_H_

#include <set>

#include "dedupe_sidecar/core/in_flight_claims.h"
#include "dedupe_sidecar/store/record_store.h"

namespace eonce {

class ForgettingRecordStore : public RecordStore {
 public:
  using RecordStore::RecordStore;
  absl::StatusOr<std::optional<Record>> Get(const std::string&, const std::string&) override {
    return std::optional<Record>();
  }
};

class UnfencedRecordStore : public RecordStore {
 public:
  using RecordStore::RecordStore;
  bool HeldBy(const std::optional<Record>& record, uint64_t) const override {
    return record.has_value() && record->state() == Record::STARTED;
  }
};

class UnsyncedRecordStore : public RecordStore {
 public:
  UnsyncedRecordStore(RocksStore& store, Clock& clock, const RetentionOptions& retention,
                      std::set<Record::State> unsynced)
      : RecordStore(store, clock, retention), unsynced_(std::move(unsynced)) {}
  absl::Status WriteMany(const std::vector<RecordWrite>& writes, bool sync) override {
    for (const RecordWrite& write : writes) {
      if (unsynced_.count(write.record->state()) > 0) sync = false;
    }
    return RecordStore::WriteMany(writes, sync);
  }
  void WhenDurable(Record::State state, RocksStore::DurableFn done) override {
    if (unsynced_.count(state) == 0) {
      RecordStore::WhenDurable(state, std::move(done));
    } else {
      done(absl::OkStatus());
    }
  }

 private:
  const std::set<Record::State> unsynced_;
};

class ForgetfulClaims : public InFlightClaims {
 public:
  bool Add(const std::string&, const Record&) override { return true; }
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_NEGATIVE_CONTROLS_H_

#include "dedupe_sidecar/store/retention_promises.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/base/status.h"

namespace eonce {
namespace {

constexpr char kRetentionKey[] = "retention_promise";
// Stores of earlier versions kept no forensic promise (see Settle).
constexpr char kForensicKey[] = "forensic_promise";

// A lengthening that has come due: every record stored under the old value has outlived
// it, so the new one holds for all.
void BringDue(internal::RetentionPromise* promise, int64_t now_ms) {
  if (promise->configured_ms() > promise->advertised_ms() && now_ms >= promise->full_from_ms()) {
    promise->set_advertised_ms(promise->configured_ms());
    promise->clear_full_from_ms();
  }
}

// The stored promise (nullopt: none) settled with the value configured now.
absl::StatusOr<internal::RetentionPromise> SettleOne(const std::optional<std::string>& stored,
                                                     int64_t configured, int64_t now_ms) {
  internal::RetentionPromise promise;
  if (!stored.has_value()) {
    promise.set_advertised_ms(configured);
  } else {
    if (!promise.ParseFromString(*stored) || promise.advertised_ms() <= 0) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable retention promise");
    }
    BringDue(&promise, now_ms);
  }
  if (configured <= promise.advertised_ms()) {
    promise.set_advertised_ms(configured);
    promise.clear_full_from_ms();
  } else if (configured != promise.configured_ms()) {
    // Longer than what stored records keep: keep advertising the old value until every
    // record written before now has outlived the new one.
    promise.set_full_from_ms(std::max(promise.full_from_ms(), now_ms + configured));
  }
  promise.set_configured_ms(configured);
  return promise;
}

}  // namespace

RetentionPromises::RetentionPromises(RocksStore& store, Clock& clock, std::string meta_family,
                                     const RetentionOptions& configured)
    : store_(store), clock_(clock), meta_family_(std::move(meta_family)), configured_(configured) {
  retention_.set_advertised_ms(configured.retention_ms);
  retention_.set_configured_ms(configured.retention_ms);
  forensic_.set_advertised_ms(configured.forensic_retention_ms);
  forensic_.set_configured_ms(configured.forensic_retention_ms);
}

absl::Status RetentionPromises::Settle() {
  auto read = [this](const char* key) -> absl::StatusOr<std::optional<std::string>> {
    std::string value;
    rocksdb::Status status = store_.Get(meta_family_, key, &value);
    if (status.IsNotFound()) return std::optional<std::string>();
    EONCE_RETURN_IF_ERROR(FromRocks(status, "read retention promise"));
    return std::optional<std::string>(std::move(value));
  };
  EONCE_ASSIGN_OR_RETURN(std::optional<std::string> stored_retention, read(kRetentionKey));
  EONCE_ASSIGN_OR_RETURN(std::optional<std::string> stored_forensic, read(kForensicKey));
  const int64_t now = clock_.NowMs();
  EONCE_ASSIGN_OR_RETURN(internal::RetentionPromise retention,
                         SettleOne(stored_retention, configured_.retention_ms, now));
  // A store of an earlier version has a retention promise but no forensic one: its
  // tombstones were written under a value not known here, taken to be the one configured
  // now (as every version before this one advertised).
  EONCE_ASSIGN_OR_RETURN(internal::RetentionPromise forensic,
                         SettleOne(stored_forensic, configured_.forensic_retention_ms, now));
  rocksdb::WriteBatch batch;
  batch.Put(store_.cf(meta_family_), kRetentionKey, retention.SerializeAsString());
  batch.Put(store_.cf(meta_family_), kForensicKey, forensic.SerializeAsString());
  // Synced: the promises must hold after a crash, like the records they speak for.
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, "retention promise"));
  absl::MutexLock lock(&mu_);
  retention_ = std::move(retention);
  forensic_ = std::move(forensic);
  return absl::OkStatus();
}

internal::RetentionPromise RetentionPromises::retention() {
  absl::MutexLock lock(&mu_);
  BringDue(&retention_, clock_.NowMs());
  return retention_;
}

internal::RetentionPromise RetentionPromises::forensic() {
  absl::MutexLock lock(&mu_);
  BringDue(&forensic_, clock_.NowMs());
  return forensic_;
}

}  // namespace eonce

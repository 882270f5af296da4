#include "common/coord/etcd_map_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace eonce {

namespace {

// A watch answers at most once per round; the rounds bound a wait that keeps meeting
// compactions or deletions of the map key.
constexpr int kMaxWatchRounds = 16;

using etcdserverpb::Compare;

absl::Status BadStoredValue(const std::string& key, absl::string_view why) {
  return Error(absl::StatusCode::kFailedPrecondition, "BAD_STORED_VALUE",
               absl::StrCat("etcd key ", key, ": ", why));
}

// The map stored at `kv`, its epoch the key's revision.
absl::StatusOr<SlotMap> MapFromKv(const mvccpb::KeyValue& kv) {
  if (kv.value().size() > kMaxSlotMapBytes) return BadStoredValue(kv.key(), "larger than 1 MiB");
  v1::SlotMap proto;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(kv.value(), &proto, options);
  if (!parsed.ok()) return BadStoredValue(kv.key(), "not a SlotMap in JSON");
  proto.set_epoch(static_cast<uint64_t>(kv.mod_revision()));
  auto map = SlotMap::FromProto(std::move(proto));
  if (!map.ok()) return BadStoredValue(kv.key(), map.status().message());
  return map;
}

// The map as stored: its epoch left out (written as 0), the revision stands for it.
absl::StatusOr<std::string> StoredJson(const SlotMap& map) {
  v1::SlotMap proto = map.proto();
  proto.set_epoch(0);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(proto, &json, options).ok() ||
      json.size() > kMaxSlotMapBytes) {
    return absl::InvalidArgumentError("slot map: cannot be stored (larger than 1 MiB?)");
  }
  return json;
}

std::string PresenceJson(const std::string& address, uint64_t held_epoch) {
  google::protobuf::Struct value;
  (*value.mutable_fields())["address"].set_string_value(address);
  (*value.mutable_fields())["held_epoch"].set_number_value(static_cast<double>(held_epoch));
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(value, &json);
  return json;
}

absl::StatusOr<ShardPresence> PresenceFromKv(const mvccpb::KeyValue& kv) {
  google::protobuf::Struct value;
  if (kv.value().size() > kMaxShardAddressBytes + 128 ||
      !google::protobuf::util::JsonStringToMessage(kv.value(), &value).ok()) {
    return BadStoredValue(kv.key(), "not a shard's presence in JSON");
  }
  ShardPresence presence;
  presence.live = true;
  presence.address = value.fields().count("address") ? value.fields().at("address").string_value()
                                                     : "";
  double held = value.fields().count("held_epoch")
                    ? value.fields().at("held_epoch").number_value()
                    : 0;
  presence.held_epoch = held > 0 ? static_cast<uint64_t>(held) : 0;
  return presence;
}

etcdserverpb::RequestOp PutOp(const std::string& key, std::string value, int64_t lease) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(std::move(value));
  op.mutable_request_put()->set_lease(lease);
  return op;
}

etcdserverpb::RequestOp RangeOp(const std::string& key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

// The key the failure branch's range read, if it exists.
const mvccpb::KeyValue* FailureKv(const etcdserverpb::TxnResponse& response) {
  if (response.responses_size() == 0) return nullptr;
  const etcdserverpb::RangeResponse& range = response.responses(0).response_range();
  return range.kvs_size() > 0 ? &range.kvs(0) : nullptr;
}

absl::Status CheckShard(const std::string& shard, const std::string& address) {
  if (shard.empty() || shard.size() > kMaxShardIdBytes || shard.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard id: 1..", kMaxShardIdBytes, " bytes without '/'"));
  }
  if (address.size() > kMaxShardAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard address: at most ", kMaxShardAddressBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SlotMapKey(const std::string& prefix) { return absl::StrCat(prefix, "/slotmap"); }

std::string ShardKey(const std::string& prefix, const std::string& shard) {
  return absl::StrCat(prefix, "/shards/", shard);
}

int64_t LeaseServeUntilMs(int64_t sent_ms, int64_t ttl_ms) {
  return sent_ms + static_cast<int64_t>(static_cast<double>(ttl_ms) * (1 - kLeaseClockDrift)) -
         kLeaseMarginMs;
}

absl::StatusOr<SlotMap> EtcdMapStore::Read() {
  etcdserverpb::RangeRequest request;
  request.set_key(SlotMapKey(prefix_));
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, client_.Range(request));
  if (response.kvs_size() == 0) {
    return Error(absl::StatusCode::kNotFound, "NO_SLOT_MAP",
                 absl::StrCat("no slot map at etcd key ", request.key(), " (seed one first)"));
  }
  return MapFromKv(response.kvs(0));
}

absl::StatusOr<SlotMap> EtcdMapStore::CompareAndSwap(uint64_t expected_epoch,
                                                     const SlotMap& next) {
  if (expected_epoch > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError("expected epoch: beyond etcd's revisions");
  }
  EONCE_ASSIGN_OR_RETURN(std::string json, StoredJson(next));
  const std::string key = SlotMapKey(prefix_);
  etcdserverpb::TxnRequest txn;
  Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_result(Compare::EQUAL);
  if (expected_epoch == 0) {
    compare->set_target(Compare::CREATE);
    compare->set_create_revision(0);
  } else {
    compare->set_target(Compare::MOD);
    compare->set_mod_revision(static_cast<int64_t>(expected_epoch));
  }
  *txn.add_success() = PutOp(key, std::move(json), 0);
  *txn.add_failure() = RangeOp(key);
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(txn));
  if (!response.succeeded()) {
    const mvccpb::KeyValue* current = FailureKv(response);
    return Error(absl::StatusCode::kAborted, "EPOCH_CHANGED",
                 absl::StrCat("slot map: expected epoch ", expected_epoch, " but it is ",
                              current != nullptr ? current->mod_revision() : 0,
                              "; re-read and retry"));
  }
  v1::SlotMap stored = next.proto();
  stored.set_epoch(static_cast<uint64_t>(response.header().revision()));
  return SlotMap::FromProto(std::move(stored));
}

absl::StatusOr<SlotMap> EtcdMapStore::WaitNewer(uint64_t after_epoch, int64_t timeout_ms) {
  const std::string key = SlotMapKey(prefix_);
  if (timeout_ms <= 0) {
    // No time to watch: a look at the current map.
    absl::StatusOr<SlotMap> current = Read();
    if (!current.ok() || current->epoch() > after_epoch) return current;
  }
  const auto deadline = WallIn(std::max<int64_t>(timeout_ms, 0));
  int64_t start = static_cast<int64_t>(after_epoch) + 1;
  for (int round = 0; round < kMaxWatchRounds && MsUntilWall(deadline) > 0; ++round) {
    EONCE_ASSIGN_OR_RETURN(EtcdWatchResult watched,
                           client_.WatchOnce(key, start, MsUntilWall(deadline)));
    if (watched.compact_revision > 0) {
      // The changes since `start` are compacted away; the current value says whether one
      // of them was newer, and nothing older than the compaction needs watching.
      absl::StatusOr<SlotMap> current = Read();
      if (current.ok() && current->epoch() > after_epoch) return current;
      if (!current.ok() && current.status().code() != absl::StatusCode::kNotFound) {
        return current.status();
      }
      start = std::max(start, watched.compact_revision);
      continue;
    }
    if (watched.events.empty()) break;  // nothing before the deadline
    for (auto it = watched.events.rbegin(); it != watched.events.rend(); ++it) {
      if (it->type() == mvccpb::Event::PUT &&
          it->kv().mod_revision() > static_cast<int64_t>(after_epoch)) {
        // The first batch may stop short of the newest map (a caller that was away gets
        // the history in batches): the current value is the newest.
        absl::StatusOr<SlotMap> current = Read();
        if (current.ok() && current->epoch() > after_epoch) return current;
        return MapFromKv(it->kv());
      }
    }
    // Only a deletion of the map key (an operator's hand): wait on for a map.
    start = watched.events.back().kv().mod_revision() + 1;
  }
  return Error(absl::StatusCode::kDeadlineExceeded, "NO_NEWER_MAP",
               absl::StrCat("no slot map newer than epoch ", after_epoch, " came in ",
                            timeout_ms, " ms"));
}

absl::StatusOr<ShardPresence> EtcdMapStore::Presence(const std::string& shard) {
  EONCE_RETURN_IF_ERROR(CheckShard(shard, ""));
  etcdserverpb::RangeRequest request;
  request.set_key(ShardKey(prefix_, shard));
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, client_.Range(request));
  if (response.kvs_size() == 0) return ShardPresence{};
  return PresenceFromKv(response.kvs(0));
}

absl::Status EtcdShardLease::Acquire(const std::string& shard, const std::string& address) {
  EONCE_RETURN_IF_ERROR(CheckShard(shard, address));
  if (ttl_ms_ < kMinLeaseTtlMs || ttl_ms_ > kMaxLeaseTtlMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease_ttl_ms: must be between ", kMinLeaseTtlMs, " and ", kMaxLeaseTtlMs));
  }
  // A lease still held (or maybe lost) is given back first: this is a fresh start.
  Release();
  const int64_t sent_ms = clock_.NowMs();
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::LeaseGrantResponse grant,
                         client_.LeaseGrant((ttl_ms_ + 999) / 1000));
  const std::string key = ShardKey(prefix_, shard);
  etcdserverpb::TxnRequest txn;
  Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_result(Compare::EQUAL);
  compare->set_target(Compare::CREATE);
  compare->set_create_revision(0);
  *txn.add_success() = PutOp(key, PresenceJson(address, 0), grant.id());
  *txn.add_failure() = RangeOp(key);
  absl::StatusOr<etcdserverpb::TxnResponse> response = client_.Txn(txn);
  if (!response.ok() || !response->succeeded()) {
    // Ours lapses by itself if this revoke does not reach etcd.
    (void)client_.LeaseRevoke(grant.id());
    if (!response.ok()) return response.status();
    const mvccpb::KeyValue* holder = FailureKv(*response);
    std::string held_by = "another process";
    if (holder != nullptr) {
      absl::StatusOr<ShardPresence> presence = PresenceFromKv(*holder);
      if (presence.ok()) held_by = absl::StrCat("the process at \"", presence->address, "\"");
    }
    return Error(absl::StatusCode::kFailedPrecondition, "SHARD_HELD",
                 absl::StrCat("shard ", shard, " is held by ", held_by,
                              "; retry once its lease lapses"));
  }
  shard_ = shard;
  address_ = address;
  lease_id_ = grant.id();
  granted_ttl_ms_ = std::min(ttl_ms_, grant.ttl() * 1000);
  serve_until_ms_ = LeaseServeUntilMs(sent_ms, granted_ttl_ms_);
  return absl::OkStatus();
}

absl::Status EtcdShardLease::Renew() {
  if (lease_id_ == 0) {
    return Error(absl::StatusCode::kFailedPrecondition, "NOT_LEASED",
                 "no shard lease held: Acquire first");
  }
  const int64_t sent_ms = clock_.NowMs();
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::LeaseKeepAliveResponse renewed,
                         client_.LeaseKeepAlive(lease_id_));
  if (renewed.ttl() <= 0) {
    Drop();
    return Error(absl::StatusCode::kAborted, "LEASE_LOST",
                 absl::StrCat("the lease on shard ", shard_, " lapsed: acquire it again"));
  }
  const int64_t ttl_ms = std::min(ttl_ms_, renewed.ttl() * 1000);
  serve_until_ms_ = std::max(serve_until_ms_, LeaseServeUntilMs(sent_ms, ttl_ms));
  return absl::OkStatus();
}

absl::Status EtcdShardLease::Acknowledge(uint64_t epoch) {
  if (lease_id_ == 0) {
    return Error(absl::StatusCode::kFailedPrecondition, "NOT_LEASED",
                 "no shard lease held: Acquire first");
  }
  const std::string key = ShardKey(prefix_, shard_);
  etcdserverpb::TxnRequest txn;
  // Only over our own key: once our lease lapsed, the key may be another holder's.
  Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_result(Compare::EQUAL);
  compare->set_target(Compare::LEASE);
  compare->set_lease(lease_id_);
  *txn.add_success() = PutOp(key, PresenceJson(address_, epoch), lease_id_);
  EONCE_ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(txn));
  if (!response.succeeded()) {
    Drop();
    return Error(absl::StatusCode::kAborted, "LEASE_LOST",
                 absl::StrCat("the lease on shard ", shard_, " lapsed: acquire it again"));
  }
  return absl::OkStatus();
}

void EtcdShardLease::Release() {
  if (lease_id_ == 0) return;
  // Revoking deletes the shard key at once; if etcd cannot be reached, the lease lapses.
  (void)client_.LeaseRevoke(lease_id_);
  Drop();
}

void EtcdShardLease::Drop() {
  lease_id_ = 0;
  granted_ttl_ms_ = 0;
  serve_until_ms_ = 0;
}

absl::StatusOr<std::unique_ptr<EtcdCoordination>> EtcdCoordination::Create(
    const EtcdCoordOptions& options, Clock& clock) {
  EONCE_ASSIGN_OR_RETURN(std::vector<std::string> endpoints,
                         ParseEtcdEndpoints(options.endpoints));
  if (options.prefix.empty() || options.prefix.front() != '/' || options.prefix.back() == '/' ||
      options.prefix.size() > kMaxEtcdPrefixBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd_prefix: must start with '/', not end with one, and be at most ",
        kMaxEtcdPrefixBytes, " bytes"));
  }
  if (options.lease_ttl_ms < kMinLeaseTtlMs || options.lease_ttl_ms > kMaxLeaseTtlMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease_ttl_ms: must be between ", kMinLeaseTtlMs, " and ", kMaxLeaseTtlMs));
  }
  EtcdClientOptions client_options;
  client_options.endpoints = std::move(endpoints);
  client_options.call_timeout_ms = options.call_timeout_ms;
  client_options.tls = options.tls;
  EONCE_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client,
                         EtcdClient::Create(std::move(client_options)));
  return std::unique_ptr<EtcdCoordination>(
      new EtcdCoordination(std::move(client), clock, options));
}

EtcdCoordination::EtcdCoordination(std::unique_ptr<EtcdClient> client, Clock& clock,
                                   EtcdCoordOptions options)
    : client_(std::move(client)), clock_(clock), options_(std::move(options)) {
  store_ = std::make_unique<EtcdMapStore>(*client_, options_.prefix);
}

std::unique_ptr<EtcdShardLease> EtcdCoordination::NewLease() {
  return std::make_unique<EtcdShardLease>(*client_, clock_, options_.prefix,
                                          options_.lease_ttl_ms);
}

}  // namespace eonce

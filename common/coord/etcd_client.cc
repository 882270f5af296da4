#include "common/coord/etcd_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/clock.h"
#include "common/base/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"

namespace eonce {

namespace {

absl::Status BadEndpoints(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--etcd_endpoints: ", why));
}

// etcd's answer as our status. Its codes already follow gRPC's meaning (UNAVAILABLE for no
// leader or a timed-out proposal, NOT_FOUND for a lease that is gone), so they are kept.
absl::Status FromEtcd(const grpc::Status& status, absl::string_view what,
                      const std::string& endpoint) {
  return Error(static_cast<absl::StatusCode>(status.error_code()), "ETCD_ERROR",
               absl::StrCat("etcd ", what, " at ", endpoint, ": ", status.error_message()));
}

absl::Status Unreachable(absl::string_view what, absl::string_view last_error) {
  return Error(absl::StatusCode::kUnavailable, "ETCD_UNREACHABLE",
               absl::StrCat("etcd ", what, ": no member answered in time (last: ", last_error,
                            ")"));
}

// Waits until `until` for the channel to a member to be connected. A call that is not
// wait-for-ready fails at once while its channel is not connected, and the synchronous API
// polls a channel's sockets only while a call or a wait is active: without this wait, a
// connection to a member that just came up would be noticed only by gRPC's backup poller
// (every 5 s), and every call would fail meanwhile. A down member costs this wait once: the
// calls after it start at the member that answered.
void AwaitConnected(grpc::Channel& channel, std::chrono::system_clock::time_point until) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  // Bounded: IDLE -> CONNECTING -> TRANSIENT_FAILURE -> READY at most, with a spare.
  for (int changes = 0; changes < 4; ++changes) {
    if (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_SHUTDOWN) return;
    if (!channel.WaitForStateChange(state, until)) return;  // not connected in time
    state = channel.GetState(/*try_to_connect=*/true);
  }
}

// A stream to a member cut off from its cluster's leader would otherwise stay open and
// quiet (no events, no renewals) until its deadline; with this, etcd ends it UNAVAILABLE
// ("no leader") and the call tries the next member.
void RequireLeader(grpc::ClientContext& context) { context.AddMetadata("hasleader", "true"); }

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view list) {
  std::vector<std::string> endpoints;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    // Accept the URL form etcdctl prints; gRPC wants host:port.
    (void)(absl::ConsumePrefix(&part, "http://") || absl::ConsumePrefix(&part, "https://"));
    size_t colon = part.rfind(':');
    uint32_t port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return BadEndpoints(absl::StrCat("\"", part, "\" is not host:port"));
    }
    endpoints.emplace_back(part);
  }
  if (endpoints.empty()) return BadEndpoints("at least one host:port is required");
  if (endpoints.size() > kMaxEtcdEndpoints) {
    return BadEndpoints(absl::StrCat("at most ", kMaxEtcdEndpoints, " members"));
  }
  return endpoints;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  if (options.endpoints.empty() || options.endpoints.size() > kMaxEtcdEndpoints) {
    return BadEndpoints(absl::StrCat("1..", kMaxEtcdEndpoints, " members are required"));
  }
  if (options.call_timeout_ms < 1 || options.call_timeout_ms > 60'000) {
    return absl::InvalidArgumentError("--etcd_timeout_ms: must be between 1 and 60000");
  }
  absl::Status tls = ValidateTlsFiles(options.tls);
  if (!tls.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("etcd TLS (--etcd_tls_cert, --etcd_tls_key, "
                                                   "--etcd_tls_ca): ", tls.message()));
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(options.endpoints), options.call_timeout_ms, options.tls));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, int64_t call_timeout_ms,
                       const TlsFiles& tls)
    : endpoints_(std::move(endpoints)), call_timeout_ms_(call_timeout_ms) {
  for (const std::string& endpoint : endpoints_) {
    Member member;
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(kMaxEtcdMessageBytes);
    args.SetMaxSendMessageSize(kMaxEtcdMessageBytes);
    member.channel = grpc::CreateCustomChannel(endpoint, ChannelCredentials(tls), args);
    member.kv = etcdserverpb::KV::NewStub(member.channel);
    member.watch = etcdserverpb::Watch::NewStub(member.channel);
    member.lease = etcdserverpb::Lease::NewStub(member.channel);
    members_.push_back(std::move(member));
  }
}

absl::Status EtcdClient::WithFailover(
    absl::string_view what, int64_t timeout_ms,
    const std::function<grpc::Status(Member&, grpc::ClientContext&)>& attempt) {
  const auto deadline = WallIn(timeout_ms);
  const size_t start = current_.load();
  std::string last_error = "none tried";
  for (size_t i = 0; i < members_.size() && MsUntilWall(deadline) > 0; ++i) {
    const size_t at = (start + i) % members_.size();
    // Each member left gets an equal share of the time left to connect; the call itself
    // may use all of it.
    const int64_t share_ms = MsUntilWall(deadline) / static_cast<int64_t>(members_.size() - i);
    AwaitConnected(*members_[at].channel, WallIn(share_ms));
    grpc::ClientContext context;
    context.set_deadline(deadline);
    grpc::Status status = attempt(members_[at], context);
    if (status.ok()) {
      current_.store(at);
      return absl::OkStatus();
    }
    last_error = absl::StrCat(endpoints_[at], ": ", status.error_message());
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // A member that takes the whole deadline (stopped, partitioned) is skipped by the
      // next call; this one has no time left for another member.
      current_.store((at + 1) % members_.size());
      break;
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return FromEtcd(status, what, endpoints_[at]);
    }
  }
  return Unreachable(what, last_error);
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "Range", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.kv->Range(&context, request, &response);
      }));
  return response;
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(
    const etcdserverpb::PutRequest& request) {
  etcdserverpb::PutResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "Put", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.kv->Put(&context, request, &response);
      }));
  return response;
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> EtcdClient::DeleteRange(
    const etcdserverpb::DeleteRangeRequest& request) {
  etcdserverpb::DeleteRangeResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "DeleteRange", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.kv->DeleteRange(&context, request, &response);
      }));
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "Txn", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.kv->Txn(&context, request, &response);
      }));
  return response;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_s) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "LeaseGrant", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.lease->LeaseGrant(&context, request, &response);
      }));
  if (!response.error().empty()) {
    return Error(absl::StatusCode::kUnavailable, "ETCD_ERROR",
                 absl::StrCat("etcd LeaseGrant: ", response.error()));
  }
  return response;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  return WithFailover("LeaseRevoke", call_timeout_ms_,
                      [&](Member& member, grpc::ClientContext& context) {
                        return member.lease->LeaseRevoke(&context, request, &response);
                      });
}

absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> EtcdClient::LeaseKeepAlive(
    int64_t lease_id) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseKeepAliveResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "LeaseKeepAlive", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        RequireLeader(context);
        auto stream = member.lease->LeaseKeepAlive(&context);
        if (!stream->Write(request) || !stream->Read(&response)) return stream->Finish();
        // One renewal per stream: the answer is in, so the stream's end does not matter.
        context.TryCancel();
        (void)stream->Finish();
        return grpc::Status::OK;
      }));
  return response;
}

absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> EtcdClient::LeaseTimeToLive(
    int64_t lease_id) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseTimeToLiveResponse response;
  EONCE_RETURN_IF_ERROR(WithFailover(
      "LeaseTimeToLive", call_timeout_ms_, [&](Member& member, grpc::ClientContext& context) {
        return member.lease->LeaseTimeToLive(&context, request, &response);
      }));
  return response;
}

absl::StatusOr<EtcdWatchResult> EtcdClient::WatchOnce(const std::string& key,
                                                      int64_t start_revision,
                                                      int64_t timeout_ms) {
  etcdserverpb::WatchRequest request;
  request.mutable_create_request()->set_key(key);
  request.mutable_create_request()->set_start_revision(start_revision);
  // A caller that was away gets the history since its revision, possibly many maps: in one
  // message it could pass any receive limit. Fragments keep each message to etcd's request
  // size limit (1.5 MiB by default) or one event; the first batch is all a caller needs.
  request.mutable_create_request()->set_fragment(true);
  EtcdWatchResult result;
  absl::Status status = WithFailover(
      "Watch", timeout_ms, [&](Member& member, grpc::ClientContext& context) {
        bool created = false;
        RequireLeader(context);
        auto stream = member.watch->Watch(&context);
        if (!stream->Write(request)) return stream->Finish();
        etcdserverpb::WatchResponse response;
        while (stream->Read(&response)) {
          created = created || response.created();
          if (response.compact_revision() > 0) {
            result.compact_revision = response.compact_revision();
          } else if (response.canceled()) {
            context.TryCancel();
            (void)stream->Finish();
            return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                absl::StrCat("watch canceled: ", response.cancel_reason()));
          } else if (response.events_size() > 0) {
            result.events.assign(response.events().begin(), response.events().end());
          } else {
            continue;  // the creation's acknowledgement, or a progress notice
          }
          context.TryCancel();
          (void)stream->Finish();
          return grpc::Status::OK;
        }
        grpc::Status finished = stream->Finish();
        // etcd ends a watch whose deadline passed with Go's bare context error, which gRPC
        // sends as UNKNOWN; it can arrive before our own timer says DEADLINE_EXCEEDED.
        const bool timed_out =
            finished.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
            (finished.error_code() == grpc::StatusCode::UNKNOWN &&
             absl::StrContains(finished.error_message(), "deadline exceeded"));
        // A watch the member acknowledged that then saw nothing until the deadline is an
        // answer: nothing changed. One never acknowledged is a member that did not answer.
        if (timed_out) {
          return created ? grpc::Status::OK
                         : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                        finished.error_message());
        }
        return finished;
      });
  EONCE_RETURN_IF_ERROR(status);
  return result;
}

}  // namespace eonce
